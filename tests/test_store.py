import h5py
import numpy as np
import pytest

from landscape.errors import LandscapeError
from landscape.store import describe, identity_of, open_result, read_result, require_dataset, write_array


def _attrs(**over):
    base = {"model": "m", "model_kwargs": {"a": 1}, "grid": [0.0, 1.0, 3], "device": "cpu", "command": "x"}
    base.update(over)
    return base


def test_create_then_resume_same_options(tmp_path):
    path = tmp_path / "r.h5"
    f, resumed = open_result(path, "surface", _attrs())
    assert not resumed
    ds = require_dataset(f, "loss", (2, 3), "f8", fill=np.nan, axes=["y", "x"])
    ds[0, 1] = 4.5
    f.close()
    # device and command are provenance, not identity: a rerun on another device still resumes
    f, resumed = open_result(path, "surface", _attrs(device="cuda", command="y"))
    assert resumed
    assert f["loss"][0, 1] == 4.5
    assert np.isnan(f["loss"][1, 1])
    f.close()


def test_other_options_refused_without_force(tmp_path):
    path = tmp_path / "r.h5"
    open_result(path, "surface", _attrs())[0].close()
    with pytest.raises(LandscapeError, match="differs in: grid.*--force"):
        open_result(path, "surface", _attrs(grid=[0.0, 2.0, 3]))
    with pytest.raises(LandscapeError, match="--force"):
        open_result(path, "hessian", _attrs())
    f, resumed = open_result(path, "surface", _attrs(grid=[0.0, 2.0, 3]), force=True)
    assert not resumed and f.attrs["grid"] == "[0.0, 2.0, 3]"
    f.close()


def test_non_hdf5_file_never_overwritten(tmp_path):
    path = tmp_path / "notes.h5"
    path.write_text("precious")
    with pytest.raises(LandscapeError, match="not a readable HDF5 file"):
        open_result(path, "surface", _attrs())
    assert path.read_text() == "precious"


def test_read_roundtrip_and_describe(tmp_path):
    path = tmp_path / "r.h5"
    f, _ = open_result(path, "fourier", _attrs())
    write_array(f, "delta", np.arange(6.0).reshape(2, 3), axes=["layer", "frequency"])
    write_array(f, "names", np.array(["stem", "layer1.0"]))
    f.close()
    res = read_result(path)
    assert res.kind == "fourier"
    assert res.attrs["model_kwargs"] == {"a": 1}
    assert res.attrs["grid"] == [0.0, 1.0, 3]
    np.testing.assert_array_equal(res["delta"], np.arange(6.0).reshape(2, 3))
    assert list(res["names"]) == ["stem", "layer1.0"]
    assert res.axes["delta"] == ["layer", "frequency"]
    text = describe(path)
    assert "fourier result (incomplete)" in text and "delta: float64 (2, 3)" in text


def test_identity_ignores_provenance():
    assert identity_of(_attrs(device="a", command="b")) == identity_of(_attrs(device="c", command="d"))
    assert identity_of(_attrs(seed=1)) != identity_of(_attrs(seed=2))


def test_read_errors(tmp_path):
    with pytest.raises(LandscapeError, match="does not exist"):
        read_result(tmp_path / "none.h5")
    (tmp_path / "x.h5").write_text("no")
    with pytest.raises(LandscapeError, match="not an HDF5 file"):
        read_result(tmp_path / "x.h5")
    with h5py.File(tmp_path / "y.h5", "w") as f:
        f["a"] = 1
    with pytest.raises(LandscapeError, match="not a landscape result"):
        read_result(tmp_path / "y.h5")


def test_file_held_by_a_running_writer_is_reported_as_such(tmp_path):
    path = tmp_path / "r.h5"
    writer, _ = open_result(path, "surface", _attrs())
    code = (
        "from landscape.store import open_result, read_result\nfrom landscape.errors import LandscapeError\n"
        f"for fn in (lambda: read_result({str(path)!r}), lambda: open_result({str(path)!r}, 'surface', {{}})):\n"
        "    try:\n        fn()\n    except LandscapeError as e:\n        print(e)\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    writer.close()
    assert out.count("being written") == 2, out
    assert path.exists()
