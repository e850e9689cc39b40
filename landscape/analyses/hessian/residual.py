"""The residual ``R = H - G``: the part of the Hessian that holds the network's second derivatives.

For a loss ``l(z, y)`` of the logits ``z_n = f(x_n; theta)``,

    R = H - G = (1/N) sum_n sum_k (dl / dz_k)_n  d^2 f_k(x_n) / dtheta^2,

the Hessian minus the generalised Gauss-Newton (:mod:`landscape.analyses.hessian.ggn`). ``G`` is positive
semi-definite for a loss convex in the logits, so ``lambda_min(H) >= lambda_min(G) + lambda_min(R) >=
lambda_min(R)`` (Weyl): every negative eigenvalue of ``H`` comes from ``R``. A product is the difference of the
Hessian's product (made as ``--hvp`` says, :class:`~landscape.analyses.hessian.operator.HessianOperator`) and the
Gauss-Newton's, both of the data term only: the regulariser's Hessian belongs to both ``H`` and ``G`` and so is
not part of ``R``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

from torch import Tensor

from landscape.analyses.hessian.flat import FlatOperator
from landscape.analyses.hessian.ggn import GGNOperator
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.products import ProductCosts
from landscape.core.objective import Objective
from landscape.core.params import ParamDict
from landscape.core.regularizer import Regularizer


class ResidualOperator(FlatOperator):
    """``R = H - G`` of an objective's data term at one point, on flat vectors.

    Args:
        objective: the objective (model, batches, criterion; its regulariser cancels).
        params: the evaluation point (default ``objective.params``).
        patterns: name patterns of the operator's block (:class:`~landscape.analyses.hessian.flat.FlatOperator`).
        batches: indices of the objective's batches to use (default all).
        mode: how the Hessian's products are made (:class:`HessianOperator`'s ``mode``).
        max_linearized: how many batches ``auto`` lets keep a Hessian graph or trace.
        costs: the Hessian's product measurements, shared with other operators on batches of the same shape.
        shard: under torchrun, each rank multiplies by its share of the batches (summed with ``all_reduce``).

    Attributes:
        hessian: the data term's Hessian operator.
        ggn: the data term's Gauss-Newton operator.
    """

    operator = "residual"

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
        super().__init__(objective, params, patterns=patterns, batches=batches, shard=shard)
        data_term = copy.copy(objective)  # shares the model, batches and BatchNorm fold; no regulariser
        data_term.regularizer = Regularizer()
        where = {"patterns": patterns, "batches": batches}
        self.hessian = HessianOperator(
            data_term, params, **where, mode=mode, max_linearized=max_linearized, costs=costs
        )
        self.ggn = GGNOperator(data_term, params, **where, max_kept=max_linearized)

    def hvp_dict(self, v: Mapping[str, Tensor], *, part: int = 0, parts: int = 1) -> ParamDict:
        """``R v = H v - G v`` of the data term (this part's share of the batches with ``parts > 1``).

        Args:
            v: the vector by parameter name.
            part: which share to compute, ``0 <= part < parts``.
            parts: the number of shares.

        Returns:
            ``R v`` by selected parameter name.
        """
        h = self.hessian.hvp_dict(v, part=part, parts=parts)
        g = self.ggn.hvp_dict(v, part=part, parts=parts)
        self.n_matvec += 1
        return {n: h[n] - g[n] for n in self.names}

    def plan_products(self, count: int) -> None:
        """Tell the Hessian's ``auto`` that about ``count`` more products are coming.

        Args:
            count: the number of products expected next.
        """
        super().plan_products(count)
        self.hessian.plan_products(count)

    def hvp_choice(self) -> dict[str, object]:
        """How the products were made: ``{"operator": "residual", "hessian": {...}, "ggn": {...}}``.

        Returns:
            The record, with the Hessian's and the Gauss-Newton's own.
        """
        return {**super().hvp_choice(), "hessian": self.hessian.hvp_choice(), "ggn": self.ggn.hvp_choice()}

    # -- the Hessian part's advice and, by central differences, its error (the Gauss-Newton's products are exact) --
    def remedy(self, problem: str) -> str:
        """What to try when these products are not finite or not symmetric: the Hessian part's advice (``--hvp``)."""
        return self.hessian.remedy(problem)

    @property
    def asymmetry_tolerance(self) -> float | None:
        """The relative asymmetry the solvers allow: the Hessian part's (``FD_MAX_ERROR`` by central differences)."""
        return self.hessian.asymmetry_tolerance

    def product_error(self, curvature: float = 0.0) -> float:
        """The predicted error of a unit vector's product: the Hessian part's (0 for exact products)."""
        return self.hessian.product_error(curvature)

    def adapt_step(self, vector: Tensor) -> bool:
        """Shorten the Hessian part's step of central differences along ``vector`` when it must be (else False)."""
        return self.hessian.adapt_step(vector)

    def explain_asymmetry(self, upper: float, lower: float, products: int) -> str | None:
        """Why the products are not symmetric: the Hessian part's central differences (None: the general reason)."""
        return self.hessian.explain_asymmetry(upper, lower, products)

    def clear_cache(self) -> None:
        """Drop both operators' kept graphs and traces."""
        self.hessian.clear_cache()
        self.ggn.clear_cache()
