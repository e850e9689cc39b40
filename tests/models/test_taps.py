"""FeatureTaps: every rule's maps against hand recomputations of the blocks, user taps, errors, hook hygiene."""

import copy

import numpy as np
import pytest
import torch
from helpers import one_line_error
from torch import nn

from landscape.analyses.fourier.features import fourier_profile
from landscape.errors import ForeignError, LandscapeError
from landscape.models.taps import FeatureTaps, as_grid, parse_taps

timm = pytest.importorskip("timm")
torchvision = pytest.importorskip("torchvision")

ATOL = 1e-5


def no_hooks(model):
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def tokens_to_nchw(tokens, prefix, h, w):
    b, _, c = tokens.shape
    return tokens[:, prefix:].reshape(b, h, w, c).permute(0, 3, 1, 2)


def nhwc_to_nchw(x):
    return x.permute(0, 3, 1, 2)


def assert_maps(features, reference, atol=ATOL):
    assert [(f.name, f.kind) for f in features] == [(n, k) for n, k, _ in reference]
    for f, (name, _, expected) in zip(features, reference):
        assert f.tensor.shape == expected.shape, name
        torch.testing.assert_close(f.tensor, expected, atol=atol, rtol=0, msg=name)


# --------------------------------------------------------------------------------------------------------
# Hand recomputations, block by block


def timm_vit_reference(model, x):
    """Embedded tokens, then x1 = x + ls1(attn(norm1(x))), x2 = x1 + ls2(mlp(norm2(x1))) per block."""
    h, w = model.patch_embed.dynamic_feat_size(x.shape[-2:])
    p = model.num_prefix_tokens
    t = model.norm_pre(model._pos_embed(model.patch_embed(x)))
    ref = [("patch_embed", "embed", tokens_to_nchw(t, p, h, w))]
    for i, blk in enumerate(model.blocks):
        x1 = t + blk.ls1(blk.attn(blk.norm1(t)))
        x2 = x1 + blk.ls2(blk.mlp(blk.norm2(x1)))
        torch.testing.assert_close(blk(t), x2, atol=ATOL, rtol=0)  # the post-MLP stream is the block output
        ref += [
            (f"blocks.{i}.msa", "msa", tokens_to_nchw(x1, p, h, w)),
            (f"blocks.{i}.mlp", "mlp", tokens_to_nchw(x2, p, h, w)),
        ]
        t = x2
    torch.testing.assert_close(model.norm(t), model.forward_features(x), atol=ATOL, rtol=0)
    return ref


def resnet_reference(model, x):
    """The stem (conv1, bn1, relu, maxpool), then every block applied to the previous block's output."""
    act = model.act1 if hasattr(model, "act1") else model.relu
    y = model.maxpool(act(model.bn1(model.conv1(x))))
    ref = [("maxpool", "stem", y)]
    for s in range(1, 5):
        for i, blk in enumerate(getattr(model, f"layer{s}")):
            y = blk(y)
            ref.append((f"layer{s}.{i}", "downsample" if i == 0 and s > 1 else "conv", y))
    return ref


@pytest.fixture(scope="module")
def small_vit():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=4, depth=2, num_classes=10).eval()


# --------------------------------------------------------------------------------------------------------
# Family rules


@pytest.mark.parametrize(
    ("kwargs", "size"),
    [
        ({"img_size": 32}, (32, 32)),
        ({"img_size": (32, 48), "reg_tokens": 2, "init_values": 0.5}, (32, 48)),
        ({"img_size": 32, "dynamic_img_size": True}, (32, 48)),
    ],
    ids=["square", "registers-nonsquare", "dynamic"],
)
def test_timm_vit_maps_equal_block_recomputation(kwargs, size):
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", patch_size=4, depth=2, num_classes=10, **kwargs).eval()
    x = torch.randn(2, 3, *size)
    taps = FeatureTaps(model)
    assert taps.rule == "timm-vit"
    with torch.no_grad():
        features = taps(x)
        ref = timm_vit_reference(model, x)
    assert features[0].tensor.shape[-2:] == (size[0] // 4, size[1] // 4)
    assert_maps(features, ref)
    assert no_hooks(model)


def test_timm_vit_tokens_land_on_their_patch():
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", img_size=(32, 48), patch_size=4, depth=1, reg_tokens=2, num_classes=10
    ).eval()
    with torch.no_grad():
        model.pos_embed.zero_()
        x = torch.randn(2, 3, 32, 48)
        embed = FeatureTaps(model)(x)[0]
        conv = model.patch_embed.proj(x)  # (B, C, 8, 12): patch (r, c) of the image at [..., r, c]
    torch.testing.assert_close(embed.tensor, conv)


