"""Points as linear combinations: fresh and buffered results equal the plain formulas bit for bit, no new tensors."""

from __future__ import annotations

import pytest
import torch

from landscape.core.combine import PointBuffer, combine


def _dicts(dtype: torch.dtype, seed: int = 0) -> tuple[dict, dict, dict]:
    g = torch.Generator().manual_seed(seed)
    shapes = {"conv.weight": (4, 3, 3, 3), "conv.bias": (4,), "fc.weight": (10, 36)}
    make = lambda: {n: torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for n, s in shapes.items()}  # noqa: E731
    return make(), make(), make()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_plane_point_equals_the_formula(dtype: torch.dtype) -> None:
    theta, dx, dy = _dicts(dtype)
    buffer = PointBuffer(theta)
    for a, b in [(0.3, -0.7), (-1.0, 2.5e-3), (0.0, 0.0)]:
        ta, tb = torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype)
        want = {n: (t + ta * dx[n]) + tb * dy[n] for n, t in theta.items()}
        terms = [(None, theta), (ta, dx), (tb, dy)]
        for got in (combine(terms), combine(terms, buffer)):
            assert list(got) == list(want)
            assert all(torch.equal(got[n], want[n]) for n in want)


def test_path_points_equal_the_formulas() -> None:
    a, c, b = _dicts(torch.float32, seed=1)
    buffer = PointBuffer(a)
    for t in (0.0, 0.25, 1 / 3, 1.0):
        line = {n: (1.0 - t) * x + t * b[n] for n, x in a.items()}
        wa, wc, wb = (1 - t) ** 2, 2 * t * (1 - t), t**2
        curve = {n: wa * x + wc * c[n] + wb * b[n] for n, x in a.items()}
        for want, terms in ((line, [(1.0 - t, a), (t, b)]), (curve, [(wa, a), (wc, c), (wb, b)])):
            assert all(torch.equal(combine(terms)[n], want[n]) for n in want)
            assert all(torch.equal(combine(terms, buffer)[n], want[n]) for n in want)


def test_scaled_term_equals_the_sharpness_formula() -> None:
    w, eps, c = _dicts(torch.float32, seed=2)
    c = {n: t.abs() for n, t in c.items()}
    buffer = PointBuffer(w)
    for rho in (0.01, 0.37):
        z = {n: rho * e for n, e in eps.items()}
        for sign in (1.0, -1.0):
            want = {n: w[n] + sign * c[n] * z[n] for n in w}  # the formula as the measures wrote it
            got = combine([(None, w), (sign * rho, eps, c)], buffer)
            assert all(torch.equal(got[n], want[n]) for n in w)
    first = combine([(None, eps, c), (1.0, w)])
    assert all(torch.equal(first[n], eps[n] * c[n] + w[n]) for n in w)
    assert all(torch.equal(combine([(None, eps, c), (1.0, w)], buffer)[n], first[n]) for n in w)


def test_buffer_is_rewritten_in_place() -> None:
    theta, dx, dy = _dicts(torch.float32)
    buffer = PointBuffer(theta)
    ptrs = {n: t.data_ptr() for n, t in buffer.tensors.items()}
    scratch = {k: t.data_ptr() for k, t in buffer._scratch.items()}
    seen = []
    for a in (0.1, 0.2, 0.3):
        got = combine([(None, theta), (a, dx), (-a, dy)], buffer)
        assert got is buffer.tensors
        assert {n: t.data_ptr() for n, t in got.items()} == ptrs
        seen.append(got["fc.weight"].clone())
    assert {k: t.data_ptr() for k, t in buffer._scratch.items()} == scratch
    assert not torch.equal(seen[0], seen[2])  # each point overwrote the one before
    # one scratch tensor per dtype and device, of the largest parameter's size
    assert [(k, t.numel()) for k, t in buffer._scratch.items()] == [((torch.float32, torch.device("cpu")), 360)]


def test_buffer_works_in_and_out_of_inference_mode() -> None:
    theta, dx, _ = _dicts(torch.float32)
    with torch.inference_mode():
        buffer = PointBuffer(theta)
        inside = combine([(None, theta), (0.5, dx)], buffer)["fc.weight"].clone()
    assert not buffer.tensors["fc.weight"].is_inference()
    with torch.no_grad():
        outside = combine([(None, theta), (0.5, dx)], buffer)["fc.weight"]
    assert torch.equal(inside, outside)


def test_buffer_keeps_the_layout_and_mixed_dtypes() -> None:
    like = {
        "w": torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
        "h": torch.randn(7, dtype=torch.float64),
    }
    buffer = PointBuffer(like)
    assert buffer.tensors["w"].stride() == like["w"].stride()
    assert sorted(t.numel() for t in buffer._scratch.values()) == [7, 120]
    d = {n: torch.ones_like(t) for n, t in like.items()}
    got = combine([(None, like), (2.0, d)], buffer)
    assert all(torch.equal(got[n], like[n] + 2.0 * d[n]) for n in like)


def test_fresh_points_are_differentiable_and_buffered_ones_are_not() -> None:
    a, c, b = _dicts(torch.float64, seed=3)
    leaves = {n: t.clone().requires_grad_(True) for n, t in c.items()}
    t = 0.3
    point = combine([((1 - t) ** 2, a), (2 * t * (1 - t), leaves), (t**2, b)])
    sum(p.sum() for p in point.values()).backward()
    assert all(torch.equal(x.grad, torch.full_like(x, 2 * t * (1 - t))) for x in leaves.values())
    buffered = combine([((1 - t) ** 2, a), (2 * t * (1 - t), leaves), (t**2, b)], PointBuffer(a))
    assert not any(p.requires_grad for p in buffered.values())


def test_stacked_coefficients_give_stacked_points() -> None:
    theta, dx, dy = _dicts(torch.float32)
    a, b = torch.tensor([0.1, -0.4, 2.0]), torch.tensor([0.5, 0.0, -1.5])
    stacked = combine([(None, theta), (a, dx), (b, dy)])
    for k in range(3):
        one = combine([(None, theta), (a[k], dx), (b[k], dy)])
        assert all(stacked[n].shape == (3, *theta[n].shape) and torch.equal(stacked[n][k], one[n]) for n in theta)


def test_no_terms_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one term"):
        combine([])
