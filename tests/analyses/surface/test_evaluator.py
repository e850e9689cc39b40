"""The point evaluator's loop: each point written into one buffer, equal to the plain formula's evaluation; batches
read one at a time."""

import pytest
import torch
from helpers import TrackedBatches, conv_bn_model
from torch import nn

from landscape.analyses.surface import evaluator as E
from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.evaluator import PointEvaluator
from landscape.core.objective import Objective


def _objective() -> Objective:
    model = conv_bn_model()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(13, 1, 6, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (13,), generator=g)
    return Objective(model, [(x[:8], y[:8]), (x[8:], y[8:])])


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


def test_vmap_is_never_tried_on_more_than_the_bound(monkeypatch):
    obj = _objective()
    d = random_directions(obj.params, ndim=2, seed=3)
    ev = PointEvaluator(obj, d.x, d.y)
    size = sum(t.numel() * t.element_size() for t in obj.params.values())
    tried = []
    monkeypatch.setattr(ev, "vectorised", lambda *a, **k: tried.append(1) or [])
    monkeypatch.setattr(E, "VMAP_STACK_BYTES", 4 * size - 1)
    assert not ev.vmap_fits(4) and ev.time_vmap(k=4) is None and not tried  # 4 copies exceed the bound
    monkeypatch.setattr(E, "VMAP_STACK_BYTES", 4 * size)
    assert ev.vmap_fits(4) and ev.time_vmap(k=4) is not None and tried  # at the bound it is timed
    assert not ev.vmap_fits(1)  # one point per call is the loop


@pytest.mark.parametrize("channels_last", [False, True])
def test_points_read_one_batch_at_a_time_in_the_chosen_layout(channels_last):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 10)).eval()
    source = TrackedBatches.synthetic(48, 8, 8)  # 6 batches
    obj = Objective(model, source)
    dx = {n: torch.full_like(p, 0.01) for n, p in obj.params.items()}
    evaluator = PointEvaluator(obj, dx, None)
    if channels_last:
        evaluator.use_channels_last()
        assert evaluator.channels_last and all(
            x.is_contiguous(memory_format=torch.channels_last) for x, _ in evaluator.batches
        )
    before = len(source.alive)
    out = evaluator.loop([(0.0, 0.0), (1.0, 0.0), (-1.0, 0.0)])
    assert len(source.alive) - before == 3 * 6 and source.most <= 2
    assert out[0][0] == pytest.approx(obj.evaluate().loss, rel=1e-6) and out[0][2] == obj.evaluate().accuracy


@pytest.mark.parametrize("name", ["vit_mini", "conv_bn"])
def test_the_exported_loss_reads_only_the_rows_it_needs_and_equals_eager(name, tmp_path):
    """The program a package is built from: a CLS classifier narrowed, a convolutional one left whole."""
    torch.manual_seed(0)
    if name == "vit_mini":
        from landscape.models import create_model

        model = create_model("vit_mini", num_classes=4, depth=2).double().eval()
        x = torch.randn(5, 3, 32, 32, dtype=torch.float64)
        y = torch.randint(0, 4, (5,))
        obj = Objective(model, [(x, y)], determinism="loss")
    else:
        obj = _objective()
    d = random_directions(obj.params, ndim=2, seed=3)
    ev = PointEvaluator(obj, d.x, d.y)
    nodes, narrowed = ev.export(tmp_path / "program.pt2")
    assert (narrowed >= 10) if name == "vit_mini" else (narrowed == 0)
    program = torch.export.load(tmp_path / "program.pt2").module()
    state = ev._point_state(ev.point(torch.tensor(0.3, dtype=torch.float64), torch.tensor(-0.2, dtype=torch.float64)))
    names = sorted(state)
    x, y = obj.batches[0]
    with torch.no_grad():
        loss, hits = program([state[n] for n in names], x.contiguous(), y)
        want_loss, want_hits = ev._batch_eval_state(state, x, y)
    torch.testing.assert_close(loss, want_loss, rtol=1e-13, atol=0)
    assert float(hits) == float(want_hits)
