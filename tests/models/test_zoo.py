"""Registry-driven checks of every zoo model, plus exact checks of the shared layers.

Every registered model, the big ones included, gets the forward, gradient (1 input channel) and
block_features checks on a batch of 2 at 32x32. To keep the file fast, the big models (over 1M
parameters) get a forward pass only with 3 input channels, and block_features in eval mode only
(the train-mode variant runs on the small models). Nothing else is skipped. Default-built models
are cached per (name, in_chans); a test that uses one resets what it changes (mode, gradients).
"""

import functools
import itertools

import pytest
import torch
import torch.nn.functional as F

from landscape.errors import LandscapeError
from landscape.models import (
    FEATURE_KINDS,
    AlterNet,
    Feature,
    ResNet,
    ViT,
    count_parameters,
    create_model,
    list_models,
)
from landscape.models.alternet import MSABlock, msa_pattern
from landscape.models.layers import (
    Attention,
    DropPath,
    RelativePositionBias,
    WindowAttention,
    grid_positions,
    relative_offset_index,
    relative_position_index,
    tokens_to_grid,
    window_merge,
    window_partition,
)

NUM_CLASSES = 7
MODELS = list_models()  # registry-driven: every model registered when this file is collected
OWN_MODELS = ["alternet50", "alternet_mini", "resnet18", "resnet50", "resnet_mini", "vit_mini", "vit_ti"]
BIG = 1_000_000


@functools.cache
def _cached(name: str, in_chans: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return create_model(name, num_classes=NUM_CLASSES, in_chans=in_chans)


def _build(name: str, in_chans: int, **kwargs) -> torch.nn.Module:
    if not kwargs:
        model = _cached(name, in_chans)
        model.zero_grad(set_to_none=True)
        return model.train()
    torch.manual_seed(0)
    return create_model(name, num_classes=NUM_CLASSES, in_chans=in_chans, **kwargs)


def _is_big(name: str) -> bool:
    return count_parameters(_build(name, 1)) > BIG


def _modes(model: torch.nn.Module) -> list[bool]:
    return [m.training for m in model.modules()]


@pytest.mark.parametrize(("name", "in_chans"), list(itertools.product(MODELS, (1, 3))))
def test_forward_and_gradients(name, in_chans):
    model = _build(name, in_chans)
    x = torch.randn(2, in_chans, 32, 32)
    backward = in_chans == 1 or not _is_big(name)
    with torch.set_grad_enabled(backward):
        out = model(x)
    assert out.shape == (2, NUM_CLASSES)
    assert torch.isfinite(out).all()
    if not backward:
        return
    F.cross_entropy(out, torch.tensor([0, 3])).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{pname} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{pname} has a non-finite gradient"
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("train", [False, True])
def test_block_features(name, train):
    if train and _is_big(name):
        pytest.skip("the train-mode check runs on the models under 1M parameters, for speed")
    model = _build(name, 1)
    model.train(train)
    before = _modes(model)
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        feats = model.block_features(x)
        features = model.forward_features(x)
    assert _modes(model) == before
    assert feats, "no intermediates"
    names = [f.name for f in feats]
    assert len(set(names)) == len(names)
    for f in feats:
        assert isinstance(f, Feature)
        assert f.kind in FEATURE_KINDS
        assert f.tensor.ndim == 4 and f.tensor.shape[0] == 2
        assert torch.isfinite(f.tensor).all()
    # consistent with forward: the last map is what the head consumes, and the head gives the logits
    last = features if features.ndim == 4 else model.to_grid(features)
    torch.testing.assert_close(feats[-1].tensor, last, rtol=0, atol=0)
    if not train:  # train-mode BatchNorm updates running stats per call, so compare in eval only
        with torch.no_grad():
            torch.testing.assert_close(model.forward_head(features), model(x))


@pytest.mark.parametrize("name", [n for n in OWN_MODELS if n.startswith(("resnet", "alternet"))])
def test_resnet_family_intermediates_structure(name):
    model = _build(name, 1).eval()
    with torch.no_grad():
        feats = model.block_features(torch.randn(1, 1, 32, 32))
    assert (feats[0].name, feats[0].kind) == ("stem", "stem")
    expected = []
    for s, stage in enumerate(model.stages()):
        for i, blk in enumerate(stage):
            kind = "msa" if isinstance(blk, MSABlock) else ("downsample" if s > 0 and i == 0 else "conv")
            expected.append((f"layer{s + 1}.{i}", kind))
    assert [(f.name, f.kind) for f in feats[1:]] == expected
    sizes = [f.tensor.shape[-1] for f in feats]
    assert sizes[0] == 32 and sizes[-1] == 4  # CIFAR stem: maps 32/16/8/4


@pytest.mark.parametrize("name", [n for n in OWN_MODELS if n.startswith("vit")])
def test_vit_intermediates_structure(name):
    model = _build(name, 3).eval()
    with torch.no_grad():
        feats = model.block_features(torch.randn(1, 3, 32, 32))
    expected = [("patch_embed", "embed")]
    for i in range(len(model.blocks)):
        expected += [(f"blocks.{i}.msa", "msa"), (f"blocks.{i}.mlp", "mlp")]
    assert [(f.name, f.kind) for f in feats] == expected
    assert all(f.tensor.shape[-2:] == model.grid_size for f in feats)


# ---------------------------------------------------------------------------------------------- ResNet


@pytest.mark.parametrize(
    "kwargs",
    [
        {"preact": True},
        {"block": "bottleneck"},
        {"block": "bottleneck", "preact": True},
        {"stem": "imagenet"},
        {"stem": "imagenet", "preact": True, "block": "bottleneck"},
    ],
)
def test_resnet_variants(kwargs):
    model = _build("resnet_mini", 3, **kwargs)
    assert isinstance(model, ResNet)
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, NUM_CLASSES) and torch.isfinite(out).all()
    imagenet = kwargs.get("stem") == "imagenet"
    # conv, then BN + ReLU unless pre-activation, then max-pool for the ImageNet stem
    assert len(model.stem) == 1 + (0 if kwargs.get("preact") else 2) + (1 if imagenet else 0)
    feats = model.eval().block_features(torch.randn(1, 3, 32, 32))
    assert feats[0].tensor.shape[-1] == (8 if imagenet else 32)


