"""benchmarks/surface.py --quick: every way of one model runs, the table and every goal line are printed."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "surface.py"


def test_quick_prints_the_table_and_a_verdict_for_every_goal(tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--models", "resnet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    peer_installed = importlib.util.find_spec("loss_landscapes") is not None  # the bench extra
    row = r"^resnet\s+(\d)x(\d)\s+([\d.]+)\s+([\d.]+|-)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
    rows = re.findall(row, proc.stdout, re.M)
    assert [r[:2] for r in rows] == [("2", "2"), ("3", "3")] * 2, proc.stdout  # printed as measured and in the table
    assert all(float(v) > 0 for r in rows for v in r[2:7] if v != "-")
    assert all((r[3] != "-") == peer_installed for r in rows), proc.stdout
    goals = re.findall(
        r"^  goal (\d): resnet (\d)x\d, (.+?): (?:([\d.]+)x (.*)|not measured \((.*)\))$", proc.stdout, re.M
    )
    assert len(goals) == 2 * (2 + 4), proc.stdout  # per grid: auto cold and warm / plain; two peers, cold and warm
    for goal in goals:
        if goal[5]:  # only the missing peer is not measured, and the line says how to install it
            assert not peer_installed and goal[2].startswith("loss-landscapes") and "[bench]" in goal[5], goal
        else:
            assert goal[4].endswith(("MET", "NOT MET")) or goal[4].startswith("(information"), goal
    assert not list(tmp_path.glob("landscape-bench-cache-*"))  # the warm cache folder is removed
    bad = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "--rounds" in bad.stderr


@pytest.mark.slow
def test_breakdown_prints_each_models_point_eager_and_compiled_and_the_operator_shares(tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--breakdown", "--models", "resnet", "--samples", "16", "--rounds", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = re.search(
        r"^resnet: a point \(wall, median of 2\) eager ([\d.]+) ms; compiled ([\d.]+) ms \(([\d.]+)x eager\); "
        r"the eager forward's operator time: (.*), the rest (\d+)%$",
        proc.stdout,
        re.M,
    )
    assert line, proc.stdout
    eager, compiled, ratio = (float(v) for v in line.groups()[:3])
    assert eager > 0 and compiled > 0 and ratio == pytest.approx(compiled / eager, abs=0.03)  # from the unrounded times
    shares = dict(re.findall(r"(\w[\w ()]*) (\d+)%", line.group(4)))
    assert "convolutions" in shares and sum(map(int, shares.values())) + int(line.group(5)) in (99, 100, 101)
