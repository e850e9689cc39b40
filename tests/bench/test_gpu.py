"""benchmarks/gpu.py: the one GPU command runs every row's code path on the CPU (--smoke) and reports sane numbers."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu.py"
EXPECTED = [
    ("surface", "float32"),
    ("surface", "bf16 autocast"),
    ("Hessian top-5", "resnet_mini"),
    ("spectrum top-5", "ours (lanczos, group"),
    ("spectrum top-5", "PyHessian"),
    ("Fourier profile", "float32"),
    ("Fourier profile", "bf16 autocast"),
    ("Hessian top-3", "exact (graph)"),
    ("Hessian top-3", "finite differences"),
    ("Hessian top-3", "fsdp_lanczos on 2 rank(s)"),
]


def _load():
    spec = importlib.util.spec_from_file_location("benchmark_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_smoke_table_and_json(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert data["smoke"] is True and data["command"].endswith(str(out))
    assert len(rows) == len(EXPECTED)
    for row, (kind, detail) in zip(rows, EXPECTED):
        assert row["benchmark"].startswith(kind) and detail in row["benchmark"], row["benchmark"]
        assert not row["failed"]
        for key in ("total_s", "unit_s", "forward_s", "ratio_forward"):
            assert _positive(row[key]), (row["benchmark"], key, row[key])
        gradient_row = kind in ("Hessian top-5", "spectrum top-5", "Hessian top-3")
        for key in ("backward_s", "ratio_backward"):
            assert _positive(row[key]) if gradient_row else row[key] is None, (row["benchmark"], key)
        assert not any("SCALED" in n or "EXTRAPOLATED" in n or "STOPPED" in n for n in row["notes"]), row["notes"]

    # the table: a header line, then one markdown row per JSON row, in the same order
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("GPU benchmarks (smoke, CPU")
    table = [line for line in lines if line.startswith("| ")]
    assert len(table) == 1 + len(rows) and table[0].startswith("| benchmark | work | total (s)")
    for line, row in zip(table[1:], rows):
        assert line.startswith(f"| {row['benchmark']} | ")

    surface32, surface16, hessian, ours, theirs, fourier32, fourier16, exact, differences, sharded = rows
    assert surface32["extra"]["points_timed"] == surface32["extra"]["points"] == 4  # the 2x2 grid, whole
    assert surface16["extra"]["compared_points"] == 4
    assert 0 < surface16["extra"]["max_rel_loss_diff"] < 0.05  # bf16 differs, but not by much
    assert "whole grid timed" in surface32["notes"]
    assert surface32["total_s"] == pytest.approx(4 * surface32["unit_s"])
    assert hessian["extra"]["converged"] == [True] * 5 and hessian["extra"]["n_matvec"] >= 5
    eig = hessian["extra"]["eigenvalues"]
    assert eig == sorted(eig) and all(math.isfinite(v) for v in eig)
    assert ours["extra"]["group"] == 2 and "group 2" in ours["benchmark"]  # the smoke run's vmap over 2 batches
    assert ours["extra"]["converged"] == 10
    assert ours["extra"]["batches"] == theirs["extra"]["batches"] == 2
    assert theirs["extra"]["compared_batches"] == [0, 1] and theirs["extra"]["n_compared"] == 10
    a, b = theirs["extra"]["ours_eigenvalues"], theirs["extra"]["pyhessian_eigenvalues"]
    assert len(a) == len(b) == 2 and all(len(r) == 5 for r in a + b)
    # PyHessian's power iteration at tol 1e-3 is loose (its smaller eigenvalues may be off by a few per cent),
    # but both solve the same batches' Hessians: the largest magnitude agrees closely, the rest roughly
    assert theirs["extra"]["max_rel_diff_largest"] < 0.05
    assert theirs["extra"]["max_rel_diff"] < 0.1
    assert f"{theirs['extra']['n_differ']}/10 eigenvalues differ" in theirs["accuracy"]
    assert 0 < fourier16["extra"]["max_abs_log_amplitude_diff"] < 0.5
    assert fourier32["unit_s"] == fourier32["total_s"]
    # the curvature rows: central differences and fsdp_lanczos (2 gloo ranks) against exact products, in float32
    assert exact["extra"]["n_matvec"] > 3 and len(exact["extra"]["eigenvalues"]) == 3
    for row in (differences, sharded):
        assert row["extra"]["max_rel_error"] < 1e-3 and row["extra"]["finite_difference"]["lattice"] == "float32"
    assert differences["extra"]["gradients"] / differences["extra"]["n_matvec"] <= 2.2
    print(f"smoke run: {seconds:.1f} s")


def test_tiny_budget_scales_down_and_extrapolates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    assert (
        bench.main(["--smoke", "--rows", "surface,fourier", "--budget-s", "0.01", "--json", str(tmp_path / "r.json")])
        == 0
    )
    surface32, surface16, fourier32, fourier16 = json.loads((tmp_path / "r.json").read_text())["rows"]
    for row in (surface32, surface16):  # every share is over at once: one round of the 2x2 grid, the rest extrapolated
        assert row["extra"]["points_timed"] == 1 and any(n.startswith("EXTRAPOLATED: 1 of 4") for n in row["notes"])
        assert row["total_s"] > row["extra"]["timed_s"] > 0
    assert surface16["extra"]["compared_points"] == 1
    for row in (fourier32, fourier16):
        assert "SCALED DOWN from 8 to 4 images to fit the share" in row["notes"] and "over 4 images" in row["work"]
    assert "EXTRAPOLATED" in capsys.readouterr().out


def test_refuses_without_cuda_unless_smoke() -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "CUDA" in proc.stderr and "Traceback" not in proc.stderr


def test_failed_row_is_reported_and_exit_code_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load()

    def broken(*args: object) -> list:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setitem(bench.RUNNERS, "hessian", broken)
    assert bench.main(["--smoke", "--rows", "hessian"]) == 1
    out = capsys.readouterr().out
    assert "| hessian | FAILED |" in out and "RuntimeError: boom" in out and "second line" not in out


def test_budget_shares_follow_weights_and_pass_time_on() -> None:
    bench = _load()
    budget = bench.Budget(100.0, {"a": 1.0, "b": 3.0}, reserve_s=20.0)
    first = budget.share("a")
    assert first.deadline - first.start == pytest.approx(20.0, abs=0.1)  # 1/4 of the 80 s left
    second = budget.share("b")  # a used none of its share: b gets all that is left
    assert second.deadline - second.start == pytest.approx(80.0, abs=0.1)
    part = second.part(0.5)
    assert part.left() == pytest.approx(40.0, abs=0.1) and not part.over()
    assert bench.Share(0.0, 0.0).over() and bench.Share(0.0, 0.0).left() == 0.0


def test_rows_option_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    with pytest.raises(SystemExit) as exc:
        bench.main(["--smoke", "--rows", "surface,nope"])
    assert exc.value.code == 2 and "--rows" in capsys.readouterr().err
