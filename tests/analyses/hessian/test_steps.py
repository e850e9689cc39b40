"""The step of central differences, measured at the point: closed forms, and float32 networks at realistic norms."""

import math

import pytest
import torch

from landscape.analyses.hessian.finite import CentralDifferences
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.linalg import LOCAL, random_unit
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.products import central_difference
from landscape.analyses.hessian.steps import choose_step, ulp_shift
from landscape.core.gradients import gradient_of
from landscape.core.objective import Objective
from landscape.core.params import flatten, unflatten
from landscape.models import create_model
from landscape.options.hessian import FD_ADAPT, FD_MAX_ERROR


def test_ulp_shift_moves_every_weight_to_its_neighbour_in_the_lattice():
    theta = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 3
    e = ulp_shift(theta, torch.float32, torch.Generator().manual_seed(1))
    moved = theta + e
    up, down = torch.nextafter(theta, torch.tensor(math.inf)), torch.nextafter(theta, torch.tensor(-math.inf))
    assert bool(((moved == up) | (moved == down)).all()) and 300 < int((moved == up).sum()) < 700
    coarse = ulp_shift(theta, torch.bfloat16, torch.Generator().manual_seed(1))
    bf = theta.to(torch.bfloat16)
    step = torch.nextafter(bf, torch.tensor(math.inf, dtype=torch.bfloat16)).double() - bf.double()
    torch.testing.assert_close(coarse.abs().double(), step, rtol=0, atol=0)  # one bfloat16 unit of each weight


def test_the_measurement_finds_the_noise_and_the_truncation_of_a_quartic_in_closed_form():
    """``f = theta^T A theta / 2 + (kappa / 24) (u . theta)^4``: along ``s`` the central difference's truncation is
    exactly ``(kappa / 6) h^2 (u . s)^3 u`` (no higher term) and Richardson's product exactly ``H s``; every gradient
    carries a fresh Gaussian error of norm ``sigma``, so ``nu`` is ``sqrt(2) sigma``."""
    n, kappa, sigma = 400, 1e6, 1e-8
    gen = torch.Generator().manual_seed(0)
    eig = torch.linspace(0.1, 10.0, n, dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    A = Q @ torch.diag(eig) @ Q.T
    u = Q[:, -1]  # the quartic acts along the top eigenvector: curvature changes fastest there, as in networks
    theta = 1e-4 * torch.randn(n, generator=gen, dtype=torch.float64)
    theta += (0.003 - u @ theta) * u  # u . theta = 0.003: the quartic's curvature changes on that scale along u
    noise = torch.Generator().manual_seed(1)

    def gradient(shift):
        point = theta if shift is None else theta + shift
        error = torch.randn(n, generator=noise, dtype=torch.float64)
        return A @ point + (kappa / 6) * (u @ point) ** 3 * u + sigma * error / error.norm()

    w = random_unit(n, torch.float64, "cpu", torch.Generator().manual_seed(2))
    choice, s, product, direction = choose_step(
        gradient, theta, w, LOCAL, lattice=torch.float64, generator=torch.Generator().manual_seed(3)
    )
    g0 = A @ theta + (kappa / 6) * (u @ theta) ** 3 * u
    torch.testing.assert_close(direction, g0 / g0.norm(), rtol=0, atol=1e-6)
    torch.testing.assert_close(s, (direction + w) / (direction + w).norm(), rtol=0, atol=1e-12)
    assert choice.noise == pytest.approx(math.sqrt(2) * sigma, rel=0.1)
    hessian = A + (kappa / 2) * (u @ theta) ** 2 * torch.outer(u, u)
    h1 = choice.probe_steps[-1]
    cut = (kappa / 6) * h1**2 * abs(float(u @ s)) ** 3
    assert cut > 1e-3 * choice.product_norm  # visible above the noise of the third difference, sqrt(20) sigma / 6 h1
    assert abs(choice.probe_truncation[-1] * choice.product_norm - cut) <= math.sqrt(20) * sigma / (6 * h1)
    # Richardson's product is H s here, but its O(h1^4) remainder, about probe_truncation^2, is not known to be
    # below the predicted error of a product at the step: it is not offered in place of a product
    assert choice.probe_truncation[-1] ** 2 > choice.error and product is None
    made = (gradient(choice.step * s) - gradient(-choice.step * s)) / (2 * choice.step)
    assert float((made - hessian @ s).norm()) <= choice.product_error(float(s @ hessian @ s))
    # the chosen step balances the model A h^2 + B / h: its derivative vanishes there
    a = choice.truncation * choice.scale / choice.step**2
    assert 2 * a * choice.step == pytest.approx(choice.noise / choice.step**2, rel=1e-9)
    assert choice.gradients == 5 and choice.asymptotic and choice.asymmetry is None


def small_vit(depth=2, embed_dim=64):
    """The zoo's ViT (GELU, LayerNorm, softmax attention; smooth) at 16 x 16, 102,602 weights of norm 19.6 at its
    initialisation, and two batches (20 and 12) of Gaussian images with random labels."""
    torch.manual_seed(0)
    model = create_model(
        "vit_mini", num_classes=10, in_chans=1, img_size=16, depth=depth, embed_dim=embed_dim, num_heads=2, patch_size=4
    )
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 1, 16, 16, generator=g), torch.randint(0, 10, (32,), generator=g)
    return model.eval(), [(x[:20], y[:20]), (x[20:], y[20:])]


