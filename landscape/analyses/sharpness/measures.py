"""Average-case and worst-case sharpness of an :class:`~landscape.core.objective.Objective`, adaptive or plain.

Each of the objective's batches is one mini-batch ``S`` with mean loss ``L_S`` (the data loss of that batch; the
regulariser only with ``include_regularizer``). The weights ``w`` are the objective's variable params (or those
matching ``patterns``; every other parameter, and the BatchNorm running statistics, held as they are). The scale
is ``c = |w| + eta`` elementwise (adaptive, Kwon et al. 2021, ASAM; ``eta = 0`` by default, so that a weight
that is exactly 0 never moves) or ``c = 1`` (plain). For a radius ``rho``:

    average:  S_avg(S) = E_{eps ~ N(0, I)} [L_S(w + rho c * eps) - L_S(w)]      (delta ~ N(0, rho^2 diag(c^2)))
    worst:    S_max(S) = max_{||z||_p <= rho} L_S(w + c * z) - L_S(w)            (z = delta / c, p in {2, inf})

and the reported sharpness is ``E_S`` of either, the equal-weight mean over the batches (each batch one draw of
``S``), with a percentile bootstrap interval over the batches (Andriushchenko et al. 2023, "A modern look at the
relationship between sharpness and generalization") from :data:`~landscape.options.sharpness.MIN_INTERVAL_BATCHES`
batches on (NaN bounds below). A list of radii gives the curve over ``rho`` from one
run: the noise (average) and the ascent's start direction (worst) are shared by every radius.

The worst case is found by an APGD-style projected ascent in ``z`` (:mod:`~landscape.analyses.sharpness.ascent`).
In ``z`` the adaptive measures are invariant to rescaling a ReLU layer by ``a > 0`` and the next by ``1 / a``
(with ``eta = 0``): the perturbed network is the rescaled perturbed network, and the gradient in ``z`` is unchanged.

Random numbers come from private ``torch.Generator`` s seeded with ``seed`` (drawn on the CPU in float64, then
moved), so the caller's global random state is never touched; the objective is never changed. A non-finite loss
(at ``w``, or perturbed) stops the measure with one :class:`~landscape.errors.LandscapeError` line naming its
cause: no value written is NaN or infinite.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from landscape.analyses.sharpness.ascent import ascend, boundary_point, output_diversified
from landscape.core.combine import PointBuffer, combine
from landscape.core.forward import EvalForward
from landscape.core.objective import Objective
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.names import matches_any, select
from landscape.options.sharpness import (
    INITS,
    MIN_INTERVAL_BATCHES,
    PERTURB,
    WORST_INIT,
    WORST_RESTARTS,
    WORST_STEP_SIZE,
    WORST_STEPS,
    check_radii,
    norm_name,
)
from landscape.options.surface import DEFAULT_ZERO_PATTERNS


@dataclass(frozen=True)
class SharpnessEstimate:
    """A sharpness measure per batch and radius, its mean over batches and a bootstrap interval.

    Attributes:
        measure: ``"average"`` or ``"worst"``.
        adaptive: whether the scale is ``c = |w| + eta`` (else ``c = 1``).
        p: the norm of the worst case's ball (2 or inf); None for the average case.
        rho: the radii, in the order given.
        batches: the objective's batch indices used, in order.
        values: ``S(S_b, rho_r)`` per batch and radius, shape ``(B, R)``, float64 on the CPU.
        stderr: the average case's Monte-Carlo standard error of each value, ``std_j / sqrt(samples)``, shape
            ``(B, R)`` (NaN with one sample); None for the worst case.
        base_loss: ``L_S(w)`` per batch, shape ``(B,)``.
        mean: ``(1/B) sum_b values[b]``, shape ``(R,)``.
        low: the lower end of the percentile bootstrap interval of ``mean`` over batches, shape ``(R,)`` (NaN
            below :data:`~landscape.options.sharpness.MIN_INTERVAL_BATCHES` batches).
        high: the upper end, shape ``(R,)``.
        confidence: the interval's level.
        settings: what else the estimate depends on (samples, antithetic, steps, step size, init, seed, eta, the
            perturbed ``tensors`` and ``parameters``, ...).
        ascent: the worst case's ascent per batch and radius, each ``(B, R)``: ``best_iteration`` (the iteration
            that found the value, over the restarts), ``final_step`` (the last step over ``rho``), ``halvings``;
            None for the average case.
    """

    measure: str
    adaptive: bool
    p: float | None
    rho: tuple[float, ...]
    batches: tuple[int, ...]
    values: Tensor
    stderr: Tensor | None
    base_loss: Tensor
    mean: Tensor
    low: Tensor
    high: Tensor
    confidence: float
    settings: dict[str, object]
    ascent: dict[str, Tensor] | None = None

    @property
    def mean_stderr(self) -> Tensor | None:
        """The average case's Monte-Carlo standard error of :attr:`mean` given the batches, shape ``(R,)``.

        ``sqrt(sum_b stderr[b]^2) / B``: the batches' draws are independent (NaN with one sample); None for the
        worst case.
        """
        if self.stderr is None:
            return None
        return (self.stderr**2).sum(dim=0).sqrt() / self.stderr.shape[0]


# ------------------------------------------------------------------------------------------------- checks
def check_norm(p: float | str) -> float:
    """The worst case's norm as ``2.0`` or ``math.inf``; an error for any other.

    Args:
        p: ``2`` (or ``"2"``) or ``inf`` (``math.inf``, ``"inf"``, ``"linf"``).

    Returns:
        ``2.0`` or ``math.inf``.

    Raises:
        LandscapeError: ``p`` is neither 2 nor inf.
    """
    return math.inf if norm_name(p) == "inf" else 2.0


def _check_batches(objective: Objective, batches: Sequence[int] | None) -> list[int]:
    used = list(range(len(objective.batches))) if batches is None else [int(i) for i in batches]
    if not used or any(i < 0 or i >= len(objective.batches) for i in used):
        raise LandscapeError(f"batch indices must lie in [0, {len(objective.batches)}), got {used[:5]}")
    return used


# ------------------------------------------------------------------------------------------- shared parts
def perturbation_scale(params: ParamDict, adaptive: bool, eta: float = 0.0) -> ParamDict:
    """The scale ``c`` of the perturbation: ``|w| + eta`` elementwise (adaptive) or ones (plain).

    Args:
        params: the weights ``w`` by name.
        adaptive: ``c = |w| + eta`` when True, else ``c = 1``.
        eta: ASAM's offset, finite and >= 0 (with 0 a weight that is exactly 0 is never perturbed).

    Returns:
        ``c`` by name, each tensor of its parameter's shape, dtype and device.

    Raises:
        LandscapeError: ``eta`` is negative, NaN or infinite.
    """
    offset = checks.non_negative(eta, "--eta")
    return {n: (w.abs() + offset if adaptive else torch.ones_like(w)) for n, w in params.items()}


def perturbed_names(params: ParamDict, patterns: Sequence[str] | str | None = None, perturb: str = "all") -> list[str]:
    """The names of the perturbed parameters: those matching ``patterns`` (all when None), by the rule ``perturb``.

    Args:
        params: the variable parameters by name, in order.
        patterns: name patterns (:func:`~landscape.options.names.select`); None: every parameter.
        perturb: ``all``, or ``surface``: the loss surfaces' default rule, tensors of fewer than two dimensions and
            those matching :data:`~landscape.options.surface.DEFAULT_ZERO_PATTERNS` (position tables, learned
            tokens) held fixed.

    Returns:
        The names, in the order of ``params``.

    Raises:
        LandscapeError: a pattern matches nothing, ``perturb`` is unknown, or the rule leaves nothing to perturb.
    """
    names = select(list(params), patterns)
    if perturb not in PERTURB:
        raise LandscapeError(f"unknown --perturb {perturb!r}; choose one of {', '.join(PERTURB)}")
    if perturb == "surface":
        names = [n for n in names if params[n].ndim >= 2 and not matches_any(n, DEFAULT_ZERO_PATTERNS)]
        if not names:
            raise LandscapeError(
                "--perturb surface leaves no parameter to perturb (every one chosen has fewer than two dimensions or "
                "is a position table or token); use --perturb all"
            )
    return names


def perturbed_counts(params: ParamDict) -> dict[str, int]:
    """How much is perturbed: ``{"tensors": T, "parameters": P}`` (tensors, and the numbers in them).

    Args:
        params: the perturbed weights by name.

    Returns:
        The counts.
    """
    return {"tensors": len(params), "parameters": sum(int(t.numel()) for t in params.values())}


def _finite_base(value: float, index: int) -> float:
    """``L_S(w)`` when finite; else an error naming the input (no radius makes a non-finite start meaningful)."""
    if not math.isfinite(value):
        raise LandscapeError(
            f"the loss at the unperturbed weights is {value} on mini-batch {index}; check the model and its data"
        )
    return value


def bootstrap_interval(
    values: Tensor,
    *,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    minimum: int = MIN_INTERVAL_BATCHES,
) -> tuple[Tensor, Tensor]:
    """The percentile bootstrap interval of the mean over the rows (batches) of ``values``, per column (radius).

    Each of ``resamples`` resamples draws ``B`` rows with replacement (the same rows for every column) from a
    private generator seeded with ``seed``; the interval is the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles (linear interpolation) of the resampled means. With fewer than ``minimum``
    rows the resampled means take too few values for their quantiles to be an interval of the given level: the
    bounds are NaN.

    Args:
        values: shape ``(B, R)``.
        confidence: the level, in ``(0, 1)``.
        resamples: the number of bootstrap resamples (>= 1).
        seed: the seed of the resampling generator.
        minimum: the fewest rows that get an interval (at least 2).

    Returns:
        ``(low, high)``, each of shape ``(R,)``, float64; NaN for fewer than ``minimum`` rows.

    Raises:
        LandscapeError: ``confidence`` outside ``(0, 1)`` or ``resamples < 1``.
    """
    level = checks.in_range(confidence, "confidence", 0.0, 1.0, low_open=True, high_open=True)
    count = checks.positive_int(resamples, "resamples")
    values = values.to(torch.float64)
    n = values.shape[0]
    if n < max(2, int(minimum)):
        nan = torch.full(values.shape[1:], math.nan, dtype=torch.float64)
        return nan, nan.clone()
    gen = torch.Generator().manual_seed(int(seed))
    means = values[torch.randint(0, n, (count, n), generator=gen)].mean(dim=1)
    tail = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    low, high = torch.quantile(means, tail, dim=0)
    return low, high


def _perturbed(
    w: ParamDict, c: ParamDict, z: ParamDict, coef: float | None = None, buffer: PointBuffer | None = None
) -> ParamDict:
    """``w + (coef * z) * c`` by name (``w + z * c`` without ``coef``), new tensors or written into ``buffer``."""
    return combine([(None, w), (coef, z, c)], buffer)


def _batch_losses(
    objective: Objective, used: list[int], include_regularizer: bool, forward: EvalForward | None = None
) -> list[Callable[[ParamDict], Tensor]]:
    """For each used batch, ``sub -> L_S(theta with sub)`` (+ R(theta) with ``include_regularizer``).

    With ``forward`` (no gradients taken) the data loss is ``forward``'s, for ``objective``'s buffers.
    """
    point, reg = objective.params, objective.regularizer
    if forward is not None:
        if not isinstance(forward, EvalForward):
            raise LandscapeError(f"forward= must be an EvalForward of this objective, got {type(forward).__name__}")
        if forward.obj.module is not objective.module or forward.obj.batches is not objective.batches:
            raise LandscapeError("forward= must be an EvalForward of this objective's model and batches")
        forward = forward.at(objective)

    def make(index: int) -> Callable[[ParamDict], Tensor]:
        if forward is not None:
            return _loss_with(forward, index, point, reg if include_regularizer and reg.active else None)
        loss = objective.batch_loss_at(index)  # the batch is read at each call: none is held on the device

        def fn(sub: ParamDict) -> Tensor:
            full = {**point, **sub}
            return loss(full) + reg(full) if include_regularizer and reg.active else loss(full)

        return fn

    return [make(i) for i in used]


def _loss_with(
    forward: EvalForward, index: int, point: ParamDict, reg: Callable[[ParamDict], Tensor] | None
) -> Callable[[ParamDict], Tensor]:
    """``sub -> L_S(theta with sub)`` (+ ``reg``) of batch ``index`` by ``forward``."""

    def fn(sub: ParamDict) -> Tensor:
        full = {**point, **sub}
        return forward.batch_loss(index, full) + reg(full) if reg is not None else forward.batch_loss(index, full)

    return fn


def _draw(like: ParamDict, gen: torch.Generator, kind: str, out: ParamDict | None = None) -> ParamDict:
    """Random tensors shaped like ``like``: standard normal or uniform on [-1, 1] (drawn on the CPU in float64).

    Each tensor is drawn into one float64 scratch tensor of the largest tensor's size, then moved: into new
    tensors, or into ``out``'s (rewritten at every call; the same numbers).
    """
    scratch = torch.empty(max((t.numel() for t in like.values()), default=0), dtype=torch.float64)
    result: ParamDict = {} if out is None else out
    for n, t in like.items():
        x = scratch[: t.numel()].view(t.shape)
        if kind == "normal":
            torch.randn(t.shape, generator=gen, dtype=torch.float64, out=x)
        else:
            torch.rand(t.shape, generator=gen, dtype=torch.float64, out=x).mul_(2).sub_(1)
        if out is None:
            result[n] = x.to(device=t.device, dtype=t.dtype, copy=True)
        else:
            out[n].copy_(x)
    return result


def _estimate(
    measure: str,
    adaptive: bool,
    p: float | None,
    radii: tuple[float, ...],
    used: list[int],
    values: Tensor,
    stderr: Tensor | None,
    base: Tensor,
    confidence: float,
    resamples: int,
    seed: int,
    settings: dict[str, object],
) -> SharpnessEstimate:
    low, high = bootstrap_interval(values, confidence=confidence, resamples=resamples, seed=seed)
    mean = values.mean(dim=0)
    return SharpnessEstimate(
        measure, adaptive, p, radii, tuple(used), values, stderr, base, mean, low, high, float(confidence), settings
    )


# ------------------------------------------------------------------------------------------- average case
def average_sharpness(
    objective: Objective,
    rho: float | Sequence[float],
    *,
    samples: int = 16,
    adaptive: bool = True,
    eta: float = 0.0,
    antithetic: bool = False,
    patterns: Sequence[str] | str | None = None,
    perturb: str = "all",
    batches: Sequence[int] | None = None,
    include_regularizer: bool = False,
    seed: int = 0,
    confidence: float = 0.95,
    resamples: int = 1000,
    forward: EvalForward | None = None,
    base_loss: Sequence[float] | None = None,
    option: str = "--rho",
) -> SharpnessEstimate:
    """Average-case sharpness ``E_S E_{delta ~ N(0, rho^2 diag(c^2))} [L_S(w + delta) - L_S(w)]``.

    Per batch ``S`` the expectation is the Monte-Carlo mean over ``samples`` draws ``delta_j = rho c * eps_j``,
    ``eps_j ~ N(0, I)`` (with ``antithetic``, the mean of ``[L_S(w + delta_j) + L_S(w - delta_j)] / 2 -
    L_S(w)``: the same expectation, with the linear term cancelled in every draw). Each batch gets its own
    ``eps_j``; every radius uses the same ones. For ``L = (w - b)^T A (w - b) / 2`` the expectation is exactly
    ``rho^2 tr(diag(c^2) A) / 2`` (the linear term has mean zero), and the estimate converges to it as
    ``1 / sqrt(samples)``.

    Args:
        objective: the loss; its variable params are ``w`` (never changed).
        rho: one radius or a list of radii, each finite and >= 0.
        samples: noise draws per batch (>= 1).
        adaptive: ``c = |w| + eta`` (True) or ``c = 1``.
        eta: the adaptive scale's offset (ASAM's ``eta``), finite and >= 0.
        antithetic: evaluate each draw at ``+delta`` and ``-delta``.
        patterns: perturb only the params matching these (see
            :func:`~landscape.options.names.select`); default all variable params.
        perturb: ``all`` or ``surface`` (:func:`perturbed_names`).
        batches: indices of the objective's batches to use (default all).
        include_regularizer: add the objective's regulariser to ``L_S``.
        seed: seed of the noise's private generator (and of the bootstrap's).
        confidence: the bootstrap interval's level.
        resamples: bootstrap resamples.
        forward: evaluate every loss with this :class:`~landscape.core.forward.EvalForward` of the objective's
            model and batches, tuned once (BatchNorm folded, the inputs' layout chosen: the same values to
            rounding, each forward cheaper), for the objective's buffers; default the objective's plain forward.
        base_loss: ``L_S(w)`` of each used batch, in order, when it is already known (the data loss, e.g.
            :attr:`~landscape.core.objective.Evaluation.batch_losses` at the objective's params and buffers);
            default a forward pass of each batch.
        option: the option that set ``rho``, as its errors name it (``--curvature-rho`` for connect's pass).

    Returns:
        A :class:`SharpnessEstimate` (``measure="average"``, per-batch values with their standard errors).

    Raises:
        LandscapeError: a radius that is NaN, infinite or negative, ``samples < 1``, a bad ``eta``, batch index or
            pattern, a bad ``confidence``/``resamples``, a ``base_loss`` not one number per used batch, or a
            non-finite loss at ``w`` or at a perturbed point.
    """
    radii = check_radii(rho, option)
    count = checks.positive_int(samples, "samples")
    used = _check_batches(objective, batches)
    if base_loss is not None and len(base_loss) != len(used):
        raise LandscapeError(f"base_loss= needs one loss per used batch ({len(used)}), got {len(base_loss)}")
    names = perturbed_names(objective.params, patterns, perturb)
    w = {n: objective.params[n] for n in names}
    c = perturbation_scale(w, adaptive, eta)
    gen = torch.Generator().manual_seed(int(seed))
    values = torch.zeros(len(used), len(radii), dtype=torch.float64)
    stderr = torch.zeros_like(values)
    base = torch.zeros(len(used), dtype=torch.float64)
    buffer = PointBuffer(w)  # every draw's point is written here: one copy of w, however many draws
    eps = {n: torch.empty_like(t) for n, t in w.items()}  # and every draw's noise here
    with torch.no_grad():
        for b, loss in enumerate(_batch_losses(objective, used, include_regularizer, forward)):
            base[b] = _finite_base(float(loss(w) if base_loss is None else base_loss[b]), used[b])
            draws = torch.zeros(count, len(radii), dtype=torch.float64)
            for j in range(count):
                _draw(w, gen, "normal", eps)
                for r, radius in enumerate(radii):
                    value = float(loss(_perturbed(w, c, eps, radius, buffer)))
                    if antithetic:
                        value = (value + float(loss(_perturbed(w, c, eps, -radius, buffer)))) / 2
                    if not math.isfinite(value):
                        raise LandscapeError(
                            f"{option} {radius:g} makes the perturbed loss non-finite ({value}); use a smaller {option}"
                        )
                    draws[j, r] = value - float(base[b])
            values[b] = draws.mean(dim=0)
            stderr[b] = draws.std(dim=0) / math.sqrt(count) if count > 1 else math.nan
    settings = {
        "samples": count,
        "antithetic": bool(antithetic),
        "eta": float(eta),
        "seed": int(seed),
        **perturbed_counts(w),
    }
    return _estimate(
        "average", adaptive, None, radii, used, values, stderr, base, confidence, resamples, seed, settings
    )


# --------------------------------------------------------------------------------------------- worst case
def _starts(
    objective: Objective, index: int, w: ParamDict, c: ParamDict, gen: torch.Generator, p: float, init: str, n: int
) -> list[ParamDict]:
    """The ``n`` ascents' starts for radius 1 on batch ``index``, by ``init`` (:func:`worst_sharpness`).

    Random: uniform on the unit sphere (p = 2) or in the cube ``[-1, 1]^n`` (p = inf), coordinates with ``c = 0``
    at 0; output-diversified: ``u ~ N(0, I)`` drawn per start, one weight per output of the model (its logits
    averaged over the batch), and :func:`~landscape.analyses.sharpness.ascent.output_diversified` (random where no
    output moves).
    """
    x, units = objective.batches[index][0] if init == "output" else None, []
    for j in range(n):
        start = None
        if init == "output" and j % 2 == 0:
            drawn: list[Tensor] = []

            def projected(z: ParamDict, drawn: list[Tensor] = drawn) -> Tensor:
                out = objective.logits({**objective.params, **_perturbed(w, c, z)}, x).mean(dim=0)
                if not drawn:  # u, one weight per output, drawn when the outputs' number is known
                    drawn.append(torch.randn(out.shape, generator=gen, dtype=torch.float64))
                return (out * drawn[0].to(out.device, out.dtype)).sum()

            start = output_diversified(projected, w, p)
        if start is None and init == "zero" and j == 0:
            start = {n: torch.zeros_like(t) for n, t in w.items()}
        if start is None:
            u = _draw(w, gen, "normal" if p == 2.0 else "uniform")
            u = {n: torch.where(c[n] != 0, t, torch.zeros_like(t)) for n, t in u.items()}
            start = boundary_point(u, p) if p == 2.0 else u
        units.append(start)
    return units


def worst_sharpness(
    objective: Objective,
    rho: float | Sequence[float],
    *,
    p: float | str = 2,
    steps: int = WORST_STEPS,
    restarts: int = WORST_RESTARTS,
    adaptive: bool = True,
    eta: float = 0.0,
    step_size: float | None = None,
    init: str = WORST_INIT,
    patterns: Sequence[str] | str | None = None,
    perturb: str = "all",
    batches: Sequence[int] | None = None,
    include_regularizer: bool = False,
    seed: int = 0,
    confidence: float = 0.95,
    resamples: int = 1000,
) -> SharpnessEstimate:
    """Worst-case sharpness ``E_S [max_{||delta / c||_p <= rho} L_S(w + delta) - L_S(w)]`` by projected ascent.

    The ascent runs in ``z = delta / c`` over the ball ``||z||_p <= rho`` (coordinates with ``c = 0`` are never
    moved), with ``g = grad_z L_S(w + c * z)`` (which is ``c * grad L_S``), by
    :func:`~landscape.analyses.sharpness.ascent.ascend`: APGD-style steps ``sign(g)`` (p = inf) or ``g / ||g||_2``
    (p = 2) of a size that starts at ``step_size * rho`` (default ``2 rho``) and is halved when progress stalls,
    with momentum, projection onto the ball, and the best point kept; ``restarts`` ascents of ``steps``
    iterations each. A random start is a seeded random point of the ball's boundary for p = 2 (``rho`` times a
    uniform unit direction) and uniform in the cube for p = inf. ``init`` chooses the starts: ``"output"`` (the
    default) alternates output-diversified starts (Tashiro et al. 2020, ODI: the point ``rho * sign(g_u)``, or
    ``rho * g_u / ||g_u||_2``, of ``g_u = grad_z <u, f(w + c * z)>`` at ``z = 0``, ``f`` the model's output
    averaged over the batch and ``u ~ N(0, I)`` drawn per start) with random ones, the first output-diversified;
    ``"random"``: every start random; ``"zero"``: the first at ``z = 0`` (stuck at a stationary point, e.g. a
    minimum), the others random. The starts are drawn once per batch and shared by every radius. The value
    reported is the largest ``L_S(w + c * z) - L_S(w)`` over ``z = 0`` (so it is >= 0) and every point evaluated:
    a lower bound of the maximum. For ``L = w^T A w / 2`` at ``w = 0`` with p = 2 and ``c = 1`` it converges to
    ``rho^2 lambda_max(A) / 2``.

    Args:
        objective: the loss; its variable params are ``w`` (never changed).
        rho: one radius or a list of radii, each finite and >= 0.
        p: 2 or inf.
        steps: ascent iterations per restart, batch and radius (>= 1).
        restarts: ascents from different starts per batch and radius (>= 1), the best kept.
        adaptive: ``c = |w| + eta`` (True) or ``c = 1``.
        eta: the adaptive scale's offset (ASAM's ``eta``), finite and >= 0.
        step_size: the first step over ``rho`` (default 2); finite and > 0.
        init: the starts, one of :data:`~landscape.options.sharpness.INITS`: ``"output"``, ``"random"`` or
            ``"zero"`` (above).
        patterns: perturb only the params matching these; default all variable params.
        perturb: ``all`` or ``surface`` (:func:`perturbed_names`).
        batches: indices of the objective's batches to use (default all).
        include_regularizer: add the objective's regulariser to ``L_S``.
        seed: seed of the starts' private generator (and of the bootstrap's).
        confidence: the bootstrap interval's level.
        resamples: bootstrap resamples.

    Returns:
        A :class:`SharpnessEstimate` (``measure="worst"``), with ``ascent``: per batch and radius, the iteration
        that found the best value, the final step over ``rho`` and the step's halvings.

    Raises:
        LandscapeError: a radius that is NaN, infinite or negative, p not in {2, inf}, ``steps < 1``,
            ``restarts < 1``, a bad ``eta``, ``step_size``, ``init``, batch index or pattern, a bad
            ``confidence``/``resamples``; a non-finite loss at ``w`` or in the ball, or a non-finite iterate.
    """
    radii = check_radii(rho)
    norm = check_norm(p)
    count = checks.positive_int(steps, "steps")
    tries = checks.positive_int(restarts, "restarts")
    if init not in INITS:
        raise LandscapeError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
    relative = WORST_STEP_SIZE if step_size is None else checks.positive(step_size, "step_size")
    used = _check_batches(objective, batches)
    names = perturbed_names(objective.params, patterns, perturb)
    w = {n: objective.params[n] for n in names}
    c = perturbation_scale(w, adaptive, eta)
    gen = torch.Generator().manual_seed(int(seed))
    values = torch.zeros(len(used), len(radii), dtype=torch.float64)
    found = torch.zeros(len(used), len(radii), dtype=torch.int64)
    final = torch.full((len(used), len(radii)), relative, dtype=torch.float64)  # rho 0: no step taken
    halvings = torch.zeros(len(used), len(radii), dtype=torch.int64)
    base = torch.zeros(len(used), dtype=torch.float64)
    for b, loss in enumerate(_batch_losses(objective, used, include_regularizer)):
        with torch.no_grad():
            base[b] = _finite_base(float(loss(w)), used[b])
        units = _starts(objective, used[b], w, c, gen, norm, init, tries)

        def moved(z: ParamDict, loss: Callable[[ParamDict], Tensor] = loss) -> Tensor:
            return loss(_perturbed(w, c, z))

        for r, radius in enumerate(radii):
            if radius == 0.0:
                continue  # the ball is the point w: the value is 0
            starts = [{n: radius * t for n, t in unit.items()} for unit in units]
            end = ascend(moved, starts, float(base[b]), radius, norm, count, relative)
            values[b, r], found[b, r], final[b, r], halvings[b, r] = (
                end.value,
                end.best_iteration,
                end.step,
                end.halvings,
            )
    settings = {
        "steps": count,
        "restarts": tries,
        "step_size": relative,
        "init": init,
        "eta": float(eta),
        "seed": int(seed),
        **perturbed_counts(w),
    }
    estimate = _estimate(
        "worst", adaptive, norm, radii, used, values, None, base, confidence, resamples, seed, settings
    )
    return dataclasses.replace(estimate, ascent={"best_iteration": found, "final_step": final, "halvings": halvings})
