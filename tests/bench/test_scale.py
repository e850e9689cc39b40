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
        assert row[2] == "2"  # images
        params, costs = float(row[1].replace(",", "")), [float(value) for value in row[3:]]
        assert params > 1e5 and all(math.isfinite(c) and c > 0 for c in costs)
        assert costs[-1] < 50  # KB: the directions are kept as their recipe, not as 2 x 200k floats


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--smoke", "--images", "0"], "--images: must be a whole number from 1 to 2**62, got '0'"),
        (["--smoke", "--threads", "-1"], "--threads: must be a whole number from 1 to 2**62"),
        (["--memory", "--points", "x"], "--points: must be a whole number from 1 to 2**62, got 'x'"),
        (["--smoke", "--images", str(2**64)], "must be a whole number from 1 to 2**62"),
        (["--smoke", "--device", "nosuch"], "unknown device 'nosuch'"),
    ],
)
def test_bad_arguments_are_one_line_before_any_measurement(argv, named, capsys: pytest.CaptureFixture[str]) -> None:
    scale = _load()
    with pytest.raises(SystemExit) as exit_:
        scale.main(argv)
    out = capsys.readouterr()
    assert exit_.value.code == 2 and out.out == ""
    assert named in out.err and "Traceback" not in out.err


def test_a_failing_child_is_one_line_naming_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    scale = _load()
    monkeypatch.setattr(scale, "SMOKE", [("nosuch_model", 32)])
    with pytest.raises(SystemExit) as exit_:
        scale.main(["--smoke"])
    message = str(exit_.value.code)
    assert message.startswith("scale.py: the measurement of nosuch_model failed:") and "\n" not in message


@pytest.mark.slow
def test_finite_difference_smoke_prints_costs_and_errors_of_vit_mini(one_thread, capsys: pytest.CaptureFixture[str]):
    scale = _load()
    assert scale.main(["--fd-smoke"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:3] == ["model", "params", "images"] and len(lines) == 3
    for line, images in zip(lines[1:], ("1", "2")):
        row = line.split()
        assert row[0] == "vit_mini" and row[2] == images
        values = [float(v) for v in row[3:]]
        assert all(math.isfinite(v) and v > 0 for v in values)
        assert values[-2] < 1e-3 and values[-1] < 1e-3  # the differences' error, of ||H s||
