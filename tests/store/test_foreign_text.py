"""Text in a crafted result file or sidecar: bytes that are not UTF-8, repeated axis names, nesting too deep.

Every reader (``read_result``, ``landscape info``, ``info --json``, ``plot``, the live writer's sidecar) ends in a
correct answer or one line naming the file and what is wrong with it, never in a traceback.
"""

import fcntl
import json
import os

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from plot_results import well_formed, write_result

from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.store.attrs import as_str, decode
from landscape.store.locks import live_record, lock_path, sidecar_record
from landscape.store.read import read_result


def invoke(*args):
    result = CliRunner().invoke(cli, [*map(str, args)])
    return result.exit_code, result.output


def surface(path, **attrs):
    arrays, base = well_formed("surface")
    return write_result(path, "surface", arrays, axes=True, **{**base, **attrs})


def set_text_attrs(path):
    """Three ways a crafted file stores text that is not UTF-8."""
    with h5py.File(path, "a") as f:
        f.attrs["model"] = np.bytes_(b"res\xffnet")  # fixed-length bytes: h5py returns bytes
        f.attrs.create("dataset", data=b"dig\xfe\xffits", dtype=h5py.string_dtype("utf-8"))  # text with surrogates
        f.attrs.create("norm", data=b"fil\x80ter", dtype=h5py.string_dtype("ascii"))


def test_attributes_that_are_not_utf8_are_read_with_each_foreign_byte_escaped(tmp_path):
    path = set_text_attrs(surface(tmp_path / "s.h5")) or tmp_path / "s.h5"
    result = read_result(path)
    assert result.attrs["model"] == "res\\xffnet"
    assert result.attrs["dataset"] == "dig\\xfe\\xffits"
    assert result.attrs["norm"] == "fil\\x80ter"
    for value in result.attrs.values():
        if isinstance(value, str):
            value.encode("utf-8")  # every text is valid UTF-8


def test_info_json_and_plot_of_such_a_file_answer(tmp_path):
    path = tmp_path / "s.h5"
    surface(path)
    set_text_attrs(path)
    code, output = invoke("info", path)
    assert code == 0 and "model: res\\xffnet" in output, output
    code, output = invoke("info", "--json", path)
    assert code == 0 and json.loads(output)["provenance"]["model"] == "res\\xffnet", output
    code, output = invoke("plot", path, "--out", tmp_path / "fig")
    assert code == 0 and "Traceback" not in output, output
    assert (tmp_path / "fig" / "s_contour.png").is_file()


def test_a_text_array_that_is_not_utf8_is_read_escaped(tmp_path):
    arrays, attrs = well_formed("fourier")
    path = write_result(tmp_path / "f.h5", "fourier", arrays, **attrs)
    with h5py.File(path, "a") as f:
        del f["layer_names"]
        f.create_dataset("layer_names", data=np.array([b"l0", b"l\xff1", b"l2"], dtype="S3"))
    assert list(read_result(path)["layer_names"]) == ["l0", "l\\xff1", "l2"]
    code, output = invoke("plot", path, "--out", tmp_path / "fig")
    assert code == 0, output


def test_decode_and_as_str_never_raise_on_what_a_file_holds():
    nested = "[" * 100_000 + "]" * 100_000
    assert decode(nested) == nested  # too deep to read back as JSON: kept as the text it is
    assert decode(np.bytes_(b'["a", "\xff"]')) == '["a", "\\xff"]'  # no longer JSON: kept as text
    assert decode(np.bytes_(b'["a", "\xc3\xa9"]')) == ["a", "é"]
    assert as_str("a\udcffb") == "a\\xffb"
    assert as_str(b"\xc3\xa9") == "é"


def test_an_axis_named_twice_is_one_line_naming_the_array(tmp_path):
    path = surface(tmp_path / "s.h5")
    with h5py.File(path, "a") as f:
        f["loss"].attrs["axes"] = json.dumps(["x", "x"])
    with pytest.raises(LandscapeError, match=r"axes attribute of 'loss' repeats a name"):
        read_result(path)
    for args in (["info", path], ["info", "--json", path], ["plot", path, "--out", tmp_path / "fig"]):
        code, output = invoke(*args)
        assert code == 2 and output.startswith("Error: ") and "repeats a name" in output, output
        assert len(output.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------- a live writer's sidecar
SIDECARS = {
    "pid text": '{"pid": "abc", "identity": "{}"}',
    "pid list": '{"pid": [1, 2], "identity": "{}"}',
    "pid NaN": '{"pid": NaN, "identity": "{}"}',
    "done text": '{"pid": 5, "identity": "{}", "done": "x", "total": 9}',
    "total Infinity": '{"pid": 5, "identity": "{}", "done": 1, "total": Infinity}',
    "nested record": "[" * 200_000 + "]" * 200_000,
    "nested identity": json.dumps({"pid": 5, "identity": "[" * 100_000 + "]" * 100_000}),
    "identity a list": json.dumps({"pid": 5, "identity": "[1, 2]"}),
    "nested entry": '{"pid": 5, "identity": "{}", "unit": ' + "[" * 200_000 + "]" * 200_000 + "}",
    "not utf-8": '{"pid": 5, "identity": "{\\"model\\": \\"r\xff\\"}"}',
}


@pytest.fixture
def live(tmp_path):
    """A result file and a function that puts text in its sidecar and holds the writer's lock on it."""
    path = surface(tmp_path / "s.h5")
    held = []

    def hold(text):
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT)
        os.write(fd, text.encode("utf-8", "surrogateescape"))
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: live_record's shared lock is refused, as by a writer
        held.append(fd)
        return path

    yield hold
    for fd in held:
        os.close(fd)


@pytest.mark.parametrize("name", SIDECARS)
def test_info_on_a_live_file_with_a_crafted_sidecar_answers(live, name):
    path = live(SIDECARS[name].replace("\xff", "\udcff"))
    record = live_record(path)
    assert record is not None  # the lock is held: a live writer, whatever its sidecar says
    code, output = invoke("info", path)
    assert code == 0 and output.startswith(f"{path}: being written by a running analysis (pid "), output
    assert "Traceback" not in output
    code, output = invoke("info", "--json", path)
    assert code == 0, output
    view = json.loads(output)
    assert view["being_written"] is True and isinstance(view["pid"], int)


@pytest.mark.parametrize("name", ["nested identity", "identity a list"])
def test_a_sidecar_whose_identity_is_not_a_json_object_is_not_a_record(name):
    assert sidecar_record(SIDECARS[name].encode()) is None


def test_a_sound_sidecar_is_still_read_in_full(live):
    record = {"pid": 5, "identity": json.dumps({"kind": "surface", "model": "toy"}), "done": 2, "total": 9}
    path = live(json.dumps(record))
    assert live_record(path) == {"pid": 5, "identity": record["identity"], "done": 2, "total": 9}
    code, output = invoke("info", path)
    assert code == 0 and "(pid 5)" in output and "model: toy" in output and "2/9" in output, output
