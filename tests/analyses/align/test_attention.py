"""Head-aware alignment of attention: a ViT (landscape's, timm's) permuted by hand by heads is aligned back exactly,
the head-aware assignment against brute force, and why one permutation over all heads is not allowed."""

import itertools

import pytest
import torch
from helpers import one_line_error
from torch import nn

import landscape
from landscape.analyses.align.run import align_models
from landscape.analyses.align.spec import permutation_spec
from landscape.analyses.align.weights import head_assignment
from landscape.models import create_model
from landscape.models.layers import Attention

from .references import permuted_vit, randomise, relative_difference

VIT = {"in_chans": 1, "img_size": 8, "patch_size": 2, "depth": 2, "embed_dim": 12, "num_heads": 3, "qkv_bias": True}


def _zoo_vit(**kw):
    torch.manual_seed(0)
    return randomise(create_model("vit_mini", num_classes=10, **{**VIT, **kw}))


def _timm_vit():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    kw = {k: v for k, v in VIT.items() if k != "in_chans"}
    return randomise(timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, in_chans=1, **kw))


CASES = {"zoo": (_zoo_vit, "patch_embed"), "timm": (_timm_vit, "patch_embed.proj")}


def _images(n=16):
    return torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize(
    ("case", "method"),
    [("zoo", "weights"), ("zoo", "activations"), ("timm", "weights")],
)
def test_a_vit_permuted_by_heads_is_aligned_back_exactly(case, method):
    build, patch = CASES[case]
    a = build()
    b = permuted_vit(a, patch=patch)
    x = _images()
    assert relative_difference(a, b, x) < 1e-5  # the hand-made copy computes A's function...
    assert not torch.equal(a.state_dict()["blocks.0.attn.qkv.weight"], b.state_dict()["blocks.0.attn.qkv.weight"])
    r = align_models(a, b, [(x, None)], method=method)
    for name, t in a.state_dict().items():
        assert torch.equal(r.model.state_dict()[name], t), name
    assert r.function_error <= 1e-5 and relative_difference(b, r.model, x) <= 1e-5
    inner = {p.name: p for p in r.spec.permutations if p.heads > 1}
    assert sorted(inner) == [f"blocks.{i}.attn.{role}" for i in (0, 1) for role in ("qk", "vo")]
    assert all(p.size == 12 and p.heads == 3 and not p.sites for p in inner.values())
    assert r.matching.weight_matched == (tuple(sorted(inner)) if method == "activations" else ())


def test_one_permutation_over_all_concatenated_heads_changes_the_function():
    a = _zoo_vit()
    x = _images()
    assert relative_difference(a, permuted_vit(a, aware=False), x) > 1e-3  # units moved between heads
    assert relative_difference(a, permuted_vit(a, aware=True), x) < 1e-5


def test_the_spec_ties_the_cls_token_position_embedding_and_the_qkv_rows_by_role():
    spec = permutation_spec(_zoo_vit(), _images(2))
    stream = spec.permutations[0]
    axes = {(ax.tensor, ax.dim, ax.span) for ax in stream.axes}
    assert stream.name == "patch_embed" and stream.size == 12
    assert {("cls_token", 2, None), ("pos_embed", 2, None), ("norm.weight", 0, None), ("head.weight", 1, None)} <= axes
    assert {("blocks.0.attn.qkv.weight", 1, None), ("blocks.1.attn.proj.bias", 0, None)} <= axes
    qk, vo = spec.by_name()["blocks.0.attn.qk"], spec.by_name()["blocks.0.attn.vo"]
    assert {(ax.tensor, ax.dim, ax.span) for ax in qk.axes} == {
        (t, 0, s) for t in ("blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias") for s in ((0, 12), (12, 24))
    }
    assert ("blocks.0.attn.proj.weight", 1, None) in {(ax.tensor, ax.dim, ax.span) for ax in vo.axes}
    assert qk.heads_of == vo.heads_of == "blocks.0.attn"


def test_the_head_aware_assignment_reaches_the_brute_force_optimum():
    g = torch.Generator().manual_seed(2)
    heads, d = 2, 3
    scores = [torch.randn(heads * d, heads * d, generator=g, dtype=torch.float64) for _ in range(2)]
    within = list(itertools.permutations(range(d)))
    best = -float("inf")
    for order in itertools.permutations(range(heads)):  # every head order, every within-head order of both
        for parts in itertools.product(within, repeat=2 * heads):
            total = 0.0
            for k in range(2):
                for h in range(heads):
                    p = parts[k * heads + h]
                    total += sum(float(scores[k][h * d + i, order[h] * d + p[i]]) for i in range(d))
            best = max(best, total)
    found = head_assignment(scores, heads)
    value = sum(float(m[torch.arange(heads * d), p].sum()) for m, p in zip(scores, found))
    assert value == pytest.approx(best, rel=1e-12)
    assert torch.equal(found[0] // d, found[1] // d)  # one head order for both
    assert all(sorted((p // d).tolist()) == sorted(list(range(heads)) * d) for p in found)


def test_the_barrier_to_an_aligned_vit_permuted_by_heads_is_zero():
    a = _zoo_vit()
    b = permuted_vit(a)
    grid = {"steps": 3, "samples": 16, "batch_size": 16, "progress": False}
    r = landscape.connect(a, b, "digits:8", align="weights", **grid)
    assert abs(r.attrs["barriers"]["line"]["train"]["loss"]) < 1e-5
    assert r.attrs["align_function_error"] <= 1e-5


def test_attention_modules_not_covered_are_refused_in_one_line_naming_the_module():
    class Scaled(Attention):  # a subclass whose forward the rule cannot know
        def forward(self, x):
            return 2 * super().forward(x)

    vit = _zoo_vit()
    vit.blocks[0].attn = Scaled(12, 3, qkv_bias=True)
    one_line_error(permutation_spec, vit.eval(), _images(2), match=r"blocks\.0\.attn \(Scaled\) is a subclass")


class _Tokens(nn.Module):
    """Tokens (N, L, 4) -> Linear -> transpose to (N, 6, L) and back -> a slice of tokens or of units -> Linear."""

    def __init__(self, take_units):
        super().__init__()
        self.take_units = take_units
        self.embed, self.head = nn.Linear(4, 6), nn.Linear(3 if take_units else 6, 2)

    def forward(self, x):
        y = self.embed(x).transpose(1, 2).transpose(2, 1)
        return self.head(y[:, 0, :3] if self.take_units else y[:, 1:].mean(1))


def test_indexing_that_keeps_the_units_whole_passes_them_and_indexing_them_is_refused():
    x = torch.randn(4, 5, 4)
    spec = permutation_spec(_Tokens(False).eval(), x)
    assert [(p.name, p.size) for p in spec.permutations] == [("embed", 6)]
    assert ("head.weight", 1) in {(a.tensor, a.dim) for a in spec.permutations[0].axes}
    one_line_error(permutation_spec, _Tokens(True).eval(), x, match="indexes the permuted axis")
