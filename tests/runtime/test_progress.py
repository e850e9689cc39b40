"""What a run prints while it works, and ``landscape info`` on a file a live run is writing."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from landscape.cli import cli
from landscape.runtime import progress
from tests.helpers import tiny_resnet_checkpoint

ROOT = Path(__file__).resolve().parents[2]

#: a ``landscape surface`` run whose first write of points (the first point, written at once) waits for the file
#: ``GO`` (after touching ``HELD``)
HELD_WRITER = """
import runpy, sys, time
from pathlib import Path
import landscape.analyses.surface.run as run

held, go = Path(sys.argv[1]), Path(sys.argv[2])
original, calls = run.write_points, []

def write_points(f, points, *grid):
    calls.append(1)
    if len(calls) == 1:
        held.touch()
        while not go.exists():
            time.sleep(0.02)
    original(f, points, *grid)

run.write_points = write_points
sys.argv = ["landscape", "surface", *sys.argv[3:]]
runpy.run_module("landscape", run_name="__main__")
"""


def test_duration_estimate_and_description_are_worded_from_the_numbers():
    assert progress.duration(0.41) == "0.41 s" and progress.duration(182) == "3 min 2 s"
    assert progress.duration(7500) == "2 h 5 min"
    assert progress.plural("batch", 2) == "batches" and progress.plural("point", 1) == "point"
    assert progress.estimate(441, 0.5, "point") == "estimated 3 min 40 s (0.5 s per point)"
    assert progress.estimate(20, 0.5, "product", at_least=True) == "estimated at least 10 s (0.5 s per product)"
    with_setup = progress.estimate(10, 0.5, "point", setup=12.0)  # the whole run: the set-up done, then the work
    assert with_setup == "estimated 17 s in all (12 s of set-up done, then 0.5 s per point)"
    record = {"desc": "surface", "unit": "point", "done": 30, "total": 90, "initial": 10, "started": 100.0}
    record["updated"] = 110.0  # (30 - 10) points in 10 s: 2 points/s, (90 - 30) / 2 = 30 s left
    assert progress.describe(record) == "surface: 30/90 points (33%), 2 points/s, about 30 s left"


def test_lines_at_the_interval_and_at_the_end_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, "1e-9")
    records = []
    with progress.Progress("lesions", 3, unit="block", progress=None, record=records.append) as bar:
        bar.update(1)
        bar.update(2)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("lesions: 1/3 blocks (33%)")  # the line at the end says the rest: no 3/3 line
    assert err[1].startswith("lesions: 3/3 blocks done in ") and len(err) == 2
    assert [r["done"] for r in records] == [0, 1, 3, 3] and records[-1]["total"] == 3
    with progress.Progress("lesions", 3, unit="block", progress=False) as bar:  # --quiet
        bar.update(3)
    assert capsys.readouterr().err == ""


def test_info_reads_a_live_file_and_the_log_shows_progress_lines(tmp_path):
    ckpt, _ = tiny_resnet_checkpoint(tmp_path)
    out, held, go, log = tmp_path / "s.h5", tmp_path / "held", tmp_path / "go", tmp_path / "run.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), progress.INTERVAL_ENV: "1e-9"}
    grid = ["--x", "-1:1:3", "--y", "none", "--samples", "8", "--batch-points", "1", "--compile", "off"]
    args = [str(held), str(go), "--ckpt", str(ckpt), "--out", str(out), "--device", "cpu", *grid]
    with open(log, "w") as stderr:
        writer = subprocess.Popen(
            [sys.executable, "-c", HELD_WRITER, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=stderr
        )
        try:
            deadline = time.monotonic() + 120
            while not held.exists():
                assert writer.poll() is None, log.read_text()
                assert time.monotonic() < deadline
                time.sleep(0.05)
            info = CliRunner().invoke(cli, ["info", str(out)])
            assert info.exit_code == 0, info.output
            assert (
                f"(pid {writer.pid})" in info.output
                and "kind: surface" in info.output
                and "model: resnet_mini" in info.output
            )
            assert "progress: surface: 1/3 points (33%)" in info.output
            live = json.loads(CliRunner().invoke(cli, ["info", "--json", str(out)]).output)
            assert live["being_written"] is True and (live["pid"], live["kind"]) == (writer.pid, "surface")
            assert live["attributes"]["model"] == "resnet_mini" and live["progress"]["done"] == 1
            assert live["progress"]["total"] == 3
        finally:
            go.touch()
            writer.wait(timeout=120)
    assert writer.returncode == 0, log.read_text()
    lines = log.read_text().splitlines()
    assert "surface: 2/3 points (67%)" in "\n".join(lines) and lines[-1].startswith("surface: 3/3 points done in ")
    done = CliRunner().invoke(cli, ["info", str(out)])
    assert done.exit_code == 0 and "surface result" in done.output  # the finished file reads as before


def test_a_phase_whose_caller_prints_its_own_summary_ends_without_a_line(monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, "3600")
    with progress.Progress("epoch 1/1", 2, unit="step", progress=None, last_line=False) as bar:
        bar.update(2)
    assert capsys.readouterr().err == ""  # landscape train prints its own line per epoch


def test_a_phase_prints_at_the_interval_while_one_unit_takes_long(monkeypatch, capsys):
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.05")
    with progress.Progress("spectrum", 2, unit="batch", progress=None) as bar:
        time.sleep(0.4)  # the first batch takes long: the lines keep coming, and say since when
        bar.update(2)
    err = capsys.readouterr().err.splitlines()
    assert len(err) >= 3 and err[0].startswith("spectrum: 0/2 batches (0%), last update ")
    assert err[-1].startswith("spectrum: 2/2 batches done in ")
    assert not any(t.name == "landscape-progress" for t in threading.enumerate())  # the ticker has ended


@pytest.mark.parametrize("value", ["1e308", "1e999", "9" * 400])
def test_an_interval_beyond_the_clock_is_clamped_to_a_day_and_the_lines_still_end(monkeypatch, capsys, value):
    monkeypatch.setenv(progress.INTERVAL_ENV, value)
    assert progress.interval() in (progress.MAX_INTERVAL, progress.DEFAULT_INTERVAL)
    with progress.Progress("surface", 2, unit="point", progress=None) as bar:
        bar.update(2)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "OverflowError" not in err
    assert err.splitlines()[-1].startswith("surface: 2/2 points done in ")
    assert not any(t.name == "landscape-progress" for t in threading.enumerate())


def test_the_run_clock_is_taken_once():
    import time

    from landscape.runtime import clock

    clock.start()
    began = clock.take()
    assert began <= time.perf_counter() and clock.take() > began  # the next run starts when it is taken
