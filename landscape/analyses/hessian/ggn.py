"""The generalised Gauss-Newton matrix of an objective as a linear operator on flat vectors.

For a loss ``l(z, y)`` of the logits ``z_n = f(x_n; theta)`` and ``J_n = dz_n / dtheta``, the Hessian of the data
term splits into (Schraudolph 2002; Martens 2014)

    H = (1/N) sum_n J_n^T H_z,n J_n  +  (1/N) sum_n sum_k (dl/dz_k)_n d^2 f_k(x_n) / dtheta^2  =  G + R,

``H_z,n = d^2 l / dz_n^2`` the loss's Hessian in the logits (cross-entropy: ``diag(p) - p p^T``; soft-target
cross-entropy: ``s (diag(p) - p p^T)`` with ``s = sum_c t_c``; mean squared error against one-hot targets: ``(2 /
C) I``; one definition per criterion beside it, :func:`landscape.core.criteria.logit_hessian_product`). The first
term is the generalised Gauss-Newton ``G``, positive semi-definite for a loss convex in the logits; the residual
``R`` holds the network's second derivatives (:mod:`landscape.analyses.hessian.residual`). With batches of mean
losses,

    G v = sum_b (N_b / N) J_b^T (H_z,b (J_b v))  +  d^2 R_reg / dtheta^2 v,

one forward-mode pass (``J_b v``) and one backward pass (``J_b^T u``) per batch
(:class:`~landscape.analyses.hessian.outer.OuterOperator`). The regulariser's Hessian belongs to ``G`` as it does
to ``H`` (a function of theta alone: its Gauss-Newton part is its Hessian), so ``H - G`` is the network's term
only. For cross-entropy ``G`` is also the true Fisher, ``E_{y ~ p}[g g^T]``.
"""

from __future__ import annotations

from torch import Tensor

from landscape.analyses.hessian.outer import OuterOperator
from landscape.core.criteria import logit_hessian_product


class GGNOperator(OuterOperator):
    """The generalised Gauss-Newton ``G = sum_b (N_b / N) J_b^T H_z,b J_b + H_R`` of an objective at one point.

    Arguments and attributes are :class:`~landscape.analyses.hessian.outer.OuterOperator`'s.
    """

    operator = "ggn"

    def _middle(self, logits: Tensor, targets: Tensor, tangent: Tensor) -> Tensor:
        """``H_z (J v)`` of the batch's mean loss (its ``1 / N_b`` included)."""
        return logit_hessian_product(logits, targets, self.objective.criterion, tangent)
