"""SLQ: exact Gauss quadrature per probe, moments against exact traces of powers, normalisation."""

import math

import numpy as np
import pytest
import torch
from helpers import one_line_error

from analyses.hessian.test_operator import dense_hessian, tiny_batches, tiny_model
from landscape.analyses.hessian.density import broadened_density, spectral_density
from landscape.analyses.hessian.linalg import DenseOperator
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.probes import probe_vectors
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError


def random_symmetric(n=120, seed=0):
    rng = np.random.default_rng(seed)
    ev = np.concatenate([[30.0, 12.0, -4.0], rng.normal(0, 0.5, n - 3)])
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return torch.tensor((Q * ev) @ Q.T)


def test_quadrature_is_exact_per_probe_up_to_degree_2m_minus_1():
    A = random_symmetric()
    steps, probes = 6, 3
    d = spectral_density(DenseOperator(A), probes=probes, steps=steps, seed=7)
    Z = probe_vectors(120, probes, seed=7)
    V = Z / torch.linalg.vector_norm(Z, dim=0)
    for p in range(2 * steps):
        exact = torch.einsum("ip,ij,jp->p", V, torch.linalg.matrix_power(A, p), V)
        quad = (d.weights * d.nodes**p).sum(dim=1)
        torch.testing.assert_close(quad, exact, rtol=1e-9, atol=1e-9)
    assert d.n_matvec == probes * steps and d.nodes.shape == (probes, steps)
    torch.testing.assert_close(d.weights.sum(dim=1), torch.ones(probes, dtype=torch.float64))


def test_tiny_model_moments_converge_to_exact_traces_of_powers():
    obj = Objective(tiny_model(), tiny_batches(), dtype=torch.float64, regularizer=Regularizer("l2", 0.1))
    H = dense_hessian(obj)
    op = HessianOperator(obj, mode="jvp")
    small = spectral_density(op, probes=2, steps=4, seed=0)  # the model's operator and its dense matrix agree
    same = spectral_density(DenseOperator(H), probes=2, steps=4, seed=0)
    torch.testing.assert_close(small.nodes, same.nodes, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(small.weights, same.weights, rtol=1e-8, atol=1e-12)
    d = spectral_density(DenseOperator(H), probes=40, steps=8, seed=0)
    n = op.shape[0]
    V = probe_vectors(n, 40, seed=0)
    V = V / torch.linalg.vector_norm(V, dim=0)
    for p in (1, 2, 3, 4):
        Hp = torch.linalg.matrix_power(H, p)
        exact = float(torch.trace(Hp)) / n
        per_probe = torch.einsum("ip,ij,jp->p", V, Hp, V)
        assert d.moment(p) == pytest.approx(float(per_probe.mean()), rel=1e-9, abs=1e-12)
        stderr = float(per_probe.std()) / math.sqrt(40)
        assert abs(d.moment(p) - exact) < 4 * stderr


def test_early_termination_when_the_krylov_space_is_invariant():
    A = torch.diag(torch.tensor([1.0, 2.0, 2.0, 4.0], dtype=torch.float64))
    d = spectral_density(DenseOperator(A), probes=2, steps=10, seed=0)
    assert d.nodes.shape == (2, 4)
    # three distinct eigenvalues: the fourth node is padding with weight 0
    assert torch.allclose(d.weights[:, 3], torch.zeros(2, dtype=torch.float64), atol=1e-12)
    assert d.moment(1) == pytest.approx(9 / 4)  # Rademacher probes give v^T A v = tr(A)/n exactly here


@pytest.mark.parametrize("grid_points", [7, 1000])
def test_broadened_density_integrates_to_one_for_any_grid(grid_points):
    nodes = torch.tensor([[-2.0, 0.0, 3.0], [0.5, 1.0, 8.0]], dtype=torch.float64)
    weights = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]], dtype=torch.float64)
    for sigma in (None, 1e-4, 2.0):
        grid, values, s = broadened_density(nodes, weights, sigma, grid_points)
        spacing = float(grid[1] - grid[0])
        assert float(values.sum()) * spacing == pytest.approx(1.0, abs=1e-8)
        assert float(grid[0]) == pytest.approx(-2 - 6 * s + spacing / 2)
        if sigma is None:
            assert s == pytest.approx(0.1)  # 1% of the node spread (8 - (-2))
    # a fine grid reproduces the Gaussian mixture pointwise
    grid, values, s = broadened_density(nodes, weights, 1.0, 4000)
    w = weights.reshape(-1) / 2
    mix = (w * torch.exp(-((grid[:, None] - nodes.reshape(-1)) ** 2) / 2) / math.sqrt(2 * math.pi)).sum(1)
    torch.testing.assert_close(values, mix, rtol=1e-4, atol=1e-6)


def test_invalid_density_options():
    A = random_symmetric(20)
    with pytest.raises(LandscapeError):
        spectral_density(DenseOperator(A), probes=0)
    with pytest.raises(LandscapeError):
        broadened_density(torch.zeros(2, 2), torch.ones(2, 2), sigma=-1.0)


def test_seed_none_leaves_the_global_rng_untouched_and_a_seed_reproduces():
    A = random_symmetric(40)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    fresh = [spectral_density(DenseOperator(A), probes=2, steps=8, seed=None).nodes for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), before)
    assert not torch.equal(fresh[0], fresh[1])
    a = spectral_density(DenseOperator(A), probes=2, steps=8, seed=3)
    b = spectral_density(DenseOperator(A), probes=2, steps=8, seed=3)
    assert torch.equal(a.nodes, b.nodes) and torch.equal(a.values, b.values)


@pytest.mark.parametrize("sigma", [math.nan, math.inf, -math.inf, 0.0, -1.0])
def test_sigma_must_be_finite_and_positive(sigma):
    A = random_symmetric(20)
    op = DenseOperator(A)
    one_line_error(spectral_density, op, probes=1, steps=4, sigma=sigma, match="sigma must be a finite number")
    assert op.n_matvec == 0  # refused before any product
    one_line_error(broadened_density, torch.zeros(2, 2), torch.ones(2, 2), sigma=sigma, match="sigma")


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_products_are_a_one_line_error(bad):
    A = random_symmetric(30)
    count = [0]

    def fn(v):
        count[0] += 1
        out = A @ v
        return out if count[0] <= 5 else torch.where(torch.arange(30) == 2, bad, out)

    msg = one_line_error(
        spectral_density,
        DenseOperator(fn=fn, n=30),
        probes=2,
        steps=4,
        seed=0,
        match="Hessian-vector product returned non-finite values",
    )
    assert "at product 2" in msg and count[0] == 6  # the second probe's second product