def test_resnet_projection_shortcut_only_when_shape_changes():
    model = _build("resnet18", 3)
    assert model.layer1[0].shortcut is None and model.layer1[1].shortcut is None
    for stage in model.stages()[1:]:
        assert stage[0].shortcut is not None and stage[1].shortcut is None
    post = model.layer2[0].shortcut
    assert isinstance(post[0], torch.nn.Conv2d) and isinstance(post[1], torch.nn.BatchNorm2d)
    assert isinstance(_build("resnet18", 3, preact=True).layer2[0].shortcut, torch.nn.Conv2d)


# -------------------------------------------------------------------------------------------------- ViT


def test_tokens_to_grid_is_row_major():
    H, W, C = 3, 5, 2
    tokens = torch.arange(H * W, dtype=torch.float32).view(1, H * W, 1).expand(1, H * W, C)
    grid = tokens_to_grid(tokens, (H, W))
    assert grid.shape == (1, C, H, W)
    for i in range(H * W):
        assert grid[0, 0, i // W, i % W] == i


@pytest.mark.parametrize("pos_embed", ["abs", "rpe"])
def test_vit_patch_embed_feature_matches_conv_grid(pos_embed):
    model = ViT(img_size=16, patch_size=4, in_chans=1, embed_dim=8, depth=1, num_heads=2, pos_embed=pos_embed)
    x = torch.randn(2, 1, 16, 16)
    with torch.no_grad():
        feat = model.block_features(x)[0].tensor
        expected = model.patch_embed(x)  # the conv's own (B, C, 4, 4) map: tokens i <-> (i // 4, i % 4)
        if pos_embed == "abs":
            expected = expected + model.pos_embed[0, 1:].T.reshape(1, 8, 4, 4)
    torch.testing.assert_close(feat, expected)


def test_vit_rpe_with_nine_heads_and_explicit_head_dim():
    model = ViT(
        img_size=16,
        patch_size=4,
        in_chans=3,
        embed_dim=32,
        depth=2,
        num_heads=9,
        head_dim=8,
        pos_embed="rpe",
        num_classes=NUM_CLASSES,
    )
    assert model.pos_embed is None
    attn = model.blocks[0].attn
    assert attn.qkv.out_features == 3 * 9 * 8 and attn.proj.in_features == 72
    assert attn.rel_pos.table.shape == (9, 7 * 7)
    assert attn.rel_pos.cls_bias.shape == (9, 3)
    out = model(torch.randn(2, 3, 16, 16))
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_vit_rejects_wrong_image_size():
    with pytest.raises(LandscapeError, match="img_size"):
        _build("vit_mini", 3)(torch.randn(1, 3, 28, 28))
    with pytest.raises(LandscapeError):
        ViT(img_size=30, patch_size=4)


# ---------------------------------------------------------------------------------------- Relative bias


@pytest.mark.parametrize("grid", [(1, 1), (2, 3), (4, 4), (3, 5)])
def test_relative_position_index_matches_brute_force(grid):
    H, W = grid
    index = relative_position_index(grid)
    positions = [(y, x) for y in range(H) for x in range(W)]  # row-major
    assert index.shape == (H * W, H * W)
    for (q, pq), (k, pk) in itertools.product(enumerate(positions), enumerate(positions)):
        dy, dx = pk[0] - pq[0], pk[1] - pq[1]
        assert index[q, k] == relative_offset_index(dy, dx, grid)
    # the helper is a bijection from all offsets onto the table's columns
    offsets = [(dy, dx) for dy in range(-H + 1, H) for dx in range(-W + 1, W)]
    columns = sorted(relative_offset_index(dy, dx, grid) for dy, dx in offsets)
    assert columns == list(range((2 * H - 1) * (2 * W - 1)))
    with pytest.raises(ValueError):
        relative_offset_index(H, 0, grid)


def test_grid_positions_are_row_major_and_shifted():
    assert grid_positions(2, 3).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert grid_positions(1, 2, start=3).tolist() == [[3, 3], [3, 4]]


def test_relative_position_index_of_given_positions():
    # queries on the inner 2x3 grid of a grid padded by one ring (4x5 keys); the table is that of a 3x4 grid
    grid = (3, 4)
    queries, keys = grid_positions(2, 3, start=1), grid_positions(4, 5)
    index = relative_position_index(grid, queries, keys)
    assert index.shape == (6, 20)
    for (q, pq), (k, pk) in itertools.product(enumerate(queries.tolist()), enumerate(keys.tolist())):
        assert index[q, k] == relative_offset_index(pk[0] - pq[0], pk[1] - pq[1], grid)
    # query (1, 1) -> key (0, 0) is offset (-1, -1): column 1 * 7 + 2; (2, 3) -> (0, 0) and (1, 1) -> (3, 4)
    # are the extreme offsets (-2, -3) and (2, 3): the table's first and last columns
    assert index[0, 0] == 9 and index[5, 0] == 0 and index[0, 19] == 5 * 7 - 1
    with pytest.raises(ValueError):
        relative_position_index((2, 3), queries, keys)  # offsets of up to 2 rows do not fit a 2-row table


def test_relative_position_bias_entry_lands_on_its_offset():
    H, W, heads = 3, 4, 2
    rpb = RelativePositionBias((H, W), heads, num_prefix_tokens=1)
    with torch.no_grad():
        rpb.table.zero_()
        rpb.table[1, rpb.offset_index(1, -1)] = 5.0
        rpb.cls_bias.copy_(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    bias = rpb()
    assert bias.shape == (heads, 1 + H * W, 1 + H * W)
    assert bias[:, 0, 0].tolist() == [3.0, 6.0]
    assert (bias[0, 0, 1:] == 1.0).all() and (bias[0, 1:, 0] == 2.0).all()
    patch = bias[:, 1:, 1:]
    assert (patch[0] == 0).all()
    for q, k in itertools.product(range(H * W), repeat=2):
        hit = (k // W - q // W, k % W - q % W) == (1, -1)
        assert patch[1, q, k] == (5.0 if hit else 0.0)


def test_attention_matches_reference_sdpa():
    torch.manual_seed(0)
    attn = Attention(12, num_heads=3, qkv_bias=True, grid_size=(2, 3), num_prefix_tokens=1)
    x = torch.randn(2, 7, 12)
    q, k, v = attn.qkv(x).view(2, 7, 3, 3, 4).permute(2, 0, 3, 1, 4)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=attn.rel_pos())
    ref = attn.proj(ref.transpose(1, 2).reshape(2, 7, 12))
    torch.testing.assert_close(attn(x), ref)


def test_window_partition_roundtrip_and_order():
    x = torch.arange(2 * 3 * 8 * 4, dtype=torch.float32).view(2, 3, 8, 4)
    windows = window_partition(x, 4)
    assert windows.shape == (2 * 2 * 1, 16, 3)
    torch.testing.assert_close(windows[1, :, 0], x[0, 0, 4:8, 0:4].flatten())
    torch.testing.assert_close(window_merge(windows, 4, 8, 4), x)


def test_window_attention_equals_attention_per_window():
    torch.manual_seed(0)
    wa = WindowAttention(6, 10, num_heads=2, head_dim=3, window=2, rel_pos_per_head=True)
    x = torch.randn(1, 6, 4, 4)
    out = wa(x)
    ref = torch.zeros_like(out)
    lin = Attention(6, num_heads=2, head_dim=3, out_dim=10, grid_size=(2, 2))
    with torch.no_grad():
        lin.qkv.weight.copy_(wa.qkv.weight.flatten(1))
        lin.proj.weight.copy_(wa.proj.weight.flatten(1))
        lin.proj.bias.copy_(wa.proj.bias)
        lin.rel_pos.table.copy_(wa.rel_pos.table)
        for wy, wx in itertools.product(range(2), repeat=2):
            patch = x[0, :, 2 * wy : 2 * wy + 2, 2 * wx : 2 * wx + 2]  # (C, 2, 2)
            tokens = patch.flatten(1).T.unsqueeze(0)  # row-major tokens in the window
            ref[0, :, 2 * wy : 2 * wy + 2, 2 * wx : 2 * wx + 2] = lin(tokens)[0].T.reshape(10, 2, 2)
    torch.testing.assert_close(out, ref)
    with pytest.raises(LandscapeError):
        wa(torch.randn(1, 6, 3, 4))


# ---------------------------------------------------------------------------------------------- AlterNet


def _kind_letter(blk) -> str:
    return "M" if blk.kind == "msa" else "C"


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("alternet50", {}),
        ("alternet50", {"msa_blocks": (0, 1, 3, 2)}),
        ("alternet_mini", {}),
        ("alternet_mini", {"layers": (2, 3, 4, 2), "msa_blocks": (1, 1, 2, 0)}),
    ],
)
def test_alternet_stage_pattern(name, kwargs):
    model = _build(name, 1, **kwargs)
    assert isinstance(model, AlterNet)
    for stage, n2 in zip(model.stages(), model.msa_blocks):
        n1 = len(stage)
        assert [_kind_letter(b) for b in stage] == ["C"] * (n1 - 2 * n2) + ["C", "M"] * n2
        assert stage[0].kind in ("conv", "downsample")


