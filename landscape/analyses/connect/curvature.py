"""Curvature along a path: the top Hessian eigenvalue and the adaptive average-case sharpness at each point.

At a point ``theta`` of the line or the curve, with the BatchNorm statistics (and REPAIR's corrections) it is
evaluated with, on each split's objective ``L = sum_b (N_b / N) L_b + R``:

- ``lambda_max``: the largest eigenvalue of the Hessian ``sum_b (N_b / N) d^2 L_b / d theta^2 + d^2 R / d theta^2``
  over every variable parameter, by the package's thick-restart Lanczos
  (:func:`~landscape.analyses.hessian.lanczos.lanczos`, ``which="LA"``, relative tolerance
  :data:`~landscape.options.connect.CURVATURE_TOL`) on the Hessian operator
  (:class:`~landscape.analyses.hessian.operator.HessianOperator`, ``mode="graph"``: each batch keeps one gradient
  graph for all of the point's products, each product one backward pass; the way is fixed rather than timed so that
  a resumed run makes the same products). Whether it met the tolerance is
  recorded beside it; an unconverged value is the largest Ritz value found, a lower bound of ``lambda_max``.
- ``S_avg``: the adaptive average-case sharpness ``E_S E_{delta ~ N(0, rho^2 diag(w^2))} [L_S(w + delta) - L_S(w)]``
  (Andriushchenko et al. 2023) of the data loss, averaged over the objective's batches
  (:func:`~landscape.analyses.sharpness.measures.average_sharpness`, antithetic draws), its forward passes by the
  split's :class:`~landscape.core.forward.EvalForward`, tuned once per run (BatchNorm folded but under REPAIR's
  hooks, the inputs' layout chosen: the same values to rounding, each forward cheaper). Its Monte-Carlo standard
  error given the batches (:attr:`~landscape.analyses.sharpness.measures.SharpnessEstimate.mean_stderr`,
  ``sqrt(sum_b se_b^2) / B``) is recorded beside it (NaN with one draw).

Both use private generators seeded by the run's seed, so a resumed run computes the same numbers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import Tensor

from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.sharpness.measures import average_sharpness
from landscape.core.forward import EvalForward
from landscape.core.objective import Objective
from landscape.options.connect import CURVATURE_HVP, CURVATURE_MAXITER, CURVATURE_TOL


@dataclass(frozen=True)
class CurvatureSettings:
    """How a point's curvature is measured.

    Attributes:
        rho: the average-case sharpness' radius, relative to ``|w|``.
        samples: its noise draws per batch.
        seed: the seed of Lanczos' start vector and of the noise.
        tol: Lanczos' relative tolerance.
        maxiter: Lanczos' restarts at most.
    """

    rho: float
    samples: int
    seed: int
    tol: float = CURVATURE_TOL
    maxiter: int = CURVATURE_MAXITER


def objective_at(objective: Objective, params: Mapping[str, Tensor], buffers: Mapping[str, Tensor]) -> Objective:
    """The objective with its variable parameters and buffers set to a point's (it shares the model and batches).

    Args:
        objective: the objective (not changed).
        params: the point's variable parameters.
        buffers: the point's buffers.

    Returns:
        A shallow copy whose :attr:`params` and :attr:`buffers` are the point's.
    """
    at = copy.copy(objective)
    at.params, at.buffers = dict(params), dict(buffers)
    return at


def point_curvature(
    objective: Objective,
    params: Mapping[str, Tensor],
    buffers: Mapping[str, Tensor],
    settings: CurvatureSettings,
    forward: EvalForward | None = None,
    base_loss: Sequence[float] | None = None,
) -> tuple[float, float, float, float, float]:
    """``lambda_max`` of the Hessian, whether it converged, ``S_avg``, its standard error and the products made.

    Args:
        objective: one split's objective.
        params: the point's variable parameters.
        buffers: its buffers (BatchNorm statistics as it is evaluated with).
        settings: the radius, draws, seed and Lanczos' tolerance.
        forward: ``S_avg``'s forward passes by this tuned forward of ``objective``
            (:class:`~landscape.core.forward.EvalForward`, for the point's buffers); default the plain forward.
        base_loss: the data loss of each of the objective's batches at the point, when already known (the point's
            :attr:`~landscape.core.objective.Evaluation.batch_losses`): ``S_avg`` then makes no forward pass at
            ``w`` itself; default one per batch.

    Returns:
        ``(lambda_max, 1.0 if converged else 0.0, S_avg, its standard error, products)`` as floats
        (:data:`~landscape.options.connect.CURVATURE_QUANTITIES`).

    Raises:
        LandscapeError: a Hessian product with NaN or Inf entries.
    """
    at = objective_at(objective, params, buffers)
    op = HessianOperator(at, at.params, mode=CURVATURE_HVP)
    top = lanczos(
        op, k=1, which="LA", tol=settings.tol, maxiter=settings.maxiter, seed=settings.seed, return_eigenvectors=False
    )
    sharp = average_sharpness(
        at,
        settings.rho,
        samples=settings.samples,
        antithetic=True,
        seed=settings.seed,
        forward=forward,
        base_loss=base_loss,
        option="--curvature-rho",
    )
    return (
        float(top.eigenvalues[-1]),
        1.0 if bool(top.converged[-1]) else 0.0,
        float(sharp.mean[0]),
        float(sharp.mean_stderr[0]),
        float(op.n_matvec),
    )
