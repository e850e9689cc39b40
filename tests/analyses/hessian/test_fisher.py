"""EmpiricalFisherOperator against dense float64 references built from per-sample gradients (vmap/loop of grad)."""

import pytest
import torch

from analyses.hessian.references import dense_empirical_fisher, dense_ggn
from analyses.hessian.test_ggn import mlp, objective, soft, trained
from analyses.hessian.test_operator import REGULARIZERS, tiny_batches, tiny_model
from landscape.analyses.hessian.fisher import EmpiricalFisherOperator
from landscape.analyses.hessian.operators import eigenpairs
from landscape.core.objective import Objective


@pytest.mark.parametrize("criterion", ["cross_entropy", "mse", "soft_cross_entropy"])
@pytest.mark.parametrize("reg", REGULARIZERS, ids=["none", "l2", "norm-sum"])
def test_empirical_fisher_equals_the_dense_reference(criterion, reg):
    batches = soft(tiny_batches()) if criterion == "soft_cross_entropy" else tiny_batches()
    obj = objective(batches=batches, criterion=criterion, regularizer=reg)
    want = dense_empirical_fisher(obj)
    got = EmpiricalFisherOperator(obj).dense()
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12 * want.abs().max())


def test_the_top_three_of_the_empirical_fisher_equal_the_dense_reference_to_1e_minus_6():
    obj = objective(trained(mlp(), tiny_batches()))
    want = torch.linalg.eigvalsh(dense_empirical_fisher(obj))[-3:]
    got = eigenpairs(EmpiricalFisherOperator(obj), 3, "LA", tol=1e-10, seed=0)
    assert got.converged.all()
    assert torch.allclose(got.eigenvalues, want, rtol=1e-6, atol=0)


def test_the_empirical_fisher_is_not_the_gauss_newton():
    obj = objective(trained(mlp(), tiny_batches()))
    F, G = EmpiricalFisherOperator(obj).dense(), dense_ggn(obj)
    assert (F - G).abs().max() > 1e-2 * G.abs().max()
    assert torch.linalg.matrix_rank(F - 0 * F) <= sum(b[1].shape[0] for b in tiny_batches())  # N outer products


def test_a_block_of_one_batch_and_float32_with_batchnorm():
    model = tiny_model()
    ref = Objective(model, tiny_batches(), dtype=torch.float64)
    names = ["0.weight", "1.weight", "1.bias"]
    want = dense_empirical_fisher(ref, names, batches=[2])
    got = EmpiricalFisherOperator(Objective(model, tiny_batches()), patterns=names, batches=[2]).dense().double()
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
