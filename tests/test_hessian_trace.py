"""Trace estimators: convergence to the exact trace, standard errors, Hutch++ exact on a spanned space."""

import math

import numpy as np
import pytest
import torch
from test_hessian_operator import dense_hessian, tiny_batches, tiny_model

from landscape.errors import LandscapeError
from landscape.hessian.lanczos import DenseOperator
from landscape.hessian.operator import HessianOperator
from landscape.hessian.trace import trace
from landscape.objective import Objective, Regularizer


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
