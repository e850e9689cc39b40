"""The state of the fx walk that derives a permutation spec: what each node carries, the permutation groups.

The union-find joins the groups that residual adds and shared tensors tie.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from landscape.analyses.align.axes import Axis, Site
from landscape.errors import LandscapeError


@dataclass(frozen=True)
class State:
    """What a node's output carries: the group of its permuted axis (None: nothing permuted), axis, repeat."""

    group: int | None
    dim: int = 0
    repeat: int = 1


FIXED = State(None)
NOT_TENSOR = State(None, -1)


@dataclass
class Group:
    """One permutation group being built: its size, repeat, tensor axes, sites and the module that started it."""

    size: int
    repeat: int = 1
    axes: list[Axis] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    creator: str = ""
    node: str = ""
    name: str = ""
    heads: int = 1
    heads_of: str = ""
    fixed_heads: bool = False


class Groups:
    """Union-find over the permutation groups; group 0 is the fixed one (inputs and outputs)."""

    def __init__(self) -> None:
        self.parent: list[int] = [0]
        self.groups: dict[int, Group] = {0: Group(0)}

    def new(
        self, size: int, creator: str, node: str = "", name: str = "", heads: int = 1, fixed_heads: bool = False
    ) -> int:
        """A new group of ``size`` units started by module ``creator`` at ``node``; its id.

        A group with a ``name`` is an attention module's units in ``heads`` heads (:class:`~.axes.Permutation`,
        whose head order stays with ``fixed_heads``), kept though no node's output carries it.
        """
        g = len(self.parent)
        self.parent.append(g)
        self.groups[g] = Group(
            size,
            creator=creator,
            node=node,
            name=name,
            heads=heads,
            heads_of=creator if name else "",
            fixed_heads=fixed_heads,
        )
        return g

    def find(self, g: int) -> int:
        """The root of group ``g`` (0: fixed)."""
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def union(self, a: int, b: int, where: str) -> int:
        """Join groups ``a`` and ``b`` (of equal sizes, else refused naming ``where``); the kept root."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if 0 in (ra, rb):
            keep, gone = 0, rb if ra == 0 else ra
        else:
            keep, gone = min(ra, rb), max(ra, rb)
            if self.groups[keep].size != self.groups[gone].size:
                raise LandscapeError(
                    f"{where} joins units of {self.groups[keep].size} and {self.groups[gone].size} channels; "
                    "this network's hidden units cannot be permuted by landscape align"
                )
        self.parent[gone] = keep
        held, other = self.groups[keep], self.groups.pop(gone)
        held.axes += other.axes
        held.sites += other.sites
        return keep

    def tie(self, g: int, axis: Axis) -> None:
        """Record that group ``g`` moves ``axis``."""
        self.groups[self.find(g)].axes.append(axis)

    def see(self, g: int, site: Site) -> None:
        """Record that group ``g``'s units are seen at ``site``."""
        self.groups[self.find(g)].sites.append(site)
