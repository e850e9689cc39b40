"""How far a curvature operator is from the Hessian: principal angles, and spectral and Frobenius distances.

For the Hessian ``H`` and an approximation ``A`` (:mod:`landscape.analyses.hessian.operators`):

- **Principal angles** between the top-k eigenspaces ``span(U)`` of ``H`` and ``span(V)`` of ``A`` (orthonormal
  ``n x k`` bases): ``theta_i = arccos(sigma_i(U^T V))``, ascending; 0 where the spaces share a direction, pi/2
  where a direction of one is orthogonal to the other.
- **Spectral distance** ``||H - A||_2 / ||H||_2``: each norm is the largest eigenvalue magnitude of a symmetric
  operator, found by Lanczos (``which="LM"``, ``k = 1``) on :class:`DifferenceOperator` (one product of each
  operator per step) and on ``H``. A Ritz value never exceeds the largest magnitude; a converged one (its residual
  within ``tol`` of it) lies within ``tol |theta|`` of an eigenvalue.
- **Frobenius distance** ``||H - A||_F / ||H||_F`` by Hutchinson: for Rademacher probes ``z_i`` (``E[z z^T] = I``),
  ``||M||_F^2 = E ||M z||^2``; the same probes serve ``H`` and every ``A`` (``H z_i`` made once), so the ratio
  ``r = sum_i ||(H - A) z_i||^2 / sum_i ||H z_i||^2`` is estimated with paired samples, and its standard error is the
  delta method's, ``sqrt(var_i(d_i - r h_i) / s) / mean(h)``, halved and divided by ``sqrt(r)`` for ``sqrt(r)``.

Where ``A`` equals ``H`` up to rounding (the Gauss-Newton of a block the logits are linear in, such as the head),
``H - A`` is rounding noise, which is not symmetric at its own scale and which Lanczos refuses; below
:func:`rounding_distance` the spectral distance is therefore not computed by Lanczos: it is given as the Frobenius
estimate, an upper bound (``||M||_2 <= ||M||_F``), flagged not converged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from landscape.analyses.hessian.flat import FlatOperator
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.probes import probe_vectors


class DifferenceOperator:
    """``H - A`` on flat vectors: one product of each per product (for Lanczos).

    Args:
        hessian: the Hessian operator.
        other: the approximation, on the same parameters.

    Attributes:
        shape: ``(n, n)``.
        dtype: the vectors' dtype.
        device: the vectors' device.
        n_matvec: the products made.
    """

    def __init__(self, hessian: FlatOperator, other: FlatOperator) -> None:
        if hessian.names != other.names:
            raise ValueError("the two operators act on different parameters")
        self.hessian, self.other = hessian, other
        self.shape, self.dtype, self.device = hessian.shape, hessian.dtype, hessian.device
        self.n_matvec = 0

    def matvec(self, v: Tensor) -> Tensor:
        """``H v - A v``.

        Args:
            v: a flat vector of ``n`` entries.

        Returns:
            ``(H - A) v``.
        """
        self.n_matvec += 1
        return self.hessian.matvec(v) - self.other.matvec(v)

    def plan_products(self, count: int) -> None:
        """Tell both operators (those that listen) how many more products are coming.

        Args:
            count: the number of products expected next.
        """
        for op in (self.hessian, self.other):
            if hasattr(op, "plan_products"):
                op.plan_products(count)


@dataclass(frozen=True)
class SpectralNorm:
    """``||M||_2`` of a symmetric operator by Lanczos (largest magnitude, ``k = 1``).

    Attributes:
        value: ``|theta|``, the Ritz value of largest magnitude (a lower bound of ``||M||_2``; within ``tol`` of an
            eigenvalue's magnitude when converged).
        residual: ``||M y - theta y||`` of its unit Ritz vector.
        converged: whether the residual met Lanczos' tolerance.
        products: the products spent.
    """

    value: float
    residual: float
    converged: bool
    products: int


def spectral_norm(
    op: object, *, tol: float, ncv: int | None = None, maxiter: int | None = None, seed: int = 0
) -> SpectralNorm:
    """``||M||_2 = max |lambda(M)|`` of a symmetric operator by Lanczos (``which="LM"``, ``k = 1``).

    Args:
        op: the operator (``matvec``, ``shape``, ``dtype``, ``device``).
        tol: relative residual of a converged pair.
        ncv: Lanczos basis size (None: the solver's default).
        maxiter: most restarts (None: the solver's default).
        seed: the start vector's seed.

    Returns:
        The estimate with its residual and convergence flag.
    """
    res = lanczos(op, k=1, which="LM", tol=tol, ncv=ncv, maxiter=maxiter, seed=seed, return_eigenvectors=False)
    return SpectralNorm(
        float(res.eigenvalues.abs().max()), float(res.residuals[0]), bool(res.converged[0]), int(res.n_matvec)
    )


@dataclass(frozen=True)
class FrobeniusDistance:
    """Hutchinson's ``||H - A||_F / ||H||_F`` with paired probes, and its standard error (the module's formula).

    Attributes:
        relative: ``sqrt(r)``, ``r = sum ||(H - A) z||^2 / sum ||H z||^2``.
        stderr: its standard error (delta method).
        squared: the estimate of ``||H - A||_F^2``, ``mean ||(H - A) z||^2``.
    """

    relative: float
    stderr: float
    squared: float


@dataclass(frozen=True)
class HessianProbes:
    """The probes of the Frobenius estimates and the Hessian's products with them.

    Attributes:
        probes: ``Z``, ``(n, s)`` Rademacher columns.
        products: ``H Z``, ``(n, s)``.
        squared: the estimate of ``||H||_F^2``, ``mean ||H z||^2``.
        stderr: its standard error ``std(||H z||^2) / sqrt(s)``.
    """

    probes: Tensor
    products: Tensor
    squared: float
    stderr: float

    @property
    def norm(self) -> float:
        """The estimate of ``||H||_F``, ``sqrt(mean ||H z||^2)``."""
        return math.sqrt(max(self.squared, 0.0))


def hessian_probes(hessian: FlatOperator, samples: int, seed: int) -> HessianProbes:
    """``samples`` Rademacher probes ``z_i`` from ``seed`` and the Hessian's products ``H z_i``.

    Args:
        hessian: the Hessian operator.
        samples: the number of probes (>= 2).
        seed: the probes' seed (a private generator).

    Returns:
        The probes, their products and the estimate of ``||H||_F^2``.
    """
    Z = probe_vectors(hessian.shape[0], samples, seed=seed, dtype=hessian.dtype, device=hessian.device)
    HZ = torch.stack([hessian.matvec(Z[:, i]) for i in range(samples)], dim=1)
    h = HZ.double().pow(2).sum(0)
    return HessianProbes(Z, HZ, float(h.mean()), float(h.std() / math.sqrt(samples)))


def frobenius_distance(probes: HessianProbes, other: FlatOperator) -> FrobeniusDistance:
    """``||H - A||_F / ||H||_F`` by Hutchinson on the Hessian's probes (paired), with its standard error.

    Args:
        probes: the probes and ``H``'s products (:func:`hessian_probes`).
        other: the approximation ``A``.

    Returns:
        The relative distance, its standard error and the estimate of ``||H - A||_F^2``.
    """
    Z, HZ = probes.probes, probes.products
    d = torch.stack([(HZ[:, i] - other.matvec(Z[:, i])).double().pow(2).sum() for i in range(Z.shape[1])])
    h = HZ.double().pow(2).sum(0)
    ratio = float(d.sum() / h.sum()) if float(h.sum()) > 0 else math.nan
    spread = float((d - ratio * h).std() / math.sqrt(len(d)) / h.mean()) if len(d) > 1 else math.nan
    relative = math.sqrt(max(ratio, 0.0))
    stderr = spread / (2 * relative) if relative > 0 else math.nan
    return FrobeniusDistance(relative, stderr, float(d.mean()))


def principal_angles(U: Tensor, V: Tensor) -> Tensor:
    """The principal angles between ``span(U)`` and ``span(V)``, radians, ascending.

    Args:
        U: an ``(n, k)`` basis (orthonormalised here).
        V: an ``(n, k)`` basis.

    Returns:
        ``arccos(sigma(Q_U^T Q_V))`` for the singular values in descending order: ``min(k_U, k_V)`` angles, float64.
    """
    qu = torch.linalg.qr(U.double())[0]
    qv = torch.linalg.qr(V.double())[0]
    cosines = torch.linalg.svdvals(qu.T @ qv).clamp(0.0, 1.0)
    return torch.arccos(cosines).cpu()


def rounding_distance(dtype: torch.dtype) -> float:
    """The relative Frobenius distance below which ``H - A`` is taken for rounding noise: ``10 sqrt(eps)``.

    Lanczos' symmetry check allows ``10 sqrt(eps)`` of an operator's own scale; the rounding of ``H v - A v`` is about
    ``eps ||H||``, within that allowance once ``||H - A|| >= sqrt(eps) ||H||``.

    Args:
        dtype: the operators' floating dtype.

    Returns:
        About 3.5e-3 for float32, 1.5e-7 for float64.
    """
    return 10 * math.sqrt(float(torch.finfo(dtype).eps))


def relative(value: float, reference: float) -> float:
    """``value / reference``, NaN when the reference is 0 or not finite.

    Args:
        value: the numerator.
        reference: the denominator.

    Returns:
        The ratio.
    """
    return value / reference if math.isfinite(reference) and reference > 0 else math.nan


def with_names(values: Mapping[str, float], names: list[str]) -> list[float]:
    """The values of ``names`` in order (NaN for a name not given).

    Args:
        values: name -> value.
        names: the names in order.

    Returns:
        The list.
    """
    return [float(values.get(n, math.nan)) for n in names]
