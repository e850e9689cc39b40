"""Per-block curvature against the dense Hessian's diagonal blocks, and the blocks FeatureTaps finds."""

import pytest
import torch
from helpers import one_line_error
from torch import nn

from analyses.hessian.test_operator import dense_hessian, tiny_batches, tiny_model
from landscape.analyses.hessian.blocks import (
    ParameterBlock,
    block_curvature,
    model_blocks,
    objective_blocks,
    pattern_blocks,
    restrict_blocks,
)
from landscape.core.objective import Objective
from landscape.core.params import flatten
from landscape.core.regularizer import Regularizer
from landscape.models import create_model

F64 = torch.float64


def dense_block(H, params, names):
    """The rows and columns of the dense Hessian that belong to ``names``."""
    sizes = {n: t.numel() for n, t in params.items()}
    index, offset = [], 0
    for n, size in sizes.items():
        if n in names:
            index += range(offset, offset + size)
        offset += size
    index = torch.tensor(index)
    return H[index][:, index]


def test_pattern_blocks_split_the_parameters_in_order():
    names = ("0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias")
    blocks = pattern_blocks(names, {"last": "3", "norm": ["1.*"]})
    assert blocks == [
        ParameterBlock("last", "pattern", ("3.weight", "3.bias")),
        ParameterBlock("norm", "pattern", ("1.weight", "1.bias")),
        ParameterBlock("other", "other", ("0.weight", "0.bias")),
    ]
    assert pattern_blocks(names, {"first": "0"}, other=None) == [ParameterBlock("first", "pattern", names[:2])]
    one_line_error(pattern_blocks, names, {"all": "*", "again": "0"}, match="earlier block")
    one_line_error(pattern_blocks, names, {"x": "fc.*"}, match="no parameter matches")
    assert pattern_blocks(names, {"all": "*"}) == [ParameterBlock("all", "pattern", tuple(names))]


def test_block_curvature_equals_the_dense_diagonal_blocks():
    obj = Objective(tiny_model(), tiny_batches(), dtype=F64, regularizer=Regularizer("l2", 0.1))
    blocks = pattern_blocks(list(obj.params), {"norm": "1", "last": "3"}, other=None)
    H = dense_hessian(obj)
    # Hutch++ is exact once its sketch (samples // 3 columns) spans the block: 3 * 21 products for the largest
    results = block_curvature(obj, blocks, tol=1e-12, trace_samples=63, seed=1)
    assert [r.block.name for r in results] == ["norm", "last"]
    assert [r.size for r in results] == [12, 21]
    for r in results:
        Hb = dense_block(H, obj.params, r.block.names)
        assert r.top_eigenvalue == pytest.approx(float(torch.linalg.eigvalsh(Hb).max()), rel=1e-9, abs=1e-12)
        assert r.trace == pytest.approx(float(torch.trace(Hb)), rel=1e-10, abs=1e-12)
        assert r.converged and r.residual < 1e-6 and r.eigen_products <= r.size
        assert r.trace_products == 2 * r.size + (63 - 2 * 21)  # a sketch of min(n, 21) columns, twice, + 21 probes
    # with fewer probes than the block's size, the trace is an estimate within a few standard errors
    first = pattern_blocks(list(obj.params), {"first": "0"}, other=None)
    (r,) = block_curvature(obj, first, trace_samples=24, trace_method="hutchinson", seed=2)
    exact = float(torch.trace(dense_block(H, obj.params, first[0].names)))
    assert r.size == 30 and r.trace_method == "hutchinson" and abs(r.trace - exact) < 4 * r.trace_stderr


@pytest.mark.parametrize("operator", ["ggn", "empirical-fisher"])
def test_block_curvature_of_another_operator_is_its_dense_diagonal_block(operator):
    from analyses.hessian.references import dense_empirical_fisher, dense_ggn

    obj = Objective(tiny_model(), tiny_batches(), dtype=F64, regularizer=Regularizer("l2", 0.1))
    blocks = pattern_blocks(list(obj.params), {"norm": "1", "last": "3"}, other=None)
    dense = {"ggn": dense_ggn, "empirical-fisher": dense_empirical_fisher}[operator]
    results = block_curvature(obj, blocks, tol=1e-12, trace_samples=63, seed=1, operator=operator)
    for r in results:
        C = dense(obj, list(r.block.names))
        assert r.top_eigenvalue == pytest.approx(float(torch.linalg.eigvalsh(C).max()), rel=1e-9, abs=1e-12)
        assert r.trace == pytest.approx(float(torch.trace(C)), rel=1e-10, abs=1e-12)


