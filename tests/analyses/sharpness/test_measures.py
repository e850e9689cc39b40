"""Average- and worst-case sharpness against closed forms on quadratics, and the rescaling invariance of ReLU nets."""

import itertools
import math

import pytest
import torch
from helpers import one_line_error
from torch import nn

from landscape.analyses.sharpness.measures import (
    average_sharpness,
    bootstrap_interval,
    check_norm,
    worst_sharpness,
)
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.options.sharpness import MIN_INTERVAL_BATCHES

F64 = torch.float64


class Quadratic(nn.Module):
    """``L(w) = (w - b)^T A (w - b) / 2`` for every sample (the inputs only set the batch size)."""

    def __init__(self, A, w, b):
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.register_buffer("A", A)
        self.register_buffer("b", b)

    def forward(self, x):
        d = self.w - self.b
        return (0.5 * d @ self.A @ d).expand(x.shape[0], 1)


def mean_output(out, targets):
    return out.mean()


def spd_matrix(eigenvalues, seed=0):
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(len(eigenvalues), len(eigenvalues), generator=g, dtype=F64))
    return Q @ torch.diag(torch.tensor(eigenvalues, dtype=F64)) @ Q.T


def dummy_batches(count, size=2):
    return [(torch.zeros(size, 1, dtype=F64), torch.zeros(size, dtype=torch.long)) for _ in range(count)]


def quadratic_objective(A, w, b, batches=2):
    return Objective(Quadratic(A, w, b), dummy_batches(batches), criterion=mean_output, dtype=F64)


EIGENVALUES = [5.0, 3.0, 2.0, 1.0, 0.5, 0.1]
A = spd_matrix(EIGENVALUES)
_g = torch.Generator().manual_seed(1)
B_VEC = torch.randn(6, generator=_g, dtype=F64)
W_VEC = torch.randn(6, generator=_g, dtype=F64)


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "plain"])
@pytest.mark.parametrize("antithetic", [False, True], ids=["plain-mc", "antithetic"])
def test_average_case_is_the_monte_carlo_mean_and_converges_to_rho2_trace_c2a_over_2(adaptive, antithetic):
    obj = quadratic_objective(A, W_VEC, B_VEC)
    radii = [0.0, 0.1, 0.3]
    samples = 200
    est = average_sharpness(obj, radii, samples=samples, adaptive=adaptive, antithetic=antithetic, seed=3)
    c = W_VEC.abs() if adaptive else torch.ones(6, dtype=F64)
    # exactly the mean over the same draws (the generator replayed): L(w + d) - L(w) = g.d + d^T A d / 2
    gen = torch.Generator().manual_seed(3)
    grad = A @ (W_VEC - B_VEC)
    for b in range(2):
        eps = torch.stack([torch.randn(6, generator=gen, dtype=F64) for _ in range(samples)])
        for r, rho in enumerate(radii):
            d = rho * c * eps
            quad = 0.5 * ((d @ A) * d).sum(1)
            draws = quad if antithetic else d @ grad + quad
            assert float(est.values[b, r]) == pytest.approx(float(draws.mean()), rel=1e-10, abs=1e-15)
            assert float(est.stderr[b, r]) == pytest.approx(
                float(draws.std() / math.sqrt(samples)), rel=1e-8, abs=1e-15
            )
    # and within a few standard errors of the closed form
    for r, rho in enumerate(radii):
        exact = rho**2 * float((c**2 * torch.diag(A)).sum()) / 2
        se = float(torch.sqrt((est.stderr[:, r] ** 2).sum())) / 2
        assert abs(float(est.mean[r]) - exact) <= 4 * se + 1e-14
    assert est.values[:, 0].abs().max() == 0 and est.mean[0] == 0
    assert torch.isnan(est.low).all() and torch.isnan(est.high).all()  # 2 batches: too few for an interval
    assert est.base_loss.tolist() == pytest.approx([float(0.5 * (W_VEC - B_VEC) @ A @ (W_VEC - B_VEC))] * 2)


def test_average_case_standard_error_shrinks_like_one_over_root_samples():
    obj = quadratic_objective(A, W_VEC, B_VEC, batches=1)
    few = average_sharpness(obj, 0.2, samples=50, adaptive=False, antithetic=True, seed=0)
    many = average_sharpness(obj, 0.2, samples=800, adaptive=False, antithetic=True, seed=0)
    assert 2.5 < float(few.stderr[0, 0] / many.stderr[0, 0]) < 6.5  # ~ sqrt(16) = 4
    exact = 0.2**2 * float(torch.trace(A)) / 2
    assert abs(float(many.mean[0]) - exact) < 4 * float(many.stderr[0, 0])
    assert math.isnan(float(many.low[0])) and math.isnan(float(many.high[0]))  # one batch: no interval


