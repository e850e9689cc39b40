"""The worst case's ascent: it reaches the maximum of a long restarted ascent, and the best vertex of a small box."""

import itertools
import math

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from landscape.analyses.sharpness.ascent import ascend, checkpoints
from landscape.analyses.sharpness.measures import worst_sharpness
from landscape.core.objective import Objective
from landscape.errors import LandscapeError

F64 = torch.float64
RADII = (0.02, 0.05, 0.1, 0.2)


def seeded(net, seed):
    g = torch.Generator().manual_seed(seed)
    net = net.to(F64)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64) * 0.6)
    return net


def mlp(activation, seed):
    layers = [nn.Linear(4, 12), activation(), nn.Linear(12, 12), activation(), nn.Linear(12, 3)]
    return seeded(nn.Sequential(*layers), seed)


def cnn(seed):
    convs = [nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 3)]
    return seeded(nn.Sequential(*convs), seed)


def batch(shape, seed=3, size=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(size, *shape, generator=g, dtype=F64), torch.randint(0, 3, (size,), generator=g)


def reference_worst(net, x, y, rho, *, steps=200, starts=6, seed=11):
    """max over ||z||_inf <= rho of CE(w + |w| z) - CE(w): signed-gradient ascent, geometrically shrinking steps.

    ``starts`` uniform random starts in the cube run together (vmap), ``steps`` iterations each (1200 gradients,
    13x the package's default 92), step ``rho / 2`` shrinking to ``rho / 200``; the best loss at any iterate is kept.
    """
    w = {n: p.detach() for n, p in net.named_parameters()}

    def rise(z):
        moved = {n: w[n] + w[n].abs() * z[n] for n in w}
        return nn.functional.cross_entropy(functional_call(net, moved, (x,)), y)

    base = float(rise({n: torch.zeros_like(t) for n, t in w.items()}))
    g = torch.Generator().manual_seed(seed)
    z = {n: (torch.rand(starts, *t.shape, generator=g, dtype=F64) * 2 - 1) * rho for n, t in w.items()}
    step_and_value = vmap(grad_and_value(rise))
    best = 0.0
    for t in range(steps):
        grads, values = step_and_value(z)
        best = max(best, float(values.max()) - base)
        size = rho * 0.5 * 0.01 ** (t / steps)
        z = {n: (z[n] + size * torch.sign(grads[n])).clamp(-rho, rho) for n in z}
    return max(best, float(vmap(rise)(z).max()) - base)


CASES = {
    "relu-mlp": (lambda: mlp(nn.ReLU, 0), (4,)),
    "gelu-mlp": (lambda: mlp(nn.GELU, 1), (4,)),
    "relu-cnn": (lambda: cnn(2), (1, 6, 6)),
}


def reaches_the_reference(case, radii):
    make, shape = CASES[case]
    net = make()
    x, y = batch(shape)
    est = worst_sharpness(Objective(net, [(x, y)], dtype=F64), radii, p="inf")  # the default settings
    for r, rho in enumerate(radii):
        reference = reference_worst(net, x, y, rho)
        value = float(est.values[0, r])
        assert value >= 0.99 * reference, (case, rho, value, reference)
        # never above a maximum: a value above the long ascent's is still a loss of a point in the box
        assert value <= reference * 1.05, (case, rho, value, reference)


def test_default_linf_ascent_reaches_99_percent_of_a_long_restarted_ascent_relu_mlp():
    reaches_the_reference("relu-mlp", (0.05, 0.2))


@pytest.mark.parametrize("case", list(CASES))
def test_default_linf_ascent_reaches_99_percent_of_a_long_restarted_ascent(case):
    reaches_the_reference(case, RADII)


class LinearSquares(nn.Module):
    """``f(x) = x . v`` with three parameters; under MSE the loss is convex in ``v``."""

    def __init__(self, v):
        super().__init__()
        self.v = nn.Parameter(v.clone())

    def forward(self, x):
        return (x @ self.v).unsqueeze(1)


def squared_error(out, targets):
    return (out - targets).pow(2).mean()


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "plain"])
def test_linf_ascent_equals_the_best_vertex_of_a_convex_loss(adaptive):
    g = torch.Generator().manual_seed(5)
    v = torch.tensor([0.8, -1.3, 0.4], dtype=F64)
    x, t = torch.randn(7, 3, generator=g, dtype=F64), torch.randn(7, 1, generator=g, dtype=F64)
    obj = Objective(LinearSquares(v), [(x, t)], criterion=squared_error, dtype=F64)
    radii = [0.05, 0.3, 1.0]
    est = worst_sharpness(obj, radii, p="inf", adaptive=adaptive, seed=2)
    c = v.abs() if adaptive else torch.ones(3, dtype=F64)
    base = float(((x @ v).unsqueeze(1) - t).pow(2).mean())
    for r, rho in enumerate(radii):
        # convex in z: the maximum over the cube is at one of its 8 vertices
        corners = torch.tensor(list(itertools.product([-rho, rho], repeat=3)), dtype=F64)
        losses = [float(((x @ (v + c * z)).unsqueeze(1) - t).pow(2).mean()) for z in corners]
        assert float(est.values[0, r]) == pytest.approx(max(losses) - base, rel=1e-12)


