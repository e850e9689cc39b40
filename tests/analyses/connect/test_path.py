"""Paths between two networks: exact interpolation, the architecture check, coordinate checks."""

import math

import pytest
import torch
from helpers import one_line_error
from torch import nn

from landscape.analyses.connect.bezier import init_bend
from landscape.analyses.connect.evaluate import evaluate_path, path_coords
from landscape.analyses.connect.path import (
    Endpoint,
    bezier_point,
    check_same_architecture,
    interpolate_buffers,
    linear_point,
    midpoint,
)
from landscape.core.combine import PointBuffer
from landscape.core.objective import Objective


def net(width=3, extra=False, bn=True, track=True):
    layers = [nn.Linear(4, width), nn.BatchNorm1d(width, track_running_stats=track) if bn else nn.Identity()]
    if extra:
        layers.append(nn.Linear(width, 2))
    return nn.Sequential(*layers).double()


def ends(seed=0):
    g = torch.Generator().manual_seed(seed)
    a, b = Endpoint.of(net()), Endpoint.of(net())
    for e in (a, b):
        for t in (*e.params.values(), e.buffers["1.running_mean"]):
            t.copy_(torch.randn(t.shape, generator=g, dtype=t.dtype))
        e.buffers["1.running_var"].copy_(torch.rand(3, generator=g, dtype=torch.float64) + 0.5)
    b.buffers["1.num_batches_tracked"].fill_(7)
    return a, b


def test_linear_and_bezier_points_are_exact_at_the_ends_and_follow_the_formulas():
    a, b = ends()
    for alpha in (0.0, 1.0):
        p = linear_point(a, b, alpha)
        src = a if alpha == 0.0 else b
        for n in a.params:
            assert torch.equal(p.params[n], src.params[n])
        for n in a.buffers:
            assert torch.equal(p.buffers[n], src.buffers[n])
    p = linear_point(a, b, 0.25)
    for n in a.params:
        torch.testing.assert_close(p.params[n], 0.75 * a.params[n] + 0.25 * b.params[n], rtol=0, atol=1e-15)
    assert int(p.buffers["1.num_batches_tracked"]) == 0  # the nearer end's integer buffer
    assert int(linear_point(a, b, 0.75).buffers["1.num_batches_tracked"]) == 7
    bend = {n: torch.full_like(t, 2.0) for n, t in a.params.items()}
    t = 0.3
    q = bezier_point(a, bend, b, t)
    for n in a.params:
        want = (1 - t) ** 2 * a.params[n] + 2 * t * (1 - t) * bend[n] + t**2 * b.params[n]
        torch.testing.assert_close(q.params[n], want, rtol=0, atol=1e-15)
    # the curve's buffers: phi(t)'s weights with a bend buffer at the midpoint, i.e. linear in t
    mid = {n: (a.buffers[n] + b.buffers[n]) / 2 for n in ("1.running_mean", "1.running_var")}
    for n, m in mid.items():
        want = (1 - t) ** 2 * a.buffers[n] + 2 * t * (1 - t) * m + t**2 * b.buffers[n]
        torch.testing.assert_close(q.buffers[n], want, rtol=1e-15, atol=1e-15)
    for n, m in midpoint(a.params, b.params).items():
        torch.testing.assert_close(m, (a.params[n] + b.params[n]) / 2, rtol=0, atol=0)


def test_points_written_into_a_buffer_equal_new_ones_and_reuse_its_tensors():
    a, b = ends()
    bend = {n: torch.full_like(t, 2.0) for n, t in a.params.items()}
    buffer = PointBuffer(a.params)
    ptrs = [t.data_ptr() for t in buffer.tensors.values()]
    for c in (0.0, 0.3, 0.5, 1.0):
        for make in (lambda buf, c=c: linear_point(a, b, c, buf), lambda buf, c=c: bezier_point(a, bend, b, c, buf)):
            fresh, kept = make(None), make(buffer)
            assert kept.params is buffer.tensors and [t.data_ptr() for t in kept.params.values()] == ptrs
            assert all(torch.equal(kept.params[n], fresh.params[n]) for n in a.params)
            assert all(torch.equal(kept.buffers[n], fresh.buffers[n]) for n in a.buffers)


def test_inputs_are_never_changed():
    a, b = ends()
    before = [t.clone() for t in (*a.params.values(), *a.buffers.values(), *b.params.values())]
    linear_point(a, b, 0.5)
    bezier_point(a, midpoint(a.params, b.params), b, 0.5)
    interpolate_buffers(a.buffers, b.buffers, 0.5)
    after = [*a.params.values(), *a.buffers.values(), *b.params.values()]
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    model = net()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    e = Endpoint.of(model)
    e.params["0.weight"].add_(1.0)  # a copy: the module keeps its weights
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_architecture_mismatch_is_one_line_naming_the_first_mismatch():
    a = Endpoint.of(net())
    msg = one_line_error(check_same_architecture, a, Endpoint.of(net(width=5)))
    assert "parameter '0.weight' has shape (3, 4) in theta_A but (5, 4) in theta_B" in msg
    msg = one_line_error(check_same_architecture, a, Endpoint.of(net(extra=True)))
    assert "parameter '2.weight' is in theta_B but not in theta_A" in msg
    msg = one_line_error(check_same_architecture, Endpoint.of(net(extra=True)), a)
    assert "parameter '2.weight' is in theta_A but not in theta_B" in msg
    msg = one_line_error(check_same_architecture, a, Endpoint.of(net(track=False)))
    assert "buffer '1.running_mean' is in theta_A but not in theta_B" in msg
    # through the public entry points
    one_line_error(init_bend, a, Endpoint.of(net(width=5)), match="'0.weight' has shape")
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    obj = Objective(net(), [(x, torch.zeros(6, dtype=torch.long))])
    msg = one_line_error(evaluate_path, obj, Endpoint.of(net(width=5)), Endpoint.of(net(width=5)))
    assert "the objective's model" in msg and "(3, 4)" in msg and "(5, 4)" in msg
    bad_bend = {"0.weight": torch.zeros(3, 4, dtype=torch.float64)}
    msg = one_line_error(evaluate_path, obj, a, Endpoint.of(net()), bend=bad_bend)
    assert "'0.bias' is in theta_A but not in the bend" in msg


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan, math.inf])
def test_coordinates_outside_the_path_are_one_line_errors(bad):
    a, b = ends()
    one_line_error(linear_point, a, b, bad, match="alpha")
    one_line_error(bezier_point, a, a.params, b, bad, match="t must")
    one_line_error(path_coords, [0.0, bad, 1.0], match="path coordinate")


def test_path_coordinates():
    assert path_coords(3).tolist() == [0.0, 0.5, 1.0]
    assert path_coords([1.0, 0.2, 0.0, 0.2]).tolist() == [0.0, 0.2, 1.0]
    one_line_error(path_coords, 1, match="at least 2")
    one_line_error(path_coords, [0.0, 0.5], match="both ends")
    one_line_error(path_coords, True)