def test_the_means_standard_error_is_the_spread_of_the_mean_over_independent_runs():
    """``mean_stderr`` against its definition: the standard deviation of ``mean`` over many seeds (3 batches)."""
    obj = quadratic_objective(A, W_VEC, B_VEC, batches=3)
    runs = [average_sharpness(obj, [0.1, 0.3], samples=6, adaptive=False, resamples=10, seed=s) for s in range(400)]
    spread = torch.stack([r.mean for r in runs]).std(dim=0)
    typical = torch.stack([r.mean_stderr for r in runs]).pow(2).mean(dim=0).sqrt()
    torch.testing.assert_close(typical, spread, rtol=0.12, atol=0)
    assert worst_sharpness(obj, 0.1, steps=2).mean_stderr is None


def test_worst_case_l2_plain_at_the_minimum_is_rho2_lambda_max_over_2():
    obj = quadratic_objective(A, B_VEC, B_VEC)  # w = b: the minimum
    est = worst_sharpness(obj, [0.0, 0.1, 0.5], p=2, steps=50, adaptive=False)
    exact = torch.tensor([0.0, 0.1, 0.5], dtype=F64) ** 2 * max(EIGENVALUES) / 2
    torch.testing.assert_close(est.values, exact.expand(2, 3), rtol=1e-3, atol=0)
    torch.testing.assert_close(est.mean, exact, rtol=1e-3, atol=0)
    assert est.stderr is None and est.p == 2.0 and est.measure == "worst"


def test_worst_case_l2_adaptive_at_the_minimum_is_rho2_lambda_max_of_cac_over_2():
    obj = quadratic_objective(A, B_VEC, B_VEC)
    est = worst_sharpness(obj, 0.2, p=2, steps=60, adaptive=True)
    C = torch.diag(B_VEC.abs())
    exact = 0.2**2 * float(torch.linalg.eigvalsh(C @ A @ C).max()) / 2
    assert float(est.mean[0]) == pytest.approx(exact, rel=1e-3)


def test_worst_case_linf_reaches_the_vertex_maximum():
    diag = torch.diag(torch.tensor(EIGENVALUES, dtype=F64))
    obj = quadratic_objective(diag, B_VEC, B_VEC)  # diagonal: every vertex of the cube is a maximiser
    est = worst_sharpness(obj, [0.1, 0.4], p="inf", steps=10, adaptive=False)
    exact = torch.tensor([0.1, 0.4], dtype=F64) ** 2 * sum(EIGENVALUES) / 2
    torch.testing.assert_close(est.mean, exact, rtol=1e-12, atol=0)
    # a general quadratic, convex: the maximum over the cube is its best vertex of 64, which the default ascent finds
    est = worst_sharpness(quadratic_objective(A, B_VEC, B_VEC), 0.1, p=math.inf, adaptive=False)
    vertices = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=6)), dtype=F64)
    best = 0.1**2 * float(((vertices @ A) * vertices).sum(1).max()) / 2
    torch.testing.assert_close(est.values, torch.full((2, 1), best, dtype=F64), rtol=1e-12, atol=0)


def test_worst_case_from_zero_is_stuck_at_a_minimum_and_ascends_elsewhere():
    at_min = worst_sharpness(quadratic_objective(A, B_VEC, B_VEC), 0.1, init="zero", adaptive=False, restarts=1)
    assert at_min.values.abs().max() == 0
    away = worst_sharpness(quadratic_objective(A, W_VEC, B_VEC), 0.1, init="zero", adaptive=False, steps=40)
    w, b = W_VEC, B_VEC
    # max over the sphere of g.z + z^T A z / 2 is at least that of the gradient direction
    g = A @ (w - b)
    z = 0.1 * g / g.norm()
    assert float(away.mean[0]) >= float(g @ z + 0.5 * z @ A @ z) - 1e-12


