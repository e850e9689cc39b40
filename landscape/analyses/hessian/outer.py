"""Operators of the form ``J^T M J``: the network's Jacobian in the logits around a matrix in logit space.

For batch ``b`` with logits ``z = f(x_b; theta)`` (shape ``(N_b, C)``) and ``J_b = dz / dtheta``, an
:class:`OuterOperator` multiplies by

    C_b v = J_b^T (M_b (J_b v))

in two passes: ``J_b v`` by one forward-mode pass (``torch.func.jvp`` of the logits), ``M_b`` applied in logit
space (:meth:`OuterOperator._middle`: the loss's Hessian in the logits for the generalised Gauss-Newton, the outer
product of the per-sample logit gradients for the empirical Fisher), and ``J_b^T u`` by one backward pass
through the logits' graph, kept between products for the first ``max_kept`` batches (rebuilt for the others).
No second derivative of the network is taken. The logits are those of the Hessian's products (eval-mode
BatchNorm folded into the convolution before it or evaluated as its affine map:
:mod:`landscape.core.second_order`), so the operators and the Hessian differentiate the same function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor
from torch.func import jvp

from landscape.analyses.hessian.flat import FlatOperator
from landscape.core.objective import Objective
from landscape.core.params import ParamDict

#: how many batches keep the logits' graph between products by default (each holds one forward of memory)
MAX_KEPT = 8


class OuterOperator(FlatOperator):
    """``sum_b (N_b / N) J_b^T M_b J_b + H_R`` on flat vectors (the shared half of the GGN and empirical Fisher).

    Args:
        objective: the objective (model, batches, criterion, regulariser).
        params: the evaluation point (default ``objective.params``).
        patterns: name patterns of the operator's block (:class:`~landscape.analyses.hessian.flat.FlatOperator`).
        batches: indices of the objective's batches to use (default all).
        shard: under torchrun, each rank multiplies by its share of the batches (summed with ``all_reduce``).
        max_kept: how many batches keep their logits' graph between products.
    """

    def __init__(
        self,
        objective: Objective,
        params: Mapping[str, Tensor] | None = None,
        *,
        patterns: Sequence[str] | str | None = None,
        batches: Sequence[int] | None = None,
        shard: bool = False,
        max_kept: int = MAX_KEPT,
    ) -> None:
        super().__init__(objective, params, patterns=patterns, batches=batches, shard=shard)
        self.max_kept = int(max_kept)
        self._kept: dict[int, Callable[[Tensor], ParamDict]] = {}

    def _middle(self, logits: Tensor, targets: Tensor, tangent: Tensor) -> Tensor:
        """``M_b (J_b v)``: the batch's middle matrix times the logits' tangent, shape ``(N_b, C)`` (a subclass's)."""
        raise NotImplementedError

    def _logits(self, x: Tensor) -> Callable[[ParamDict], Tensor]:
        """``sub -> z``: the logits of inputs ``x`` as a function of the selected parameters."""
        return lambda sub: self.objective.logits(self._full(sub), x, second_order=True)

    def _batch_product(self, slot: int, v: ParamDict) -> ParamDict:
        x, y = self.objective.batches[self.batch_indices[slot]]
        logits = self._logits(x)
        z, tangent = jvp(logits, (self.params,), (v,))
        u = self._middle(z.detach(), y, tangent.detach())
        pull = self._kept.get(slot)
        if pull is None:
            pull = _pullback(logits, self.params)
            if slot < self.max_kept:
                self._kept[slot] = pull
        return pull(u)

    def hvp_choice(self) -> dict[str, object]:
        """How the products were made: ``{"operator", "products": "jvp-vjp", "kept_graphs"}`` (docs/schema.md).

        Returns:
            The record.
        """
        return {**super().hvp_choice(), "products": "jvp-vjp", "kept_graphs": len(self._kept)}

    def clear_cache(self) -> None:
        """Drop the kept logits' graphs (and the memory they hold)."""
        self._kept.clear()


def _pullback(logits: Callable[[ParamDict], Tensor], params: ParamDict) -> Callable[[Tensor], ParamDict]:
    """``u -> J^T u`` by backward passes through the logits' graph, built once (plain autograd, retained)."""
    names = list(params)
    leaves = [params[n].detach().requires_grad_(True) for n in names]
    with torch.enable_grad():
        z = logits(dict(zip(names, leaves)))

    def pull(u: Tensor) -> ParamDict:
        if not z.requires_grad:  # logits constant in the selected parameters
            return {n: torch.zeros_like(params[n]) for n in names}
        with torch.enable_grad():
            out = torch.autograd.grad(z, leaves, u, retain_graph=True, allow_unused=True, materialize_grads=True)
        return dict(zip(names, out))

    return pull
