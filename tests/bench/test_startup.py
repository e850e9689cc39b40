"""benchmarks/startup.py: one round times both fresh processes and prints the medians and their ratio."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "startup.py"


def test_one_round_prints_both_processes_and_the_ratio() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1"], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = re.search(r"^\s+0\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", proc.stdout, re.M)
    assert row is not None, proc.stdout
    wall, cpu, old_wall, old_cpu = map(float, row.groups())
    assert min(wall, cpu, old_wall, old_cpu) > 0
    ratios = re.findall(r"landscape / \+ old imports ([\d.]+) \(median of 1 rounds\)", proc.stdout)
    assert len(ratios) == 2 and abs(float(ratios[1]) - cpu / old_cpu) < 0.01  # the row's seconds are rounded
    bad = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "--rounds must be at least 1" in bad.stderr