def test_the_regulariser_counts_only_when_asked():
    obj = Objective(
        Quadratic(A, W_VEC, B_VEC),
        dummy_batches(1),
        criterion=mean_output,
        dtype=F64,
        regularizer=Regularizer("l2", 2.0),
    )
    data = average_sharpness(obj, 0.2, samples=5, antithetic=True, adaptive=False, seed=7)
    both = average_sharpness(obj, 0.2, samples=5, antithetic=True, adaptive=False, seed=7, include_regularizer=True)
    gen = torch.Generator().manual_seed(7)
    d = 0.2 * torch.stack([torch.randn(6, generator=gen, dtype=F64) for _ in range(5)])
    quad = 0.5 * ((d @ A) * d).sum(1)
    assert float(data.mean[0]) == pytest.approx(float(quad.mean()), rel=1e-10)
    # antithetic: the l2 term 0.5 * coef * ||w + d||^2 adds 0.5 * coef * ||d||^2
    assert float(both.mean[0]) == pytest.approx(float((quad + 1.0 * (d**2).sum(1)).mean()), rel=1e-10)
    assert float(both.base_loss[0] - data.base_loss[0]) == pytest.approx(float((W_VEC**2).sum()))


def relu_net(seed=0):
    g = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).to(F64)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64) * 0.7)
    return net


def rescaled(net, a):
    """Layer 2 (weight and bias) times ``a``, layer 3's weight over ``a``: the same function for ReLU and a > 0."""
    out = relu_net()
    out.load_state_dict(net.state_dict())
    with torch.no_grad():
        out[2].weight.mul_(a)
        out[2].bias.mul_(a)
        out[4].weight.div_(a)
    return out


def relu_batches(seed=2):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(6, 3, generator=g, dtype=F64), torch.randint(0, 3, (6,), generator=g)) for _ in range(2)]


def test_adaptive_measures_are_invariant_to_relu_rescaling_and_plain_ones_are_not():
    net, batches = relu_net(), relu_batches()
    same = rescaled(net, 7.0)
    x = batches[0][0]
    torch.testing.assert_close(same(x), net(x), rtol=1e-12, atol=1e-12)
    objs = [Objective(m, batches, dtype=F64) for m in (net, same)]
    runs = {
        "average": lambda o, adaptive: average_sharpness(o, [0.05, 0.2], samples=4, adaptive=adaptive, seed=5),
        "worst-l2": lambda o, adaptive: worst_sharpness(o, [0.05, 0.2], p=2, steps=5, adaptive=adaptive, seed=5),
        "worst-linf": lambda o, adaptive: worst_sharpness(o, 0.05, p="inf", steps=5, adaptive=adaptive, seed=5),
    }
    for name, run in runs.items():
        first, second = (run(o, True) for o in objs)
        torch.testing.assert_close(second.values, first.values, rtol=1e-9, atol=1e-13, msg=name)
        assert float(first.values.abs().min()) > 1e-6, name
        plain = [run(o, False).values for o in objs]
        assert float(((plain[0] - plain[1]).abs() / plain[0].abs()).max()) > 1e-2, name


def test_nothing_outside_is_touched():
    obj = Objective(relu_net(), relu_batches(), dtype=F64)
    before = {n: t.clone() for n, t in obj.params.items()}
    state = torch.get_rng_state()
    average_sharpness(obj, 0.1, samples=2)
    worst_sharpness(obj, 0.1, steps=2)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(before[n], obj.params[n]) for n in before)


def test_patterns_perturb_only_the_matching_parameters():
    obj = Objective(relu_net(), relu_batches(), dtype=F64)
    last = average_sharpness(obj, 0.3, samples=3, patterns="4", seed=1)
    assert last.settings["tensors"] == 2 and last.settings["parameters"] == 27
    assert float(last.mean[0]) != float(average_sharpness(obj, 0.3, samples=3, seed=1).mean[0])


def test_bootstrap_interval_is_the_percentile_interval_of_resampled_means():
    values = torch.tensor([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0], [8.0, 80.0]], dtype=F64)
    low, high = bootstrap_interval(values, confidence=0.9, resamples=500, seed=4, minimum=4)
    gen = torch.Generator().manual_seed(4)
    means = values[torch.randint(0, 4, (500, 4), generator=gen)].mean(1)
    torch.testing.assert_close(low, torch.quantile(means, 0.05, dim=0))
    torch.testing.assert_close(high, torch.quantile(means, 0.95, dim=0))
    assert float(high[1] / high[0]) == pytest.approx(10) and float(low[1] / low[0]) == pytest.approx(10)