def test_timm_post_norm_block_msa_stream_is_the_mlp_input():
    from timm.models.vision_transformer import ResPostBlock

    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", img_size=32, patch_size=4, depth=2, num_classes=10, block_fn=ResPostBlock
    ).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        features = FeatureTaps(model)(x)
        t = model._pos_embed(model.patch_embed(x))
        ref = [("patch_embed", "embed", tokens_to_nchw(t, 1, 8, 8))]
        for i, blk in enumerate(model.blocks):
            x1 = t + blk.norm1(blk.attn(t))
            t = x1 + blk.norm2(blk.mlp(x1))
            ref += [
                (f"blocks.{i}.msa", "msa", tokens_to_nchw(x1, 1, 8, 8)),
                (f"blocks.{i}.mlp", "mlp", tokens_to_nchw(t, 1, 8, 8)),
            ]
    assert_maps(features, ref)


@pytest.mark.parametrize(
    ("build", "downsample_blocks"),
    [
        (lambda: timm.create_model("resnet10t", num_classes=10), ["layer2.0", "layer3.0", "layer4.0"]),
        (lambda: timm.create_model("resnet18", num_classes=10), ["layer2.0", "layer3.0", "layer4.0"]),
        (lambda: torchvision.models.resnet18(num_classes=10), ["layer2.0", "layer3.0", "layer4.0"]),
    ],
    ids=["timm-resnet10t", "timm-resnet18", "torchvision-resnet18"],
)
def test_resnet_maps_equal_block_recomputation(build, downsample_blocks):
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(2, 3, 32, 32)
    taps = FeatureTaps(model)
    assert taps.rule == "resnet"
    with torch.no_grad():
        features = taps(x)
        ref = resnet_reference(model, x)
        if hasattr(model, "forward_features"):
            torch.testing.assert_close(features[-1].tensor, model.forward_features(x), atol=0, rtol=0)
    n_blocks = sum(len(getattr(model, f"layer{s}")) for s in range(1, 5))
    assert len(features) == 1 + n_blocks
    assert [f.name for f in features if f.kind == "downsample"] == downsample_blocks
    assert_maps(features, ref, atol=0)


def test_bottleneck_projection_block_is_a_downsample():
    torch.manual_seed(0)
    model = timm.create_model("resnet26", num_classes=10).eval()
    with torch.no_grad():
        features = FeatureTaps(model)(torch.randn(1, 3, 32, 32))
    kinds = {f.name: f.kind for f in features}
    assert kinds["layer1.0"] == "downsample" and kinds["layer1.1"] == "conv" and kinds["layer2.0"] == "downsample"


