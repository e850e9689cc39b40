"""Curvature along the paths: lambda_max against a dense float64 Hessian, S_avg against its quadratic value, resume."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import one_line_error, reestimate_bn
from torch import nn
from torch.func import functional_call, hessian

import landscape
from landscape.options.connect import CURVATURE_QUANTITIES, ConnectOptions
from landscape.plot import plot_files


def tiny(seed, batchnorm=False):
    torch.manual_seed(seed)
    layers = [nn.Flatten(), nn.Linear(16, 6)]
    layers += [nn.BatchNorm1d(6)] if batchnorm else []
    layers += [nn.Tanh(), nn.Linear(6, 3)]
    return nn.Sequential(*layers).eval()


def batches():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 1, 4, 4, generator=g)
    y = torch.randint(0, 3, (40,), generator=g)
    return [(x[:24], y[:24]), (x[24:], y[24:])]


def lerp(a, b, alpha, data):
    net = copy.deepcopy(a)
    sa, sb = a.state_dict(), b.state_dict()
    net.load_state_dict({k: (1 - alpha) * v + alpha * sb[k] if v.is_floating_point() else v for k, v in sa.items()})
    return reestimate_bn(net, data).double()


def dense_hessian(net, data):
    """The float64 Hessian of the sample-weighted mean cross-entropy over every parameter, flattened."""
    names = [n for n, _ in net.named_parameters()]
    shapes = [p.shape for _, p in net.named_parameters()]
    buffers = dict(net.named_buffers())
    n = sum(len(y) for _, y in data)

    def loss(flat):
        params, at = {}, 0
        for name, shape in zip(names, shapes):
            size = int(np.prod(shape))
            params[name] = flat[at : at + size].view(shape)
            at += size
        total = 0.0
        for x, y in data:
            out = functional_call(net, {**params, **buffers}, (x.double(),))
            total = total + F.cross_entropy(out, y, reduction="sum")
        return total / n

    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    return hessian(loss)(flat), flat


@pytest.mark.parametrize("batchnorm", [False, True], ids=["plain", "batchnorm"])
def test_top_eigenvalue_at_each_point_equals_the_dense_hessians(batchnorm):
    a, b, data = tiny(0, batchnorm), tiny(1, batchnorm), batches()
    res = landscape.connect(a, b, data, steps=3, curvature=True, device="cpu", progress=False)
    assert res["line/top_eigenvalue"].shape == (1, 3) and np.asarray(res["line/top_eigenvalue_converged"]).all()
    assert (np.asarray(res["line/hessian_products"]) > 0).all()
    for i, alpha in ((1, 0.5), (2, 1.0)):
        point = lerp(a, b, alpha, data) if alpha < 1 else copy.deepcopy(b).double()  # the end: theta_B as given
        H, _ = dense_hessian(point, data)
        top = float(torch.linalg.eigvalsh(H)[-1])
        assert res["line/top_eigenvalue"][0, i] == pytest.approx(top, rel=2e-3, abs=1e-6), alpha


def test_average_sharpness_and_its_standard_error_at_a_point_are_their_quadratic_values():
    """For small rho, S_avg = rho^2 / 2 tr(diag(w^2) H_S) + O(rho^4), averaged over the batches S (antithetic).

    Each antithetic draw is then ``rho^2 / 2 e^T A e`` with ``A = diag(|w|) H_S diag(|w|)``, ``e ~ N(0, I)``, whose
    variance is ``rho^4 / 4 * 2 tr(A^2)``: the standard error of the mean over the ``B`` batches of ``n`` draws
    each is ``sqrt(sum_S rho^4 tr(A_S^2) / (2 n)) / B``.
    """
    a, b, data = tiny(0), tiny(1), batches()
    rho, draws = 0.02, 400
    res = landscape.connect(
        a, b, data, steps=2, curvature=True, curvature_rho=rho, curvature_samples=draws, device="cpu", progress=False
    )
    per_batch = [dense_hessian(lerp(a, b, 0.0, [batch]), [batch]) for batch in data]
    want = float(np.mean([rho**2 / 2 * float((w**2 * torch.diagonal(h)).sum()) for h, w in per_batch]))
    assert res["line/average_sharpness"][0, 0] == pytest.approx(want, rel=0.15)
    scaled = [w.abs()[:, None] * h * w.abs()[None, :] for h, w in per_batch]
    variance = sum(rho**4 * float((s * s).sum()) / (2 * draws) for s in scaled)
    assert res["line/average_sharpness_stderr"][0, 0] == pytest.approx(variance**0.5 / len(data), rel=0.2)


def test_an_interrupted_run_resumes_with_the_same_curvature(tmp_path):
    a, b, data = tiny(0, True), tiny(1, True), batches()
    whole = landscape.connect(a, b, data, steps=4, curvature=True, device="cpu", progress=False)
    out = tmp_path / "c.h5"

    def stop(stage, done, total):
        if done == 2:
            raise KeyboardInterrupt

    from landscape.analyses.connect.run import run_connect
    from landscape.core.source import ModelSource

    options = ConnectOptions(steps=4, curvature=True, samples=None)
    sources = [ModelSource.of(m) for m in (a, b)]
    with pytest.raises(KeyboardInterrupt):
        run_connect(*sources, options, out=out, device="cpu", progress=False, batches=data, on_progress=stop)
    res = run_connect(*sources, options, out=out, device="cpu", progress=False, batches=data)
    for name in (*CURVATURE_QUANTITIES, "loss"):
        np.testing.assert_array_equal(res[f"line/{name}"], whole[f"line/{name}"], err_msg=name)
    figures = plot_files([out], tmp_path / "figs")
    assert [p.name for p in figures] == ["c_paths.png"]


def test_curvature_options():
    attrs = ConnectOptions(curvature=True).attrs()
    assert attrs["curvature"] is True and attrs["curvature_rho"] == 0.05 and "curvature" not in ConnectOptions().attrs()
    assert attrs["curvature_samples"] == 4 and attrs["curvature_quantities"] == list(CURVATURE_QUANTITIES)
    one_line_error(ConnectOptions, curvature_rho=0.1, match="--curvature-rho has no effect without --curvature")
    one_line_error(ConnectOptions, curvature=True, curvature_samples=0, match="--curvature-samples")


def conv_bn(seed):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(), nn.Linear(96, 3)
    ).eval()


@pytest.mark.parametrize("repair", [False, True], ids=["plain", "repair"])
def test_sharpness_draws_by_the_tuned_forward_equal_the_plain_forwards(repair, monkeypatch):
    """S_avg's draws run BatchNorm folded into the convolution (not under REPAIR's hooks): the plain values."""
    from landscape.analyses.connect.points import SplitEvaluator

    a, b, data = conv_bn(0).double(), conv_bn(1).double(), [(x.double(), y) for x, y in batches()]
    kwargs = dict(steps=3, curvature=True, repair=repair, device="cpu", progress=False)
    tuned = landscape.connect(a, b, data, **kwargs)
    folded = []
    real_tune = SplitEvaluator.tune_curvature

    def record(self):
        real_tune(self)
        folded.extend(f.fold.n_folded for f in self.forwards)

    monkeypatch.setattr(SplitEvaluator, "tune_curvature", record)
    landscape.connect(a, b, data, **kwargs)
    assert folded == [1]
    monkeypatch.setattr(SplitEvaluator, "tune_curvature", lambda self: None)
    plain = landscape.connect(a, b, data, **kwargs)
    np.testing.assert_allclose(tuned["line/average_sharpness"], plain["line/average_sharpness"], rtol=1e-9)
    np.testing.assert_array_equal(tuned["line/top_eigenvalue"], plain["line/top_eigenvalue"])


def test_a_radius_too_large_names_the_option_that_set_it():
    msg = one_line_error(
        landscape.connect, tiny(0), tiny(1), batches(), steps=2, curvature=True, curvature_rho=1e100, progress=False
    )
    assert msg.startswith("curvature_rho=1e+100 makes the perturbed loss non-finite") and "rho=" not in msg.replace(
        "curvature_rho=", ""
    )
