"""The Hessian of an :class:`~landscape.core.objective.Objective` as a linear operator on flat vectors.

For batches ``b`` with mean-reduced losses ``L_b`` and sizes ``N_b`` (``N = sum_b N_b`` over the batches
used), the operator is

    H = sum_b (N_b / N) * d^2 L_b / d theta^2  +  d^2 R / d theta^2

restricted to the selected parameters ``theta`` (all others held at the evaluation point). Each batch's
products are made by ``jvp(grad)``, by backward passes through a kept gradient graph, by a traced
``linearize``, or approximately by central differences of gradients (:mod:`landscape.analyses.hessian.products`);
``auto`` times the exact ways and takes the cheapest for the products the solver still expects (it tells the
operator through :meth:`HessianOperator.plan_products`). A kept graph or trace holds the batch's intermediates
in memory, so only the first ``max_linearized`` batches keep one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.func import grad, vmap

from landscape.analyses.hessian.products import (
    FINITE_DIFFERENCE,
    BatchProducts,
    ProductCosts,
    central_difference,
    quiet_jvp,
    step_length,
)
from landscape.core.objective import Objective
from landscape.core.params import ParamDict, flatten, unflatten, weighted_sum
from landscape.core.second_order import has_hooks
from landscape.errors import LandscapeError
from landscape.options.hessian import HVP_MODES
from landscape.options.names import select
from landscape.runtime import distributed


def bn_folded(objective: Objective, mode: str) -> int:
    """How many BatchNorm layers the products of ``mode`` on ``objective`` fold into their convolutions.

    The count of the objective's :class:`~landscape.core.second_order.SecondOrderFold` once it is built; 0 when
    nothing is folded: no fold (not built, refused or failed), a hook on the model (the fold is not used then),
    or ``finite-difference``, which differentiates the model as it is.

    Args:
        objective: the objective whose products were made.
        mode: the ``--hvp`` mode they were made by.

    Returns:
        The number of folded BatchNorm layers.
    """
    folded = objective.second_order_fold.folded
    if mode == FINITE_DIFFERENCE or folded is None or has_hooks(objective.module):
        return 0
    return folded.n_folded


class HessianOperator:
    """The (weighted, regularised) Hessian of an objective at one point, on flat vectors.

    Args:
        objective: the objective (model, batches, criterion, regulariser).
        params: the evaluation point (default ``objective.params``); a dict with the objective's names.
        patterns: name patterns (:func:`landscape.options.names.select`); the Hessian block of the matching
            parameters (a per-layer Hessian) with every other parameter held fixed. Default: all.
        batches: indices of the objective's batches to use (default all), re-weighted by ``N_b / N_used``;
            a single index gives that mini-batch's Hessian (plus the regulariser's).
        mode: how each batch's products are made (:mod:`landscape.analyses.hessian.products`): ``"jvp"``
            (``jvp(grad)`` each time, nothing kept), ``"graph"`` (a gradient graph kept per batch, one backward
            per product), ``"linearize"`` (a trace kept per batch), ``"finite-difference"`` (the central difference
            of two gradients at ``theta +- eps v``, approximate, no double backward) or ``"auto"``: each product
            made the way with the least expected time for the products still to come (``setup + left *
            per_product``; ``left`` from :meth:`plan_products`, else the products made so far), measured as it is
            made and estimated from the measurements before (no product is made only to be timed); only the first
            ``max_linearized`` batches keep a graph or trace (memory), the others choose between ``jvp`` and a
            graph rebuilt per product. The exact ways evaluate eval-mode BatchNorm as its affine map
            (:mod:`landscape.core.second_order`: cheaper second derivatives, equal values to rounding).
        max_linearized: how many batches ``"auto"`` lets keep a graph or trace (each holds one forward and
            backward of memory).
        costs: the measurements ``"auto"`` decides from, shared with other operators on batches of the same
            shape (default: a new, empty record).
        shard: under torchrun, each rank multiplies by every ``world_size``-th batch and the products are summed
            with ``all_reduce``; every rank must then make the same sequence of products (same solver, seed).

    Vectors are 1-D tensors of length ``n`` on the objective's device in the params' dtype; the flat order
    is the insertion order of the selected parameters (``self.names``). ``n_matvec`` counts products
    (one product = one full pass over the used batches).

    Attributes:
        names: the selected parameter names, in flat order.
        params: the evaluation point of the selected parameters.
        batch_indices: the objective's batches used.
        weights: ``N_b / N_used`` for each used batch.
        shape: ``(n, n)``, ``n`` the number of selected parameter entries.
        dtype: the dtype of the vectors (the first selected parameter's).
        device: the device of the vectors (the first selected parameter's).
        n_matvec: the number of products made so far.

    Raises:
        LandscapeError: unknown ``mode``, no parameter matches ``patterns``, or a batch index out of range (or
            an empty list of batches).
    """

    def __init__(
        self,
        objective: Objective,
        params: Mapping[str, Tensor] | None = None,
        *,
        patterns: Sequence[str] | str | None = None,
        batches: Sequence[int] | None = None,
        mode: str = "auto",
        max_linearized: int = 8,
        costs: ProductCosts | None = None,
        shard: bool = False,
    ) -> None:
        if mode not in HVP_MODES:
            raise LandscapeError(f"unknown HVP mode {mode!r}; choose one of {', '.join(HVP_MODES)}")
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
        self.mode = mode
        keep = {"linearize": len(used), "graph": len(used), "jvp": 0, FINITE_DIFFERENCE: 0}
        self.max_linearized = keep.get(mode, int(max_linearized))
        n = sum(p.numel() for p in self.params.values())
        self.shape = (n, n)
        first = next(iter(self.params.values()))
        self.dtype = first.dtype
        self.device = first.device
        self.n_matvec = 0
        self.costs = costs if costs is not None else ProductCosts()
        self._planned: int | None = None
        self._step: float | None = None
        self._products = [
            BatchProducts(self._batch_loss(i), self.params, mode, self.costs, cached=slot < self.max_linearized)
            for slot, i in enumerate(used)
        ]
        self.shard = shard and distributed.active()

    # -- building blocks ---------------------------------------------------------------------------
    def _full(self, sub: Mapping[str, Tensor]) -> ParamDict:
        return {**self._point, **sub}

    def _batch_loss(self, index: int) -> Callable[[ParamDict], Tensor]:
        """``sub -> L_b`` of batch ``index``, the batch read onto the device at each call (none is held here)."""
        # exact ways take second derivatives (eval-mode BatchNorm as its affine map); a central difference only first
        second_order = self.mode != FINITE_DIFFERENCE
        loss = self.objective.batch_loss_at(index, second_order=second_order)
        return lambda sub: loss(self._full(sub))

    def plan_products(self, count: int) -> None:
        """Tell ``auto`` that about ``count`` more products are coming (solvers call it; optional).

        Args:
            count: the number of products expected next.
        """
        self._planned = max(int(count), 0)

    def _left(self) -> int:
        if self._planned is None:  # nobody said: expect as many again as have been made
            return self.n_matvec + 1
        return max(self._planned, 1)

    def _batch_hvp(self, slot: int, v: ParamDict) -> ParamDict:
        return self._products[slot](v, self._left())

    @property
    def _linear(self) -> dict[int, Callable[[ParamDict], ParamDict]]:
        """The kept product functions (graphs or traces) by batch slot."""
        return {slot: p.cache for slot, p in enumerate(self._products) if p.cache is not None}

    def hvp_choice(self) -> dict[str, object]:
        """How the products were made: the mode, the number of batches per way, and the seconds measured.

        Returns:
            ``{"mode", "ways": {way: n_batches}, "bn_folded", "seconds": {...}, "failed": {...}}``, as result
            files record it (docs/schema.md): ``bn_folded`` the BatchNorm layers the exact ways fold into their
            convolutions (:class:`~landscape.core.second_order.SecondOrderFold`; 0 when none are, as with
            ``finite-difference``, which differentiates the model as it is); in ``finite-difference`` mode also
            ``finite_difference_step``, the length ``||eps v||`` of every displacement
            (:func:`~landscape.analyses.hessian.products.step_length`).
        """
        ways = Counter(p.way for p in self._products if p.way is not None)
        out = {"mode": self.mode, "ways": dict(sorted(ways.items())), **self.costs.summary()}
        out["bn_folded"] = bn_folded(self.objective, self.mode)
        if self.mode == FINITE_DIFFERENCE:
            out["finite_difference_step"] = self._step_length()
        return out

    def _reg_hvp(self, v: ParamDict) -> ParamDict | None:
        reg = self.objective.regularizer
        if not reg.active:
            return None
        gradient = grad(lambda sub: reg(self._full(sub)))
        if self.mode == FINITE_DIFFERENCE:
            return central_difference(gradient, self.params, v, self._step_length())
        return quiet_jvp(gradient, self.params, v)

    def _step_length(self) -> float:
        """The length of every central difference's displacement at this point (:func:`step_length`)."""
        if self._step is None:
            self._step = step_length(self.params)
        return self._step

    def hvp_dict(self, v: Mapping[str, Tensor], *, part: int = 0, parts: int = 1) -> ParamDict:
        """``H v`` for a dict ``v`` with the selected parameters' names and shapes.

        With ``parts > 1`` only this part's share is computed: the batches ``part, part + parts, ...`` (and the
        regulariser in part 0); the parts sum to ``H v``.

        ``H v = sum_b (N_b/N_used) H_b v + H_R v`` over the used batches (this part's share of them).

        Args:
            v: the vector by parameter name (at least the selected names; other entries are ignored).
            part: which share to compute, ``0 <= part < parts``.
            parts: the number of shares.

        Returns:
            ``H v`` (or this part's share) by selected parameter name, each tensor of its parameter's shape.
        """
        v = {n: v[n] for n in self.names}
        total = self._weighted_sum(v, self._batch_hvp, part, parts)
        self.n_matvec += 1
        if self._planned is not None:
            self._planned -= 1
        return total

    # -- the operator ------------------------------------------------------------------------------
    def matvec(self, v: Tensor) -> Tensor:
        """``H v`` for a flat vector ``v`` of length n (moved to the operator's device and dtype).

        With ``shard`` under torchrun each rank computes its share of the batches and the shares are summed
        with ``all_reduce``.

        Args:
            v: a vector of ``n`` entries (any shape that flattens to ``(n,)``).

        Returns:
            ``H v``, shape ``(n,)``, in :attr:`dtype` on :attr:`device`.

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

    def matmat(self, V: Tensor, *, vectorize: bool = False) -> Tensor:
        """``H V`` for an (n, m) matrix: column by column, or all columns at once with ``vmap``.

        ``vectorize=True`` maps the products over the columns with ``torch.func.vmap`` (worth it on a GPU
        for small models; on CPU a loop was faster). It counts as m products.

        Args:
            V: the matrix, shape ``(n, m)``.
            vectorize: compute all columns at once with ``vmap`` (not sharded across ranks).

        Returns:
            ``H V``, shape ``(n, m)``, in :attr:`dtype` on :attr:`device`.

        Raises:
            ValueError: ``V`` is not a matrix with ``n`` rows.
        """
        V = V.to(device=self.device, dtype=self.dtype)
        if V.dim() != 2 or V.shape[0] != self.shape[0]:
            raise ValueError(f"expected an ({self.shape[0]}, m) matrix, got {tuple(V.shape)}")
        if not vectorize:
            cols = [self.matvec(V[:, j]) for j in range(V.shape[1])]
            return torch.stack(cols, dim=1) if cols else V.new_zeros(V.shape)
        count, planned = self.n_matvec, self._planned
        out = vmap(lambda col: flatten(self._vectorized_hvp(unflatten(col, self.params))), in_dims=1, out_dims=1)(V)
        self.n_matvec, self._planned = count + V.shape[1], planned
        return out

    def _vectorized_hvp(self, v: ParamDict) -> ParamDict:
        """``H v`` by ``jvp(grad)`` for every batch, plus the regulariser's (central differences in that mode).

        These are the ways that run inside ``vmap``.
        """
        if self.mode == FINITE_DIFFERENCE:
            length = self._step_length()
            return self._weighted_sum(
                v, lambda slot, vec: central_difference(grad(self._products[slot].loss), self.params, vec, length)
            )
        return self._weighted_sum(v, lambda slot, vec: quiet_jvp(grad(self._products[slot].loss), self.params, vec))

    def _weighted_sum(
        self, v: ParamDict, product: Callable[[int, ParamDict], ParamDict], part: int = 0, parts: int = 1
    ) -> ParamDict:
        """``sum_b w_b product(b, v)`` over this part's share of the batches, plus ``H_R v`` in part 0."""
        start = self._reg_hvp(v) if part == 0 else None
        total = weighted_sum(self.weights, lambda slot: product(slot, v), start=start, part=part, parts=parts)
        if total is None:
            total = {n: torch.zeros_like(t) for n, t in v.items()}
        return total

    def dense(self) -> Tensor:
        """The full n x n matrix by n products with the unit vectors, vectorised (tiny problems and tests).

        Returns:
            ``H``, shape ``(n, n)``, in :attr:`dtype` on :attr:`device`.
        """
        return self.matmat(torch.eye(self.shape[0], dtype=self.dtype, device=self.device), vectorize=True)

    def to_scipy(self) -> object:
        """A ``scipy.sparse.linalg.LinearOperator`` (float64 numpy in and out) backed by this operator.

        Returns:
            A symmetric ``LinearOperator`` of shape ``(n, n)`` whose products call :meth:`matvec` (e.g. for
            ``scipy.sparse.linalg.eigsh``).
        """
        from scipy.sparse.linalg import LinearOperator

        def mv(x: np.ndarray) -> np.ndarray:
            """``H x`` as float64 numpy.

            Args:
                x: an array of ``n`` entries.

            Returns:
                ``H x``, shape ``(n,)``, float64.
            """
            out = self.matvec(torch.as_tensor(np.asarray(x).reshape(-1)))
            return out.detach().to("cpu", torch.float64).numpy()

        def mm(X: np.ndarray) -> np.ndarray:
            """``H X`` column by column, as float64 numpy.

            Args:
                X: an ``(n, m)`` array.

            Returns:
                ``H X``, shape ``(n, m)``, float64.
            """
            return np.stack([mv(X[:, j]) for j in range(X.shape[1])], axis=1)

        return LinearOperator(self.shape, matvec=mv, rmatvec=mv, matmat=mm, dtype=np.float64)

    def clear_cache(self) -> None:
        """Drop the kept per-batch graphs and traces (and the memory they hold); measurements are kept."""
        for p in self._products:
            p.drop()
