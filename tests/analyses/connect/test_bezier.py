"""Bezier bend training: a circle of minima, exact resumption, the seeded t, train-mode BatchNorm, bad options."""

import copy
import io
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import one_line_error
from torch import nn

from landscape.analyses.connect.bezier import BendState, epoch_generator, init_bend, train_bend, train_bend_epoch
from landscape.analyses.connect.evaluate import evaluate_path
from landscape.analyses.connect.path import Endpoint, bezier
from landscape.core.objective import Objective


class Circle(nn.Module):
    """Loss (u^2 + v^2 - 1)^2 (1 + v/2) of the two parameters (u, v): zero exactly on the unit circle.

    The factor (1 + v/2) is 1 on the line v = 0 and positive near the circle; it breaks the mirror symmetry
    v -> -v, without which the bend, starting at the midpoint (0, 0) of two antipodal minima on that line, would
    get no gradient off the line and stay on it.
    """

    def __init__(self, p):
        super().__init__()
        self.p = nn.Parameter(torch.tensor(p, dtype=torch.float64))

    def forward(self, x):
        u, v = self.p[0], self.p[1]
        return ((u * u + v * v - 1) ** 2 * (1 + v / 2)).expand(x.shape[0], 1)


def mean_output(out, y):
    return out.mean()


def circle_problem(batches=16):
    data = [(torch.zeros(2, 1, dtype=torch.float64), torch.zeros(2, dtype=torch.long)) for _ in range(batches)]
    model_a, model_b = Circle([-1.0, 0.0]), Circle([1.0, 0.0])
    obj = Objective(model_a, data, criterion=mean_output)
    return obj, Endpoint.of(model_a), Endpoint.of(model_b)


def test_line_between_antipodal_minima_has_barrier_one_and_the_trained_curve_almost_none():
    obj, a, b = circle_problem()
    line = evaluate_path(obj, a, b, points=21)
    assert line.loss[0] == 0.0 and line.loss[-1] == 0.0
    bar = line.barrier()
    assert bar.loss == 1.0 and bar.loss_at == 0.5  # the line passes through the centre, L = 1
    state = train_bend(obj, a, b, epochs=20, lr=0.1, momentum=0.9, seed=0)
    assert state.epoch == 20 and len(state.history) == 20
    curve = evaluate_path(obj, a, b, bend=state.bend, points=41)
    assert curve.kind == "bezier" and curve.loss[0] == 0.0 and curve.loss[-1] == 0.0
    assert curve.barrier().loss < 0.05
    assert abs(float(state.bend["p"][1])) > 1.5  # the bend left the line (phi(1/2) = bend / 2 near the circle)


def test_resumed_training_equals_an_uninterrupted_run_bit_for_bit():
    obj, a, b = circle_problem(batches=5)
    options = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3, "seed": 3}
    seen = []
    straight = train_bend(obj, a, b, epochs=3, on_epoch=lambda s: seen.append(s.epoch), **options)
    assert seen == [1, 2, 3]
    saved = []
    train_bend(obj, a, b, epochs=2, on_epoch=lambda s: saved.append(s.state_dict()), **options)
    buffer = io.BytesIO()
    torch.save(saved[-1], buffer)  # a checkpoint of the caller's: plain data, read back with weights_only
    buffer.seek(0)
    state = BendState.from_state_dict(torch.load(buffer, weights_only=True))
    resumed = train_bend_epoch(obj, a, b, state, **options)
    assert resumed.epoch == 3 and resumed.history == straight.history
    assert torch.equal(resumed.bend["p"], straight.bend["p"])
    assert torch.equal(resumed.momentum["p"], straight.momentum["p"])
    assert train_bend(obj, a, b, epochs=3, state=straight, **options) is straight  # nothing left to do
    other = train_bend(obj, a, b, epochs=3, **{**options, "seed": 4})
    assert not torch.equal(other.bend["p"], straight.bend["p"])


def test_global_random_state_is_neither_used_nor_changed():
    obj, a, b = circle_problem(batches=4)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = train_bend(obj, a, b, epochs=2, lr=0.05, seed=1)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(456)
    second = train_bend(obj, a, b, epochs=2, lr=0.05, seed=1)
    assert torch.equal(first.bend["p"], second.bend["p"])


def bn_net():
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2)).double()


def test_one_step_is_sgd_on_the_train_mode_batchnorm_loss_at_the_seeded_t():
    torch.manual_seed(0)
    model_a, model_b = bn_net(), bn_net()
    before = copy.deepcopy(model_a.state_dict())
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.tensor([0, 1, 1, 0, 1, 0])
    obj = Objective(model_a, [(x, y)])
    a, b = Endpoint.of(model_a), Endpoint.of(model_b)
    lr, seed = 0.1, 7
    state = train_bend_epoch(obj, a, b, init_bend(a, b), lr=lr, momentum=0.0, seed=seed)
    # the reference: t drawn as the epoch draws it, the loss of phi(t) with BatchNorm in train mode
    gen = epoch_generator(seed, 0)
    torch.randperm(1, generator=gen)
    t = float(torch.rand(1, generator=gen, dtype=torch.float64))
    bend = {n: ((a.params[n] + b.params[n]) / 2).requires_grad_(True) for n in a.params}
    ref = copy.deepcopy(model_a).train()
    phi = bezier(a.params, bend, b.params, t)
    loss = F.cross_entropy(torch.func.functional_call(ref, phi, (x,)), y)
    grads = torch.autograd.grad(loss, list(bend.values()))
    for (n, c), gr in zip(bend.items(), grads):
        torch.testing.assert_close(state.bend[n], c.detach() - lr * gr, rtol=1e-12, atol=1e-14)
    assert state.history == [pytest.approx(float(loss.detach()), rel=1e-12)]
    # the caller's networks, and the objective's own copy, are as they were
    assert all(torch.equal(v, before[k]) for k, v in model_a.state_dict().items())
    assert not any(m.training for m in obj.module.modules())


@pytest.mark.parametrize(
    "options, match",
    [
        ({"lr": math.nan}, "lr must be a finite number"),
        ({"lr": 0.0}, "lr must be a finite number > 0"),
        ({"lr": 0.1, "momentum": 1.0}, "momentum must lie in"),
        ({"lr": 0.1, "weight_decay": -1.0}, "weight_decay"),
        ({"lr": 0.1, "seed": -1}, "seed must be a whole number"),
        ({"lr": 0.1, "epochs": 0}, "epochs must be a whole number"),
    ],
)
def test_bad_options_are_one_line_errors(options, match):
    obj, a, b = circle_problem(batches=2)
    one_line_error(train_bend, obj, a, b, **{"epochs": 1, **options}, match=match)


def test_divergence_and_bad_states_are_one_line_errors():
    obj, a, b = circle_problem(batches=4)
    one_line_error(train_bend, obj, a, b, epochs=3, lr=1e6, momentum=0.0, match="diverged")
    done = train_bend(obj, a, b, epochs=2, lr=0.01)
    one_line_error(train_bend, obj, a, b, epochs=1, lr=0.01, state=done, match="more than epochs")
    one_line_error(BendState.from_state_dict, {"epoch": 1, "bend": {}, "momentum": {}}, match="history")