def test_central_differences_of_a_vit_at_a_realistic_norm_give_its_top_eigenvalues_in_float32():
    model, batches = small_vit()
    fd, exact = Objective(model, batches), Objective(model, batches, dtype=torch.float64)
    theta = flatten(fd.params)
    assert 15 < float(theta.norm()) < 25 and theta.dtype == torch.float32
    reference = lanczos(HessianOperator(exact, mode="graph"), k=3, tol=1e-10, seed=0, return_eigenvectors=True)
    float32 = lanczos(HessianOperator(fd, mode="graph"), k=3, tol=1e-6, seed=0)
    op = HessianOperator(fd, mode="finite-difference")
    found = lanczos(op, k=3, tol=1e-4, seed=0)
    assert bool(found.converged.all())
    torch.testing.assert_close(found.eigenvalues, reference.eigenvalues, rtol=1e-4, atol=0)  # measured: 2.5e-5
    torch.testing.assert_close(found.eigenvalues, float32.eigenvalues, rtol=1e-4, atol=0)
    assert found.symmetry_defect < 1e-3
    # the measurement's product of its probe is Lanczos' first: the whole solve costs at most 2.2 gradients a product
    spent = op.hvp_choice()["finite_difference_gradients"]
    assert spent == 5 + 2 * (found.n_matvec - 1) and spent / found.n_matvec <= 2.2
    # along the top eigenvector: within the predicted error at the step chosen; 94% off at the rule this replaces,
    # u^(1/3) (1 + ||theta||) = 0.10, whose truncation error is not small at these norms
    top = reference.eigenvectors[:, -1]
    exact_product = HessianOperator(exact, mode="graph").matvec(top)
    old = float(torch.finfo(torch.float32).eps) ** (1 / 3) * (1 + float(theta.norm()))
    gradient = gradient_of(lambda sub: sum(w * fd.batch_loss_fn(b)(sub) for w, b in zip(fd.weights, batches)))

    def error(step):
        made = flatten(central_difference(gradient, fd.params, unflatten(top.float(), fd.params), step)).double()
        return float((made - exact_product).norm())

    assert error(op.step().step) <= op.product_error(float(reference.eigenvalues[-1]))
    assert error(old) > 0.5 * float(exact_product.norm())


