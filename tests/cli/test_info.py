"""``landscape info --json``: one line of strict JSON per result file, for every registered kind.

Checked against what the files hold (read with numpy and h5py here), against the registry's summary and numbers,
on crafted files of every kind and on files made by small runs of the commands.
"""

import hashlib
import json
import math

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import tiny_resnet_checkpoint
from plot_results import surface_arrays, well_formed, write_result

from landscape.analyses.registry import kinds, numbers_of, summarize
from landscape.cli import cli
from landscape.store.attrs import PROVENANCE
from landscape.store.read import read_result


def _reject(constant):
    raise AssertionError(f"bare {constant} in the JSON")


def info_json(*paths):
    """``landscape info --json PATHS``: one dict per line, parsed strictly (no bare NaN or Infinity)."""
    result = CliRunner().invoke(cli, ["info", "--json", *map(str, paths)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(paths), result.output
    return [json.loads(line, parse_constant=_reject) for line in lines]


def as_floats(values):
    """JSON values back to floats: null is NaN, "inf" / "-inf" are the infinities."""
    return np.array([[math.nan if v is None else float(v) for v in np.ravel(values)]], dtype=float).ravel()


def stored(path):
    """Every dataset of ``path`` as numpy reads it (strings as text), by its path in the file."""
    out = {}
    with h5py.File(path, "r") as f:

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = np.asarray(obj.asstr()[()] if h5py.check_string_dtype(obj.dtype) else obj[()])

        f.visititems(visit)
    return out


def check_arrays(view, path):
    """Each array's entry says its shape, the finite entries' count, min, max and mean, and small arrays' values."""
    arrays = stored(path)
    groups = {}
    for name in arrays:
        if "/" in name:
            groups.setdefault(name.rpartition("/")[0], []).append(name)
    groups = {group: names for group, names in groups.items() if len(names) > 8}  # one entry each
    for group, names in groups.items():
        assert view["groups"][group]["arrays"] == len(names)
        assert view["groups"][group]["values"] == sum(arrays.pop(name).size for name in names)
    assert set(view["groups"]) == set(groups) and set(view["arrays"]) == set(arrays)
    for name, arr in arrays.items():
        entry = view["arrays"][name]
        assert entry["shape"] == list(arr.shape), name
        if arr.dtype == bool:
            assert entry["set"] == int(np.count_nonzero(arr)), name
        elif arr.dtype.kind in "iuf":
            finite = arr.astype(float)[np.isfinite(arr.astype(float))]
            assert entry["finite"] == finite.size, name
            if finite.size:
                assert (entry["min"], entry["max"]) == (finite.min(), finite.max()), name
                assert entry["mean"] == pytest.approx(finite.mean(), rel=1e-12), name
        if arr.size <= 64:
            if arr.dtype.kind in "iuf":
                np.testing.assert_array_equal(as_floats(entry["values"]), arr.astype(float).ravel(), err_msg=name)
            else:
                assert np.array_equal(np.asarray(entry["values"]).ravel(), arr.ravel()), name
        else:
            assert "values" not in entry, name


def test_every_registered_kind_in_one_call(tmp_path):
    paths = []
    for kind in kinds():
        arrays, attrs = well_formed(kind)
        paths.append(write_result(tmp_path / f"{kind}.h5", kind, arrays, **attrs))
    views = info_json(*paths)
    for path, view in zip(paths, views):
        result = read_result(path)
        assert (view["path"], view["kind"]) == (str(path), result.kind)
        assert view["complete"] is bool(result.attrs.get("complete"))
        assert view["summary"] == summarize(result) and "inconsistent" not in view["summary"]
        assert view["numbers"] == numbers_of(result)
        with h5py.File(path, "r") as f:
            written = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        assert set(view["attributes"]) == set(written)
        assert view["provenance"] == {k: view["attributes"][k] for k in PROVENANCE if k in written}
        check_arrays(view, path)
    assert len({v["kind"] for v in views}) == len(kinds())


def test_nan_and_infinities_are_null_and_text(tmp_path):
    arrays = surface_arrays(done=np.arange(28).reshape(4, 7) % 5 != 0)  # points not done are NaN
    arrays["accuracy"] = np.where(arrays["done"], arrays["accuracy"], np.inf)
    path = write_result(tmp_path / "s.h5", "surface", arrays, surface_ndim=2, centre_loss=math.nan, zmax=-math.inf)
    (view,) = info_json(path)
    loss, accuracy = view["arrays"]["loss"], view["arrays"]["accuracy"]
    pending = ~arrays["done"]
    assert [v is None for v in np.ravel(loss["values"])] == list(pending.ravel())
    assert [v == "inf" for v in np.ravel(accuracy["values"])] == list(pending.ravel())
    assert loss["finite"] == accuracy["finite"] == int((~pending).sum()) and view["complete"] is False
    assert loss["min"] == np.nanmin(arrays["loss"])
    assert view["attributes"]["centre_loss"] is None and view["attributes"]["zmax"] == "-inf"


def test_text_of_several_files_and_one_line_errors(tmp_path):
    a, b = (
        write_result(tmp_path / f"{k}.h5", k, arrays, **attrs)
        for k in ("surface", "hessian")
        for arrays, attrs in [well_formed(k)]
    )
    text = CliRunner().invoke(cli, ["info", str(a), str(b)])
    assert text.exit_code == 0
    first, second = text.output.split("\n\n")
    assert first.startswith(f"{a}: surface result") and second.startswith(f"{b}: hessian result")
    (tmp_path / "junk.h5").write_text("not HDF5")
    for args in (["--json", str(a), str(tmp_path / "junk.h5")], ["--json", str(tmp_path / "missing.h5")]):
        bad = CliRunner().invoke(cli, ["info", *args])
        lines = bad.output.strip().splitlines()
        assert bad.exit_code == 2 and lines[-1].startswith("Error: ") and "Traceback" not in bad.output
    assert CliRunner().invoke(cli, ["info", "--json"]).exit_code == 2


def _run(*args):
    result = CliRunner().invoke(cli, [*map(str, args), "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    """A surface line, a Hessian top eigenvalue and a per-batch spectrum of a tiny resnet, made by the commands."""
    folder = tmp_path_factory.mktemp("runs")
    ckpt = tiny_resnet_checkpoint(folder)[0]
    small = ["--ckpt", ckpt, "--samples", "8"]
    surface = ("--x", "-1:1:3", "--y", "none", "--compile", "off", "--store-directions", "full")  # tensors held
    _run("surface", *small, *surface, "--out", folder / "surface.h5")
    _run("hessian", *small, "--top-k", "1", "--tol", "1e-2", "--params", "fc.*", "--out", folder / "hessian.h5")
    _run("spectrum", *small, "--batch-size", "4", "--top-k", "1", "--out", folder / "spectrum.h5")
    return ckpt, [folder / f"{kind}.h5" for kind in ("surface", "hessian", "spectrum")]


def test_files_of_real_runs(run_files):
    ckpt, paths = run_files
    views = info_json(*paths)
    assert [v["kind"] for v in views] == ["surface", "hessian", "spectrum"]
    digest = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    for path, view in zip(paths, views):
        result = read_result(path)
        assert view["complete"] is True and view["summary"] == summarize(result)
        assert set(PROVENANCE) <= set(view["provenance"]), set(PROVENANCE) - set(view["provenance"])
        assert view["provenance"]["checkpoint_sha256"] == digest and view["provenance"]["n_samples"] == 8
        assert view["provenance"]["model"] == "resnet_mini" and view["attributes"]["kind"] == view["kind"]
        assert "identity" not in view["attributes"]
        check_arrays(view, path)
    surface, hessian, spectrum = views
    assert surface["groups"] and all(g["arrays"] > 8 for g in surface["groups"].values())  # a tensor each
    assert not any(name.startswith("directions/") for name in surface["arrays"])
    assert hessian["arrays"]["eigenvalues"]["values"] == read_result(paths[1])["eigenvalues"].tolist()
    assert spectrum["arrays"]["eigenvalues"]["shape"] == [2, 1]
    assert hessian["numbers"]["top Hessian eigenvalue"] == numbers_of(read_result(paths[1]))["top Hessian eigenvalue"]