def test_checkpoints_follow_the_apgd_schedule():
    assert checkpoints(100) == [22, 41, 57, 70, 80, 87, 93, 99]
    assert checkpoints(1) == [1]
    assert all(1 <= k <= 20 for k in checkpoints(20)) and checkpoints(20) == sorted(set(checkpoints(20)))


def test_the_best_iterate_is_kept_and_the_ascent_records_how_it_ended():
    # L(z) = -(z - 0.3)^2 on [-1, 1]: the maximum 0 at z = 0.3 is inside, where sign steps oscillate
    def loss(z):
        return -((z["z"] - 0.3) ** 2).sum()

    base = -(0.3**2)
    end = ascend(loss, [{"z": torch.tensor([-1.0], dtype=F64)}], base, 1.0, math.inf, 40, 2.0)
    assert end.value == pytest.approx(0.09, abs=1e-4)  # the best point is within the final step of 0.3
    assert end.halvings >= 5 and end.step == pytest.approx(2.0 / 2**end.halvings)
    assert 1 <= end.best_iteration <= 40


def test_the_second_restart_counts_its_iterations_after_the_first():
    def loss(z):  # a maximum at z = 1 that a start at z = -1 with a tiny step never reaches
        return (z["z"] ** 3).sum()

    starts = [{"z": torch.tensor([-1.0], dtype=F64)}, {"z": torch.tensor([0.5], dtype=F64)}]
    end = ascend(loss, starts, 0.0, 1.0, math.inf, 10, 0.01)
    assert end.value > 0.5**3 and end.best_iteration > 10


def test_a_non_finite_loss_or_iterate_is_an_error_not_flat():
    def overflowing(z):
        return torch.exp(1e3 * z["z"]).sum()

    with pytest.raises(LandscapeError, match="--rho 1 makes the perturbed loss"):
        ascend(overflowing, [{"z": torch.tensor([0.5], dtype=F64)}], 0.0, 1.0, math.inf, 5, 2.0)

    def quadratic(z):
        return (z["z"] ** 2).sum()

    start = {"z": torch.tensor([0.5, 0.1], dtype=torch.float32)}
    with pytest.raises(LandscapeError, match="--step-size 1e\\+300 makes the ascent's iterate non-finite"):
        ascend(quadratic, [start], 0.0, 1e10, 2.0, 5, 1e300)


def test_the_step_is_not_halved_for_no_progress_right_after_a_halving():
    """APGD's second condition: halve when the step was not halved at the last checkpoint and the best did not rise.

    The loss is scripted by the iteration (its gradient 1e-9, so every step moves): at the checkpoint 5 (of 20)
    fewer than 75% of the iterations rose, so the step is halved and the ascent resumes from the best point (3);
    then 3 of the 4 iterations to the checkpoint 9 rise, below the best: no halving (it was halved at 5), and from
    there every iteration sets a new best. One halving in all (two if the second condition forgot the first).
    """
    table = [0.0, 1.0, 3.0, 0.5, 0.4, 0.3, 1.0, 1.5, 2.0, 2.5] + [4.0 + k for k in range(11)]
    calls = []

    def loss(z):
        calls.append(1)
        return (1e-9 * z["z"]).sum() + table[len(calls) - 1]

    assert checkpoints(20)[:2] == [5, 9]
    end = ascend(loss, [{"z": torch.tensor([0.0], dtype=F64)}], 0.0, 1.0, math.inf, 20, 2.0)
    assert len(calls) == 21 and end.value == pytest.approx(14.0) and end.best_iteration == 20
    assert end.halvings == 1 and end.step == pytest.approx(1.0)


