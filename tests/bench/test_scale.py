"""benchmarks/scale.py --smoke: one row per zoo mini with positive, finite costs and a small surface file."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale.py"


def _load():
    spec = importlib.util.spec_from_file_location("benchmark_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smoke_prints_one_row_per_mini(one_thread, capsys: pytest.CaptureFixture[str]) -> None:
    scale = _load()
    assert scale.main(["--smoke"]) == 0
    table, slopes = capsys.readouterr().out.strip().split("\n\n")
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["model", "params"]
    rows = [line.split() for line in lines[1:]]
    assert [row[0] for row in rows] == [spec for spec, _ in scale.SMOKE]
    assert "per parameter and image" in slopes and slopes.count("exponent") == 3
    for row in rows:
        params, costs = float(row[1].replace(",", "")), [float(value) for value in row[2:]]
        assert params > 1e5 and all(math.isfinite(c) and c > 0 for c in costs)
        assert costs[-1] < 50  # KB: the directions are kept as their recipe, not as 2 x 200k floats
