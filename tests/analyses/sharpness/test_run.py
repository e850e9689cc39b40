"""run_sharpness: closed forms on a quadratic through the runner, resume after kill -9, torchrun 2 ranks = 1."""

import math
import os
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import conv_bn_model, one_line_error, tiny_resnet_checkpoint, torchrun
from torch import nn

import landscape
from landscape.analyses.registry import summarize
from landscape.analyses.sharpness.run import run_sharpness
from landscape.cli import cli
from landscape.options.sharpness import SharpnessOptions
from landscape.plot import plot_files
from landscape.store.read import read_result

F64 = torch.float64
# a bias-free linear model under MSE: L_b(W) = ||X_b W^T - T_b||^2 / (N_b C), a quadratic in W with the Hessian
# A_b = (2 / (N_b C)) I_C (x) X_b^T X_b in the row-major order of W (C x K)
K, C, M, B = 16, 2, 4, 3


def linear_problem():
    g = torch.Generator().manual_seed(7)
    X = torch.randn(M * B, K, generator=g, dtype=F64)
    y = torch.randint(0, C, (M * B,), generator=g)
    batches = [(X[i : i + M].reshape(M, 1, 1, K), y[i : i + M]) for i in range(0, M * B, M)]
    T = torch.nn.functional.one_hot(y, C).to(F64)
    W_min = (torch.linalg.pinv(X) @ T).T  # K > M B: every batch is fitted exactly, W_min minimises every L_b
    W_away = W_min + 0.3 * torch.randn(C, K, generator=g, dtype=F64)
    return batches, W_min, W_away


def linear_model(W):
    model = nn.Sequential(nn.Flatten(), nn.Linear(K, C, bias=False)).to(F64)
    with torch.no_grad():
        model[1].weight.copy_(W)
    return model


def batch_hessian(x):
    X = x.reshape(M, K)
    return torch.block_diag(*[2 * X.T @ X / (M * C)] * C)


def batch_gradient(x, y, W):
    X, T = x.reshape(M, K), torch.nn.functional.one_hot(y, C).to(F64)
    return (2 * (X @ W.T - T).T @ X / (M * C)).reshape(-1)


QUADRATIC = {"criterion": "mse", "dtype": "float64", "batch_size": M, "samples": None}


def test_worst_case_through_the_runner_is_half_rho_squared_lambda_max_at_the_minimum():
    batches, W_min, _ = linear_problem()
    w = W_min.reshape(-1)
    radii = [0.0, 0.1, 0.4]
    for adaptive, eta in ((False, 0.0), (True, 0.0), (True, 0.05)):
        kw = {"steps": 60, "restarts": 1, "adaptive": adaptive, "eta": eta, "progress": False, **QUADRATIC}
        res = landscape.sharpness(linear_model(W_min), batches, rho=radii, **kw)
        c = w.abs() + eta if adaptive else torch.ones_like(w)
        for b, (x, _) in enumerate(batches):
            top = float(torch.linalg.eigvalsh(c[:, None] * batch_hessian(x) * c[None, :]).max())
            np.testing.assert_allclose(res["values"][b], np.square(radii) * top / 2, rtol=1e-3, atol=1e-15)
        np.testing.assert_allclose(res["mean"], res["values"].mean(0), rtol=1e-15)
        assert res["done"].all() and res.attrs["complete"] and res.attrs["measure"] == "worst"
        assert res.attrs["adaptive"] is adaptive and res.attrs["p"] == "2" and res.attrs["eta"] == eta
        assert res.attrs["perturbed_tensors"] == 1 and res.attrs["perturbed_parameters"] == C * K
        assert res["base_loss"] == pytest.approx(0.0, abs=1e-20)
        # how each ascent ended: at rho 0 none ran; else the best within the 60 iterations
        assert (res["best_iteration"][:, 0] == 0).all() and (res["halvings"][:, 0] == 0).all()
        assert ((res["best_iteration"] >= 0) & (res["best_iteration"] <= 60)).all()
        np.testing.assert_array_equal(res["final_step"], 2.0 / 2.0 ** res["halvings"])
        # 3 batches: too few for an interval, and the file says so
        assert np.isnan(res["low"]).all() and np.isnan(res["high"]).all()
        assert res.attrs["interval"] == "no interval: 3 mini-batches, fewer than the 5 an interval needs"
        assert "(no interval: 3 mini-batches" in summarize(res)


