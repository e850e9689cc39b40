"""Rows pushed up an exported graph: the same function (against the module's own eager forward), fewer rows."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from landscape.models import create_model
from landscape.runtime.row_pushdown import push_rows_up

aten = torch.ops.aten


def exported(module: nn.Module, *args, dynamic=None):
    with torch.no_grad():
        return torch.export.export(module, args, dynamic_shapes=dynamic, strict=False)


def run(program, *args):
    with torch.no_grad():
        return program.module()(*args)


class Chain(nn.Module):
    """Elementwise with broadcasting, dropout, layer norm, linear, reshape, permute, attention, then a select."""

    def __init__(self, dim: int, index: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.scale = nn.Parameter(torch.randn(1, 5, 1, generator=g, dtype=torch.float64))
        self.shift = nn.Parameter(torch.randn(4, generator=g, dtype=torch.float64))
        self.norm = nn.LayerNorm(4, dtype=torch.float64)
        self.lin = nn.Linear(4, 6, dtype=torch.float64)
        self.dim, self.index = dim, index

    def forward(self, x):
        h = F.dropout(F.gelu(x * self.scale + self.shift - 0.5), 0.0, False)
        a = self.lin(self.norm(h)).reshape(3, 5, 2, 3).permute(0, 2, 1, 3)  # (3, 2, 5, 3)
        att = torch.softmax(a @ a.transpose(-2, -1) * 0.5, -1) @ a
        return att.transpose(1, 2).reshape(3, 5, 6).select(self.dim, self.index)


@pytest.mark.parametrize(
    ("dim", "index", "least", "most"),
    [(0, 0, 12, 99), (0, -1, 12, 99), (-3, 2, 12, 99), (1, 0, 5, 7), (1, -2, 5, 7), (-2, 4, 5, 7), (2, 1, 0, 0)],
)
def test_each_operator_crossed_keeps_the_function(dim, index, least, most):
    module = Chain(dim, index)
    x = torch.randn(3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = module(x)
    program = exported(module, x)
    narrowed = push_rows_up(program.graph_module)
    assert least <= narrowed <= most
    torch.testing.assert_close(run(program, x), want, rtol=1e-13, atol=0)


def test_the_rows_of_a_batch_stop_where_the_whole_value_is_needed():
    """Rows (dim 1) cross the attention's output side but stop at the keys: ``a`` is read whole by them."""
    module = Chain(1, 0)
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    program = exported(module, x)
    push_rows_up(program.graph_module)
    linear = [n for n in program.graph.nodes if n.target is aten.linear.default]
    assert [tuple(n.args[0].meta["val"].shape) for n in linear] == [(3, 5, 4)]  # the keys need every row
    softmax = [n for n in program.graph.nodes if n.target is aten.softmax.int]
    assert [tuple(n.meta["val"].shape) for n in softmax] == [(3, 2, 1, 5)]  # one query row, every key


class Broadcast(nn.Module):
    """A batched matrix product against a matrix stack without the batch dim."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2, 3, 4, dtype=torch.float64))
        self.dim = dim

    def forward(self, x):  # (5, 2, 6, 3) @ (2, 3, 4) -> (5, 2, 6, 4)
        return torch.relu(x @ self.weight).select(self.dim, 1)


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_a_matrix_product_is_narrowed_on_either_side_and_in_its_batch_dims(dim):
    module = Broadcast(dim)
    x = torch.randn(5, 2, 6, 3, dtype=torch.float64)
    with torch.no_grad():
        want = module(x)
    program = exported(module, x)
    assert push_rows_up(program.graph_module) == 2
    torch.testing.assert_close(run(program, x), want, rtol=1e-13, atol=0)
    (product,) = [n for n in program.graph.nodes if n.target is aten.matmul.default]
    shape = [5, 2, 6, 4]
    shape[dim] = 1
    assert list(product.meta["val"].shape) == shape


def test_a_value_read_whole_elsewhere_is_not_narrowed():
    class TwoUses(nn.Module):
        def forward(self, x):
            h = torch.tanh(x)
            return h.sum() + h.select(1, 0).sum()

    x = torch.randn(4, 3, dtype=torch.float64)
    program = exported(TwoUses(), x)
    assert push_rows_up(program.graph_module) == 0
    torch.testing.assert_close(run(program, x), TwoUses()(x), rtol=1e-13, atol=0)


def test_softmax_along_the_rows_and_dropout_in_training_are_not_crossed():
    class Stops(nn.Module):
        def forward(self, x):
            return torch.softmax(x, 1).select(1, 0) + F.dropout(x, 0.5, True).select(0, 0).sum()

    x = torch.randn(4, 3, dtype=torch.float64)
    program = exported(Stops(), x)
    assert push_rows_up(program.graph_module) == 0


def test_a_graph_that_writes_into_a_tensor_is_left_unchanged():
    class InPlace(nn.Module):
        def forward(self, x):
            h = torch.tanh(x)
            out = torch.sigmoid(h).select(1, 0)
            h.mul_(2.0)
            return out

    x = torch.randn(4, 3, dtype=torch.float64)
    program = exported(InPlace(), x)
    assert any(n.target is aten.mul_.Tensor for n in program.graph.nodes)
    assert push_rows_up(program.graph_module) == 0
    torch.testing.assert_close(run(program, x), InPlace()(x), rtol=1e-13, atol=0)


def test_symbolic_shapes_leave_the_graph_unchanged():
    class Head(nn.Module):
        def forward(self, x):
            return torch.tanh(x).select(1, 0)

    x = torch.randn(4, 3, dtype=torch.float64)
    program = exported(Head(), x, dynamic=({0: torch.export.Dim("batch", min=2)},))
    before = [n.format_node() for n in program.graph.nodes]
    assert push_rows_up(program.graph_module) == 0
    assert [n.format_node() for n in program.graph.nodes] == before


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_cls_classifier_runs_its_last_block_on_the_cls_row_alone(dtype, tmp_path):
    torch.manual_seed(0)
    model = create_model("vit_mini", num_classes=10, depth=2).eval().to(dtype)
    x = torch.randn(6, 3, 32, 32, dtype=dtype)
    y = torch.randint(0, 10, (6,))

    class Loss(nn.Module):
        def forward(self, x, y):
            return F.cross_entropy(model(x), y)

    with torch.no_grad():
        want = F.cross_entropy(model(x), y)
    program = exported(Loss(), x, y)

    def tokens_read_by_linears(graph):  # the head reads (6, 64): no token dim
        shapes = [n.args[0].meta["val"].shape for n in graph.nodes if n.target is aten.linear.default]
        return sorted(s[1] if len(s) == 3 else 0 for s in shapes)

    assert tokens_read_by_linears(program.graph) == [0] + [65] * 8  # 4 linears per block, then the head
    assert push_rows_up(program.graph_module) >= 10
    assert tokens_read_by_linears(program.graph) == [0] + [1] * 3 + [65] * 5  # the last block's qkv reads all
    rtol = 1e-13 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(run(program, x, y), want, rtol=rtol, atol=0)
    torch.export.save(program, tmp_path / "p.pt2")  # written and read back as a package build reads it
    torch.testing.assert_close(run(torch.export.load(tmp_path / "p.pt2"), x, y), want, rtol=rtol, atol=0)
