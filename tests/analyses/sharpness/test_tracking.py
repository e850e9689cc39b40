"""Edge-of-stability tracking: exact sharpness on a quadratic, warm starts, Adam's preconditioned sharpness."""

import copy
import math

import pytest
import torch
from helpers import one_line_error
from torch import nn

from analyses.sharpness.test_measures import Quadratic, dummy_batches, mean_output, spd_matrix
from landscape.analyses.sharpness.tracking import SharpnessTracker, adam_preconditioner, stability_threshold
from landscape.core.params import flatten, unflatten
from landscape.options.sharpness import TRACK_MAXITER, TRACK_NCV, TRACK_TOL

F64 = torch.float64
EIGENVALUES = [6.0, 4.0, 2.5, 1.0, 0.3, 0.1, 0.05, 0.01]


def quadratic_model():
    g = torch.Generator().manual_seed(0)
    A = spd_matrix(EIGENVALUES, seed=2)
    return Quadratic(A, torch.randn(8, generator=g, dtype=F64), torch.randn(8, generator=g, dtype=F64))


def state_of(optimizer):
    return copy.deepcopy(optimizer.state_dict())


def same_state(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    return a == b


def test_sgd_on_a_quadratic_tracks_lambda_max_and_warm_starts_save_products():
    model = quadratic_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = dummy_batches(1)[0]
    common = {"every": 5, "criterion": mean_output, "tol": 1e-10, "seed": 1}
    warm = SharpnessTracker(model, optimizer, batch, **common)
    cold = SharpnessTracker(model, optimizer, batch, warm_start=False, **common)
    for step in range(21):
        if step:
            optimizer.zero_grad()
            mean_output(model(batch[0]), batch[1]).backward()
            optimizer.step()
        for tracker in (warm, cold):
            tracker.maybe_track(step)
    assert [r.step for r in warm.records] == [0, 5, 10, 15, 20]
    for r in warm.records + cold.records:
        assert r.sharpness == pytest.approx(max(EIGENVALUES), rel=1e-10)
        assert r.threshold == pytest.approx((2 + 2 * 0.9) / 0.05) and r.lr == 0.05 and not r.preconditioned
        assert r.converged and r.ratio == pytest.approx(6.0 / 76.0)
    assert [r.warm for r in warm.records] == [False] + [True] * 4 and not any(r.warm for r in cold.records)
    assert warm.records[0].n_products == cold.records[0].n_products > 3
    assert all(w.n_products < c.n_products for w, c in zip(warm.records[1:], cold.records[1:]))
    assert all(r.n_products <= 2 for r in warm.records[1:])


def test_tracking_changes_nothing_of_the_model_the_optimizer_or_the_random_state():
    model = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Tanh(), nn.Linear(4, 2)).to(F64).train()
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(6, 3, generator=g, dtype=F64), torch.randint(0, 2, (6,), generator=g))
    for optimizer in (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5), torch.optim.AdamW(model.parameters())):
        tracker = SharpnessTracker(model, optimizer, batch)
        torch.nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()
        params = {n: (p.detach().clone(), p.grad.clone()) for n, p in model.named_parameters()}
        state, rng = state_of(optimizer), torch.get_rng_state()
        tracker.track(1)
        tracker.track(2)
        assert torch.equal(torch.get_rng_state(), rng)
        assert same_state(state_of(optimizer), state)
        assert model.training and model[1].training
        for n, p in model.named_parameters():
            assert torch.equal(p.detach(), params[n][0]) and torch.equal(p.grad, params[n][1])
        model.zero_grad(set_to_none=True)
    before = torch.get_rng_state()
    SharpnessTracker(model, torch.optim.SGD(model.parameters(), lr=0.1), batch).track(0)
    assert torch.equal(torch.get_rng_state(), before)
    assert all(p.grad is None for p in model.parameters())


def tiny_net():
    g = torch.Generator().manual_seed(3)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 3)).to(F64)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
    return net


def dense_loss_hessian(model, batch):
    params = {n: p.detach().clone() for n, p in model.named_parameters()}

    def loss(flat):
        out = torch.func.functional_call(model, unflatten(flat, params), (batch[0],))
        return torch.nn.functional.cross_entropy(out, batch[1])

    return torch.func.hessian(loss)(flatten(params))