@pytest.mark.parametrize("eta", [0.0, 0.05])
def test_average_case_through_the_runner_replays_each_batch_s_draws_exactly(eta):
    batches, _, W = linear_problem()
    W = W.clone()
    W[0, :3] = 0.0  # weights at exactly 0: perturbed only with eta > 0
    w = W.reshape(-1)
    radii, draws, seed = [0.05, 0.2], 50, 3
    opts = SharpnessOptions(measure="average", rho=radii, draws=draws, seed=seed, resamples=200, eta=eta, **QUADRATIC)
    res = run_sharpness(linear_model(W), opts, out=None, batches=batches, progress=False)
    c = w.abs() + eta
    for b, (x, y) in enumerate(batches):
        gen = torch.Generator().manual_seed(seed + b)  # each batch's own noise: seed + its index
        eps = torch.stack([torch.randn(C, K, generator=gen, dtype=F64).reshape(-1) for _ in range(draws)])
        A, g = batch_hessian(x), batch_gradient(x, y, W)
        for r, rho in enumerate(radii):
            d = rho * c * eps  # L_b(w + d) - L_b(w) = g.d + d^T A d / 2, exactly
            rise = d @ g + 0.5 * ((d @ A) * d).sum(1)
            assert res["values"][b, r] == pytest.approx(float(rise.mean()), rel=1e-9, abs=1e-15)
            assert res["stderr"][b, r] == pytest.approx(float(rise.std() / math.sqrt(draws)), rel=1e-7)
            exact = rho**2 * float((c**2 * torch.diag(A)).sum()) / 2  # E: the linear term has mean zero
            assert abs(res["values"][b, r] - exact) < 5 * res["stderr"][b, r]
    assert np.isnan(res["low"]).all() and np.isnan(res["high"]).all()  # 3 batches: no interval
    assert res.path.name == "<memory>" and res.attrs["dataset"] == "batches" and res.attrs["draws"] == draws
    assert res.attrs["eta"] == eta and "best_iteration" not in res


def test_the_plan_line_and_the_file_name_the_perturbed_set(capsys):
    batches, _, W = linear_problem()
    model = nn.Sequential(nn.Flatten(), nn.Linear(K, C)).to(F64)  # a weight and a bias
    res = landscape.sharpness(
        model, batches, rho=[0.1], steps=1, params="*.weight", eta=0.1, progress=True, **QUADRATIC
    )
    plan = capsys.readouterr().err
    assert "c = |w| + 0.1" in plan and f"perturbing 1 of 2 tensors ({C * K} numbers; --params *.weight)" in plan
    assert res.attrs["perturbed_tensors"] == 1 and res.attrs["perturbed_parameters"] == C * K
    assert res.attrs["eta"] == 0.1 and res.attrs["params"] == ["*.weight"]
    landscape.sharpness(model, batches, rho=[0.1], steps=1, progress=True, **QUADRATIC)
    assert f"perturbing 2 of 2 tensors ({C * K + C} numbers)" in capsys.readouterr().err


@pytest.mark.parametrize("complete", [True, False], ids=["complete", "unfinished"])
def test_a_file_holding_non_finite_values_is_not_resumed(tmp_path, complete):
    batches, _, W = linear_problem()
    out = tmp_path / "s.h5"
    kw = {"measure": "average", "rho": [0.1], "draws": 2, "progress": False, "out": out, **QUADRATIC}
    landscape.sharpness(linear_model(W), batches, **kw)
    with h5py.File(out, "r+") as h5:
        h5["values"][1, 0] = np.nan
        h5.attrs["complete"] = complete
    one_line_error(landscape.sharpness, linear_model(W), batches, **kw, match="non-finite values .* remove the file")
    out.unlink()
    assert np.isfinite(landscape.sharpness(linear_model(W), batches, **kw)["values"]).all()


