"""Loss and error along a path, and its barrier, against exact answers; BatchNorm re-estimated per point."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import one_line_error, reestimate_bn
from torch import nn

from landscape.analyses.connect.evaluate import barrier, evaluate_path, point_buffers
from landscape.analyses.connect.path import Endpoint, linear_point
from landscape.core.objective import Objective


def gaussian(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_linear_barrier_of_a_convex_objective_is_zero():
    """Logistic regression: L is convex in the weights, so L(theta(a)) <= (1-a) L_A + a L_B on the whole line."""
    x, y = gaussian(40, 5, seed=0), torch.arange(40) % 3
    batches = [(x[:25], y[:25]), (x[25:], y[25:])]
    model = nn.Linear(5, 3).double()
    a, b = Endpoint.of(model), Endpoint.of(model)
    for i, e in enumerate((a, b)):
        for n, t in e.params.items():
            t.copy_(3 * gaussian(*t.shape, seed=10 + i + len(n)))
    obj = Objective(model, batches)
    curve = evaluate_path(obj, a, b, points=51)
    excess = curve.loss - ((1 - curve.coords) * curve.loss[0] + curve.coords * curve.loss[-1])
    assert excess.max() <= 1e-12
    bar = curve.barrier()
    assert bar.loss <= 1e-12 and bar.loss_at in (0.0, 1.0)
    assert curve.loss[0] > 0 and curve.loss[-1] > 0 and not np.allclose(curve.loss[0], curve.loss[-1])


class Poly(nn.Module):
    """Two parameters p; column 0 of the output is the loss f(p) = p0 - p0^3 + 1.5 p1 for every sample, column 1
    is f(p) + q(p) with q = -(p0 - 1/4)(p0 - 3/4), so class 1 (wrong: every label is 0) wins where q > 0."""

    def __init__(self, p):
        super().__init__()
        self.p = nn.Parameter(torch.tensor(p, dtype=torch.float64))

    def forward(self, x):
        p0, p1 = self.p[0], self.p[1]
        f = p0 - p0**3 + 1.5 * p1
        q = -(p0 - 0.25) * (p0 - 0.75)
        return torch.stack([f, f + q]).expand(x.shape[0], 2)


def first_column(out, y):
    return out[:, 0].mean()


def test_barrier_and_its_alpha_equal_the_closed_form():
    """From (0, 0) to (1, 2): L(a) = 4a - a^3, ends 0 and 3, excess a - a^3, peak 2 / (3 sqrt 3) at 1 / sqrt 3."""
    batches = [(torch.zeros(3, 1, dtype=torch.float64), torch.zeros(3, dtype=torch.long))]
    obj = Objective(Poly([0.0, 0.0]), batches, criterion=first_column)
    a, b = Endpoint.of(Poly([0.0, 0.0])), Endpoint.of(Poly([1.0, 2.0]))
    star = 1 / math.sqrt(3)
    curve = evaluate_path(obj, a, b, points=[0.0, 0.2, star, 0.8, 1.0])
    np.testing.assert_allclose(curve.loss, 4 * curve.coords - curve.coords**3, rtol=1e-14, atol=1e-15)
    bar = curve.barrier()
    assert bar.loss == pytest.approx(2 / (3 * math.sqrt(3)), rel=1e-14) and bar.loss_at == star
    # on an even grid: the closed form's largest value on the grid, where the grid has it
    grid = evaluate_path(obj, a, b, points=101, bn="eval")
    excess = grid.coords - grid.coords**3
    assert grid.barrier().loss == pytest.approx(excess.max(), rel=1e-13)
    assert grid.barrier().loss_at == grid.coords[np.argmax(excess)] == 0.58
    # the error: 1 on (1/4, 3/4), 0 at the ends: barrier 1 at the first grid point inside
    eleven = evaluate_path(obj, a, b, points=11)
    np.testing.assert_array_equal(eleven.error, [0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0])
    bar = eleven.barrier()
    assert bar.error == 1.0 and bar.error_at == eleven.coords[3]


def test_barrier_function():
    assert barrier([0, 0.5, 1], [1.0, 3.0, 2.0]) == (1.5, 0.5)
    assert barrier([0, 0.5, 1], [1.0, 1.0, 2.0]) == (0.0, 0.0)  # below the line: the ends' zero
    value, at = barrier([0, 0.5, 1], [0.0, math.nan, 0.0])
    assert math.isnan(value) and at == 0.5
    one_line_error(barrier, [0.1, 1.0], [0.0, 0.0], match="both ends")
    one_line_error(barrier, [0.0, 1.0], [0.0], match="one value per point")


def bn_net():
    return nn.Sequential(
        nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 4)
    ).double()


def trained_buffers(model, seed):
    """Give the BatchNorm layer running statistics of its own (a few train-mode passes on random data)."""
    model.train()
    with torch.no_grad():
        for i in range(3):
            model(2 * gaussian(5, 1, 6, 6, seed=seed + i) + seed)
    return model.eval()


def test_bn_recompute_equals_a_reference_re_estimation_of_the_interpolated_network():
    torch.manual_seed(0)
    model_a, model_b = trained_buffers(bn_net(), 1), trained_buffers(bn_net(), 2)
    x, y = gaussian(11, 1, 6, 6, seed=5), torch.arange(11) % 4
    batches = [(x[:4], y[:4]), (x[4:9], y[4:9]), (x[9:], y[9:])]
    obj = Objective(model_a, batches)
    a, b = Endpoint.of(model_a), Endpoint.of(model_b)
    assert not torch.allclose(a.buffers["1.running_mean"], b.buffers["1.running_mean"])
    alpha = 0.3
    point = linear_point(a, b, alpha)
    got = point_buffers(obj, point, "recompute")
    ref = copy.deepcopy(model_a)
    with torch.no_grad():
        for n, p in ref.named_parameters():
            p.copy_((1 - alpha) * a.params[n] + alpha * b.params[n])
    reestimate_bn(ref, batches)  # cumulative average over the batches, in train mode
    for n, t in ref.named_buffers():
        torch.testing.assert_close(got[n], t, rtol=1e-12, atol=1e-14)
    # the path's loss at alpha is that network's, in eval mode
    curve = evaluate_path(obj, a, b, points=[0.0, alpha, 1.0])
    with torch.no_grad():
        want = sum(len(by) / 11 * float(F.cross_entropy(ref(bx), by)) for bx, by in batches)
    assert curve.loss[1] == pytest.approx(want, rel=1e-12)
    # eval: the ends' statistics interpolated
    kept = point_buffers(obj, point, "eval")
    for n in ("1.running_mean", "1.running_var"):
        torch.testing.assert_close(kept[n], (1 - alpha) * a.buffers[n] + alpha * b.buffers[n], rtol=0, atol=1e-15)
    evald = evaluate_path(obj, a, b, points=[0.0, alpha, 1.0], bn="eval")
    assert evald.loss[1] != pytest.approx(curve.loss[1], rel=1e-6)  # the statistics matter here
    # nothing given was changed
    assert torch.equal(model_a[1].running_mean, a.buffers["1.running_mean"])
    assert not model_a.training
    one_line_error(evaluate_path, obj, a, b, bn="train", match="unknown BatchNorm mode")
