"""Products by a kept ``torch.func.linearize`` trace equal the exact ones at every call, not only the first.

The trace folds what does not depend on the parameters into constants and replays the rest; an in-place
operation on such a part (digits normalised in place when a batch was read) rewrote the constant at every call,
so every product after the first was wrong (0.46 to 21 times the product's norm off) and ``auto`` could take it.
"""

import pytest
import torch
from torch import nn

from landscape.analyses.hessian import products
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.operator import HessianOperator
from landscape.core.front import batches_for, build_objective, load_inputs
from landscape.core.objective import Objective
from landscape.core.source import ModelSource
from landscape.errors import LandscapeError


def digits_objective(model, dtype):
    """A zoo model at its seeded initialisation over two batches of digits read from the dataset (as the CLI does)."""
    torch.manual_seed(0)
    inputs = load_inputs(ModelSource(model=model, random_init=True), device="cpu")
    return build_objective(inputs, batches_for(inputs, batch_size=4, n_samples=8), dtype=dtype)


@pytest.mark.parametrize("model, dtype", [("resnet_mini", torch.float64), ("vit_mini", torch.float32)])
def test_every_product_of_a_trace_equals_jvp_s(one_thread, model, dtype):
    objective = digits_objective(model, dtype)
    traced, exact = HessianOperator(objective, mode="linearize"), HessianOperator(objective, mode="jvp")
    g = torch.Generator().manual_seed(1)
    vectors = [torch.randn(traced.shape[0], generator=g, dtype=dtype) for _ in range(3)]
    for v in vectors + vectors:  # the same vectors again: a trace that drifts gives other products
        a, b = traced.matvec(v), exact.matvec(v)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        assert torch.linalg.vector_norm(a - b) <= tol * torch.linalg.vector_norm(b)


def test_a_traced_top_k_equals_the_dense_hessian_s(one_thread):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1),
        nn.BatchNorm2d(3),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(12, 10),
    )
    inputs = load_inputs(net, data="digits", device="cpu")
    objective = build_objective(inputs, batches_for(inputs, batch_size=4, n_samples=8), dtype=torch.float64)
    op = HessianOperator(objective, mode="linearize")
    # the dense Hessian by torch.func.hessian of the batch-size-weighted loss, from the definition
    x = torch.cat([b[0] for b in objective.batches])
    y = torch.cat([b[1] for b in objective.batches])
    names = list(op.params)
    shapes = [op.params[n].shape for n in names]

    def loss(flat):
        pieces = dict(zip(names, torch.split(flat, [s.numel() for s in shapes])))
        state = {**objective.buffers, **{n: p.reshape(s) for (n, p), s in zip(pieces.items(), shapes)}}
        return nn.functional.cross_entropy(torch.func.functional_call(net.double().eval(), state, (x,)), y)

    dense = torch.func.hessian(loss)(torch.cat([op.params[n].reshape(-1) for n in names]))
    top = torch.linalg.eigvalsh((dense + dense.T) / 2)[-3:]
    found = lanczos(op, k=3, which="LA", tol=1e-10, seed=0)
    assert torch.allclose(torch.sort(torch.as_tensor(found.eigenvalues)).values, top, rtol=1e-8, atol=1e-10)


class InPlaceTable(nn.Module):
    """A model whose forward builds a table in place from nothing that depends on its weights."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        scale = torch.ones(6, dtype=x.dtype)
        scale.mul_(2.0)  # a constant for the trace, rewritten at every replay
        return self.fc(torch.tanh(x * scale))


def table_objective():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    return Objective(InPlaceTable(), [(torch.randn(5, 6, generator=g), torch.tensor([0, 1, 2, 0, 1]))])


def test_a_trace_that_drifts_is_refused_by_name_and_auto_takes_another_way(one_thread, monkeypatch):
    objective = table_objective()
    v = torch.randn(HessianOperator(objective).shape[0], generator=torch.Generator().manual_seed(3))
    with pytest.raises(LandscapeError, match="--hvp linearize: .*gives another product when called again"):
        HessianOperator(objective, mode="linearize").matvec(v)
    exact = HessianOperator(objective, mode="jvp").matvec(v)
    cheapest = products.cheapest  # auto takes the trace whenever it is offered: it is taken, then refused
    monkeypatch.setattr(
        products, "cheapest", lambda left, ways: "linearize" if "linearize" in ways else cheapest(left, ways)
    )
    auto = HessianOperator(objective, mode="auto")
    for _ in range(3):
        assert torch.allclose(auto.matvec(v), exact, rtol=1e-5, atol=1e-7)
    assert "linearize" in auto.hvp_choice()["failed"]
