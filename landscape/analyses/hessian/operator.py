"""The Hessian of an :class:`~landscape.core.objective.Objective` as a linear operator on flat vectors.

For batches ``b`` with mean-reduced losses ``L_b`` and sizes ``N_b`` (``N = sum_b N_b`` over the batches
used), the operator is

    H = sum_b (N_b / N) * d^2 L_b / d theta^2  +  d^2 R / d theta^2

restricted to the selected parameters ``theta`` (all others held at the evaluation point). Each batch's
products are made by ``jvp(grad)``, by backward passes through a kept gradient graph, by a traced
``linearize``, or approximately by central differences of gradients (:mod:`landscape.analyses.hessian.products`)
with a step chosen at the point from its measured errors (:mod:`landscape.analyses.hessian.steps`, refused where
no step is accurate: :mod:`landscape.analyses.hessian.finite`);
``auto`` times the exact ways and takes the cheapest for the products the solver still expects (it tells the
operator through :meth:`HessianOperator.plan_products`). A kept graph or trace holds the batch's intermediates
in memory, so only the first ``max_linearized`` batches keep one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext

import torch
from torch import Tensor
from torch.func import grad, vmap

from landscape.analyses.hessian import finite
from landscape.analyses.hessian.flat import FlatOperator
from landscape.analyses.hessian.linalg import LOCAL
from landscape.analyses.hessian.products import (
    FINITE_DIFFERENCE,
    BatchProducts,
    ProductCosts,
    central_difference,
    quiet_jvp,
)
from landscape.analyses.hessian.steps import StepChoice, full_float32
from landscape.core.gradients import gradient_of
from landscape.core.objective import Objective
from landscape.core.params import ParamDict, flatten, unflatten, weighted_sum
from landscape.core.second_order import has_hooks
from landscape.errors import LandscapeError
from landscape.options.hessian import FD_MAX_ERROR, HVP_MODES
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


class HessianOperator(FlatOperator):
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
    (one product = one full pass over the used batches). The attributes are :class:`FlatOperator`'s.

    Raises:
        LandscapeError: unknown ``mode``, no parameter matches ``patterns``, or a batch index out of range (or
            an empty list of batches).
    """

    operator = "hessian"
    #: whether the caller has ``--dtype``, so that advice may name float64 (a surface has none)
    dtype_option = True

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
        super().__init__(objective, params, patterns=patterns, batches=batches, shard=shard)
        self.mode = mode
        used = self.batch_indices
        keep = {"linearize": len(used), "graph": len(used), "jvp": 0, FINITE_DIFFERENCE: 0}
        self.max_linearized = keep.get(mode, int(max_linearized))
        self.costs = costs if costs is not None else ProductCosts()
        self._products = [
            BatchProducts(self._batch_loss(i), self.params, mode, self.costs, cached=slot < self.max_linearized)
            for slot, i in enumerate(used)
        ]
        self.differences = (
            finite.CentralDifferences(
                self._point_gradient,
                flatten(self.params),
                LOCAL,
                self.shape[0],
                self.dtype,
                self.device,
                lambda: finite.forward_lattice(self.dtype, self.device),
                self._explain,
                self.remedy,
            )
            if mode == FINITE_DIFFERENCE
            else None
        )

    # -- building blocks ---------------------------------------------------------------------------
    def _batch_loss(self, index: int) -> Callable[[ParamDict], Tensor]:
        """``sub -> L_b`` of batch ``index``, the batch read onto the device at each call (none is held here)."""
        # exact ways take second derivatives (eval-mode BatchNorm as its affine map); a central difference only first
        second_order = self.mode != FINITE_DIFFERENCE
        loss = self.objective.batch_loss_at(index, second_order=second_order)
        return lambda sub: loss(self._full(sub))

    def _left(self) -> int:
        if self._planned is None:  # nobody said: expect as many again as have been made
            return self.n_matvec + 1
        return max(self._planned, 1)

    def _batch_product(self, slot: int, v: ParamDict) -> ParamDict:
        return self._products[slot](v, self._left())

    @property
    def _linear(self) -> dict[int, Callable[[ParamDict], ParamDict]]:
        """The kept product functions (graphs or traces) by batch slot."""
        return {slot: p.cache for slot, p in enumerate(self._products) if p.cache is not None}

    def hvp_choice(self) -> dict[str, object]:
        """How the products were made: the mode, the number of batches per way, and the seconds measured.

        Returns:
            ``{"operator", "mode", "ways": {way: n_batches}, "bn_folded", "seconds": {...}, "failed": {...}}``, as
            result files record it (docs/schema.md): ``bn_folded`` the BatchNorm layers the exact ways fold into their
            convolutions (:class:`~landscape.core.second_order.SecondOrderFold`; 0 when none are, as with
            ``finite-difference``, which differentiates the model as it is); in ``finite-difference`` mode also
            ``finite_difference_step``, the length ``||eps v||`` of every displacement
            and ``finite_difference``, the step's measurement (its predicted error: the two-step estimate,
            :class:`~landscape.analyses.hessian.steps.StepChoice`), and ``finite_difference_gradients``, the
            gradients this operator spent so far (the measurement's, when made here, and two per product).
        """
        ways = Counter(p.way for p in self._products if p.way is not None)
        out = {**super().hvp_choice(), "mode": self.mode, "ways": dict(sorted(ways.items())), **self.costs.summary()}
        out["bn_folded"] = bn_folded(self.objective, self.mode)
        if self.differences is not None:
            out["finite_difference_gradients"] = self.differences.gradients
        return out

    def _regularizer_product(self, v: ParamDict) -> ParamDict | None:
        reg = self.objective.regularizer
        if not reg.active or self.mode != FINITE_DIFFERENCE:
            return super()._regularizer_product(v)
        gradient = grad(lambda sub: reg(self._full(sub)))
        with full_float32(self.device):
            return central_difference(gradient, self.params, v, self.step().step)

    # -- central differences ----------------------------------------------------------------------
    def step(self, start: Tensor | None = None) -> StepChoice:
        """The step of this point's central differences: chosen once from its measured errors, then kept.

        Operators that share :attr:`costs` (the batches of one shape at one point) share the step.

        Args:
            start: the unit vector ``w`` of the probe (:func:`~landscape.analyses.hessian.steps.choose_step`); default
                a Gaussian unit vector from seed 0.

        Returns:
            The :class:`~landscape.analyses.hessian.steps.StepChoice`.

        Raises:
            LandscapeError: not in ``finite-difference`` mode, or no step gives products within ``FD_MAX_ERROR``
                (the message names why: :mod:`~landscape.analyses.hessian.finite`).
        """
        if self.differences is None:
            raise LandscapeError(f"--hvp {self.mode!r} makes exact products: it has no step")
        if self.costs.step is not None:
            self.differences.adopt(self.costs.step)
        self.costs.step = self.differences.step(start)
        return self.costs.step

    def _point_gradient(self, shift: Tensor | None) -> Tensor:
        """The flat gradient of the operator's loss at ``theta + shift`` (added in the weights' dtype)."""
        point = (
            self.params
            if shift is None
            else {n: t + d for (n, t), d in zip(self.params.items(), unflatten(shift, self.params).values())}
        )
        reg = self.objective.regularizer
        start = gradient_of(lambda sub: reg(self._full(sub)))(point) if reg.active else None  # no matmul: float32
        part, parts = (distributed.rank(), distributed.world_size()) if self.shard else (0, 1)
        with full_float32(self.device):
            total = weighted_sum(
                self.weights,
                lambda slot: gradient_of(self._products[slot].loss)(point),
                start=start,
                part=part,
                parts=parts,
            )
        out = flatten(total) if total is not None else torch.zeros(self.shape[0], dtype=self.dtype, device=self.device)
        return distributed.sum_tensor(out) if self.shard else out

    def start_vector(self, generator: torch.Generator) -> Tensor | None:
        """A Lanczos start vector that sees the point's top curvature, for central differences (else None).

        :meth:`~landscape.analyses.hessian.finite.CentralDifferences.start_vector`: the gradient's direction plus
        the Gaussian unit vector the solver would draw; when the step is measured with it, its product is already
        made.

        Args:
            generator: the solver's generator.

        Returns:
            The unit start vector in :attr:`dtype`, or None (exact products, or a step shared from another operator).
        """
        if self.differences is None:
            return None
        if self.costs.step is not None:
            self.differences.adopt(self.costs.step)
        vector = self.differences.start_vector(generator)
        self.costs.step = self.differences.choice
        return vector

    def product_error(self, curvature: float = 0.0) -> float:
        """The predicted error ``||C_h u - H u||`` of a unit vector's central difference (0 for the exact ways).

        Args:
            curvature: the curvature along ``u`` (:meth:`~landscape.analyses.hessian.steps.StepChoice.product_error`).

        Returns:
            The absolute error.
        """
        return self.differences.product_error(curvature) if self.differences is not None else 0.0

    def adapt_step(self, vector: Tensor) -> bool:
        """Measure the truncation along ``vector`` and shorten the central differences' step when it must be.

        :meth:`~landscape.analyses.hessian.finite.CentralDifferences.adapt` (3 gradients along ``vector``); the
        operators sharing :attr:`costs` take the new step.

        Args:
            vector: the top Ritz vector, or the vector whose products a solver found asymmetric.

        Returns:
            True when the step was shortened; False for exact products, or when the asymmetry is not the
            truncation's.
        """
        if self.differences is None:
            return False
        shortened = self.differences.adapt(vector)
        self.costs.step = self.differences.choice
        return shortened

    @property
    def curvature_scale(self) -> float | None:
        """The curvature the central differences' step was chosen for (None for exact products, or before it is)."""
        return self.differences.scale if self.differences is not None else None

    @property
    def asymmetry_tolerance(self) -> float | None:
        """The relative asymmetry of two couplings the solvers allow: ``FD_MAX_ERROR`` for central differences.

        Returns:
            :data:`~landscape.options.hessian.FD_MAX_ERROR`, or None (rounding only) for exact products.
        """
        return FD_MAX_ERROR if self.differences is not None else None

    def explain_asymmetry(self, upper: float, lower: float, products: int) -> str | None:
        """Why this operator's products are not symmetric, with what to do (None: the solvers' general reason).

        Args:
            upper: ``v_i . A v_j``.
            lower: ``v_j . A v_i``.
            products: the products made so far.

        Returns:
            A one-line message for central differences, else None.
        """
        return self.differences.asymmetry(upper, lower, products) if self.differences is not None else None

    def _explain(self, finding: str) -> str:
        """The one-line refusal of central differences at this point: ``finding``, its cause and what to do."""
        x = self.objective.batches[0][0][:2]
        params = {n: t.detach().requires_grad_(t.is_floating_point()) for n, t in self._point.items()}
        kinks = finite.kinked_operations(lambda: self.objective.logits(params, x))
        return finite.refusal(
            finding,
            kinks=kinks,
            lattice=finite.forward_lattice(self.dtype, self.device),
            dtype=self.dtype,
            python=False,
            float64=self._wider(),
        )

    def _wider(self) -> bool:
        """Whether float64 may be advised: the products are in another dtype and the caller has ``--dtype``."""
        return self.dtype_option and self.dtype != torch.float64

    def remedy(self, problem: str) -> str:
        """What to try when these products are not a Hessian's (``problem``: ``non-finite`` or ``asymmetric``).

        Float64 is suggested only to an operator that computes in another dtype for a caller with ``--dtype``
        (:attr:`dtype_option`), and another product only where another could help
        (:func:`~landscape.analyses.hessian.linalg.remedy_of`).
        """
        wider = ": try --dtype float64" if self._wider() else ""
        if problem == "non-finite":
            return f"a NaN weight, or a loss that overflows in {str(self.dtype).replace('torch.', '')}{wider}"
        if self.mode == FINITE_DIFFERENCE:
            return f"with --hvp finite-difference the differences cross kinks of ReLU-like activations{wider}"
        other = "finite-difference" if self.mode == "jvp" else "jvp"
        return (
            "a custom autograd function whose backward cannot be differentiated (once_differentiable) makes the "
            f"products drop terms; try --hvp {other}"
        )

    def hvp_dict(self, v: Mapping[str, Tensor], *, part: int = 0, parts: int = 1) -> ParamDict:
        """``H v`` for a dict ``v`` (:meth:`FlatOperator.hvp_dict`), the central differences' step chosen first."""
        if self.mode == FINITE_DIFFERENCE:
            self.step()
        return super().hvp_dict(v, part=part, parts=parts)

    def matvec(self, v: Tensor) -> Tensor:
        """``H v`` for a flat vector ``v`` of length n (:meth:`FlatOperator.matvec`).

        With central differences the step is measured at the first product (its probe along ``v``), and the
        probe's own product, which the measurement made, is returned as it is.

        Args:
            v: a vector of ``n`` entries (any shape that flattens to ``(n,)``).

        Returns:
            ``H v``, shape ``(n,)``, in :attr:`dtype` on :attr:`device`.

        Raises:
            ValueError: ``v`` does not have ``n`` entries.
        """
        if self.differences is None:
            return super().matvec(v)
        v = v.to(device=self.device, dtype=self.dtype).reshape(-1)
        if v.numel() != self.shape[0]:
            raise ValueError(f"vector has {v.numel()} entries, the operator acts on {self.shape[0]}")
        self.step(v.double() / torch.linalg.vector_norm(v.double()) if self.costs.step is None else None)
        known = self.differences.probe_product(v)
        if known is not None:  # the probe's product, made by the step's measurement
            self.n_matvec += 1
            if self._planned is not None:
                self._planned -= 1
            return known
        self.differences.count()
        return super().matvec(v)

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
        if not vectorize:
            return super().matmat(V)
        V = self._columns(V)
        if self.differences is not None:
            self.step()  # chosen before the map: its measurement is not a mapped computation
            self.differences.count(V.shape[1])
        count, planned = self.n_matvec, self._planned
        with full_float32(self.device) if self.differences is not None else nullcontext():
            out = vmap(lambda col: flatten(self._vectorized_hvp(unflatten(col, self.params))), in_dims=1, out_dims=1)(V)
        self.n_matvec, self._planned = count + V.shape[1], planned
        return out

    def _vectorized_hvp(self, v: ParamDict) -> ParamDict:
        """``H v`` by ``jvp(grad)`` for every batch, plus the regulariser's (central differences in that mode).

        These are the ways that run inside ``vmap``.
        """
        if self.mode == FINITE_DIFFERENCE:
            length = self.step().step
            return self._weighted_sum(
                v, lambda slot, vec: central_difference(grad(self._products[slot].loss), self.params, vec, length)
            )
        return self._weighted_sum(v, lambda slot, vec: quiet_jvp(grad(self._products[slot].loss), self.params, vec))

    def dense(self) -> Tensor:
        """The full n x n matrix by n products with the unit vectors, vectorised (tiny problems and tests).

        Returns:
            ``H``, shape ``(n, n)``, in :attr:`dtype` on :attr:`device`.
        """
        return self.matmat(torch.eye(self.shape[0], dtype=self.dtype, device=self.device), vectorize=True)

    def clear_cache(self) -> None:
        """Drop the kept per-batch graphs and traces (and the memory they hold); measurements are kept."""
        for p in self._products:
            p.drop()
