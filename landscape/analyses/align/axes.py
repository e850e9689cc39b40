"""The data of a permutation spec: which tensor axes a permutation of hidden units moves, where it is seen.

Units are seen in the forward pass at sites (docs/analyses.md, permutation alignment).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Axis:
    """One axis of one tensor that a permutation moves.

    Attributes:
        tensor: the state-dict name of the parameter or buffer (e.g. ``layer1.0.bn1.running_mean``).
        dim: the axis of that tensor.
        repeat: the axis holds ``size * repeat`` entries, unit ``c`` at ``c * repeat + j`` (after a flatten);
            1 otherwise.
        span: the units occupy entries ``[start, stop)`` of the axis only (the query, key or value rows of an
            attention module's fused ``qkv``); None: the whole axis.
        per_head: the axis holds one entry per head of a head-aware permutation (a relative position table with
            one row per head): it moves by the permutation's head order only, ``t'[h] = t[p[h d] // d]``, and
            nothing inside a head moves it.
    """

    tensor: str
    dim: int
    repeat: int = 1
    span: tuple[int, int] | None = None
    per_head: bool = False


@dataclass(frozen=True)
class Site:
    """Where a permutation's units are seen in the forward pass: a node's output, the axis that carries them.

    Attributes:
        node: the fx node's name.
        dim: the axis of the node's output that holds the units.
        repeat: as :attr:`Axis.repeat`.
        module: the module the node calls or belongs to (for messages and docs), ``""`` at the top.
    """

    node: str
    dim: int
    repeat: int = 1
    module: str = ""


@dataclass(frozen=True)
class Permutation:
    """One permutation of ``size`` units and every tensor axis and forward-pass site it moves.

    Attributes:
        name: the first module whose output carries it (e.g. ``stem.0`` for a ResNet's residual stream).
        size: the number of units.
        axes: the tensor axes it moves, in graph order.
        sites: the nodes whose outputs carry it, in graph order (none for the units inside an attention module).
        heads: the units are ``heads`` blocks of ``size // heads`` (an attention module's heads): a permutation
            reorders whole heads and the units within each head only; 1: any permutation.
        heads_of: the attention module whose heads it orders; the permutations of one module (its query/key and
            its value/output units) share one order of the heads.
        fixed_heads: every head keeps its place (each has a fixed role of its own, as the neighbour offset of a
            shift attention): only the units within each head move.
    """

    name: str
    size: int
    axes: tuple[Axis, ...]
    sites: tuple[Site, ...]
    heads: int = 1
    heads_of: str = ""
    fixed_heads: bool = False


@dataclass(frozen=True)
class PermutationSpec:
    """Every permutation of a network's hidden units that leaves its function unchanged.

    Attributes:
        model: the network's class name.
        permutations: the permutations, in the order of their first site in the graph.
    """

    model: str
    permutations: tuple[Permutation, ...]

    def by_name(self) -> dict[str, Permutation]:
        """The permutations by name."""
        return {p.name: p for p in self.permutations}

    def touching(self) -> dict[str, list[tuple[str, Axis]]]:
        """Each tensor that some permutation moves -> the (permutation, axis) pairs that move it."""
        out: dict[str, list[tuple[str, Axis]]] = {}
        for p in self.permutations:
            for axis in p.axes:
                out.setdefault(axis.tensor, []).append((p.name, axis))
        return out


def iter_axes(spec: PermutationSpec) -> Iterator[tuple[str, Axis]]:
    """Every (permutation name, axis) pair of a spec, in order."""
    for p in spec.permutations:
        for axis in p.axes:
            yield p.name, axis