class QuarticDifferences:
    """Central differences of ``f = theta^T A theta / 2 + (kappa / 24) (u . theta)^4`` (float64, a Gaussian error of
    norm 1e-10 in every gradient), with ``u`` the bottom eigenvector of ``A`` and ``u . theta`` tiny: the top
    curvature ``(kappa / 2) (u . theta)^2`` lies along ``u``, which the gradient hardly sees, and the truncation
    there, ``(u . theta)^-2 h^2 / 3`` relative, is far above what the probe measures."""

    asymmetry_tolerance = FD_MAX_ERROR

    def __init__(self, kappa, a, n=400):
        gen = torch.Generator().manual_seed(0)
        Q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
        self.A = Q @ torch.diag(torch.linspace(0.1, 10.0, n, dtype=torch.float64)) @ Q.T
        self.u, self.kappa = Q[:, 0], kappa
        self.theta = torch.randn(n, generator=gen, dtype=torch.float64)
        self.theta += (a - self.u @ self.theta) * self.u
        self.noise = torch.Generator().manual_seed(1)
        self.shape, self.dtype, self.device = (n, n), torch.float64, torch.device("cpu")
        lattice = lambda: torch.float64  # noqa: E731
        self.d = CentralDifferences(self.gradient, self.theta, LOCAL, n, self.dtype, self.device, lattice, str)
        self.hessian = self.A + (kappa / 2) * a**2 * torch.outer(self.u, self.u)
        self.sees = True

    def gradient(self, shift):
        point = self.theta if shift is None else self.theta + shift
        error = torch.randn(self.shape[0], generator=self.noise, dtype=torch.float64)
        return self.A @ point + (self.kappa / 6) * (self.u @ point) ** 3 * self.u + 1e-10 * error / error.norm()

    def matvec(self, v):
        if self.d.choice is None:
            self.d.step(v / v.norm())
        known = self.d.probe_product(v)
        if known is not None:
            return known
        eps = self.d.choice.step / float(v.norm())
        return (self.gradient(eps * v) - self.gradient(-eps * v)) / (2 * eps)

    def start_vector(self, generator):
        return self.d.start_vector(generator)

    def product_error(self, curvature=0.0):
        return self.d.product_error(curvature)

    def adapt_step(self, vector):
        return self.d.adapt(vector)

    @property
    def curvature_scale(self):
        return self.d.scale if self.sees else None

    @curvature_scale.setter
    def curvature_scale(self, value):
        self.sees = value is not None


@pytest.mark.parametrize(("kappa", "a", "before"), [(1e10, 1e-4, 9.4e-4), (4e12, 5e-6, 6.9e-3)])
def test_a_top_curvature_the_probe_cannot_see_is_measured_along_its_ritz_vector(kappa, a, before):
    op = QuarticDifferences(kappa, a)
    exact = torch.linalg.eigvalsh(op.hessian)[-3:]
    found = lanczos(op, k=3, tol=1e-6, seed=0)
    # the top Ritz value passed twice the probe's curvature scale: the truncation along its Ritz vector was measured
    # (3 gradients), the step shortened and the solve started again from that vector; without it the top eigenvalue
    # was off by `before` (measured), and the products' asymmetry (at most 2.4e-3) had not shown it
    choice = op.d.choice
    assert choice.adapted == 1 and len(choice.probe_steps) == 2 and choice.step < choice.probe_steps[0] / 1.5
    torch.testing.assert_close(found.eigenvalues, exact, rtol=1e-4, atol=0)  # measured: 7.0e-6 and 5.3e-5
    blind = QuarticDifferences(kappa, a)  # the same products without the measurement along the Ritz vector
    blind.curvature_scale = None
    unseen = lanczos(blind, k=3, tol=1e-6, seed=0)
    error = float((unseen.eigenvalues[-1] - exact[-1]).abs() / exact[-1])
    assert before / 1.5 < error < before * 1.5 and unseen.symmetry_defect < FD_ADAPT
