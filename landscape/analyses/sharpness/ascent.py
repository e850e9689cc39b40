"""The worst case's ascent: the largest rise ``max_{||z||_p <= rho} L(w + c * z) - L(w)`` over a ball in ``z``.

An APGD-style projected ascent (after the idea of Croce & Hein 2020, "Reliable evaluation of adversarial robustness
with an ensemble of diverse parameter-free attacks"), written for the normalised variable ``z = delta / c``, with
``g = grad_z L(w + c * z)`` and ``P`` the projection onto the ball ``||z||_p <= rho``:

- the direction is ``d(g) = sign(g)`` (p = inf) or ``g / ||g||_2`` (p = 2);
- the first iterate is ``z_1 = P(z_0 + eta d(g_0))``; then ``u = P(z_k + eta d(g_k))`` and
  ``z_{k+1} = P(z_k + a (u - z_k) + (1 - a)(z_k - z_{k-1}))`` with the momentum weight ``a = 0.75``;
- the step ``eta`` starts at ``step_size * rho`` (default ``2 rho``, the ball's diameter; for p = inf a larger
  step lands where ``2 rho`` does and is taken as ``2 rho``); at each checkpoint of
  :func:`checkpoints` it is halved, and the ascent goes on from the best point found, when fewer than 75% of the
  iterations since the last checkpoint raised the loss, or when the step was not halved at the last checkpoint
  and the best value has not risen since (APGD's two conditions);
- the value kept is the best ``L(w + c * z) - L(w)`` of every point evaluated (and ``z = 0``, so it is >= 0),
  never the last one; ``restarts`` ascents from different starts, the best of them kept.

A non-finite loss or iterate stops the ascent with one :class:`~landscape.errors.LandscapeError` line naming
the option that caused it, so a loss that overflows is never reported as flat.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from landscape.core.gradients import value_and_gradient
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError

#: APGD's momentum weight ``a`` of the new step (``1 - a`` of the previous move)
MOMENTUM = 0.75
#: the share of the iterations between two checkpoints that must raise the loss, else the step is halved
PROGRESS_SHARE = 0.75


@dataclass(frozen=True)
class AscentEnd:
    """How the ascent at one radius ended.

    Attributes:
        value: the best ``L(w + c * z) - L(w)`` found, >= 0 (``z = 0`` counts).
        best_iteration: the iteration that found it, counted over the restarts (restart ``j``'s iteration ``k``
            is ``j * steps + k``; 0: the first start or ``z = 0``).
        step: the final step ``eta / rho`` of the restart that found it.
        halvings: how often that restart halved its step.
    """

    value: float
    best_iteration: int
    step: float
    halvings: int


def checkpoints(steps: int) -> list[int]:
    """The iterations at which the ascent checks its progress: ``ceil(p_j steps)`` for ``p_j <= 1``, without 0.

    ``p_0 = 0``, ``p_1 = 0.22``, ``p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06)`` (APGD's schedule: the checks
    come at 22%, 41%, 57%, 70%, 80%, 87%, 93% and 99% of the iterations).

    Args:
        steps: the iterations of one ascent (>= 1).

    Returns:
        The distinct checkpoints in ``[1, steps]``, increasing.
    """
    shares = [0.0, 0.22]
    while shares[-1] + max(shares[-1] - shares[-2] - 0.03, 0.06) <= 1.0:
        shares.append(shares[-1] + max(shares[-1] - shares[-2] - 0.03, 0.06))
    return sorted({math.ceil(round(s, 2) * steps) for s in shares[1:]} - {0})


def _norm2(z: ParamDict) -> float:
    """``||z||_2``, scaled by the largest entry first so that large finite entries do not overflow."""
    top = max((float(t.abs().max()) for t in z.values() if t.numel()), default=0.0)
    if top == 0.0 or not math.isfinite(top):
        return top
    return top * math.sqrt(sum(float(((t.double() / top) ** 2).sum()) for t in z.values()))


def _project(z: ParamDict, rho: float, p: float) -> ParamDict:
    if p == math.inf:
        return {n: t.clamp(-rho, rho) for n, t in z.items()}
    size = _norm2(z)
    return {n: t * (rho / size) for n, t in z.items()} if size > rho else z


def _direction(g: ParamDict, p: float) -> ParamDict | None:
    """``sign(g)`` or ``g / ||g||_2``; None where ``g = 0`` (a stationary point: no ascent direction)."""
    if p == math.inf:
        d = {n: torch.sign(t) for n, t in g.items()}
        return d if any(bool(t.any()) for t in d.values()) else None
    length = _norm2(g)
    return {n: t / length for n, t in g.items()} if length > 0 else None


def boundary_point(g: ParamDict, p: float) -> ParamDict:
    """The point of the unit ball's boundary in the direction of ``g``: ``sign(g)`` (p = inf) or ``g / ||g||_2``.

    Args:
        g: a direction by name (all zero: returned as it is).
        p: 2 or ``math.inf``.

    Returns:
        The point, new tensors.
    """
    if p == math.inf:
        return {n: torch.sign(t) for n, t in g.items()}
    length = _norm2(g)
    return {n: t / length for n, t in g.items()} if length > 0 else dict(g)


def output_diversified(projected: Callable[[ParamDict], Tensor], like: ParamDict, p: float) -> ParamDict | None:
    """An output-diversified start for radius 1 (Tashiro et al. 2020, ODI): :func:`boundary_point` of the gradient.

    Args:
        projected: ``z -> <u, f(w + c * z)>``, the model's output weighted by ``u``, differentiable in ``z``.
        like: ``z``'s tensors (their shapes, dtypes and devices).
        p: 2 or ``math.inf``.

    Returns:
        The boundary point in the direction of ``grad_z projected`` at ``z = 0``; None where that is 0.
    """
    g, _ = value_and_gradient(projected, {n: torch.zeros_like(t) for n, t in like.items()})
    return boundary_point(g, p) if any(bool(t.any()) for t in g.values()) else None


def _finite(z: ParamDict) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in z.values())


def ascend(
    loss: Callable[[ParamDict], Tensor],
    starts: Sequence[ParamDict],
    base: float,
    rho: float,
    p: float,
    steps: int,
    step_size: float,
) -> AscentEnd:
    """The largest rise ``L(z) - base`` over the ball ``||z||_p <= rho`` found by APGD-style ascents (see module).

    Args:
        loss: ``z -> L(w + c * z)``, differentiable in ``z``.
        starts: one start per restart, each in the ball.
        base: ``L(w)``, finite.
        rho: the radius, > 0.
        p: 2 or ``math.inf``.
        steps: ascent iterations per restart (>= 1).
        step_size: the first step ``eta / rho`` (> 0).

    Returns:
        The best value, and how the ascent that found it ended (:class:`AscentEnd`).

    Raises:
        LandscapeError: the loss at a point of the ball is non-finite (``--rho`` too large), or an iterate is
            (``--step-size`` too large).
    """

    def value_and_grad(z: ParamDict) -> tuple[ParamDict, Tensor]:
        return value_and_gradient(loss, z)

    marks = set(checkpoints(steps))
    best = AscentEnd(0.0, 0, step_size, 0)  # z = 0 lies in the ball

    def evaluate(z: ParamDict) -> tuple[float, ParamDict]:
        if not _finite(z):
            raise LandscapeError(
                f"--step-size {step_size:g} makes the ascent's iterate non-finite at rho {rho:g}; use a smaller "
                "--step-size (or leave it out: 2)"
            )
        g, value = value_and_grad(z)
        rise = float(value) - base
        if not math.isfinite(rise) or not _finite(g):
            raise LandscapeError(
                f"--rho {rho:g} makes the perturbed loss (or its gradient) non-finite; use a smaller --rho"
            )
        return rise, g

    for restart, start in enumerate(starts):
        # p = inf: a step beyond the cube's diameter 2 rho lands where a step of 2 rho does (sign steps, clipped)
        eta, halvings = (min(step_size, 2.0) if p == math.inf else step_size) * rho, 0
        z, previous = start, start
        value, g = evaluate(z)
        top, top_z, top_g, found = value, z, g, 0
        last_mark, halved_at_mark, top_at_mark, rises = 0, False, top, 0
        for k in range(1, steps + 1):
            d = _direction(g, p)
            if d is None:
                break
            step = _project({n: z[n] + eta * d[n] for n in z}, rho, p)
            if k == 1:
                moved = step
            else:
                moved = {n: z[n] + MOMENTUM * (step[n] - z[n]) + (1 - MOMENTUM) * (z[n] - previous[n]) for n in z}
                moved = _project(moved, rho, p)
            previous, z = z, moved
            new, g = evaluate(z)
            rises += new > value
            value = new
            if value > top:
                top, top_z, top_g, found = value, z, g, k
            if k in marks:
                stalled = rises < PROGRESS_SHARE * (k - last_mark)
                unchanged = not halved_at_mark and top <= top_at_mark
                halve = stalled or unchanged
                if halve:
                    eta, halvings = eta / 2, halvings + 1
                    z, previous, g, value = top_z, top_z, top_g, top
                last_mark, halved_at_mark, top_at_mark, rises = k, halve, top, 0
        final = eta / rho
        if top > best.value:
            best = AscentEnd(top, restart * steps + found, final, halvings)
        elif restart == 0:
            best = AscentEnd(best.value, 0, final, halvings)
    return best
