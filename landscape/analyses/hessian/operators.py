"""The curvature operators by name, and their eigenpairs: what every Hessian analysis takes as ``operator=``.

- ``hessian``: ``H``, :class:`~landscape.analyses.hessian.operator.HessianOperator` (second derivatives, ``--hvp``);
- ``ggn``: the generalised Gauss-Newton ``G = J^T H_z J``, :class:`~landscape.analyses.hessian.ggn.GGNOperator`;
- ``empirical-fisher``: ``(1/N) sum_n g_n g_n^T``, :class:`~landscape.analyses.hessian.fisher.EmpiricalFisherOperator`;
- ``residual``: ``R = H - G``, :class:`~landscape.analyses.hessian.residual.ResidualOperator`;
- ``kfac``: Kronecker factors per Linear and Conv2d layer, :class:`~landscape.analyses.hessian.kfac.KFACOperator`.

Each adds the regulariser's Hessian (which therefore cancels in ``R``). :func:`eigenpairs` takes K-FAC's
eigenpairs exactly from its factors and every other operator's by thick-restart Lanczos.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from landscape.analyses.hessian.fisher import EmpiricalFisherOperator
from landscape.analyses.hessian.flat import FlatOperator
from landscape.analyses.hessian.ggn import GGNOperator
from landscape.analyses.hessian.kfac import KFACOperator
from landscape.analyses.hessian.lanczos import check_request, lanczos
from landscape.analyses.hessian.linalg import EigenResult
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.products import ProductCosts
from landscape.analyses.hessian.residual import ResidualOperator
from landscape.core.objective import Objective
from landscape.options.hessian import check_operator

#: the operator class of each name of :data:`~landscape.options.hessian.OPERATORS`
OPERATOR_CLASSES: dict[str, type[FlatOperator]] = {
    "hessian": HessianOperator,
    "ggn": GGNOperator,
    "empirical-fisher": EmpiricalFisherOperator,
    "residual": ResidualOperator,
    "kfac": KFACOperator,
}


def curvature_operator(
    objective: Objective,
    operator: str = "hessian",
    params: Mapping[str, Tensor] | None = None,
    *,
    patterns: Sequence[str] | str | None = None,
    batches: Sequence[int] | None = None,
    mode: str = "auto",
    costs: ProductCosts | None = None,
    shard: bool = False,
) -> FlatOperator:
    """The curvature operator ``operator`` of ``objective`` at ``params`` (see the module doc).

    Args:
        objective: the objective (model, batches, criterion, regulariser).
        operator: one of :data:`~landscape.options.hessian.OPERATORS`.
        params: the evaluation point (default ``objective.params``).
        patterns: name patterns of the operator's block (every other parameter held fixed). Default: all.
        batches: indices of the objective's batches to use (default all), re-weighted by ``N_b / N_used``.
        mode: how Hessian products are made (``hessian`` and ``residual``; the others take ``auto`` only).
        costs: the Hessian's product measurements, shared by operators on batches of one shape.
        shard: under torchrun, each rank multiplies by its share of the batches.

    Returns:
        The operator (``matvec``, ``shape``, ``dtype``, ``device``, ``names``, ``hvp_choice()``...).

    Raises:
        LandscapeError: an unknown operator, a ``mode`` other than ``auto`` for an operator without second
            derivatives, or the operator's own errors (bad patterns or batches; K-FAC with a callable criterion).
    """
    check_operator(operator, mode)
    cls = OPERATOR_CLASSES[operator]
    where: dict[str, Any] = {"patterns": patterns, "batches": batches, "shard": shard}
    if operator in ("hessian", "residual"):
        where.update(mode=mode, costs=costs)
    return cls(objective, params, **where)


def eigenpairs(op: FlatOperator, k: int, which: str = "LA", **lanczos_options: Any) -> EigenResult:
    """``k`` eigenpairs of kind ``which`` of ``op``: exactly from K-FAC's factors, else by Lanczos.

    Args:
        op: a curvature operator (:func:`curvature_operator`).
        k: how many eigenpairs.
        which: ``LA``, ``SA``, ``BE`` or ``LM``.
        **lanczos_options: :func:`~landscape.analyses.hessian.lanczos.lanczos`'s ``ncv``, ``tol``, ``maxiter``,
            ``v0``, ``seed``, ``return_eigenvectors``, ``callback``; K-FAC's exact pairs use ``tol`` (to judge their
            measured residuals) and ``return_eigenvectors`` only.

    Returns:
        The pairs, ascending, with residuals and convergence flags.

    Raises:
        LandscapeError: a bad request (``k``, ``which``, ``ncv``) or the solver's errors.
    """
    if isinstance(op, KFACOperator):
        check_request(op.shape[0], k, which, lanczos_options.get("ncv"))
        exact = op.eigenpairs(
            k,
            which,
            tol=lanczos_options.get("tol", 1e-6),
            return_eigenvectors=lanczos_options.get("return_eigenvectors", True),
        )
        if exact is not None:
            return exact
    return lanczos(op, k=k, which=which, **lanczos_options)


def eigen_method(op: FlatOperator) -> str:
    """How :func:`eigenpairs` finds ``op``'s eigenpairs: ``"kronecker"`` (exact, K-FAC) or ``"lanczos"``.

    Args:
        op: a curvature operator.

    Returns:
        The method's name, as result files record it (``eigen_method``).
    """
    return "kronecker" if isinstance(op, KFACOperator) and op.exact else "lanczos"
