"""KFACOperator against K-FAC from per-sample layer inputs and Jacobians, against curvlinops; its eigenpairs."""

import pytest
import torch
from torch import nn

from analyses.hessian.references import dense_kfac, regularizer_hessian
from analyses.hessian.test_ggn import trained
from analyses.hessian.test_operator import tiny_batches
from landscape.analyses.hessian.kfac import KFACOperator, covered
from landscape.analyses.hessian.operators import curvature_operator, eigen_method, eigenpairs
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError


def bn_mlp(seed=0):
    """Linear -> BatchNorm1d (eval, non-trivial statistics) -> tanh -> Linear, float64."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 3)).double()
    model[1].running_mean.normal_()
    model[1].running_var.uniform_(0.5, 2.0)
    return model.eval()


def kfac_objective(model=None, **kwargs):
    return Objective(bn_mlp() if model is None else model, tiny_batches(), dtype=torch.float64, **kwargs)


def test_kfac_equals_the_reference_and_names_what_it_does_not_cover():
    obj = kfac_objective(trained(bn_mlp(), tiny_batches(), steps=30))
    want, held = dense_kfac(obj, obj.module)
    op = KFACOperator(obj)
    assert torch.allclose(op.dense(), want, rtol=1e-10, atol=1e-13 * want.abs().max())
    assert op.uncovered == ["1.weight", "1.bias"] and [layer.module for layer in op.layers] == ["0", "3"]
    assert sorted(held) == sorted(n for n in obj.params if n not in op.uncovered)
    assert op.hvp_choice()["uncovered"] == ["1.weight", "1.bias"]


def test_an_in_place_activation_after_a_layer_does_not_change_its_recorded_output():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True), nn.Linear(6, 3)).double()
    obj = kfac_objective(trained(model, tiny_batches(), steps=30))
    want = dense_kfac(obj, obj.module)[0]
    assert torch.allclose(KFACOperator(obj).dense(), want, rtol=1e-10, atol=1e-13 * want.abs().max())


def test_every_eigenvalue_is_exact_from_the_factors_and_the_l2_shift():
    obj = kfac_objective(regularizer=Regularizer("l2", 0.01))
    want = dense_kfac(obj, obj.module)[0] + regularizer_hessian(obj, list(obj.params))
    every = torch.linalg.eigvalsh(want)
    op = KFACOperator(obj)
    for which, expected in [("LA", every[-4:]), ("SA", every[:4]), ("LM", every[-4:])]:
        got = eigenpairs(op, 4, which, tol=1e-10)
        assert torch.allclose(got.eigenvalues, expected, rtol=1e-10, atol=1e-12)
        assert got.converged.all() and got.n_restarts == 0 and got.n_matvec == 4
        V = got.eigenvectors
        assert torch.allclose(V.T @ V, torch.eye(4, dtype=torch.float64), atol=1e-12)
        assert torch.allclose(want @ V, V * got.eigenvalues, atol=1e-12 * every.abs().max())
    assert eigen_method(op) == "kronecker"
    assert op.trace() == pytest.approx(float(torch.trace(want)), rel=1e-12)


def test_a_norm_sum_regulariser_falls_back_to_lanczos():
    obj = kfac_objective(regularizer=Regularizer("norm-sum", 0.05))
    want = dense_kfac(obj, obj.module)[0] + regularizer_hessian(obj, list(obj.params))
    op = KFACOperator(obj)
    assert torch.allclose(op.dense(), want, rtol=1e-10, atol=1e-13 * want.abs().max())
    assert op.eigenpairs(3) is None and eigen_method(op) == "lanczos"
    got = eigenpairs(op, 3, "LA", tol=1e-10, seed=0)
    assert torch.allclose(got.eigenvalues, torch.linalg.eigvalsh(want)[-3:], rtol=1e-8, atol=0)


def test_a_block_restricts_the_factors_to_the_selected_weight_or_bias():
    obj = kfac_objective()
    full = dense_kfac(obj, obj.module)[0]
    offsets = {}
    start = 0
    for name, p in obj.params.items():
        offsets[name] = torch.arange(start, start + p.numel())
        start += p.numel()
    for names in (["3.bias"], ["0.weight", "3.bias"], ["1.weight", "3.weight"]):
        index = torch.cat([offsets[n] for n in names])
        got = KFACOperator(obj, patterns=names).dense()
        assert torch.allclose(got, full[index[:, None], index[None, :]], rtol=1e-10, atol=1e-14)


def test_kfac_equals_curvlinops_on_convolutions_and_sequences():
    from curvlinops import KFACLinearOperator

    class Tokens(nn.Module):
        """A convolution, then a Linear over its 9 pixels as tokens (weight sharing), then a head."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, stride=2, padding=1)
            self.mix = nn.Linear(4, 5)
            self.head = nn.Linear(5 * 9, 3)

        def forward(self, x):
            t = self.conv(x).flatten(2).transpose(1, 2)  # (B, 9, 4)
            return self.head(torch.tanh(self.mix(t)).flatten(1))

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(s, 2, 6, 6, generator=g), torch.randint(0, 3, (s,), generator=g)) for s in (5, 3)]
    obj = Objective(Tokens().double(), batches, dtype=torch.float64)
    ours = KFACOperator(obj)
    model = obj.module
    theirs = KFACLinearOperator(
        model,
        nn.CrossEntropyLoss(),
        list(model.parameters()),
        [(x.double(), y) for x, y in batches],
        fisher_type="type-2",
        kfac_approx="expand",
        separate_weight_and_bias=False,
        check_deterministic=False,
    )
    dense = theirs @ torch.eye(ours.shape[0], dtype=torch.float64)
    assert ours.uncovered == []
    assert torch.allclose(ours.dense(), dense, rtol=1e-10, atol=1e-13 * dense.abs().max())


def test_what_kfac_refuses_and_leaves_out():
    with pytest.raises(LandscapeError, match="K-FAC needs the Hessian of the loss"):
        KFACOperator(kfac_objective(criterion=lambda z, y: nn.functional.cross_entropy(z, y)))
    with pytest.raises(LandscapeError, match="--hvp chooses how Hessian products are made"):
        curvature_operator(kfac_objective(), "kfac", mode="graph")
    assert not covered(nn.Conv2d(4, 4, 3, groups=2)) and not covered(nn.Conv2d(2, 2, 2, padding="same"))
    assert covered(nn.Conv2d(2, 2, 3, padding="same")) and not covered(nn.LayerNorm(3))
