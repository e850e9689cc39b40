"""Paper B's models: the ring ViT with relative position bias and its shift-attention CNN counterpart."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import landscape.models.vit_rpe  # noqa: F401  (registers the models)
from landscape.errors import LandscapeError
from landscape.models import count_parameters, create_model, list_models
from landscape.models.conv_attention import neighbour_offsets
from landscape.models.vit_rpe import RingAttention, ShiftAttention

NAMES = ["convvit_mini", "convvit_ti", "vit_rpe_mini", "vit_rpe_ti"]


def test_registered_and_cpu_models_are_small() -> None:
    assert set(NAMES) <= set(list_models())
    for name in ("vit_rpe_mini", "convvit_mini"):
        model = create_model(name, in_chans=1)
        assert count_parameters(model) <= 300_000
        assert all(blk.attn.num_heads >= 9 for blk in model.blocks)
        assert model(torch.randn(2, 1, 32, 32)).shape == (2, 10)


def test_shift_attention_is_a_3x3_convolution_on_the_token_grid() -> None:
    torch.manual_seed(0)
    dim, heads, head_dim, H, W = 6, 9, 2, 4, 5
    layer = ShiftAttention(dim, heads, head_dim, qkv_bias=True, grid_size=(H, W)).double()
    x = torch.randn(3, 1 + H * W, dim, dtype=torch.float64)
    out = layer(x)
    # reference: conv2d with kernel[:, :, 1 + dy, 1 + dx] = W_O^h W_V^h for head h at offset (dy, dx)
    wv = layer.v.weight.view(heads, head_dim, dim)
    wo = layer.proj.weight.view(dim, heads, head_dim)
    kernel = torch.zeros(dim, dim, 3, 3, dtype=torch.float64)
    for h, (dy, dx) in enumerate(neighbour_offsets(1)):
        kernel[:, :, 1 + dy, 1 + dx] = wo[:, h] @ wv[h]
    grid = x[:, 1:].transpose(1, 2).reshape(3, dim, H, W)
    # the value bias is shifted too, so it is zero outside the grid: convolve a map of ones for it
    vb = layer.v.bias.view(heads, head_dim)
    bias_kernel = torch.zeros(dim, 1, 3, 3, dtype=torch.float64)
    for h, (dy, dx) in enumerate(neighbour_offsets(1)):
        bias_kernel[:, 0, 1 + dy, 1 + dx] = wo[:, h] @ vb[h]
    ones = torch.ones(1, 1, H, W, dtype=torch.float64)
    ref = F.conv2d(grid, kernel, padding=1) + F.conv2d(ones, bias_kernel, padding=1) + layer.proj.bias.view(1, -1, 1, 1)
    assert torch.allclose(out[:, 1:].transpose(1, 2).reshape(3, dim, H, W), ref, atol=1e-13)
    # the CLS query reads the mean patch value
    v = layer.v(x)
    assert torch.allclose(out[:, 0], layer.proj(v[:, 1:].mean(1)), atol=1e-13)


def _dense_ring_attention(layer: RingAttention, x: torch.Tensor) -> torch.Tensor:
    """Slow reference: loop over queries/keys with explicit positions, zero ring tokens and table look-ups."""
    H, W = layer.grid_size
    r = layer.ring
    B, N, _ = x.shape
    qkv = layer.qkv(x).view(B, N, 3, layer.num_heads, layer.head_dim)
    q, k, v = qkv.unbind(2)
    keys = [("cls", None)] + [("grid", (i, j)) for i in range(-r, H + r) for j in range(-r, W + r)]
    table, cls_bias = layer.rel_pos.table, layer.rel_pos.cls_bias
    out = torch.zeros(B, N, layer.num_heads, layer.head_dim, dtype=x.dtype)
    for qi in range(N):
        qpos = None if qi == 0 else divmod(qi - 1, W)
        for h in range(layer.num_heads):
            scores, values = [], []
            for kind, kpos in keys:
                inside = kind == "grid" and 0 <= kpos[0] < H and 0 <= kpos[1] < W
                kidx = 0 if kind == "cls" else (1 + kpos[0] * W + kpos[1] if inside else None)
                kv = (k[:, kidx, h], v[:, kidx, h]) if kidx is not None else (torch.zeros_like(k[:, 0, h]),) * 2
                if qpos is None:  # CLS query
                    if kind == "grid" and not inside:
                        continue
                    b = cls_bias[h, 2] if kind == "cls" else cls_bias[h, 0]
                else:
                    b = (
                        cls_bias[h, 1]
                        if kind == "cls"
                        else table[h, layer.rel_pos.offset_index(kpos[0] - qpos[0], kpos[1] - qpos[1])]
                    )
                scores.append((q[:, qi, h] * kv[0]).sum(-1) * layer.scale + b)
                values.append(kv[1])
            a = torch.stack(scores, -1).softmax(-1)
            out[:, qi, h] = (a[..., None] * torch.stack(values, 1)).sum(1)
    return layer.proj(out.reshape(B, N, -1))


@pytest.mark.parametrize("ring", [0, 1, 2])
def test_ring_attention_matches_a_dense_reference(ring: int) -> None:
    torch.manual_seed(1)
    layer = RingAttention(8, 4, 3, qkv_bias=True, grid_size=(3, 2), ring=ring).double()
    with torch.no_grad():
        layer.rel_pos.table.normal_()
        layer.rel_pos.cls_bias.normal_()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    assert torch.allclose(layer(x), _dense_ring_attention(layer, x), atol=1e-12)


def test_ring_zero_equals_the_zoo_rpe_vit() -> None:
    torch.manual_seed(2)
    ring_vit = create_model("vit_rpe_mini", in_chans=1, ring=0, depth=2).double().eval()
    zoo_vit = (
        create_model("vit_mini", in_chans=1, pos_embed="rpe", depth=2, num_heads=9, head_dim=8, embed_dim=72)
        .double()
        .eval()
    )
    with torch.no_grad():
        for p in ring_vit.parameters():
            p.normal_(0, 0.3)
    zoo_vit.load_state_dict(ring_vit.state_dict())
    x = torch.randn(2, 1, 32, 32, dtype=torch.float64)
    assert torch.allclose(ring_vit(x), zoo_vit(x), atol=1e-12)


def test_features_and_options() -> None:
    x = torch.randn(1, 1, 32, 32)
    kinds = [f.kind for f in create_model("convvit_mini", in_chans=1).block_features(x)]
    assert kinds == ["embed"] + ["conv", "mlp"] * 4
    kinds = [f.kind for f in create_model("vit_rpe_mini", in_chans=1).block_features(x)]
    assert kinds == ["embed"] + ["msa", "mlp"] * 4
    with pytest.raises(LandscapeError, match="relative position"):
        create_model("vit_rpe_mini", pos_embed="abs")
    with pytest.raises(LandscapeError, match=r"\(2m\+1\)\^2"):
        create_model("convvit_mini", num_heads=8, head_dim=8)
    m = create_model("convvit_mini", in_chans=1, num_heads=25, head_dim=4)  # a 5x5 shift
    assert m(x).shape == (1, 10)