# ----------------------------------------------------------------------- float64 MLPs trained on digits
def _trained_mlp(widths, seed, epochs=30):
    """A float64 ReLU MLP trained by Adam on digits at 8 x 8 (64 inputs), seeded."""
    from landscape.data import load_dataset

    x, y = load_dataset("digits:8", "train").tensors()
    x = x.reshape(len(x), -1).to(F64)
    g = torch.Generator().manual_seed(seed)
    layers = []
    for k, (i, o) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [nn.Linear(i, o)] + ([nn.ReLU()] if k < len(widths) - 2 else [])
    net = nn.Sequential(*layers).to(F64)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_((torch.rand(p.shape, generator=g, dtype=F64) * 2 - 1) / p.shape[-1] ** 0.5)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 64):
            idx = order[i : i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    return net.eval(), x, y


def restarted_ascent(net, x, y, rho, p, *, starts=23, steps=200, seed=11):
    """max over ||z||_p <= rho of CE(w + |w| z) - CE(w), by a restarted projected ascent 50 times the default's.

    ``starts`` random starts (uniform in the cube, or on the sphere for p = 2) run together (vmap), ``steps``
    projected steps each, signed (p = inf) or normalised (p = 2), of a size shrinking geometrically from ``rho``
    to ``rho / 100``; the best loss at any iterate is kept. 23 x 201 = 4623 gradients: 50 times the default's 92
    (8 ascents of 10 iterations, each from its start, and 4 output gradients for the starts).
    """
    w = {n: p_.detach() for n, p_ in net.named_parameters()}

    def loss(z):
        moved = {n: w[n] + w[n].abs() * z[n] for n in w}
        return nn.functional.cross_entropy(functional_call(net, moved, (x,)), y)

    def norms(t):  # per start: ||t||_2 over every tensor
        return torch.sqrt(sum((v.flatten(1) ** 2).sum(1) for v in t.values()))

    def scaled(t, factor):
        return {n: v * factor.view(-1, *[1] * (v.ndim - 1)) for n, v in t.items()}

    base = float(loss({n: torch.zeros_like(t) for n, t in w.items()}))
    g = torch.Generator().manual_seed(seed)
    if p == "inf":
        z = {n: (torch.rand(starts, *t.shape, generator=g, dtype=F64) * 2 - 1) * rho for n, t in w.items()}
    else:
        z = {n: torch.randn(starts, *t.shape, generator=g, dtype=F64) for n, t in w.items()}
        z = scaled(z, rho / norms(z))
    step_and_value = vmap(grad_and_value(loss))
    best = 0.0
    for t in range(steps):
        grads, values = step_and_value(z)
        best = max(best, float(values.max()) - base)
        size = rho * 0.01 ** (t / steps)
        if p == "inf":
            z = {n: (z[n] + size * torch.sign(grads[n])).clamp(-rho, rho) for n in z}
        else:
            z = {n: z[n] + v for n, v in scaled(grads, size / norms(grads).clamp_min(1e-300)).items()}
            z = scaled(z, (rho / norms(z)).clamp(max=1.0))
    return max(best, float(vmap(loss)(z).max()) - base)


def default_against_a_restarted_ascent(widths, seed, batches, p):
    """The default worst case's share of the restarted ascent's, per mini-batch of 32 and radius (0.05, 0.1)."""
    net, x, y = _trained_mlp(widths, seed)
    shares = []
    for b in batches:
        xb, yb = x[32 * b : 32 * (b + 1)], y[32 * b : 32 * (b + 1)]
        est = worst_sharpness(Objective(net, [(xb, yb)], dtype=F64), (0.05, 0.1), p=p)  # the default settings
        assert est.settings["steps"] == 10 and est.settings["restarts"] == 8 and est.settings["init"] == "output"
        for r, rho in enumerate((0.05, 0.1)):
            shares.append(float(est.values[0, r]) / restarted_ascent(net, xb, yb, rho, p))
    return shares


def test_on_a_trained_mlp_the_default_l2_ascent_reaches_99_percent_of_a_50_times_longer_one():
    shares = default_against_a_restarted_ascent((64, 8, 6, 10), 1, range(4), "2")
    assert min(shares) >= 0.99, shares


def test_on_a_trained_mlp_the_default_linf_ascent_falls_short_by_no_more_than_its_documented_bound():
    """p = inf: a lower bound, as documented (docs/analyses.md): within 1% on most batches, within 16% on every one.

    The previous default (20 iterations from 2 random starts) fails it here: 0.88 and 0.92 of the restarted ascent
    at rho 0.1 on batches 0 and 2, within 1% on 4 of the 8 (benchmarks/ascent.py --mlps prints both).
    """
    shares = default_against_a_restarted_ascent((64, 8, 6, 10), 1, range(4), "inf")
    assert min(shares) >= 0.84 and sum(s >= 0.99 for s in shares) >= 0.6 * len(shares), shares


@pytest.mark.slow
@pytest.mark.parametrize("widths, seed", [((64, 16, 12, 10), 1), ((64, 20, 16, 12, 10), 2)])
def test_on_more_trained_mlps_and_batches_the_default_ascent_keeps_its_documented_bounds(widths, seed):
    linf = default_against_a_restarted_ascent(widths, seed, range(6), "inf")
    assert min(linf) >= 0.84 and sum(s >= 0.99 for s in linf) >= 0.6 * len(linf), linf
    assert min(default_against_a_restarted_ascent(widths, seed, range(3), "2")) >= 0.99
