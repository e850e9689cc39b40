"""ResidualOperator R = H - G against the dense H (torch.func.hessian) minus the dense G (per-sample Jacobians)."""

import pytest
import torch

from analyses.hessian.references import dense_ggn
from analyses.hessian.test_ggn import mlp, objective, trained
from analyses.hessian.test_operator import REGULARIZERS, dense_hessian, tiny_batches
from landscape.analyses.hessian.operators import eigenpairs
from landscape.analyses.hessian.residual import ResidualOperator
from landscape.core.regularizer import Regularizer


@pytest.mark.parametrize("criterion", ["cross_entropy", "mse"])
@pytest.mark.parametrize("reg", REGULARIZERS, ids=["none", "l2", "norm-sum"])
def test_residual_equals_the_dense_hessian_minus_the_dense_ggn(criterion, reg):
    obj = objective(criterion=criterion, regularizer=reg)
    want = dense_hessian(obj) - dense_ggn(obj)  # the regulariser's Hessian is in both and cancels
    got = ResidualOperator(obj, mode="graph").dense()  # jvp(grad) of mse_loss fails in torch (ZeroTensor)
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-11 * want.abs().max())


def test_the_most_negative_eigenvalue_of_the_residual_is_the_dense_one():
    obj = objective(trained(mlp(), tiny_batches()))
    H, R = dense_hessian(obj), dense_hessian(obj) - dense_ggn(obj)
    want = torch.linalg.eigvalsh(R)[0]
    got = eigenpairs(ResidualOperator(obj), 1, "SA", tol=1e-10, seed=0)
    assert got.converged.all() and want < 0
    assert torch.allclose(got.eigenvalues[0], want, rtol=1e-6, atol=0)
    assert torch.linalg.eigvalsh(H)[0] >= want  # G is positive semi-definite: H's negative curvature is R's


def test_the_regulariser_cancels_and_both_parts_are_recorded():
    plain = ResidualOperator(objective(), mode="graph")
    decayed = ResidualOperator(objective(regularizer=Regularizer("norm-sum", 0.3)), mode="graph")
    v = torch.randn(plain.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(plain.matvec(v), decayed.matvec(v), rtol=1e-12, atol=1e-14)
    choice = decayed.hvp_choice()
    assert choice["operator"] == "residual" and choice["hessian"]["mode"] == "graph"
    assert choice["ggn"]["operator"] == "ggn" and decayed.n_matvec == 1


def test_finite_difference_products_of_the_hessian_part():
    obj = objective()
    want = dense_hessian(obj) - dense_ggn(obj)
    got = ResidualOperator(obj, mode="finite-difference").dense()
    assert (got - want).abs().max() < 1e-6 * want.abs().max()
