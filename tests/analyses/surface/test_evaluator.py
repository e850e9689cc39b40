"""The point evaluator's loop: each point written into one buffer, equal to the plain formula's evaluation."""

import torch
from torch import nn

from landscape.analyses.surface import evaluator as E
from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.evaluator import PointEvaluator
from landscape.core.objective import Objective


def _objective() -> Objective:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(48, 4)).double()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(13, 1, 6, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (13,), generator=g)
    return Objective(model.eval(), [(x[:8], y[:8]), (x[8:], y[8:])])


def test_loop_reuses_one_buffer_and_equals_the_formula():
    obj = _objective()
    d = random_directions(obj.params, ndim=2, seed=3)
    ev = PointEvaluator(obj, d.x, d.y)
    points = [(0.5, -0.25), (-1.0, 0.75), (0.0, 0.0)]
    got = ev.loop(points)
    for (a, b), values in zip(points, got):
        at = {
            n: t + torch.tensor(a, dtype=t.dtype) * d.x[n] + torch.tensor(b, dtype=t.dtype) * d.y[n]
            for n, t in obj.params.items()
        }
        want = obj.evaluate(at)
        assert values == (want.loss, want.data_loss, want.accuracy)
    first = ev.point(torch.tensor(0.5, dtype=torch.float64), torch.tensor(0.1, dtype=torch.float64))
    ptrs = [t.data_ptr() for t in first.values()]
    second = ev.point(torch.tensor(-0.5, dtype=torch.float64), torch.tensor(0.2, dtype=torch.float64))
    assert second is first and [t.data_ptr() for t in second.values()] == ptrs
    assert all(t.data_ptr() not in ptrs for t in obj.params.values())  # the centre is never written


def test_auto_never_stacks_more_than_the_bound(monkeypatch):
    obj = _objective()
    d = random_directions(obj.params, ndim=2, seed=3)
    ev = PointEvaluator(obj, d.x, d.y)
    size = sum(t.numel() * t.element_size() for t in obj.params.values())
    tried = []
    monkeypatch.setattr(ev, "vectorised", lambda *a, **k: tried.append(1) or [])
    monkeypatch.setattr(E, "VMAP_STACK_BYTES", 4 * size - 1)
    assert ev.choose_batch_points(k=4) == 1 and not tried  # 4 copies exceed the bound: vmap is not even tried
    monkeypatch.setattr(E, "VMAP_STACK_BYTES", 4 * size)
    ev.choose_batch_points(k=4, repeats=1)
    assert tried  # at the bound it is timed