def conv_net(seed=0):
    g = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Tanh(), nn.Conv2d(2, 1, 3), nn.Tanh(), nn.Flatten(), nn.Linear(4, 3)).to(
        F64
    )
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64) * 0.5)
    return net


def conv_batches(seed=3):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 1, 6, 6, generator=g, dtype=F64), torch.randint(0, 3, (5,), generator=g)) for _ in range(2)]


def test_tapped_blocks_of_a_model_and_their_curvature():
    net = conv_net().train()
    before = {n: t.clone() for n, t in net.state_dict().items()}
    blocks = model_blocks(net, conv_batches()[0][0], taps=["0=conv", "2=conv"])
    assert blocks == [
        ParameterBlock("0", "conv", ("0.weight", "0.bias")),
        ParameterBlock("2", "conv", ("2.weight", "2.bias")),
        ParameterBlock("other", "other", ("5.weight", "5.bias")),
    ]
    assert net.training and all(torch.equal(before[n], t) for n, t in net.state_dict().items())
    obj = Objective(net, conv_batches(), dtype=F64)
    assert objective_blocks(obj, taps=["0=conv", "2=conv"], other=None) == blocks[:2]
    H = dense_hessian(obj)
    # sizes 20, 19 and 15: Hutch++ with 3 * 20 products is exact on each
    for r in block_curvature(obj, blocks, tol=1e-12, trace_samples=3 * 20):
        Hb = dense_block(H, obj.params, r.block.names)
        assert r.top_eigenvalue == pytest.approx(float(torch.linalg.eigvalsh(Hb).max()), rel=1e-9, abs=1e-12)
        assert r.trace == pytest.approx(float(torch.trace(Hb)), rel=1e-10, abs=1e-12)
    # only the objective's variable parameters are analysed
    partial = Objective(net, conv_batches(), dtype=F64, param_names=["2.weight", "5.bias"])
    assert restrict_blocks(blocks, list(partial.params)) == [
        ParameterBlock("2", "conv", ("2.weight",)),
        ParameterBlock("other", "other", ("5.bias",)),
    ]
    one_line_error(block_curvature, partial, blocks, match="not among the objective's parameters")
    one_line_error(block_curvature, partial, [], match="no blocks")


def test_transformer_blocks_split_into_their_msa_and_mlp_halves():
    vit = create_model("vit_mini", num_classes=10, depth=2)
    blocks = {b.name: b for b in model_blocks(vit, torch.randn(1, 3, 32, 32))}
    assert list(blocks) == ["patch_embed", "blocks.0.msa", "blocks.0.mlp", "blocks.1.msa", "blocks.1.mlp", "other"]
    assert {n.split(".")[2] for n in blocks["blocks.0.msa"].names} == {"norm1", "attn"}
    assert {n.split(".")[2] for n in blocks["blocks.1.mlp"].names} == {"norm2", "mlp"}
    assert blocks["blocks.0.msa"].kind == "msa" and blocks["blocks.0.mlp"].kind == "mlp"
    assert set(blocks["other"].names) == {
        "cls_token",
        "pos_embed",
        "norm.weight",
        "norm.bias",
        "head.weight",
        "head.bias",
    }
    flat = [n for b in blocks.values() for n in b.names]
    assert sorted(flat) == sorted(n for n, _ in vit.named_parameters())  # a partition


def test_resnet_blocks_by_module_prefix():
    net = create_model("resnet_mini", num_classes=10)
    blocks = model_blocks(net, torch.randn(1, 3, 32, 32))
    assert [b.name for b in blocks] == ["stem", "layer1.0", "layer2.0", "layer3.0", "layer4.0", "other"]
    assert all(n.startswith(b.name + ".") for b in blocks[:-1] for n in b.names)
    assert blocks[-1].names == ("fc.weight", "fc.bias")
    assert sum(len(b.names) for b in blocks) == len(list(net.parameters()))


def test_flat_order_of_a_block_is_the_objectives():
    obj = Objective(tiny_model(), tiny_batches(), dtype=F64)
    (r,) = block_curvature(obj, [ParameterBlock("b", "pattern", ("3.bias", "0.weight"))], trace_samples=6)
    assert r.size == 27
    assert flatten({n: obj.params[n] for n in ("0.weight", "3.bias")}).numel() == r.size
