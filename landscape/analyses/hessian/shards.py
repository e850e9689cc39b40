"""Vectors split across the ranks of a process group, and the reductions a solver makes over them.

A vector of length ``n`` (the flat order of a model's whole parameters) is held as one part per rank: rank ``r``
holds the entries of some index ranges ``[start, stop)`` of the whole vector, concatenated in the order of the
ranges (:func:`~landscape.analyses.hessian.fsdp.shard_ranges` gives those of a model sharded with FSDP). Every
sum over a vector's entries is this rank's partial sum followed by an ``all_reduce`` over the group
(:class:`ShardedInnerProduct`), so each rank holds ``n / world`` entries of every solver vector and every rank
sees the same reduced numbers, and so takes the same decisions.

Random vectors are the same whole vector whatever the number of ranks: every rank draws the whole vector from
the seed, :data:`~landscape.options.hessian.SHARDED_DRAW_CHUNK` entries at a time, and keeps its entries
(:func:`draw_parts`). While ``n`` is at most one chunk the vector equals
:func:`~landscape.analyses.hessian.linalg.random_unit`'s from the same generator.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from landscape.analyses.hessian.linalg import InnerProduct
from landscape.core.params import flat_dot, project
from landscape.errors import LandscapeError
from landscape.options.hessian import SHARDED_DRAW_CHUNK
from landscape.runtime.distributed import collective


def draw_parts(
    ranges: Sequence[tuple[int, int]], n: int, generator: torch.Generator, chunk: int = SHARDED_DRAW_CHUNK
) -> Tensor:
    """This rank's entries of a standard Gaussian vector of length ``n`` drawn in pieces of ``chunk`` entries.

    The whole vector is ``concat(randn(chunk), randn(chunk), ..., randn(n mod chunk))`` from ``generator`` (in
    float64 on the CPU); every piece is drawn, so the generator ends in the same state on every rank.

    Args:
        ranges: the ``[start, stop)`` index ranges of the whole vector that this rank holds, in its order.
        n: the whole vector's length.
        generator: the CPU generator.
        chunk: the entries drawn at a time.

    Returns:
        The entries of ``ranges``, concatenated, float64 on the CPU.
    """
    offsets, total = [], 0
    for start, stop in ranges:
        offsets.append(total)
        total += stop - start
    out = torch.empty(total, dtype=torch.float64)
    for begin in range(0, n, chunk):
        end = min(begin + chunk, n)
        piece = torch.randn(end - begin, generator=generator, dtype=torch.float64)
        for (start, stop), offset in zip(ranges, offsets):
            lo, hi = max(start, begin), min(stop, end)
            if lo < hi:
                out[offset + lo - start : offset + hi - start] = piece[lo - begin : hi - begin]
    return out


class ShardedInnerProduct(InnerProduct):
    """Reductions over vectors of which this rank holds the entries of ``ranges``: partial sums, ``all_reduce``.

    Args:
        ranges: the ``[start, stop)`` ranges of the whole vector this rank holds, in the order it holds them.
        n: the whole vector's length.
        group: the process group whose ranks hold the other parts (None: the default group).
        device: where the group's collectives take their tensors (the vectors' device: a GPU under nccl).

    Raises:
        LandscapeError: ranges outside ``[0, n)``, or parts of all ranks that do not add up to ``n`` entries.
    """

    def __init__(
        self,
        ranges: Sequence[tuple[int, int]],
        n: int,
        group: dist.ProcessGroup | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.ranges = [(int(a), int(b)) for a, b in ranges]
        self.n, self.group, self.device = int(n), group, torch.device(device)
        if any(not 0 <= a <= b <= self.n for a, b in self.ranges):
            raise LandscapeError(f"shard ranges must lie in [0, {self.n}], got {self.ranges[:3]}...")
        self.length = sum(b - a for a, b in self.ranges)
        held = self.reduce(torch.tensor([float(self.length)], dtype=torch.float64))
        if int(held.item()) != self.n:
            raise LandscapeError(
                f"the ranks hold {int(held.item())} entries of vectors of {self.n} between them; every entry must "
                "be held by exactly one rank (shard the parameters along dim 0 over one mesh dimension)"
            )

    def reduce(self, partial: Tensor) -> Tensor:
        """The sum of ``partial`` over the group's ranks (``partial`` itself with one rank).

        Args:
            partial: this rank's partial sum(s).

        Returns:
            The sum over ranks, on ``partial``'s device, the same on every rank.
        """
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size(self.group) > 1):
            return partial
        total = partial.to(self.device)
        with collective("all_reduce"):
            dist.all_reduce(total, group=self.group)
        return total.to(partial.device)

    def local_length(self, n: int) -> int:
        """The number of entries this rank holds.

        Args:
            n: the whole vector's length (must be the one given when built).

        Returns:
            The length of this rank's part.
        """
        if int(n) != self.n:
            raise LandscapeError(f"this inner product splits vectors of {self.n} entries, not {n}")
        return self.length

    def dot(self, a: Tensor, b: Tensor) -> Tensor:
        """``a . b`` over the whole vectors: the parts' products, summed over ranks.

        Args:
            a: this rank's part of a vector.
            b: this rank's part of another.

        Returns:
            The 0-dim inner product, the same on every rank.
        """
        return self.reduce(flat_dot(a, b))

    def project(self, basis: Tensor, r: Tensor) -> Tensor:
        """``basis^T r`` over the whole vectors.

        Args:
            basis: this rank's rows of an ``(n, j)`` matrix.
            r: this rank's part of a vector.

        Returns:
            The ``(j,)`` coefficients, the same on every rank.
        """
        return self.reduce(project(basis, r))

    def norm(self, x: Tensor, dim: int | None = None) -> Tensor:
        """``||x||_2`` of the whole vector(s): ``sqrt`` of the squared parts' sum over ranks.

        Args:
            x: this rank's part of a vector (or this rank's rows of a matrix, with ``dim=0``).
            dim: the dimension to reduce (None: all).

        Returns:
            The norm(s), the same on every rank.
        """
        squares = x.pow(2).sum() if dim is None else x.pow(2).sum(dim=dim)
        return self.reduce(squares).sqrt()

    def random_unit(self, n: int, dtype: torch.dtype, device: torch.device, generator: torch.Generator) -> Tensor:
        """This rank's part of the unit vector ``g / ||g||``, ``g ~ N(0, I_n)`` drawn as :func:`draw_parts` says.

        Args:
            n: the whole vector's length.
            dtype: the dtype of the result (drawn in float64).
            device: the device of the result.
            generator: the CPU generator (every rank must hold one in the same state).

        Returns:
            This rank's part, shape ``(local_length(n),)``.
        """
        self.local_length(n)
        part = draw_parts(self.ranges, self.n, generator)
        norm = self.reduce(part.pow(2).sum()).sqrt()
        return (part / norm).to(device=device, dtype=dtype)