def test_too_few_batches_give_no_interval():
    assert MIN_INTERVAL_BATCHES == 5
    four = torch.arange(8, dtype=F64).reshape(4, 2)
    assert torch.isnan(torch.stack(bootstrap_interval(four))).all()
    five = torch.arange(10, dtype=F64).reshape(5, 2)
    low, high = bootstrap_interval(five)
    assert (low < five.mean(0)).all() and (five.mean(0) < high).all()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rho": math.nan}, "rho"),
        ({"rho": -0.1}, "rho"),
        ({"rho": [0.1, math.inf]}, "rho"),
        ({"rho": []}, "rho"),
        ({"rho": 0.1, "samples": 0}, "samples"),
        ({"rho": 0.1, "batches": [5]}, "batch"),
        ({"rho": 0.1, "patterns": "nothing.*"}, "no parameter"),
        ({"rho": 0.1, "confidence": 1.0}, "confidence"),
        ({"rho": 0.1, "base_loss": [1.0]}, "base_loss= needs one loss per used batch [(]2[)], got 1"),
        ({"rho": 0.1, "base_loss": [1.0, math.nan]}, "the loss at the unperturbed weights is nan on mini-batch 1"),
    ],
)
def test_average_case_refuses_bad_input_in_one_line(kwargs, match):
    obj = quadratic_objective(A, W_VEC, B_VEC)
    one_line_error(average_sharpness, obj, **kwargs, match=match)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rho": math.nan}, "rho"),
        ({"rho": -1.0}, "rho"),
        ({"rho": 0.1, "p": 1}, "p must be 2 or inf"),
        ({"rho": 0.1, "steps": 0}, "steps"),
        ({"rho": 0.1, "step_size": -1.0}, "step_size"),
        ({"rho": 0.1, "init": "sphere"}, "init"),
    ],
)
def test_worst_case_refuses_bad_input_in_one_line(kwargs, match):
    obj = quadratic_objective(A, W_VEC, B_VEC)
    one_line_error(worst_sharpness, obj, **kwargs, match=match)


def test_norm_names():
    assert check_norm(2) == check_norm("2") == 2.0
    assert check_norm(math.inf) == check_norm("inf") == check_norm("linf") == math.inf


def test_noise_drawn_into_reused_tensors_equals_new_draws():
    from landscape.analyses.sharpness.measures import _draw

    like = {"a": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.float64), "c": torch.zeros(2, 2, 2)}
    for kind in ("normal", "uniform"):
        fresh_gen, kept_gen = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
        out = {n: torch.empty_like(t) for n, t in like.items()}
        ptrs = [t.data_ptr() for t in out.values()]
        for _ in range(3):
            fresh = _draw(like, fresh_gen, kind)
            assert _draw(like, kept_gen, kind, out) is out and [t.data_ptr() for t in out.values()] == ptrs
            assert all(torch.equal(out[n], fresh[n]) and fresh[n].dtype == like[n].dtype for n in like)
        ref = torch.Generator().manual_seed(4)
        want = {}
        for n, t in like.items():
            if kind == "normal":
                x = torch.randn(t.shape, generator=ref, dtype=torch.float64)
            else:
                x = torch.rand(t.shape, generator=ref, dtype=torch.float64) * 2 - 1
            want[n] = x.to(t.dtype)
        first = _draw(like, torch.Generator().manual_seed(4), kind)  # "b" (float64) must not alias the scratch
        assert all(torch.equal(first[n], want[n]) for n in like)


def test_a_forward_of_another_objective_is_refused_in_one_line():
    from landscape.core.forward import EvalForward

    def objective():
        torch.manual_seed(0)
        x, y = torch.randn(6, 4), torch.randint(0, 2, (6,))
        return Objective(nn.Linear(4, 2), [(x, y)])

    mine, other = objective(), objective()
    one_line_error(
        average_sharpness, mine, 0.1, forward=EvalForward(other), match="EvalForward of this objective's model"
    )
    one_line_error(
        average_sharpness, mine, 0.1, forward="fast", match="must be an EvalForward of this objective, got str"
    )


def test_a_known_base_loss_saves_one_forward_per_batch_and_changes_nothing(monkeypatch):
    """The unperturbed ``L_S(w)`` given (as a point's evaluation knows it) is the one each batch would compute."""
    obj = quadratic_objective(A, W_VEC, B_VEC, batches=3)
    calls = []
    real = Objective.batch_loss_at

    def counted(self, index, **kwargs):
        loss = real(self, index, **kwargs)
        return lambda params: calls.append(index) or loss(params)

    monkeypatch.setattr(Objective, "batch_loss_at", counted)
    computed = average_sharpness(obj, 0.1, samples=5, antithetic=True, seed=4)
    forwards = len(calls)
    known = obj.evaluate().batch_losses
    calls.clear()
    given = average_sharpness(obj, 0.1, samples=5, antithetic=True, seed=4, base_loss=known)
    assert forwards == 3 * (1 + 2 * 5) and len(calls) == forwards - 3
    torch.testing.assert_close(given.values, computed.values, rtol=1e-13, atol=0)
    torch.testing.assert_close(given.base_loss, computed.base_loss, rtol=1e-13, atol=0)
