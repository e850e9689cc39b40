import pytest
import torch
from helpers import TrackedBatches
from torch import nn

from landscape.analyses.surface.evaluator import PointEvaluator
from landscape.core.objective import Objective


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