def test_alternet_msa_block_follows_the_paper():
    model = _build("alternet50", 3)
    blk = model.layer3[5]
    assert isinstance(blk, MSABlock)
    assert isinstance(blk.act, torch.nn.GELU)
    assert blk.conv.in_channels == 1024 and blk.conv.out_channels == 256  # down to channels / 4
    attn = blk.attn
    assert (attn.num_heads, attn.head_dim, attn.window) == (12, 64, 4)
    assert attn.qkv.bias is None and attn.qkv.kernel_size == (1, 1)
    assert attn.proj.out_channels == 1024
    assert attn.rel_pos.table.shape == (1, 7 * 7)  # one table per block
    assert [b.attn.num_heads for b in model.modules() if isinstance(b, MSABlock)] == [6, 12, 24, 24]
    assert not hasattr(blk, "mlp")


def test_alternet_window_clipped_to_map_and_drop_path_schedule():
    model = _build("alternet_mini", 1, window=8, drop_path_rate=0.1)
    msa = [b for b in model.modules() if isinstance(b, MSABlock)]
    assert [b.attn.window for b in msa] == [8, 8, 4]  # maps 16, 8, 4
    rates = [b.drop_path.drop_prob for b in msa]
    assert rates == sorted(rates) and rates[-1] == pytest.approx(0.1)
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, NUM_CLASSES)


