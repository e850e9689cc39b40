"""GGNOperator against dense float64 Gauss-Newton matrices built from per-sample Jacobians, and against curvlinops."""

import pytest
import torch
from torch import nn

from analyses.hessian.references import dense_ggn
from analyses.hessian.test_operator import REGULARIZERS, dense_hessian, tiny_batches, tiny_model
from landscape.analyses.hessian.ggn import GGNOperator
from landscape.analyses.hessian.operators import eigenpairs
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer


def mlp(seed=0):
    """A float64 tanh MLP 4 -> 8 -> 3 (67 parameters)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def soft(batches, classes=3, seed=2):
    """The batches with label distributions (what Mixup/CutMix make) instead of labels."""
    g = torch.Generator().manual_seed(seed)
    return [(x, torch.softmax(torch.randn(len(y), classes, generator=g), -1)) for x, y in batches]


def trained(model, batches, steps=60, lr=0.05):
    """``model`` after a few Adam steps on the batches (realistic, non-random parameters)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = batches[step % len(batches)]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x.to(next(model.parameters()).dtype)), y).backward()
        opt.step()
    return model


def objective(model=None, batches=None, **kwargs):
    batches = tiny_batches() if batches is None else batches
    return Objective(mlp() if model is None else model, batches, dtype=torch.float64, **kwargs)


@pytest.mark.parametrize("criterion", ["cross_entropy", "mse", "soft_cross_entropy"])
@pytest.mark.parametrize("reg", REGULARIZERS, ids=["none", "l2", "norm-sum"])
def test_ggn_equals_the_dense_reference(criterion, reg):
    batches = soft(tiny_batches()) if criterion == "soft_cross_entropy" else tiny_batches()
    obj = objective(batches=batches, criterion=criterion, regularizer=reg)
    want = dense_ggn(obj)
    got = GGNOperator(obj).dense()
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12 * want.abs().max())


def test_the_top_three_of_the_ggn_equal_the_dense_reference_to_1e_minus_6():
    obj = objective(trained(mlp(), tiny_batches()))
    want = torch.linalg.eigvalsh(dense_ggn(obj))[-3:]
    got = eigenpairs(GGNOperator(obj), 3, "LA", tol=1e-10, seed=0)
    assert got.converged.all()
    assert torch.allclose(got.eigenvalues, want, rtol=1e-6, atol=0)


def test_a_block_of_one_batch_is_the_reference_block():
    obj = objective(regularizer=Regularizer("l2", 0.1))
    names = ["2.weight", "2.bias"]
    got = GGNOperator(obj, patterns=names, batches=[1]).dense()
    assert torch.allclose(got, dense_ggn(obj, names, batches=[1]), rtol=1e-10, atol=1e-14)


def test_the_ggn_is_positive_semi_definite_and_not_the_hessian():
    obj = objective(trained(mlp(), tiny_batches()))
    G = GGNOperator(obj).dense()
    assert torch.linalg.eigvalsh(G)[0] > -1e-12 * G.abs().max()
    assert (G - dense_hessian(obj)).abs().max() > 1e-3 * G.abs().max()


def test_float32_with_batchnorm_agrees_with_the_float64_reference():
    model = tiny_model()
    ref = Objective(model, tiny_batches(), dtype=torch.float64)
    single = Objective(model, tiny_batches())
    want = dense_ggn(ref)
    got = GGNOperator(single).dense().double()
    assert single.dtype == torch.float32 and got.dtype == torch.float64
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()


def test_kept_graphs_give_the_same_products_as_rebuilt_ones():
    obj = objective()
    v = torch.randn(GGNOperator(obj).shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    kept, rebuilt = GGNOperator(obj, max_kept=8), GGNOperator(obj, max_kept=0)
    first, second = kept.matvec(v), kept.matvec(v)
    assert torch.equal(first, second) and torch.allclose(first, rebuilt.matvec(v), rtol=1e-12, atol=0)
    assert kept.hvp_choice() == {"operator": "ggn", "products": "jvp-vjp", "kept_graphs": 3}
    kept.clear_cache()
    assert kept.hvp_choice()["kept_graphs"] == 0


def test_ggn_equals_curvlinops_on_a_convolutional_model():
    from curvlinops import GGNLinearOperator

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 5 * 5, 4)
    ).double()
    model[1].running_var.uniform_(0.5, 2.0)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(s, 1, 5, 5, generator=g), torch.randint(0, 4, (s,), generator=g)) for s in (6, 3)]
    obj = Objective(model, batches, dtype=torch.float64)
    ours = GGNOperator(obj).dense()
    data = [(x.double(), y) for x, y in batches]
    copy = obj.module  # the objective's own copy in eval mode, at the same parameters
    theirs = GGNLinearOperator(copy, nn.CrossEntropyLoss(), list(copy.parameters()), data, check_deterministic=False)
    dense = theirs @ torch.eye(ours.shape[0], dtype=torch.float64)
    assert torch.allclose(ours, dense, rtol=1e-10, atol=1e-12 * dense.abs().max())
