"""benchmarks/alignment.py: the CI-sized run (--smoke) trains, aligns and measures each width and prints its row."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "alignment.py"


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


def _script():
    spec = importlib.util.spec_from_file_location("alignment_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compare_measures_the_ends_and_the_matched_midpoints_with_and_without_the_reset(tmp_path) -> None:
    """A permuted copy of a CIFAR-shaped ResNet: after matching, the midpoint is the end itself, with the BatchNorm
    statistics interpolated or re-estimated, so all three accuracies are equal in each mode."""
    from analyses.align.references import permuted_resnet, randomise_bn
    from data.test_data import write_cifar10

    from landscape.models import create_model
    from landscape.models.checkpoint import save_checkpoint

    write_cifar10(tmp_path, per_class=4)
    data = f"cifar10:{tmp_path}"
    torch.manual_seed(0)
    a = randomise_bn(create_model("resnet_mini", num_classes=10, in_chans=3, widths=(4, 6), layers=(1, 1)))
    b = permuted_resnet(a, ("stem.0", "stem.1"), "shortcut")
    ends = []
    for name, model in (("a", a), ("b", b)):
        path = save_checkpoint(
            tmp_path / f"{name}.pt",
            model,
            model_name="resnet_mini",
            model_kwargs=model.model_kwargs,
            num_classes=10,
            dataset=data,
        )
        ends.append(path)
    measured = _script().compare(ends, data, None)
    assert list(measured) == list(_script().PUBLISHED)
    assert measured["midpoint, no reset"] == measured["end A"] == measured["end B"]
    for value in measured.values():
        assert 0.0 <= value <= 100.0 and value / 10 == pytest.approx(round(value / 10))  # % of 10 test images


def test_compare_needs_the_data_it_was_trained_on(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--compare", "a.pt", "b.pt"], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 2 and "--compare needs --data" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--cost", "--repeats", "0"], "--repeats: must be a whole number from 1 to 2**62, got '0'"),
        (["--cost", "--draws", "0"], "--draws: must be a whole number from 1 to 2**62, got '0'"),
        (["--threads", "0"], "--threads: must be a whole number from 1 to 2**62, got '0'"),
        (["--multipliers", "1", "x"], "--multipliers: must be a whole number from 1 to 2**62, got 'x'"),
        (["--epochs", "-1"], "--epochs: must be a whole number"),
        (["--samples", "2.5"], "--samples: must be a whole number"),
        (["--steps", "1"], "--steps: a line needs at least 2 points, got 1"),
    ],
)
def test_bad_arguments_are_one_line_before_any_work(argv, named, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        _script().main(argv)
    out = capsys.readouterr()
    assert exit_.value.code == 2 and out.out == ""
    assert named in out.err and "Traceback" not in out.err


def test_cost_matches_a_permuted_copy_in_one_sweep_and_times_as_many_products_as_the_pass_makes(capsys) -> None:
    from landscape.models import create_model

    def build(seed):
        torch.manual_seed(seed)
        return create_model("resnet_mini", num_classes=10, widths=(4, 6), layers=(1, 1)).eval()

    script = _script()
    independent, permuted = script.matching_cost(build, "resnet_mini")
    assert independent["converged"] and not independent["exact"]
    assert permuted["exact"] and permuted["sweeps"] == 1 and permuted["converged"]
    assert capsys.readouterr().out.count("the descents: invariant/seeded") == 2  # each descent, and the first alone
    rows = script.curvature_cost(2, {"widths": (4, 6), "layers": (1, 1)}, samples=8, batch_size=4)
    assert len(rows) == 2 and all(r["products"] == r["products_alone"] > 0 for r in rows)
    assert all(seconds > 0 for r in rows for k in ("pass", "alone", "lanczos", "sharpness") for seconds in r[k])
    assert all(0 < r["in_pass"] < r["pass"][1] for r in rows)  # the pass's products, timed inside it, are part of it
    out = capsys.readouterr().out
    assert "pass / products alone" in out and "within each of the 2 rounds" in out
    assert "pass / its own products timed inside it, median of 2" in out


def test_path_cost_times_every_points_pass_against_its_own_products(capsys) -> None:
    rows = _script().curvature_path_cost(
        steps=2, samples=16, epochs=1, model_kwargs={"widths": [4, 6], "layers": [1, 1]}, subset=64, draws=2
    )
    assert len(rows) == 4  # two points of the aligned line, two of the line as trained
    assert all(r["hessian_products"] > 0 and 0 < r["in_pass"] < r["pass"] for r in rows)
    assert all(r["average_sharpness_stderr"] > 0 for r in rows)
    out = capsys.readouterr().out
    assert "2 antithetic draws per batch" in out and "pass / its own products over the 4 points: median" in out