@pytest.mark.parametrize("name", ["swin_tiny_patch4_window7_224", "swinv2_tiny_window8_256"])
def test_timm_swin_maps_equal_block_recomputation(name):
    torch.manual_seed(0)
    model = timm.create_model(
        name, img_size=32, window_size=4, embed_dim=24, depths=(2, 2), num_heads=(1, 2), num_classes=10
    ).eval()
    post_norm = "v2" in name
    x = torch.randn(2, 3, 32, 32)
    taps = FeatureTaps(model)
    assert taps.rule == "timm-swin"
    with torch.no_grad():
        features = taps(x)
        y = model.patch_embed(x)
        ref = [("patch_embed", "embed", nhwc_to_nchw(y))]
        for i, stage in enumerate(model.layers):
            if i > 0:
                y = stage.downsample(y)
                ref.append((f"layers.{i}.downsample", "downsample", nhwc_to_nchw(y)))
            for j, blk in enumerate(stage.blocks):
                b, h, w, c = y.shape
                attn = blk.norm1(blk._attn(y)) if post_norm else blk._attn(blk.norm1(y))
                s = (y + attn).reshape(b, h * w, c)
                out = s + (blk.norm2(blk.mlp(s)) if post_norm else blk.mlp(blk.norm2(s)))
                torch.testing.assert_close(blk(y).reshape(b, h * w, c), out, atol=ATOL, rtol=0)
                y = out.reshape(b, h, w, c)
                ref += [
                    (f"layers.{i}.blocks.{j}.msa", "msa", nhwc_to_nchw(s.reshape(b, h, w, c))),
                    (f"layers.{i}.blocks.{j}.mlp", "mlp", nhwc_to_nchw(y)),
                ]
        torch.testing.assert_close(model.norm(y), model.forward_features(x), atol=ATOL, rtol=0)
    assert_maps(features, ref)


def test_timm_convnext_maps_equal_block_recomputation():
    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", dims=(8, 16, 32, 64), depths=(1, 1, 2, 1), num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    taps = FeatureTaps(model)
    assert taps.rule == "timm-convnext"
    with torch.no_grad():
        features = taps(x)
        y = model.stem(x)
        ref = [("stem", "stem", y)]
        for i, stage in enumerate(model.stages):
            if i > 0:
                y = stage.downsample(y)
                ref.append((f"stages.{i}.downsample", "downsample", y))
            for j, blk in enumerate(stage.blocks):
                y = blk(y)
                ref.append((f"stages.{i}.blocks.{j}", "conv", y))
        torch.testing.assert_close(y, model.forward_features(x))
    assert_maps(features, ref, atol=0)


def test_torchvision_vit_maps_equal_block_recomputation():
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32
    ).eval()
    x = torch.randn(2, 3, 32, 32)
    taps = FeatureTaps(model)
    assert taps.rule == "torchvision-vit"
    with torch.no_grad():
        features = taps(x)
        t = model._process_input(x)
        t = torch.cat([model.class_token.expand(2, -1, -1), t], dim=1) + model.encoder.pos_embedding
        ref = [("conv_proj", "embed", tokens_to_nchw(t, 1, 4, 4))]
        for i, blk in enumerate(model.encoder.layers):
            y = blk.ln_1(t)
            x1 = blk.self_attention(y, y, y, need_weights=False)[0] + t
            t = x1 + blk.mlp(blk.ln_2(x1))
            path = f"encoder.layers.encoder_layer_{i}"
            ref += [
                (f"{path}.msa", "msa", tokens_to_nchw(x1, 1, 4, 4)),
                (f"{path}.mlp", "mlp", tokens_to_nchw(t, 1, 4, 4)),
            ]
    assert_maps(features, ref)


def test_zoo_model_delegates_to_block_features():
    from landscape.models import create_model

    torch.manual_seed(0)
    model = create_model("vit_mini", num_classes=10, in_chans=1).eval()
    x = torch.randn(2, 1, 32, 32)
    taps = FeatureTaps(model)
    assert taps.rule == "zoo"
    with torch.no_grad():
        features, direct = taps(x), model.block_features(x)
    assert [(f.name, f.kind) for f in features] == [(f.name, f.kind) for f in direct]
    for a, b in zip(features, direct):
        assert torch.equal(a.tensor, b.tensor)
    assert FeatureTaps(model, ["blocks.?=mlp"]).rule == "taps"


# --------------------------------------------------------------------------------------------------------
# Fourier profiles through the taps


