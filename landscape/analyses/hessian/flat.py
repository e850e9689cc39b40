"""What every curvature operator shares: a symmetric matrix at one point of an objective, on flat vectors.

An operator ``C`` (the Hessian, the generalised Gauss-Newton, the empirical Fisher, the residual ``H - G``,
K-FAC: :mod:`landscape.analyses.hessian.operators`) of an :class:`~landscape.core.objective.Objective` with
batches ``b`` of mean-reduced losses ``L_b`` and sizes ``N_b`` (``N = sum_b N_b`` over the batches used) is

    C v = sum_b (N_b / N) C_b v  +  d^2 R / d theta^2 v

restricted to the selected parameters ``theta`` (every other parameter held at the point): ``C_b`` is the
operator's curvature of batch ``b``'s loss, and the regulariser's Hessian belongs to every operator (so that
``H - G`` holds only the network's second derivatives). :class:`FlatOperator` holds the point, the batches and
their weights, sums the batches' products (:func:`~landscape.core.params.weighted_sum`), and offers the flat
products the solvers call (``matvec``, ``matmat``, ``dense``, a scipy ``LinearOperator``), summed across ranks
under torchrun with ``shard``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from landscape.core.objective import Objective
from landscape.core.params import ParamDict, flatten, unflatten, weighted_sum
from landscape.errors import LandscapeError
from landscape.options.names import select
from landscape.runtime import distributed


class FlatOperator:
    """A symmetric curvature operator of an objective at one point, on flat vectors (the shared half).

    A subclass names itself in :attr:`operator` and makes one batch's product in :meth:`_batch_product`; it may
    replace the regulariser's product (:meth:`_regularizer_product`).

    Args:
        objective: the objective (model, batches, criterion, regulariser).
        params: the evaluation point (default ``objective.params``); a dict with the objective's names.
        patterns: name patterns (:func:`landscape.options.names.select`): the operator's block of the matching
            parameters, every other parameter held fixed. Default: all.
        batches: indices of the objective's batches to use (default all), re-weighted by ``N_b / N_used``.
        shard: under torchrun, each rank multiplies by every ``world_size``-th batch and the products are summed
            with ``all_reduce``; every rank must then make the same sequence of products (same solver, seed).

    Attributes:
        operator: the operator's name (one of :data:`~landscape.options.hessian.OPERATORS`).
        objective: the objective.
        names: the selected parameter names, in flat order.
        params: the evaluation point of the selected parameters.
        batch_indices: the objective's batches used.
        weights: ``N_b / N_used`` for each used batch.
        shape: ``(n, n)``, ``n`` the number of selected parameter entries.
        dtype: the dtype of the vectors (the first selected parameter's).
        device: the device of the vectors (the first selected parameter's).
        n_matvec: the number of products made so far (one product = one pass over the used batches).

    Raises:
        LandscapeError: no parameter matches ``patterns``, or a batch index out of range (or an empty list).
    """

    operator = "hessian"

    def __init__(
        self,
        objective: Objective,
        params: Mapping[str, Tensor] | None = None,
        *,
        patterns: Sequence[str] | str | None = None,
        batches: Sequence[int] | None = None,
        shard: bool = False,
    ) -> None:
        self.objective = objective
        point = dict(objective.params if params is None else params)
        self.names = select(list(point), patterns)
        self._point = point
        self.params: ParamDict = {n: point[n] for n in self.names}
        used = list(range(len(objective.batches))) if batches is None else [int(i) for i in batches]
        if not used or any(i < 0 or i >= len(objective.batches) for i in used):
            raise LandscapeError(f"batch indices must lie in [0, {len(objective.batches)}), got {used[:5]}")
        self.batch_indices = used
        every = objective.batches.sizes
        sizes = [every[i] for i in used]
        self.weights = [s / sum(sizes) for s in sizes]
        n = sum(p.numel() for p in self.params.values())
        self.shape = (n, n)
        first = next(iter(self.params.values()))
        self.dtype = first.dtype
        self.device = first.device
        self.n_matvec = 0
        self._planned: int | None = None
        self.shard = shard and distributed.active()

    # -- what a subclass makes ---------------------------------------------------------------------
    def _batch_product(self, slot: int, v: ParamDict) -> ParamDict:
        """``C_b v`` of the used batch at position ``slot`` (a subclass's)."""
        raise NotImplementedError

    def _regularizer_product(self, v: ParamDict) -> ParamDict | None:
        """``d^2 R / d theta^2 v`` in closed form (``Regularizer.hessian_product``), or None without a regulariser."""
        reg = self.objective.regularizer
        return reg.hessian_product(self.params, v) if reg.active else None

    def hvp_choice(self) -> dict[str, object]:
        """How the products were made, as result files record it (``operator`` first; docs/schema.md).

        Returns:
            ``{"operator": ...}`` and what the subclass adds.
        """
        return {"operator": self.operator}

    # -- building blocks ---------------------------------------------------------------------------
    def _full(self, sub: Mapping[str, Tensor]) -> ParamDict:
        return {**self._point, **sub}

    def plan_products(self, count: int) -> None:
        """Hear that about ``count`` more products are coming (solvers call it; the Hessian's ``auto`` uses it).

        Args:
            count: the number of products expected next.
        """
        self._planned = max(int(count), 0)

    def clear_cache(self) -> None:
        """Drop what the operator keeps between products (graphs, traces) and the memory it holds."""

    def _weighted_sum(
        self, v: ParamDict, product: Callable[[int, ParamDict], ParamDict], part: int = 0, parts: int = 1
    ) -> ParamDict:
        """``sum_b w_b product(b, v)`` over this part's share of the batches, plus the regulariser's in part 0."""
        start = self._regularizer_product(v) if part == 0 else None
        total = weighted_sum(self.weights, lambda slot: product(slot, v), start=start, part=part, parts=parts)
        if total is None:
            total = {n: torch.zeros_like(t) for n, t in v.items()}
        return total

    def hvp_dict(self, v: Mapping[str, Tensor], *, part: int = 0, parts: int = 1) -> ParamDict:
        """``C v`` for a dict ``v`` with the selected parameters' names and shapes.

        ``C v = sum_b (N_b/N_used) C_b v + H_R v`` over the used batches; with ``parts > 1`` only this part's
        share (the batches ``part, part + parts, ...``, and the regulariser in part 0); the parts sum to ``C v``.

        Args:
            v: the vector by parameter name (at least the selected names; other entries are ignored).
            part: which share to compute, ``0 <= part < parts``.
            parts: the number of shares.

        Returns:
            ``C v`` (or this part's share) by selected parameter name, each tensor of its parameter's shape.
        """
        v = {n: v[n] for n in self.names}
        total = self._weighted_sum(v, self._batch_product, part, parts)
        self.n_matvec += 1
        if self._planned is not None:
            self._planned -= 1
        return total

    # -- the operator on flat vectors --------------------------------------------------------------
    def matvec(self, v: Tensor) -> Tensor:
        """``C v`` for a flat vector ``v`` of length n (moved to the operator's device and dtype).

        With ``shard`` under torchrun each rank computes its share of the batches and the shares are summed
        with ``all_reduce``.

        Args:
            v: a vector of ``n`` entries (any shape that flattens to ``(n,)``).

        Returns:
            ``C v``, shape ``(n,)``, in :attr:`dtype` on :attr:`device`.

        Raises:
            ValueError: ``v`` does not have ``n`` entries.
        """
        v = v.to(device=self.device, dtype=self.dtype).reshape(-1)
        if v.numel() != self.shape[0]:
            raise ValueError(f"vector has {v.numel()} entries, the operator acts on {self.shape[0]}")
        if not self.shard:
            return flatten(self.hvp_dict(unflatten(v, self.params)))
        # under torchrun every rank runs the same solver; each multiplies by its share of the batches
        out = flatten(self.hvp_dict(unflatten(v, self.params), part=distributed.rank(), parts=distributed.world_size()))
        return distributed.sum_tensor(out)

    def __matmul__(self, v: Tensor) -> Tensor:
        return self.matvec(v) if v.dim() == 1 else self.matmat(v)

    def matmat(self, V: Tensor) -> Tensor:
        """``C V`` for an (n, m) matrix, column by column (m products).

        Args:
            V: the matrix, shape ``(n, m)``.

        Returns:
            ``C V``, shape ``(n, m)``, in :attr:`dtype` on :attr:`device`.

        Raises:
            ValueError: ``V`` is not a matrix with ``n`` rows.
        """
        V = self._columns(V)
        cols = [self.matvec(V[:, j]) for j in range(V.shape[1])]
        return torch.stack(cols, dim=1) if cols else V.new_zeros(V.shape)

    def _columns(self, V: Tensor) -> Tensor:
        """``V`` on the operator's device and dtype, checked to be an ``(n, m)`` matrix."""
        V = V.to(device=self.device, dtype=self.dtype)
        if V.dim() != 2 or V.shape[0] != self.shape[0]:
            raise ValueError(f"expected an ({self.shape[0]}, m) matrix, got {tuple(V.shape)}")
        return V

    def dense(self) -> Tensor:
        """The full n x n matrix by n products with the unit vectors (tiny problems and tests).

        Returns:
            ``C``, shape ``(n, n)``, in :attr:`dtype` on :attr:`device`.
        """
        return self.matmat(torch.eye(self.shape[0], dtype=self.dtype, device=self.device))

    def to_scipy(self) -> object:
        """A ``scipy.sparse.linalg.LinearOperator`` (float64 numpy in and out) backed by this operator.

        Returns:
            A symmetric ``LinearOperator`` of shape ``(n, n)`` whose products call :meth:`matvec` (e.g. for
            ``scipy.sparse.linalg.eigsh``).
        """
        from scipy.sparse.linalg import LinearOperator

        def mv(x: np.ndarray) -> np.ndarray:
            """``C x`` as float64 numpy.

            Args:
                x: an array of ``n`` entries.

            Returns:
                ``C x``, shape ``(n,)``, float64.
            """
            out = self.matvec(torch.as_tensor(np.asarray(x).reshape(-1)))
            return out.detach().to("cpu", torch.float64).numpy()

        def mm(X: np.ndarray) -> np.ndarray:
            """``C X`` column by column, as float64 numpy.

            Args:
                X: an ``(n, m)`` array.

            Returns:
                ``C X``, shape ``(n, m)``, float64.
            """
            return np.stack([mv(X[:, j]) for j in range(X.shape[1])], axis=1)

        return LinearOperator(self.shape, matvec=mv, rmatvec=mv, matmat=mm, dtype=np.float64)