def test_a_regulariser_is_part_of_the_loss():
    batches, _, W = linear_problem()
    base = {"measure": "average", "rho": [0.1], "draws": 4, "antithetic": True, **QUADRATIC}
    plain = landscape.sharpness(linear_model(W), batches, progress=False, **base)
    l2 = landscape.sharpness(linear_model(W), batches, progress=False, regularizer="l2", reg_coef=2.0, **base)
    w = W.reshape(-1)
    for b in range(B):
        gen = torch.Generator().manual_seed(b)
        d = 0.1 * w.abs() * torch.stack([torch.randn(C, K, generator=gen, dtype=F64).reshape(-1) for _ in range(4)])
        # antithetic: the l2 penalty 0.5 * coef * ||w + d||^2 adds 0.5 * coef * ||d||^2 to each draw
        assert l2["values"][b, 0] - plain["values"][b, 0] == pytest.approx(float((d**2).sum(1).mean()), rel=1e-9)
    assert l2["base_loss"] - plain["base_loss"] == pytest.approx(float((w**2).sum()), rel=1e-12)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("rho", math.nan, "--rho must be a finite number"),
        ("rho", [0.1, -0.1], "--rho must be a finite number >= 0"),
        ("rho", [], "--rho must be a radius"),
        ("p", 1, "--p must be 2 or inf"),
        ("steps", 0, "--steps must be a whole number >= 1"),
        ("draws", -1, "--draws"),
        ("measure", "mean", "--measure"),
        ("confidence", 1.0, "--confidence"),
        ("step_size", 0.0, "--step-size"),
        ("params", ",", "--params"),
        ("restarts", 0, "--restarts must be a whole number >= 1"),
        ("eta", -0.1, "--eta must be a finite number >= 0"),
        ("eta", math.inf, "--eta"),
    ],
)
def test_bad_options_are_refused_in_one_line(field, value, match):
    one_line_error(SharpnessOptions, **{field: value}, match=match)


def test_options_of_another_measure_or_scale_are_refused():
    one_line_error(SharpnessOptions, adaptive=False, eta=0.1, match="--eta has no effect without --adaptive")
    one_line_error(SharpnessOptions, measure="average", restarts=3, match="--restarts has no effect without --measure")


def test_the_norm_and_radii_are_read_in_every_spelling():
    assert SharpnessOptions(p="linf").p == SharpnessOptions(p=math.inf).p == "inf"
    assert SharpnessOptions(p=2).p == "2" and SharpnessOptions(rho="0.1, 0.2").rho == (0.1, 0.2)
    assert SharpnessOptions(rho=0.5).rho == (0.5,)


