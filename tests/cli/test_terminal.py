"""What the command line prints from files and options reaches the terminal with every control character escaped."""

import io
import json
import os
import subprocess
import sys

from click.testing import CliRunner

from landscape.cli import cli
from landscape.cli.terminal import SafeStream, printable
from landscape.errors import LandscapeError, one_line
from landscape.store import open_result
from landscape.store.locks import WriterLock

TITLE = "\x1b]0;owned\x07"


def test_printable_escapes_controls_and_keeps_lines():
    assert printable(f"a{TITLE}b\n\tc\r") == "a\\x1b]0;owned\\x07b\n\tc\\r"
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


#: a value that would forge a line of its own, one that hides what precedes it, and the controls JSON Lines split on
FORGED = "net\nfaked_line: yes"
HIDDEN = "value\rmodel: innocent"
SPLITTERS = "a\x9bb\x7fc\x85d\u2028e\u2029f"


def test_one_line_escapes_newlines_and_carriage_returns():
    assert one_line(FORGED) == "net\\nfaked_line: yes"
    assert one_line(HIDDEN) == "value\\rmodel: innocent"
    assert one_line("a\tb") == "a\tb"


def test_only_the_progress_bars_stream_lets_a_carriage_return_pass():
    class Sink(io.StringIO):
        pass

    sink = Sink()
    SafeStream(sink).write("a\rb\n")
    SafeStream(sink).carriage_returns.write("\rbar 50%\x1b[A")
    assert sink.getvalue() == "a\\rb\n\rbar 50%\\x1b[A"


def test_info_cannot_be_made_to_print_a_forged_or_hidden_line(tmp_path):
    out = tmp_path / "s.h5"
    with open_result(out, "trajectory", {"model": FORGED, "n_samples": 1}) as f:
        f.set_attrs({"block": HIDDEN, f"key{FORGED}": 1})
    result = CliRunner().invoke(cli, ["info", str(out)])
    assert result.exit_code == 0, result.output
    assert "\r" not in result.output
    assert not any(line.startswith("faked_line") for line in result.output.splitlines())
    assert "model: net\\nfaked_line: yes" in result.output and "block: value\\rmodel: innocent" in result.output


def test_info_of_a_live_writer_cannot_print_a_forged_line(tmp_path):
    out = tmp_path / "live.h5"
    lock = WriterLock(out, json.dumps({"kind": "surface", "model": FORGED, "dataset": HIDDEN}))
    try:
        result = CliRunner().invoke(cli, ["info", str(out)])
    finally:
        lock.release()
    assert "being written by a running analysis" in result.output
    assert "\r" not in result.output
    assert not any(line.startswith("faked_line") for line in result.output.splitlines())


def test_info_json_is_one_strict_json_line_per_file_whatever_the_attributes_hold(tmp_path):
    paths = []
    for i, value in enumerate([SPLITTERS, FORGED, HIDDEN, f"{TITLE}\u202e"]):
        paths.append(tmp_path / f"r{i}.h5")
        with open_result(paths[-1], "trajectory", {"model": value, "n_samples": 1}):
            pass
    proc = subprocess.run(
        [sys.executable, "-m", "landscape", "info", "--json", *map(str, paths)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()  # str.splitlines splits on U+0085 and U+2028 too
    assert len(lines) == len(paths)
    models = [json.loads(line)["attributes"]["model"] for line in lines]
    assert models == [SPLITTERS, FORGED, HIDDEN, f"{TITLE}\u202e"]


def test_an_error_quoting_a_value_with_a_newline_is_printed_on_one_line(monkeypatch):
    import click

    from landscape.cli import LazyGroup

    @click.command("boom")
    def boom() -> None:
        raise LandscapeError(f"the file says {FORGED}")

    monkeypatch.setattr(LazyGroup, "get_command", lambda self, ctx, name: boom)
    result = CliRunner().invoke(cli, ["boom"])
    assert result.exit_code == 2
    assert result.output.strip() == "Error: the file says net\\nfaked_line: yes"
