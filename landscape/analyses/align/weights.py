"""Weight matching (Ainsworth et al. 2023, "Git Re-Basin"): coordinate descent of linear assignments.

The permutations ``pi`` maximise ``sum_t <A_t, pi(B)_t>`` over every tensor ``t`` a permutation moves. Each step
solves one permutation ``P`` exactly with the others held: ``P`` maximises ``tr(P^T M)`` for

    M[i, j] = sum over the axes of P: <unit i of A_t, unit j of B_t with every other permutation applied>,

a linear assignment problem (``scipy.optimize.linear_sum_assignment(M, maximize=True)``). The permutations are
visited in a seeded random order (a private generator), sweep after sweep, until a whole sweep changes none of
them or ``max_sweeps`` is reached; with a single permutation the first step is the exact optimum. A tensor that
one permutation moves on two axes (a layer that reads and writes one residual stream) is a quadratic term: its
other axis is held at the permutation's current value, as in Git Re-Basin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from landscape.analyses.align.axes import Permutation, PermutationSpec
from landscape.analyses.align.permute import Perms, apply, identity, objective, permute_axis, units


@dataclass
class Matching:
    """Permutations found by a matching method and how the search went.

    Attributes:
        perms: permutation name -> permutation (new unit -> old unit of theta_B).
        sweeps: sweeps over every permutation made (weight matching; 1 for activation matching).
        converged: the last sweep changed no permutation (always True for activation matching).
        objective_before: ``sum_t <A_t, B_t>`` before alignment.
        objective_after: ``sum_t <A_t, pi(B)_t>`` after.
    """

    perms: Perms
    sweeps: int
    converged: bool
    objective_before: float
    objective_after: float


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
        m += (units(a[axis.tensor], axis) @ units(held, axis).T).cpu()
    return m


def weight_matching(
    spec: PermutationSpec, a: Mapping[str, Tensor], b: Mapping[str, Tensor], *, seed: int = 0, max_sweeps: int = 100
) -> Matching:
    """The permutations of theta_B's units that best match its weights to theta_A's (module doc).

    Args:
        spec: the networks' permutation spec.
        a: theta_A's parameters and buffers by name.
        b: theta_B's, of the same names and shapes.
        seed: seeds the order in which the permutations are visited in each sweep.
        max_sweeps: the most sweeps made.

    Returns:
        The :class:`Matching`.
    """
    perms = identity(spec)
    touching = spec.touching()
    rng = np.random.default_rng(seed)
    order = list(spec.permutations)
    sweeps, changed = 0, bool(order)
    while changed and sweeps < max_sweeps:
        sweeps += 1
        changed = False
        for k in rng.permutation(len(order)):
            p = order[int(k)]
            new = assignment(score_matrix(p, a, b, perms, touching))
            if not torch.equal(new, perms[p.name]):
                perms[p.name] = new
                changed = True
    before = objective(spec, a, b)
    after = objective(spec, a, apply(spec, b, perms))
    return Matching(perms, sweeps, not changed, before, after)