# ------------------------------------------------------------------------------ a checkpoint, files and ranks
OPTS = ["--samples", "20", "--batch-size", "4", "--rho", "0.02,0.1", "--steps", "3", "--device", "cpu"]
KW = {"samples": 20, "batch_size": 4, "rho": (0.02, 0.1), "steps": 3}
JOB = """
import sys, time
from landscape.analyses.sharpness.run import run_sharpness
from landscape.options.sharpness import SharpnessOptions

def report(b):
    print("BATCH", b, flush=True)
    time.sleep(60 if b >= 1 else 0)

run_sharpness(sys.argv[1], SharpnessOptions(**{kw}), out=sys.argv[2], device="cpu", progress=False, on_batch=report)
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path, _ = tiny_resnet_checkpoint(tmp_path_factory.mktemp("ckpt"))
    return path


@pytest.fixture(scope="module")
def reference(checkpoint, tmp_path_factory):
    return run_sharpness(
        checkpoint, SharpnessOptions(**KW), out=tmp_path_factory.mktemp("ref") / "ref.h5", device="cpu", progress=False
    )


def test_a_killed_run_resumes_to_the_same_numbers(checkpoint, reference, tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB.format(kw=KW))
    out = tmp_path / "k.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(job), str(checkpoint), str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        for line in proc.stdout:
            if line.startswith("BATCH 1"):
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    part = read_result(out)
    assert part["done"].tolist() == [True, True, False, False, False] and "mean" not in part
    assert "2 of 5 batches done" in summarize(part)
    seen = []
    res = run_sharpness(checkpoint, SharpnessOptions(**KW), out=out, device="cpu", progress=False, on_batch=seen.append)
    assert seen == [2, 3, 4] and res.attrs["created"] == part.attrs["created"]
    for name in ("values", "base_loss", "done", "mean", "low", "high", "rho", "batch_sizes"):
        np.testing.assert_array_equal(res[name], reference[name], err_msg=name)
    one_line_error(run_sharpness, checkpoint, SharpnessOptions(**{**KW, "steps": 4}), out=out, match="--force")


def test_two_rank_torchrun_equals_one_process(checkpoint, reference, tmp_path):
    out = tmp_path / "two.h5"
    proc = torchrun("-m", "landscape", "sharpness", "--ckpt", checkpoint, *OPTS, "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("wrote") == 1  # rank 0 alone reports and writes
    two = read_result(out)
    for name in ("values", "base_loss", "done", "mean", "low", "high"):
        np.testing.assert_allclose(two[name], reference[name], rtol=1e-12, err_msg=name)


def test_the_command_line_info_and_figure(checkpoint, reference, tmp_path):
    out = tmp_path / "c.h5"
    result = CliRunner().invoke(cli, ["sharpness", "--ckpt", str(checkpoint), *OPTS, "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "worst-case adaptive l2 sharpness of 5 batches of 4: rho 0.02: " in result.output
    np.testing.assert_array_equal(read_result(out)["values"], reference["values"])
    bad = CliRunner().invoke(
        cli, ["sharpness", "--ckpt", str(checkpoint), "--rho", "-1", "--out", str(tmp_path / "x.h5")]
    )
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and "--rho" in bad.output
    assert not (tmp_path / "x.h5").exists()
    (figure,) = plot_files([out, reference.path], tmp_path / "figs")
    assert figure.name.startswith("sharpness_") and figure.read_bytes()[:4] == b"\x89PNG"
    # 5 batches: an interval, named
    assert reference.attrs["interval"] == "95% bootstrap interval over 5 mini-batches"
    assert (reference["low"] <= reference["mean"]).all() and (reference["mean"] <= reference["high"]).all()
    assert "[" in summarize(reference) and "no interval" not in summarize(reference)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (["--rho", "1e30"], "--rho 1e+30 makes the perturbed loss (or its gradient) non-finite; use a smaller --rho"),
        (["--rho", "0.1", "--step-size", "1e300"], "--step-size 1e+300 makes the ascent's iterate non-finite"),
        (["--measure", "average", "--rho", "1e30"], "--rho 1e+30 makes the perturbed loss non-finite"),
    ],
)
def test_a_non_finite_loss_stops_the_run_in_one_line_and_leaves_no_file(checkpoint, tmp_path, options, match):
    out = tmp_path / "n.h5"
    args = ["sharpness", "--ckpt", str(checkpoint), "--samples", "8", "--batch-size", "4", "--steps", "2"]
    if "average" in options:
        args = [a for a in args if a not in ("--steps", "2")] + ["--draws", "2"]
    result = CliRunner().invoke(cli, [*args, *options, "--out", str(out), "--device", "cpu", "--quiet"])
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert match in result.output and result.output.strip().count("\n") == 0, result.output
    assert not out.exists() or not read_result(out)["done"].any()


class _Tokens(nn.Module):
    """A weight, a bias, a norm's weight and bias, and a position table: the surfaces' rule perturbs the weight."""

    def __init__(self):
        super().__init__()
        self.pos_embed = nn.Parameter(0.1 * torch.ones(1, K, dtype=F64))
        self.norm = nn.LayerNorm(K).to(F64)
        self.head = nn.Linear(K, C).to(F64)

    def forward(self, x):
        return self.head(self.norm(x.flatten(1) + self.pos_embed))


@pytest.mark.parametrize("measure", ["average", "worst"])
def test_perturb_surface_is_the_surfaces_rule(capsys, measure):
    batches, _, _ = linear_problem()
    model = _Tokens()
    options = {"measure": measure, "rho": [0.05], **({"draws": 2} if measure == "average" else {"steps": 3})}
    rule = landscape.sharpness(model, batches, perturb="surface", progress=True, **options, **QUADRATIC)
    assert "perturbing 1 of 5 tensors (32 numbers; --perturb surface)" in capsys.readouterr().err
    assert rule.attrs["perturb"] == "surface" and rule.attrs["perturbed_tensors"] == 1
    assert rule.attrs["perturbed_parameters"] == C * K
    named = landscape.sharpness(model, batches, params="head.weight", **options, **QUADRATIC)
    assert np.array_equal(rule["values"], named["values"])  # the same tensors, the same draws: the same numbers
    every = landscape.sharpness(model, batches, **options, **QUADRATIC)
    assert every.attrs["perturbed_tensors"] == 5 and not np.array_equal(every["values"], rule["values"])
    one_line_error(
        landscape.sharpness, model, batches, params="head.bias", perturb="surface", match="leaves no parameter"
    )


def test_the_average_case_folds_batchnorm_records_it_and_keeps_the_plain_forwards_values(monkeypatch):
    """The draws run with BatchNorm folded into the convolution; the values are the plain forward's (closed forms
    above) to rounding."""
    model = conv_bn_model()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 1, 6, 6, generator=g, dtype=F64), torch.randint(0, 4, (8,), generator=g)) for _ in "ab"]
    opts = SharpnessOptions(measure="average", rho=[0.05], draws=6, resamples=50, dtype="float64", samples=None)
    folded = run_sharpness(model, opts, out=None, batches=batches, progress=False)
    assert folded.attrs["bn_folded"] == 1 and not folded.attrs["channels_last"]
    monkeypatch.setattr("landscape.analyses.sharpness.run._tuned_forward", lambda objective, f: None)
    plain = run_sharpness(model, opts, out=None, batches=batches, progress=False)
    assert "bn_folded" not in plain.attrs
    np.testing.assert_allclose(folded["values"], plain["values"], rtol=1e-10)
    np.testing.assert_allclose(folded["base_loss"], plain["base_loss"], rtol=1e-12)


def test_a_resumed_average_case_takes_the_recorded_layout_and_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    """The average case's forward is tuned by timing; a resumed file's layout is taken again, not timed again."""
    from landscape.core.forward import EvalForward
    from landscape.core.source import ModelSource

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 4),
    ).eval()  # fmt: skip
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 3, 8, 8, generator=g), torch.randint(0, 4, (24,), generator=g)
    batches = [(x[i : i + 6], y[i : i + 6]) for i in range(0, 24, 6)]
    options = SharpnessOptions(measure="average", rho=0.05, draws=2, samples=24, batch_size=6)

    def run(out, layout, on_batch=None):
        def choose(self, repeats=2):
            if layout:
                self.use_channels_last()
            return layout

        monkeypatch.setattr(EvalForward, "choose_memory_format", choose)
        source = ModelSource(module=model)
        return run_sharpness(source, options, out=out, batches=batches, progress=False, on_batch=on_batch)

    def stop_after_two(b):
        if b == 1:
            raise KeyboardInterrupt

    whole, other = run(tmp_path / "whole.h5", False), run(tmp_path / "other.h5", True)
    assert not np.array_equal(whole["values"], other["values"])  # the layouts differ in the last bits here
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut.h5", False, on_batch=stop_after_two)
    resumed = run(tmp_path / "cut.h5", True)
    np.testing.assert_array_equal(resumed["values"], whole["values"])
    assert not resumed.attrs["channels_last"]
