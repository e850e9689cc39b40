"""Trace estimators: convergence to the exact trace, standard errors, Hutch++ exact on a spanned space."""

import math

import numpy as np
import pytest
import torch
from helpers import one_line_error

from analyses.hessian.test_operator import dense_hessian, tiny_batches, tiny_model
from landscape.analyses.hessian.linalg import DenseOperator
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.probes import probe_vectors
from landscape.analyses.hessian.trace import trace
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError


def low_rank_plus_noise(n=200, seed=0):
    rng = np.random.default_rng(seed)
    ev = np.concatenate([np.linspace(50, 10, 8), rng.normal(0, 0.05, n - 8)])
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return torch.tensor((Q * ev) @ Q.T), float(ev.sum())


@pytest.mark.parametrize("method", ["hutchinson", "hutch++"])
def test_estimates_converge_to_the_exact_trace(method):
    A, exact = low_rank_plus_noise()
    errors, stderrs = [], []
    for samples in (30, 300, 3000):
        t = trace(DenseOperator(A), samples, method, seed=1)
        assert t.estimate == pytest.approx(float(t.samples.mean()))
        assert abs(t.estimate - exact) < 4 * t.stderr + 1e-10 * abs(exact)
        errors.append(abs(t.estimate - exact))
        stderrs.append(t.stderr)
    if method == "hutchinson":
        assert stderrs[0] > 2.5 * stderrs[1] > 2.5**2 * stderrs[2]  # ~ 1/sqrt(samples)
        assert errors[-1] < 0.05 * abs(exact)
    else:  # 3000 products >= 3n: the sketch spans the space and the estimate is exact
        assert errors[-1] < 1e-10 * abs(exact) and stderrs[-1] < 1e-10 * abs(exact)


def test_hutch_plus_plus_beats_hutchinson_on_a_low_rank_spectrum():
    A, exact = low_rank_plus_noise()
    plain = trace(DenseOperator(A), 60, "hutchinson", seed=3)
    plus = trace(DenseOperator(A), 60, "hutch++", seed=3)
    assert plus.stderr < 0.1 * plain.stderr
    assert abs(plus.estimate - exact) < 0.1 * abs(plain.estimate - exact) + 1e-6


def test_tiny_model_hessian_trace():
    obj = Objective(tiny_model(), tiny_batches(), dtype=torch.float64, regularizer=Regularizer("norm-sum", 0.05))
    op = HessianOperator(obj, patterns="3", mode="jvp")  # the last layer's block: 21 parameters
    exact = float(torch.trace(dense_hessian(obj, names=op.names)))
    t = trace(op, 40, "hutchinson", seed=0)
    assert abs(t.estimate - exact) < 4 * t.stderr and t.n_matvec == 40
    assert t.stderr == pytest.approx(float(t.samples.std()) / math.sqrt(40))
    full = trace(op, 3 * 21, "hutch++", seed=0)  # the sketch spans the space: exact
    assert full.estimate == pytest.approx(exact, rel=1e-10) and full.stderr < 1e-8


def test_invalid_trace_options():
    A, _ = low_rank_plus_noise(20)
    for kw in ({"samples": 1}, {"samples": 5, "method": "hutch++"}, {"method": "other"}):
        with pytest.raises(LandscapeError):
            trace(DenseOperator(A), **kw)


@pytest.mark.parametrize("method", ["hutchinson", "hutch++"])
def test_seed_none_leaves_the_global_rng_untouched_and_a_seed_reproduces(method):
    A, _ = low_rank_plus_noise(30)
    torch.manual_seed(99)
    before = torch.get_rng_state()
    fresh = [trace(DenseOperator(A), 12, method, seed=None).samples for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), before)
    assert not torch.equal(fresh[0], fresh[1])
    a, b = trace(DenseOperator(A), 12, method, seed=5), trace(DenseOperator(A), 12, method, seed=5)
    assert torch.equal(a.samples, b.samples) and a.estimate == b.estimate


@pytest.mark.parametrize("distribution", ["rademacher", "gaussian"])
def test_probe_vectors_seed_none_leaves_the_global_rng_untouched(distribution):
    torch.manual_seed(3)
    before = torch.get_rng_state()
    z1, z2 = (probe_vectors(50, 4, seed=None, distribution=distribution) for _ in range(2))
    assert torch.equal(torch.get_rng_state(), before) and not torch.equal(z1, z2)
    g = torch.Generator().manual_seed(11)  # seed=11 is exactly a CPU generator seeded with 11
    if distribution == "gaussian":
        want = torch.randn(50, 4, generator=g, dtype=torch.float64)
    else:
        want = torch.randint(0, 2, (50, 4), generator=g).to(torch.float64) * 2 - 1
    assert torch.equal(probe_vectors(50, 4, seed=11, distribution=distribution), want)


@pytest.mark.parametrize(("method", "samples", "good"), [("hutchinson", 10, 4), ("hutch++", 9, 3), ("hutch++", 9, 7)])
def test_non_finite_products_are_a_one_line_error(method, samples, good):
    A, _ = low_rank_plus_noise(30)
    count = [0]

    def fn(v):
        count[0] += 1
        return A @ v if count[0] <= good else torch.full_like(v, math.nan)

    msg = one_line_error(trace, DenseOperator(fn=fn, n=30), samples, method, seed=0, match="non-finite")
    assert f"at product {good + 1}" in msg and count[0] == good + 1  # refused at once, no product wasted