def test_msa_pattern_rejects_too_many_msas():
    assert msa_pattern(4, 2) == [False, True, False, True]
    with pytest.raises(LandscapeError):
        msa_pattern(1, 1)
    with pytest.raises(LandscapeError):
        _build("alternet_mini", 1, msa_blocks=(0, 2, 1, 1))


# ----------------------------------------------------------------------------------------------- misc


def test_feature_rejects_unknown_kind():
    with pytest.raises(ValueError):
        Feature("x", "pool", torch.zeros(1, 1, 1, 1))


def test_drop_path_identity_in_eval_and_per_sample_in_train():
    dp = DropPath(0.5)
    x = torch.ones(64, 3, 2, 2)
    assert dp.eval()(x) is x
    torch.manual_seed(0)
    y = dp.train()(x)
    per_sample = y.flatten(1)
    assert set(per_sample.unique().tolist()) <= {0.0, 2.0}
    assert (per_sample.min(1).values == per_sample.max(1).values).all()


@pytest.mark.parametrize("name", ["alternet_mini", "vit_mini"])  # together: conv, BN, LN, GELU, attention
def test_functional_hvp_works(name):
    """The analyses call models through torch.func (forward-over-reverse HVPs) with BN in eval mode."""
    model = _build(name, 1).eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = torch.randn(2, 1, 32, 32), torch.tensor([1, 2])

    def loss(p):
        return F.cross_entropy(torch.func.functional_call(model, p, (x,)), y)

    v = {k: torch.randn_like(t) for k, t in params.items()}
    _, hvp = torch.func.jvp(torch.func.grad(loss), (params,), (v,))
    assert all(torch.isfinite(t).all() for t in hvp.values())
