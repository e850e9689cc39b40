"""Applying permutations of hidden units to a network's tensors, and the weight-matching objective.

A permutation ``p`` of ``n`` units (a 1-D int64 tensor) maps the new unit ``i`` to the old unit ``p[i]``: every axis
it moves becomes ``t'[..., i, ...] = t[..., p[i], ...]`` (for an axis with repeat ``r``, block ``i`` of ``r``
entries is block ``p[i]``; an axis with one entry per head, :attr:`~.axes.Axis.per_head`, moves by the head order
``p[h d] // d`` only). The objective of weight matching is ``sum_t <A_t, pi(B)_t>`` over every tensor ``t``
some permutation moves (docs/analyses.md, permutation alignment).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from landscape.analyses.align.axes import Axis, PermutationSpec

#: permutation name -> permutation (new unit -> old unit)
Perms = dict[str, Tensor]


def identity(spec: PermutationSpec, device: torch.device | str = "cpu") -> Perms:
    """The identity permutation of every permutation of a spec.

    Args:
        spec: the spec.
        device: where the index tensors live.

    Returns:
        Name -> ``arange(size)``.
    """
    return {p.name: torch.arange(p.size, device=device) for p in spec.permutations}


def expand(perm: Tensor, repeat: int) -> Tensor:
    """The index of an axis of ``len(perm) * repeat`` entries that moves block ``i`` to block ``perm[i]``.

    Args:
        perm: the permutation of the units.
        repeat: entries per unit.

    Returns:
        ``(perm[:, None] * repeat + arange(repeat)).flatten()``.
    """
    if repeat == 1:
        return perm
    return (perm[:, None] * repeat + torch.arange(repeat, device=perm.device)).reshape(-1)


def head_order(perm: Tensor, heads: int) -> Tensor:
    """The head order of a head-aware permutation of ``heads`` heads: new head ``h`` is old head ``perm[h d] // d``.

    Args:
        perm: a permutation of ``heads * d`` units that moves whole heads (new unit -> old unit).
        heads: the number of heads.

    Returns:
        The permutation of the heads, int64.
    """
    d = perm.shape[0] // heads
    return perm[::d] // d


def permute_axis(t: Tensor, axis: Axis, perm: Tensor) -> Tensor:
    """``t`` with the units on ``axis`` (within its span; its heads for a per-head axis) reordered by ``perm``."""
    if axis.per_head:
        return t.index_select(axis.dim, head_order(perm, t.shape[axis.dim]).to(t.device))
    index = expand(perm, axis.repeat).to(t.device)
    if axis.span is not None:
        start, stop = axis.span
        whole = torch.arange(t.shape[axis.dim], device=t.device)
        index = torch.cat([whole[:start], start + index, whole[stop:]])
    return t.index_select(axis.dim, index)


def apply(
    spec: PermutationSpec, state: Mapping[str, Tensor], perms: Mapping[str, Tensor], skip: str | None = None
) -> dict[str, Tensor]:
    """The state with every axis of every permutation applied (the tensors it does not move are the same objects).

    Args:
        spec: the spec.
        state: name -> tensor (parameters and buffers).
        perms: permutation name -> permutation.
        skip: a permutation left out (weight matching holds the one it solves for unapplied).

    Returns:
        A new dict, in the order of ``state``.
    """
    out = dict(state)
    for p in spec.permutations:
        if p.name == skip:
            continue
        for axis in p.axes:
            out[axis.tensor] = permute_axis(out[axis.tensor], axis, perms[p.name])
    return out


def units(t: Tensor, axis: Axis) -> Tensor:
    """``t`` as a ``(units, rest)`` float64 matrix: row ``i`` holds every entry of unit ``i`` on ``axis`` (its span).

    For a per-head axis the rows are the heads.
    """
    if axis.span is not None:
        t = t.narrow(axis.dim, axis.span[0], axis.span[1] - axis.span[0])
    moved = t.detach().to(torch.float64).movedim(axis.dim, 0)
    n = moved.shape[0] // axis.repeat
    return moved.reshape(n, axis.repeat, *moved.shape[1:]).reshape(n, -1)


def objective(spec: PermutationSpec, a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> float:
    """``sum_t <A_t, B_t>`` (float64) over every tensor that some permutation of ``spec`` moves.

    Args:
        spec: the spec.
        a: theta_A's tensors.
        b: theta_B's tensors (already permuted, for the aligned objective).

    Returns:
        The sum of inner products.
    """
    names = spec.touching()
    return float(sum(torch.sum(a[n].detach().double() * b[n].detach().double().to(a[n].device)) for n in names))
