"""Paper B's construction: attention == convolution, error vs sharpness, and the head lower bound."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from landscape.errors import LandscapeError
from landscape.models.conv_attention import (
    best_fit_fewer_heads,
    construction_error,
    conv_to_attention,
    fit_heads,
    head_lower_bound,
    heads_needed,
    neighbour_offsets,
    neighbourhood_blocks,
    ring_width,
)

# (in, out, kernel, patch, stride, height, width, bias)
CASES = [
    (3, 4, 3, 2, 1, 8, 6, True),
    (2, 3, 5, 2, 2, 8, 8, False),
    (1, 1, 3, 4, 1, 8, 12, True),
    (2, 5, 3, 4, 4, 12, 8, True),
    (3, 2, 9, 4, 2, 8, 16, False),
    (2, 3, 7, 2, 1, 6, 10, True),  # K > 2P + 1: 25 heads
    (1, 3, 3, 1, 1, 5, 7, True),  # pixel input: K^2 heads
    (2, 2, 5, 1, 1, 6, 6, False),
    (3, 3, 1, 2, 2, 4, 6, True),
]


def _conv(c_in: int, c_out: int, k: int, stride: int, bias: bool, seed: int) -> nn.Conv2d:
    torch.manual_seed(seed)
    conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=bias).double()
    with torch.no_grad():
        conv.weight.normal_()
        if bias:
            conv.bias.normal_()
    return conv


@pytest.mark.parametrize("case", CASES)
def test_attention_equals_conv2d_borders_included(case: tuple) -> None:
    c_in, c_out, k, p, s, h, w, bias = case
    conv = _conv(c_in, c_out, k, s, bias, seed=len(CASES) + k + p)
    x = torch.randn(3, c_in, h, w, dtype=torch.float64)
    layer = conv_to_attention(conv, p, sharpness=60.0)
    ref = F.conv2d(x, conv.weight, conv.bias, stride=s, padding=k // 2)
    out = layer(x)
    assert out.shape == ref.shape
    assert layer.num_heads == (2 * math.ceil((k // 2) / p) + 1) ** 2 == heads_needed(k, p)
    assert (out - ref).abs().max() <= 1e-5 * ref.abs().max()
    # the border rows/columns specifically (where a ring-less softmax would be wrong by O(1))
    edge = torch.zeros_like(ref, dtype=torch.bool)
    edge[..., 0, :] = edge[..., -1, :] = edge[..., :, 0] = edge[..., :, -1] = True
    assert (out - ref)[edge].abs().max() <= 1e-10 * ref.abs().max()


def test_heads_count_for_patch_and_pixel_input() -> None:
    assert heads_needed(3, 2) == heads_needed(5, 2) == heads_needed(9, 4) == 9
    assert heads_needed(7, 2) == 25 and heads_needed(5, 1) == 25 and heads_needed(3, 1) == 9
    assert heads_needed(1, 3) == 1
    assert neighbour_offsets(1)[0] == (-1, -1) and neighbour_offsets(1)[4] == (0, 0)
    assert ring_width(11, 2) == 3


def test_without_zero_ring_the_border_is_wrong() -> None:
    conv = _conv(2, 2, 3, 1, True, seed=1)
    x = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    ref = conv(x)
    layer = conv_to_attention(conv, 2, sharpness=60.0)
    assert (layer(x) - ref).abs().max() < 1e-12
    layer.ring = 0  # keys over the grid only: a border query's missing neighbour is replaced by real patches
    err = (layer(x) - ref).abs()
    assert err[..., 2:-2, 2:-2].max() < 1e-12  # interior queries (patch rows/cols 1..2) are unaffected
    assert err[..., :2, :].max() > 0.1 * ref.abs().max()  # the top patch row is wrong by O(1)


@pytest.mark.parametrize("case", [CASES[0], CASES[6], CASES[5]])
def test_error_falls_with_sharpness_and_matches_predicted_leak(case: tuple) -> None:
    c_in, c_out, k, p, s, h, w, bias = case
    conv = _conv(c_in, c_out, k, s, bias, seed=3)
    x = torch.randn(2, c_in, h, w, dtype=torch.float64)
    reports = [construction_error(conv, p, x, sharpness=c) for c in (4.0, 8.0, 12.0, 16.0, 24.0, 40.0)]
    row_l1 = neighbourhood_blocks(conv, p).abs().sum(dim=2).sum(dim=0).max()
    errors = [r.max_abs_error for r in reports]
    assert all(b < a for a, b in zip(errors, errors[1:-1]))
    assert errors[-1] < 1e-12
    for r in reports:
        # gap profile with zero content term: every query leaks exactly (n-1)e^{-c}/(1+(n-1)e^{-c})
        assert r.off_target_mass == pytest.approx(r.predicted_mass, rel=1e-6, abs=1e-15)
        # err_o = sum_h T_h[o] sum_{k != target} a_hk (x_k - x_target), so
        # |err_o| <= 2 * mass * max|x| * sum_h ||T_h[o, :]||_1
        assert r.max_abs_error <= 2 * r.off_target_mass * x.abs().max() * row_l1 * (1 + 1e-9) + 1e-14


def test_error_roughly_proportional_to_leak() -> None:
    conv = _conv(2, 3, 3, 1, False, seed=4)
    x = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    r10, r15 = (construction_error(conv, 2, x, sharpness=c) for c in (10.0, 15.0))
    ratio = r10.max_abs_error / r15.max_abs_error
    assert math.exp(5) * 0.5 < ratio < math.exp(5) * 2


def test_quadratic_profile_also_converges() -> None:
    conv = _conv(2, 2, 3, 1, True, seed=5)
    x = torch.randn(2, 2, 6, 6, dtype=torch.float64)
    assert construction_error(conv, 1, x, 40.0, profile="quadratic").max_rel_error < 1e-12
    assert construction_error(conv, 1, x, 2.0, profile="quadratic").max_rel_error > 1e-4


def test_rejects_what_the_construction_does_not_cover() -> None:
    with pytest.raises(LandscapeError, match="odd"):
        conv_to_attention(nn.Conv2d(1, 1, 2, padding=1), 2)
    with pytest.raises(LandscapeError, match="stride"):
        conv_to_attention(nn.Conv2d(1, 1, 3, stride=3, padding=1), 2)
    with pytest.raises(LandscapeError, match="same"):
        conv_to_attention(nn.Conv2d(1, 1, 3, padding=0), 2)
    with pytest.raises(LandscapeError, match="groups"):
        conv_to_attention(nn.Conv2d(2, 2, 3, padding=1, groups=2), 2)
    layer = conv_to_attention(nn.Conv2d(1, 1, 3, padding=1), 2)
    with pytest.raises(LandscapeError, match="multiple"):
        layer(torch.randn(1, 1, 5, 6))


# ------------------------------------------------------------------------------------------------ lower bound


@pytest.mark.parametrize(
    ("c_in", "c_out", "k", "p", "s"),
    [(3, 4, 3, 2, 1), (2, 3, 5, 2, 2), (4, 4, 3, 1, 1), (2, 2, 9, 4, 2)],
)
def test_fewer_heads_leave_an_error_that_does_not_vanish(c_in: int, c_out: int, k: int, p: int, s: int) -> None:
    conv = _conv(c_in, c_out, k, s, True, seed=6)
    needed = heads_needed(k, p)
    torch.manual_seed(7)
    x = torch.randn(96, c_in, 5 * p, 5 * p, dtype=torch.float64)
    bound = head_lower_bound(conv, p, needed - 1)
    assert bound > 0.01  # generic kernels: the per-offset maps span `needed` dimensions
    assert head_lower_bound(conv, p, needed) < 1e-12
    best, subset = best_fit_fewer_heads(conv, p, needed - 1, x)
    assert len(subset) == needed - 1
    # one-hot heads on any 8 of the 9 offsets (K^2 - 1 for pixels) are one of the layers the bound covers;
    # in-sample least squares can only beat the population bound by the fitted degrees of freedom
    assert best > 0.8 * bound
    assert fit_heads(conv, p, neighbour_offsets(ring_width(k, p)), x) < 1e-12


def test_lower_bound_grows_as_heads_are_removed() -> None:
    conv = _conv(3, 3, 3, 1, True, seed=8)
    bounds = [head_lower_bound(conv, 2, h) for h in range(10)]
    assert bounds[0] == pytest.approx(1.0)
    assert all(b2 <= b1 + 1e-15 for b1, b2 in zip(bounds, bounds[1:]))
    assert bounds[8] > 0 and bounds[9] < 1e-12


def test_fit_heads_refuses_too_little_data() -> None:
    conv = _conv(2, 2, 3, 1, True, seed=9)
    with pytest.raises(LandscapeError, match="interior queries"):
        fit_heads(conv, 2, neighbour_offsets(1)[:8], torch.randn(1, 2, 8, 8, dtype=torch.float64))
