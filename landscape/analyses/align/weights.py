"""Weight matching (Ainsworth et al. 2023, "Git Re-Basin"): coordinate descent of linear assignments.

The permutations ``pi`` maximise ``sum_t <A_t, pi(B)_t>`` over every tensor ``t`` a permutation moves. Each step
solves one permutation ``P`` exactly with the others held: ``P`` maximises ``tr(P^T M)`` for

    M[i, j] = sum over the axes of P: <unit i of A_t, unit j of B_t with every other permutation applied>,

a linear assignment problem (``scipy.optimize.linear_sum_assignment(M, maximize=True)``). The permutations are
visited in a seeded random order (a private generator), sweep after sweep, until a whole sweep changes none of
them or ``max_sweeps`` is reached; with a single permutation the first step is the exact optimum. A tensor that
one permutation moves on two axes (a layer that reads and writes one residual stream) is a quadratic term: its
other axis is held at the permutation's current value, as in Git Re-Basin.

A tensor with one row per head (a relative position table, :attr:`~.axes.Axis.per_head`) moves by the head order
only; it contributes to ``M`` as every tensor the permutation moves does: the inner product ``C[a, b] = <row a of A_t,
row b of B_t>`` of heads ``a`` and ``b`` is spread evenly over block ``(a, b)`` of ``M`` (``C[a, b] / d`` in each of
its ``d x d`` entries), so a head-aware ``P`` that sends head ``a`` to head ``h[a]`` gains exactly
``sum_a C[a, h[a]]``, the table's inner product under that head order.

An attention module's two permutations (``qk`` and ``vo``, :mod:`landscape.analyses.align.attention`) are solved
together, exactly, in one step: for every pair of heads ``(a, b)`` the best permutation within the heads is a linear
assignment on the ``d x d`` block of each one's ``M``, its value ``V_k[a, b]``; the head order is then the linear
assignment on ``V_qk + V_vo`` (one order for both), and each permutation is the head order with the within-head
permutations of the chosen pairs (:func:`head_assignment`). Heads that keep their places (a shift attention's,
:attr:`~.axes.Permutation.fixed_heads`) take the identity as head order: each head's block ``(a, a)`` is solved
alone.

**The start.** From the identity, the first steps solve each permutation against neighbours that are still
arbitrary: every tensor it shares with them adds noise to ``M``, and the descent can lock into a wrong fixed point
that no single step leaves (a randomised ViT permuted at random stalled at 0.21-0.24 of the optimum for most visit
orders). The solved permutations therefore start at the *invariant match*: the same linear assignment (head-aware
where the units are heads) on

    M0[i, j] = sum over the axes of P: <sort(unit i of A_t), sort(unit j of B_t)>,

the entries of each unit sorted, which forgets the order every other permutation gives them, so ``M0`` depends on
no other permutation. When theta_B is a permutation of theta_A, ``M0[i, j] = <S_i, S_pi(j)>`` for ``S_i`` unit
``i``'s sorted entries over all its tensors, and by Cauchy-Schwarz ``sum_i <S_i, S_sigma(i)> <= sum_i |S_i|^2``
with equality only where ``S_sigma(i) = S_i``: the start is the permutation that undoes pi (up to units whose
sorted entries coincide), and the descent confirms it in one sweep.

**Several starts, the best kept.** Neither start is best on every pair of networks: between small independent MLPs
trained on digits a descent from the identity sometimes ends 1-2% above one from the invariant match, sometimes
below, and the visit order moves the fixed point too. The descent therefore runs from each start of
:data:`~landscape.options.align.DESCENT_STARTS` (the invariant match and the identity, each with the
permutations visited in the layers' order, sweep after sweep, and in seeded random orders) and keeps the
permutations of the highest objective (the first such start on a tie); each start's objective, sweeps and
convergence are recorded (:class:`DescentStart`).

**Steps that cannot change are skipped.** A step's ``M`` reads the permutations on the other axes of its tensors
(its neighbours); a step none of whose neighbours changed since it was last solved has the same ``M`` and the same
solution, which it already holds, so it is not solved again (the result is that of solving it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from landscape.analyses.align.axes import Axis, Permutation, PermutationSpec
from landscape.analyses.align.permute import Perms, apply, identity, objective, permute_axis, units
from landscape.errors import LandscapeError
from landscape.options.align import DESCENT_ORDERS, DESCENT_STARTS


@dataclass(frozen=True)
class DescentStart:
    """One descent of weight matching: where it started, the order of its steps, and where it ended.

    Attributes:
        start: ``invariant`` (the invariant match) or ``identity``.
        order: ``layers`` (the permutations in the spec's order, every sweep) or ``seeded`` (a random order per
            sweep from the seed).
        objective: ``sum_t <A_t, pi(B)_t>`` at its end.
        sweeps: the sweeps it made.
        converged: its last sweep changed no permutation.
    """

    start: str
    order: str
    objective: float
    sweeps: int
    converged: bool

    def as_dict(self) -> dict[str, object]:
        """The record as JSON-ready values (a checkpoint's metadata, a result file's attribute)."""
        return {
            "start": self.start,
            "order": self.order,
            "objective": self.objective,
            "sweeps": self.sweeps,
            "converged": self.converged,
        }


@dataclass
class Matching:
    """Permutations found by a matching method and how the search went.

    Attributes:
        perms: permutation name -> permutation (new unit -> old unit of theta_B).
        sweeps: sweeps over every permutation made (weight matching; 1 for activation matching).
        converged: the last sweep changed no permutation (always True for activation matching).
        objective_before: ``sum_t <A_t, B_t>`` before alignment.
        objective_after: ``sum_t <A_t, pi(B)_t>`` after.
        weight_matched: the permutations that activation matching left to weight matching (an attention module's
            inner units, which no node's output shows), with the others held; empty for weight matching.
        starts: every descent of the weight matching, in the order run (:class:`DescentStart`); the kept one is
            the first of the highest objective. Empty where nothing was left to weight matching.
    """

    perms: Perms
    sweeps: int
    converged: bool
    objective_before: float
    objective_after: float
    weight_matched: tuple[str, ...] = ()
    starts: tuple[DescentStart, ...] = ()

    @property
    def kept_start(self) -> DescentStart | None:
        """The descent whose permutations were kept (None without weight matching)."""
        return max(self.starts, key=lambda d: d.objective) if self.starts else None


def assignment(m: Tensor) -> Tensor:
    """The permutation ``p`` maximising ``sum_i m[i, p[i]]`` (the Hungarian method, scipy's solver).

    Args:
        m: a square score matrix (rows: theta_A's units, columns: theta_B's).

    Returns:
        ``p`` as an int64 tensor on the CPU.
    """
    _, cols = linear_sum_assignment(m.detach().cpu().numpy(), maximize=True)
    return torch.as_tensor(cols, dtype=torch.int64)


def score_matrix(
    p: Permutation,
    a: Mapping[str, Tensor],
    b: Mapping[str, Tensor],
    perms: Perms,
    touching: Mapping[str, list],
) -> Tensor:
    """``M`` of one permutation with the others held at ``perms`` (module doc), in float64.

    Args:
        p: the permutation solved for.
        a: theta_A's tensors.
        b: theta_B's tensors (unpermuted).
        perms: the current permutations.
        touching: the spec's :meth:`~landscape.analyses.align.spec.PermutationSpec.touching`.

    Returns:
        The ``(size, size)`` score matrix.
    """
    m = torch.zeros(p.size, p.size, dtype=torch.float64)
    for axis in p.axes:
        held = b[axis.tensor]
        for name, other in touching[axis.tensor]:
            if other != axis:
                held = permute_axis(held, other, perms[name])
        m += _spread((units(a[axis.tensor], axis) @ units(held, axis).T).cpu(), p, axis)
    return m


def invariant_matrix(p: Permutation, a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Tensor:
    """``M0[i, j] = sum over the axes of p: <sort(unit i of A_t), sort(unit j of B_t)>``, in float64 (module doc).

    Sorting a unit's entries forgets the order the other permutations give them: ``M0`` depends on none of them.

    Args:
        p: the permutation.
        a: theta_A's tensors.
        b: theta_B's tensors (unpermuted).

    Returns:
        The ``(size, size)`` matrix.
    """
    m = torch.zeros(p.size, p.size, dtype=torch.float64)
    for axis in p.axes:
        ua, ub = (np.sort(units(t[axis.tensor], axis).cpu().numpy(), axis=1) for t in (a, b))  # numpy's sort is fast
        m += _spread(torch.from_numpy(ua @ ub.T), p, axis)
    return m


def _spread(block: Tensor, p: Permutation, axis: Axis) -> Tensor:
    """A per-head axis's ``(H, H)`` block spread evenly over the heads' ``d x d`` blocks of ``M`` (module doc)."""
    if not axis.per_head:
        return block
    d = p.size // block.shape[0]
    return block.repeat_interleave(d, 0).repeat_interleave(d, 1) / d


def head_assignment(scores: list[Tensor], heads: int, fixed: bool = False) -> list[Tensor]:
    """Permutations of ``H d`` units in ``H`` heads sharing one head order, maximising ``sum_k tr(P_k^T M_k)``.

    Each ``P_k`` maps head ``a`` of theta_A to head ``h[a]`` of theta_B (one ``h`` for all ``k``) and the units
    within it by a permutation of its own (module doc).

    Args:
        scores: the score matrices ``M_k``, each ``(H d, H d)``.
        heads: ``H``.
        fixed: the heads keep their places (``h`` the identity); only the units within each head move.

    Returns:
        The permutations, one per score matrix (new unit -> old unit), int64.
    """
    d = scores[0].shape[0] // heads
    total = torch.zeros(heads, heads, dtype=torch.float64)
    within: dict[tuple[int, int, int], Tensor] = {}
    for k, m in enumerate(scores):
        for a in range(heads):
            for b in [a] if fixed else range(heads):
                block = m[a * d : (a + 1) * d, b * d : (b + 1) * d]
                cols = assignment(block)
                within[(k, a, b)] = cols
                total[a, b] += block[torch.arange(d), cols].sum()
    order = torch.arange(heads) if fixed else assignment(total)
    return [
        torch.cat([int(order[a]) * d + within[(k, a, int(order[a]))] for a in range(heads)]) for k in range(len(scores))
    ]


def _steps(permutations: list[Permutation]) -> list[list[Permutation]]:
    """The permutations solved together: an attention module's (one head order), every other one alone."""
    steps: dict[str, list[Permutation]] = {}
    for p in permutations:
        steps.setdefault(p.heads_of or f"\0{p.name}", []).append(p)
    return list(steps.values())


def solve(step: list[Permutation], scores: list[Tensor]) -> list[Tensor]:
    """One step's permutations from their score matrices: head-aware for an attention module's, else one assignment.

    Args:
        step: the permutations solved together (an attention module's share one head order).
        scores: their score matrices, in the same order.

    Returns:
        The permutations (new unit -> old unit), int64.
    """
    first = step[0]
    return head_assignment(scores, first.heads, first.fixed_heads) if first.heads > 1 else [assignment(scores[0])]


def _reads(step: list[Permutation], touching: Mapping[str, list]) -> list[str]:
    """The permutations a step's score matrices read: those on the other axes of the tensors its axes move."""
    names = {name for p in step for axis in p.axes for name, other in touching[axis.tensor] if other != axis}
    return sorted(names)


def descend(
    spec: PermutationSpec,
    a: Mapping[str, Tensor],
    b: Mapping[str, Tensor],
    perms: Perms,
    solved: list[Permutation],
    *,
    start: str = "invariant",
    order: str = "seeded",
    seed: int = 0,
    max_sweeps: int = 100,
) -> tuple[int, bool]:
    """Coordinate descent of the ``solved`` permutations from ``start``, the others held; in place.

    Module doc: the starts, the order of the steps, the steps skipped.

    Args:
        spec: the networks' permutation spec.
        a: theta_A's tensors.
        b: theta_B's (unpermuted).
        perms: the current permutations (those of ``solved`` are replaced by the start), updated.
        solved: the permutations to solve.
        start: ``invariant`` (the invariant match) or ``identity``.
        order: ``layers`` (the spec's order, every sweep) or ``seeded`` (a random order per sweep from ``seed``).
        seed: seeds the order of the steps in each sweep (``seeded``).
        max_sweeps: the most sweeps made.

    Returns:
        ``(sweeps, converged)``: converged when the last sweep changed no permutation.

    Raises:
        LandscapeError: an unknown ``start`` or ``order``.
    """
    if start not in ("invariant", "identity") or order not in DESCENT_ORDERS:
        raise LandscapeError(
            f"a weight-matching descent starts at 'invariant' or 'identity' and visits in one of "
            f"{', '.join(DESCENT_ORDERS)}, got start={start!r}, order={order!r}"
        )
    touching = spec.touching()
    rng = np.random.default_rng(seed)
    steps = _steps(solved)
    for step in steps:
        if start == "invariant":  # the invariant match (module doc)
            for p, new in zip(step, solve(step, [invariant_matrix(p, a, b) for p in step])):
                perms[p.name] = new
        else:
            for p in step:
                perms[p.name] = torch.arange(p.size)
    reads = [_reads(step, touching) for step in steps]
    version = dict.fromkeys(perms, 0)  # how often each permutation changed
    solved_at: list[list[int] | None] = [None] * len(steps)  # the versions a step's last solution read
    sweeps, changed = 0, bool(steps)
    while changed and sweeps < max_sweeps:
        sweeps += 1
        changed = False
        for k in range(len(steps)) if order == "layers" else rng.permutation(len(steps)):
            step, now = steps[int(k)], [version[name] for name in reads[int(k)]]
            if solved_at[int(k)] == now:
                continue  # nothing it reads changed: it holds its solution (module doc)
            solved_at[int(k)] = now
            for p, new in zip(step, solve(step, [score_matrix(p, a, b, perms, touching) for p in step])):
                if not torch.equal(new, perms[p.name]):
                    perms[p.name] = new
                    version[p.name] += 1
                    changed = True
    return sweeps, not changed


def best_descent(
    spec: PermutationSpec,
    a: Mapping[str, Tensor],
    b: Mapping[str, Tensor],
    perms: Perms,
    solved: list[Permutation],
    *,
    seed: int = 0,
    max_sweeps: int = 100,
    starts: tuple[tuple[str, str], ...] = DESCENT_STARTS,
) -> tuple[DescentStart, ...]:
    """:func:`descend` from each of ``starts``; ``perms`` updated in place to the highest objective's.

    Each descent begins from ``perms`` as given (those of ``solved`` replaced by its start); the objective
    ``sum_t <A_t, pi(B)_t>`` is that of every permutation, the held ones included. On a tie the first start's
    permutations are kept.

    Args:
        spec: the networks' permutation spec.
        a: theta_A's tensors.
        b: theta_B's (unpermuted).
        perms: the current permutations, updated to the kept descent's.
        solved: the permutations to solve.
        seed: seeds the ``seeded`` orders.
        max_sweeps: the most sweeps of each descent.
        starts: ``(start, order)`` pairs (:data:`~landscape.options.align.DESCENT_STARTS`).

    Returns:
        Every descent's :class:`DescentStart`, in the order run.
    """
    records, kept = [], dict(perms)
    for start, order in starts:
        trial = dict(perms)
        sweeps, converged = descend(
            spec, a, b, trial, solved, start=start, order=order, seed=seed, max_sweeps=max_sweeps
        )
        value = objective(spec, a, apply(spec, b, trial))
        if not records or value > max(r.objective for r in records):
            kept = trial
        records.append(DescentStart(start, order, value, sweeps, converged))
    perms.update(kept)
    return tuple(records)


def weight_matching(
    spec: PermutationSpec, a: Mapping[str, Tensor], b: Mapping[str, Tensor], *, seed: int = 0, max_sweeps: int = 100
) -> Matching:
    """The permutations of theta_B's units that best match its weights to theta_A's (module doc).

    The best of the descents from every start of :data:`~landscape.options.align.DESCENT_STARTS`
    (:func:`best_descent`); the :class:`Matching`'s sweeps and convergence are the kept descent's.

    Args:
        spec: the networks' permutation spec.
        a: theta_A's parameters and buffers by name.
        b: theta_B's, of the same names and shapes.
        seed: seeds the order in which the permutations are visited in each sweep of the seeded descents.
        max_sweeps: the most sweeps of each descent.

    Returns:
        The :class:`Matching`, with every descent's record (``starts``).
    """
    perms = identity(spec)
    starts = best_descent(spec, a, b, perms, list(spec.permutations), seed=seed, max_sweeps=max_sweeps)
    kept = max(starts, key=lambda d: d.objective)
    before = objective(spec, a, b)
    after = objective(spec, a, apply(spec, b, perms))
    return Matching(perms, kept.sweeps, kept.converged, before, after, starts=starts)
