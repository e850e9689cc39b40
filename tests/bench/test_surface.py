"""benchmarks/surface.py --quick: every way of one model runs, the table and every goal line are printed."""

import os
import re
import subprocess
import sys
from pathlib import Path

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
    row = r"^resnet\s+(\d)x(\d)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
    rows = re.findall(row, proc.stdout, re.M)
    assert [r[:2] for r in rows] == [("2", "2"), ("3", "3")] * 2, proc.stdout  # printed as measured and in the table
    assert all(float(v) > 0 for r in rows for v in r[2:7])
    goals = re.findall(r"^  goal (\d): resnet (\d)x\d, (.+): ([\d.]+)x (.*)$", proc.stdout, re.M)
    assert len(goals) == 2 * (2 + 4), proc.stdout  # per grid: auto cold and warm / plain; two peers, cold and warm
    verdicts = [g[4] for g in goals]
    assert all(v.endswith(("MET", "NOT MET")) or v.startswith("(information") for v in verdicts)
    assert not list(tmp_path.glob("landscape-bench-cache-*"))  # the warm cache folder is removed
    bad = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "--rounds" in bad.stderr