@pytest.mark.parametrize(
    "make",
    [
        lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.9, 0.99), weight_decay=0.1),
        lambda p: torch.optim.Adam(p, lr=0.003, betas=(0.8, 0.95), eps=1e-4, amsgrad=True),
    ],
    ids=["adamw", "adam-amsgrad"],
)
def test_adam_preconditioned_sharpness_equals_the_dense_eigenvalue(make):
    model = tiny_net()
    optimizer = make(model.parameters())
    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(8, 3, generator=g, dtype=F64), torch.randint(0, 3, (8,), generator=g)) for _ in range(4)]
    tracker = SharpnessTracker(model, optimizer, data[0], tol=1e-12)
    one_line_error(tracker.track, 0, match="track after the first optimiser step")
    for step, (x, y) in enumerate(data * 2, start=1):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step in (3, 8):
            record = tracker.track(step)
            group = optimizer.param_groups[0]
            (beta1, beta2), eps, lr = group["betas"], group["eps"], group["lr"]
            diag = []
            for p in model.parameters():
                state = optimizer.state[p]
                t = float(state["step"])
                v = state["max_exp_avg_sq"] if group["amsgrad"] else state["exp_avg_sq"]
                diag.append(((1 - beta1**t) * ((v / (1 - beta2**t)).sqrt() + eps)).reshape(-1))
            d = torch.cat(diag).rsqrt()
            H = dense_loss_hessian(model, data[0])
            exact = float(torch.linalg.eigvalsh(d[:, None] * H * d[None, :]).max())
            assert record.sharpness == pytest.approx(exact, rel=1e-9)
            assert record.preconditioned and record.converged
            assert record.threshold == pytest.approx((2 + 2 * beta1) / ((1 - beta1) * lr))
    assert tracker.records[1].warm
    P = adam_preconditioner(optimizer, dict(model.named_parameters()))
    assert set(P) == {n for n, _ in model.named_parameters()}


def test_stability_thresholds_separate_stable_from_unstable_quadratics():
    """On L = lam w^2 / 2, each SGD variant converges just below its threshold and diverges just above it."""
    variants = [
        {"momentum": 0.0},
        {"momentum": 0.9},
        {"momentum": 0.7, "dampening": 0.3},
        {"momentum": 0.9, "nesterov": True},
    ]
    lr = 0.1
    for kw in variants:
        w = nn.Parameter(torch.ones(1, dtype=F64))
        threshold = stability_threshold(torch.optim.SGD([w], lr=lr, **kw))
        for factor, stable in ((0.98, True), (1.02, False)):
            w = nn.Parameter(torch.ones(1, dtype=F64))
            optimizer = torch.optim.SGD([w], lr=lr, **kw)
            for _ in range(400):  # the gradient of L, set by hand (no autograd: fast)
                w.grad = factor * threshold * w.detach().clone()
                optimizer.step()
            assert (abs(w.item()) < 1e-3) == stable, (kw, factor)
    adam = torch.optim.Adam([nn.Parameter(torch.ones(1))], lr=0.01)
    assert stability_threshold(adam) == pytest.approx(38 / 0.01)


def test_bad_optimizers_and_settings_are_refused_in_one_line():
    model = tiny_net()
    batch = (torch.randn(4, 3, dtype=F64), torch.randint(0, 3, (4,)))
    one_line_error(SharpnessTracker, model, torch.optim.RMSprop(model.parameters()), batch, match="supports SGD")
    one_line_error(SharpnessTracker, model, torch.optim.SGD(model.parameters(), lr=0.1), batch, every=0, match="every")
    groups = [{"params": model[0].parameters(), "lr": 0.1}, {"params": model[2].parameters(), "lr": 0.2}]
    tracker = SharpnessTracker(model, torch.optim.SGD(groups), batch)
    one_line_error(tracker.track, 0, match="differ in lr")
    frozen = torch.optim.SGD(model[2].parameters(), lr=0.1)  # only the last layer is trained and tracked
    record = SharpnessTracker(model, frozen, batch).track(0)
    assert record.threshold == pytest.approx(20.0) and math.isfinite(record.sharpness)


