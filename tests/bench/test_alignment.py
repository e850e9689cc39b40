"""benchmarks/alignment.py: the CI-sized run (--smoke) trains, aligns and measures each width and prints its row."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "alignment.py"


@pytest.mark.slow
def test_smoke_prints_one_row_per_width_with_barriers_before_and_after() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split() for line in proc.stdout.splitlines() if re.match(r"\s*\d+-\d+\s", line)]
    assert [r[0] for r in rows] == ["4-8", "8-16"]
    for r in rows:
        numbers = [float(r[i]) for i in (2, 3, 4, 6, 7, 9)]
        assert all(0.0 <= v < 10 for v in numbers)  # accuracies in [0, 1], barriers >= 0 and finite
        assert 0.0 <= float(r[2]) <= 1.0 and 0.0 <= float(r[3]) <= 1.0