def numpy_half_diagonal(maps):
    """fft2, log(|F| + 1e-6), fftshift, mean over batch and channels, half diagonal from the centre."""
    logs = np.fft.fftshift(np.log(np.abs(np.fft.fft2(maps)) + 1e-6), axes=(-2, -1)).mean(axis=(0, 1))
    return np.diag(logs)[maps.shape[-1] // 2 :]


def numpy_variance(maps):
    b, c = maps.shape[:2]
    return np.mean([np.var(maps[i, j], ddof=1) for i in range(b) for j in range(c)])


@pytest.mark.parametrize("family", ["timm-vit", "torchvision-resnet"])
def test_fourier_profile_of_foreign_models_matches_numpy(family, small_vit):
    torch.manual_seed(0)
    if family == "timm-vit":
        model, x = copy.deepcopy(small_vit).double(), torch.randn(4, 3, 32, 32, dtype=torch.float64)
        reference = timm_vit_reference
    else:
        model, x = torchvision.models.resnet18(num_classes=10).double().eval(), torch.randn(4, 3, 64, 64).double()
        reference = resnet_reference
    prof = fourier_profile(model.train(), [x[:3], (x[3:], None)])
    with torch.no_grad():
        ref = reference(model.eval(), x)
    assert prof.names == [n for n, _, _ in ref] and prof.kinds == [k for _, k, _ in ref]
    assert prof.n_samples == 4
    for i, (name, _, maps) in enumerate(ref):
        arr = maps.numpy()
        np.testing.assert_allclose(prof.log_amplitude(i), numpy_half_diagonal(arr), atol=ATOL, err_msg=name)
        assert prof.variance[i] == pytest.approx(numpy_variance(arr), rel=1e-9)


def test_fourier_profile_never_calls_timm_forward_intermediates(small_vit):
    model = copy.deepcopy(small_vit)

    def forbidden(*args, **kwargs):
        raise AssertionError("forward_intermediates was called")

    model.forward_intermediates = forbidden
    prof = fourier_profile(model, [torch.randn(2, 3, 32, 32)])
    assert prof.names == ["patch_embed", "blocks.0.msa", "blocks.0.mlp", "blocks.1.msa", "blocks.1.mlp"]
    assert no_hooks(model)


# --------------------------------------------------------------------------------------------------------
# User taps


class Custom(nn.Module):
    """A model no rule knows: conv stem, a conv body (inplace ReLUs), a token mixer and a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.body = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(4, 6, 1))
        self.mixer = nn.Linear(6, 6)
        self.head = nn.Linear(6, 10)
        self.drop = nn.Dropout(0.5)

    def tokens(self, x):
        t = self.body(self.stem(x)).flatten(2).transpose(1, 2)  # (B, 16, 6)
        cls = t.mean(dim=1, keepdim=True)
        return self.mixer(torch.cat([cls, t], dim=1))  # (B, 17, 6): CLS + a 4x4 grid

    def forward(self, x):
        return self.head(self.drop(self.tokens(x)[:, 0]))


def test_user_taps_read_outputs_in_forward_order():
    torch.manual_seed(0)
    model = Custom().eval()
    x = torch.randn(2, 3, 4, 4)
    taps = FeatureTaps(model, ["stem=stem", "body.[02]=conv", ("mixer", "msa")])
    assert taps.rule == "taps"
    with torch.no_grad():
        features = taps(x)
        stem = model.stem(x)
        conv0 = model.body[0](stem)  # before the inplace ReLU: the tap keeps its own copy
        conv2 = model.body(stem)
        mixed = model.tokens(x)
    assert [(f.name, f.kind) for f in features] == [
        ("stem", "stem"),
        ("body.0", "conv"),
        ("body.2", "conv"),
        ("mixer", "msa"),
    ]
    assert (features[1].tensor < 0).any()
    for f, expected in zip(features, [stem, conv0, conv2, mixed[:, 1:].transpose(1, 2).reshape(2, 6, 4, 4)]):
        torch.testing.assert_close(f.tensor, expected, atol=0, rtol=0)
    assert no_hooks(model)


def test_user_taps_override_a_rule(small_vit):
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        features = FeatureTaps(small_vit, ["blocks.*.mlp=mlp"])(x)
        t = small_vit._pos_embed(small_vit.patch_embed(x))
        t = t + small_vit.blocks[0].attn(small_vit.blocks[0].norm1(t))
        branch = small_vit.blocks[0].mlp(small_vit.blocks[0].norm2(t))
    assert [f.name for f in features] == ["blocks.0.mlp", "blocks.1.mlp"]
    torch.testing.assert_close(features[0].tensor, tokens_to_nchw(branch, 1, 8, 8), atol=ATOL, rtol=0)


def test_shared_module_called_twice_gives_two_maps():
    conv = nn.Conv2d(2, 2, 3, padding=1)
    model = nn.Sequential(conv, nn.Tanh(), conv).eval()
    x = torch.randn(1, 2, 5, 5)
    with torch.no_grad():
        features = FeatureTaps(model, ["0=conv"])(x)
        torch.testing.assert_close(features[1].tensor, model(x))
    assert [f.name for f in features] == ["0", "0[1]"]


def test_context_manager_keeps_hooks_until_exit(small_vit):
    x = torch.randn(1, 3, 32, 32)
    with FeatureTaps(small_vit) as taps, torch.no_grad():
        assert not no_hooks(small_vit)
        first, second = taps(x), taps(x)
    assert no_hooks(small_vit)
    assert len(first) == len(second) == 5
    for a, b in zip(first, second):
        torch.testing.assert_close(a.tensor, b.tensor)
    taps.close()  # idempotent


# --------------------------------------------------------------------------------------------------------
# Errors and hook hygiene


def test_as_grid_moved_here_keeps_its_contract():
    tokens = torch.arange(5.0).reshape(1, 5, 1)  # CLS + a 2x2 grid
    torch.testing.assert_close(as_grid(tokens), torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]]))
    one_line_error(as_grid, torch.zeros(1, 7, 2), match="square grid")
    one_line_error(as_grid, torch.zeros(2, 3), match="NCHW")


def test_parse_taps():
    assert parse_taps(None) == []
    assert parse_taps([" blocks.* = msa", "layer?.?=conv"]) == [("blocks.*", "msa"), ("layer?.?", "conv")]
    one_line_error(parse_taps, ["blocks.0"], match=r"bad tap 'blocks.0': write 'PATTERN=KIND'")
    one_line_error(parse_taps, ["=conv"], match="write 'PATTERN=KIND'")
    one_line_error(parse_taps, ["blocks.*=attention"], match=r"unknown kind 'attention'.*stem, conv, msa, mlp")
    one_line_error(FeatureTaps, Custom(), [("stem", "nope")], match="unknown kind 'nope'")
    one_line_error(FeatureTaps, Custom(), [3], match="a tap must be")


def test_no_rule_and_no_taps_lists_candidates():
    msg = one_line_error(FeatureTaps, Custom(), match=r"Custom has no block_features\(x\).*--taps 'PATTERN=KIND'")
    assert msg.endswith("candidate modules: body.0 (Conv2d), body.1 (ReLU), body.2 (Conv2d)")
    deep = nn.Sequential(*[nn.Sequential(nn.Identity(), nn.Identity()) for _ in range(7)])
    msg = one_line_error(FeatureTaps, deep, match="no block_features")
    assert "candidate modules: 0 (Sequential), 1 (Sequential), 2 (Sequential)" in msg
    assert "6 (Sequential), 0.0 (Identity), 0.1 (Identity), 1.0 (Identity) (and 11 more)" in msg
    one_line_error(FeatureTaps, nn.Linear(2, 2), match="candidate modules: none")
    one_line_error(fourier_profile, Custom(), [torch.zeros(1, 3, 4, 4)], match="block_features")


def test_taps_matching_nothing():
    one_line_error(
        FeatureTaps,
        Custom(),
        ["stem=stem", "blocks.*=mlp"],
        match=r"taps 'blocks.\*' match no module of Custom; candidate modules: body.0",
    )


class Pair(nn.Module):
    def forward(self, x):
        return x, x


class WithPair(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = Pair()
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.pair(x)[0].mean(dim=(-2, -1)))


@pytest.mark.parametrize(
    ("model", "tap", "x", "match"),
    [
        (WithPair(), "pair=conv", torch.randn(2, 4, 3, 3), r"module pair's output \(a tuple, not a Tensor\)"),
        (WithPair(), "head=conv", torch.randn(2, 4, 3, 3), r"module head's output \(shape \(2, 3\)\)"),
        (nn.Sequential(nn.Linear(3, 3)), "0=msa", torch.randn(2, 7, 3), r"module 0's output \(shape \(2, 7, 3\)\)"),
    ],
    ids=["tuple", "2-D", "tokens-not-a-grid"],
)
def test_unreadable_output(model, tap, x, match):
    taps = FeatureTaps(model, [tap])
    msg = one_line_error(taps, x, match=match)
    assert "cannot be read as a feature map" in msg
    assert no_hooks(model)


class Boom(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom")


def test_hooks_removed_and_model_unchanged_after_errors(small_vit):
    model = nn.Sequential(nn.Conv2d(3, 3, 1), Boom())
    with pytest.raises(ForeignError, match=r"your model's forward \(Sequential\) raised RuntimeError: boom"):
        FeatureTaps(model, ["0=conv"])(torch.randn(1, 3, 2, 2))
    assert no_hooks(model)
    with pytest.raises(ForeignError, match="raised RuntimeError: boom"), FeatureTaps(model, ["0=conv"]) as taps:
        taps(torch.randn(1, 3, 2, 2))
    assert no_hooks(model)

    vit = copy.deepcopy(small_vit).train()
    own = vit.blocks[1].norm2.register_forward_pre_hook(lambda m, args: None)  # the user's hook survives
    before = copy.deepcopy(vit.state_dict())
    with pytest.raises(ForeignError, match="raised AssertionError: .*doesn't match model"):
        FeatureTaps(vit)(torch.randn(1, 3, 48, 48))  # wrong size: timm raises inside the forward
    FeatureTaps(vit)(torch.randn(1, 3, 32, 32))
    assert all(m.training for m in vit.modules())
    assert len(vit.blocks[1].norm2._forward_pre_hooks) == 1
    own.remove()
    assert no_hooks(vit)
    for k, v in vit.state_dict().items():
        assert torch.equal(v, before[k])


def test_eval_mode_is_kept(small_vit):
    assert not small_vit.training
    FeatureTaps(small_vit)(torch.randn(1, 3, 32, 32))
    assert not any(m.training for m in small_vit.modules())
    with pytest.raises(LandscapeError, match="match no module"):
        FeatureTaps(small_vit, ["nothing=conv"])
    assert no_hooks(small_vit)


def test_user_taps_read_tokens_on_the_models_own_grid_not_a_guessed_square():
    # CLS + a 3 x 5 patch grid is 16 tokens: a square guess would read it as 4 x 4
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=(12, 20), patch_size=4, depth=2, num_classes=10).eval()
    x = torch.randn(2, 3, 12, 20)
    with torch.no_grad():
        features = FeatureTaps(model, ["blocks.?=msa"])(x)
        t = model._pos_embed(model.patch_embed(x))
        first = model.blocks[0](t)
    assert [f.tensor.shape[-2:] for f in features] == [(3, 5), (3, 5)]
    torch.testing.assert_close(features[0].tensor, tokens_to_nchw(first, 1, 3, 5))


def test_user_taps_on_a_model_without_a_patch_grid_still_take_square_token_maps():
    class Tokens(nn.Module):
        def __init__(self):
            super().__init__()
            self.mix = nn.Linear(3, 3)

        def forward(self, x):
            return self.mix(x.flatten(2).transpose(1, 2))  # (B, H*W, C)

    x = torch.randn(2, 3, 4, 4)
    (feature,) = FeatureTaps(Tokens(), ["mix=mlp"])(x)
    assert feature.tensor.shape == (2, 3, 4, 4)