def test_warm_started_records_of_a_nesterov_trained_mlp_that_are_flagged_converged_are_the_dense_top_eigenvalue():
    """Training's settings (tol 1e-2, ncv 8, 3 restarts): a converged record is within tol of lambda_max(H)."""
    g = torch.Generator().manual_seed(11)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3)).to(F64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
    batch = (torch.randn(16, 4, generator=g, dtype=F64), torch.randint(0, 3, (16,), generator=g))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    tol = TRACK_TOL
    tracker = SharpnessTracker(model, optimizer, batch, every=2, tol=tol, ncv=TRACK_NCV, maxiter=TRACK_MAXITER)
    for step in range(1, 13):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()
        record = tracker.maybe_track(step)
        if record is None:
            continue
        H = dense_loss_hessian(model, batch)
        lam = float(torch.linalg.eigvalsh(H).max())
        y = tracker.vector
        true_residual = float(torch.linalg.vector_norm(H @ y - record.sharpness * y))
        assert record.residual == pytest.approx(true_residual, rel=1e-6, abs=1e-12)
        assert record.threshold == pytest.approx((2 + 2 * 0.9) / ((1 + 2 * 0.9) * 0.05))
        if record.converged:
            assert true_residual <= tol * abs(record.sharpness)
            assert abs(record.sharpness - lam) <= tol * lam
    assert [r.warm for r in tracker.records] == [False] + [True] * 5
    assert sum(r.converged for r in tracker.records) >= 4  # the flags are exercised, not all False


def batchnorm_net():
    g = torch.Generator().manual_seed(4)
    net = nn.Sequential(nn.Linear(3, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 3)).to(F64)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
        net[1].running_mean.copy_(torch.randn(6, generator=g, dtype=F64))
        net[1].running_var.fill_(2.5)
    return net


def batchnorm_loss(flat, net, batch, train):
    """The loss of :func:`batchnorm_net` written out: BatchNorm by the batch's biased statistics or the running ones."""
    w1, b1, gamma, beta, w2, b2 = unflatten(flat, dict(net.named_parameters())).values()
    h = batch[0] @ w1.T + b1
    if train:
        mean, var = h.mean(0), h.var(0, unbiased=False)
    else:
        mean, var = net[1].running_mean, net[1].running_var
    z = torch.tanh((h - mean) / torch.sqrt(var + net[1].eps) * gamma + beta)
    return torch.nn.functional.cross_entropy(z @ w2.T + b2, batch[1])


def test_train_mode_batchnorm_tracks_the_function_training_follows_and_leaves_the_running_statistics():
    net = batchnorm_net().train()
    g = torch.Generator().manual_seed(6)
    batch = (torch.randn(8, 3, generator=g, dtype=F64), torch.randint(0, 3, (8,), generator=g))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    buffers = {n: b.clone() for n, b in net.named_buffers()}
    flat = flatten({n: p.detach() for n, p in net.named_parameters()})
    for mode in ("train", "eval"):
        tracker = SharpnessTracker(net, optimizer, batch, tol=1e-10, bn_mode=mode)
        record = tracker.track(0)
        H = torch.func.hessian(lambda w, m=mode: batchnorm_loss(w, net, batch, m == "train"))(flat)
        assert record.sharpness == pytest.approx(float(torch.linalg.eigvalsh(H).max()), rel=1e-9)
        assert record.converged and tracker.bn_mode == mode
        for n, b in net.named_buffers():  # neither the model's statistics nor the tracker's copy's change
            assert torch.equal(b, buffers[n]) and torch.equal(tracker.objective.buffers[n], buffers[n])
    one_line_error(SharpnessTracker, net, optimizer, batch, bn_mode="batch", match="--track-mode")


def _two_groups(model, decay):
    """Training's two param groups: ``decay`` on the weight matrices, none on the biases."""
    weights = [p for p in model.parameters() if p.ndim >= 2]
    biases = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": weights, "weight_decay": decay}, {"params": biases, "weight_decay": 0.0}]


@pytest.mark.parametrize(
    "make, coupled",
    [
        (lambda groups: torch.optim.SGD(groups, lr=0.05), True),
        (lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True), True),
        (lambda groups: torch.optim.Adam(groups, lr=0.01), True),
        (lambda groups: torch.optim.AdamW(groups, lr=0.01), False),
    ],
    ids=["sgd", "sgd-nesterov", "adam", "adamw"],
)
def test_the_tracked_hessian_is_that_of_the_function_the_optimiser_descends(make, coupled):
    """Coupled decay: lambda_max(H + D) (Adam: of P^-1/2 (H + D) P^-1/2), D = lambda on the decayed group only."""
    model, decay = tiny_net(), 0.7  # a decay large enough to move the top eigenvalue
    optimizer = make(_two_groups(model, decay))
    g = torch.Generator().manual_seed(8)
    batch = (torch.randn(8, 3, generator=g, dtype=F64), torch.randint(0, 3, (8,), generator=g))
    tracker = SharpnessTracker(model, optimizer, batch, tol=1e-12)
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()
    record = tracker.track(3)
    H = dense_loss_hessian(model, batch)
    scale = torch.ones(H.shape[0], dtype=F64)
    if isinstance(optimizer, torch.optim.Adam):  # Adam's P^-1/2, from the optimiser's state by its definition
        (beta1, beta2), eps = optimizer.param_groups[0]["betas"], optimizer.param_groups[0]["eps"]
        diag = []
        for p in model.parameters():
            state, t = optimizer.state[p], float(optimizer.state[p]["step"])
            diag.append(((1 - beta1**t) * ((state["exp_avg_sq"] / (1 - beta2**t)).sqrt() + eps)).reshape(-1))
        scale = torch.cat(diag).rsqrt()

    def top(lam):  # lambda_max of the (preconditioned) Hessian of L + sum_g (lam_g / 2) ||w_g||^2, written out
        d = torch.cat([torch.full((p.numel(),), lam if p.ndim >= 2 else 0.0, dtype=F64) for p in model.parameters()])
        return float(torch.linalg.eigvalsh(scale[:, None] * (H + torch.diag(d)) * scale[None, :]).max())

    assert record.sharpness == pytest.approx(top(decay if coupled else 0.0), rel=1e-9)
    assert abs(top(decay) - top(0.0)) > 1e-3 * top(0.0)  # the decay moves the top eigenvalue: the test can fail
    words = tracker.tracked_function()
    assert ("+ sum over param groups of (lambda / 2) ||w||^2 (coupled weight decay, lambda 0.7)" in words) == coupled
    assert ("decoupled weight decay, lambda 0.7, is no term" in words) == (not coupled)
