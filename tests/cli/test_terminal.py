"""What the command line prints from files and options reaches the terminal with every control character escaped."""

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from landscape.cli import cli
from landscape.cli.terminal import printable
from landscape.store import open_result
from landscape.store.locks import WriterLock

TITLE = "\x1b]0;owned\x07"


def test_printable_escapes_controls_and_keeps_lines():
    assert printable(f"a{TITLE}b\n\tc\r") == "a\\x1b]0;owned\\x07b\n\tc\r"
    assert printable("\u202eevil\x9b") == "\\u202eevil\\x9b"
    assert printable(os.fsdecode(b"name\xff.h5")) == "name\\xff.h5"


def test_info_escapes_a_crafted_attribute(tmp_path):
    out = tmp_path / "s.h5"
    with open_result(out, "trajectory", {"model": f"net{TITLE}", "n_samples": 1}) as f:
        f.set_attrs({"block": f"layer{TITLE}"})
    result = CliRunner().invoke(cli, ["info", str(out)])
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "net\\x1b]0;owned\\x07" in result.output


def test_info_escapes_a_live_writers_record(tmp_path):
    out = tmp_path / "live.h5"
    lock = WriterLock(out, json.dumps({"kind": "surface", "model": f"m{TITLE}"}))
    try:
        lock.record({"desc": f"surface{TITLE}", "unit": "point", "done": 1, "total": 4})
        result = CliRunner().invoke(cli, ["info", str(out)])
    finally:
        lock.release()
    assert "being written by a running analysis" in result.output
    assert "\x1b" not in result.output and "m\\x1b]0;owned\\x07" in result.output


def test_an_error_naming_a_crafted_or_non_utf8_path_is_escaped(tmp_path):
    name = os.fsencode(tmp_path) + b"/bad\xff\x1b]0;owned\x07.h5"
    proc = subprocess.run(
        [sys.executable, "-m", "landscape", "info", name],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": ""},
    )
    assert proc.returncode == 2 and b"\x1b" not in proc.stderr and b"Traceback" not in proc.stderr
    assert b"bad\\xff\\x1b]0;owned\\x07.h5" in proc.stderr
