"""The empirical Fisher of an objective as a linear operator on flat vectors.

With ``g_n = d l(f(x_n; theta), y_n) / dtheta`` the gradient of sample ``n``'s loss at its data label, the
empirical Fisher is the uncentred second moment of the per-sample gradients,

    F = (1/N) sum_n g_n g_n^T  +  d^2 R_reg / dtheta^2.

It uses the data's labels and is not the true Fisher ``E_{y ~ p}[g g^T]`` (which equals the generalised
Gauss-Newton for cross-entropy): it differs from ``G`` wherever the model's predictions differ from the labels.
The per-sample gradient factors through the logits, ``g_n = J_n^T e_n`` with ``e_n = dl / dz_n``
(:func:`landscape.core.criteria.sample_logit_gradients`), so a product is

    F v = sum_b (N_b / N) J_b^T u_b,   (u_b)_n = (1 / N_b) e_n (e_n . (J_b v)_n),

one forward-mode and one backward pass per batch, without forming the ``N_b`` per-sample gradients
(:class:`~landscape.analyses.hessian.outer.OuterOperator`). The regulariser's Hessian is added as it is to ``H``
and ``G``.
"""

from __future__ import annotations

from torch import Tensor

from landscape.analyses.hessian.outer import OuterOperator
from landscape.core.criteria import sample_logit_gradients


class EmpiricalFisherOperator(OuterOperator):
    """The empirical Fisher ``F = (1/N) sum_n g_n g_n^T + H_R`` of an objective at one point.

    Arguments and attributes are :class:`~landscape.analyses.hessian.outer.OuterOperator`'s.
    """

    operator = "empirical-fisher"

    def _middle(self, logits: Tensor, targets: Tensor, tangent: Tensor) -> Tensor:
        """``(1 / N_b) e_n (e_n . (J v)_n)`` for every sample ``n`` of the batch."""
        e = sample_logit_gradients(logits, targets, self.objective.criterion)
        return e * (e * tangent).sum(-1, keepdim=True) / logits.shape[0]
