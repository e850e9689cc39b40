"""Spectral density by stochastic Lanczos quadrature (SLQ), with a documented Gaussian broadening.

For a probe ``v = z / ||z||`` (z Rademacher or Gaussian), ``m`` Lanczos steps give a tridiagonal ``T`` with
eigenpairs ``(theta_j, s_j)``; the Gauss quadrature ``sum_j tau_j f(theta_j)``, ``tau_j = s_j[0]^2``,
approximates ``v^T f(A) v`` and is exact for polynomials of degree <= 2m - 1. Averaging over probes
estimates ``(1/n) tr f(A)``, so the nodes and weights (each probe's weights sum to 1, divided by the number
of probes) describe the normalised spectral measure ``(1/n) sum_i delta(t - lambda_i)``.

Broadening rule: each node becomes a Gaussian of standard deviation ``sigma`` (default: 1% of the spread of
all nodes, ``sigma = 0.01 * (max theta - min theta)``); the grid spans ``[min theta - 6 sigma, max theta +
6 sigma]`` in equal cells, and ``values`` are the **cell averages** of the broadened density (differences of
the Gaussian CDF divided by the cell width), so ``sum(values) * spacing = 1`` for any sigma and any grid
size, up to the tails beyond 6 sigma (< 2e-9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from landscape.analyses.hessian.lanczos import lanczos_tridiagonal
from landscape.analyses.hessian.linalg import Operator, announce, require_memory
from landscape.analyses.hessian.probes import probe_vectors
from landscape.errors import LandscapeError
from landscape.options import checks


@dataclass
class SpectralDensity:
    """The result of stochastic Lanczos quadrature.

    ``nodes`` and ``weights`` (probes, steps) (padding has weight 0; each row sums to 1), the density
    ``values`` on ``grid`` (cell centres; integrates to 1), the broadening ``sigma`` and ``n_matvec``.

    Attributes:
        nodes: the quadrature nodes theta_j, shape ``(probes, steps)``, float64.
        weights: their weights tau_j, shape ``(probes, steps)``; each row sums to 1, padding has weight 0.
        grid: the cell centres, shape ``(grid_points,)``.
        values: the broadened density's cell averages on ``grid``, shape ``(grid_points,)``.
        sigma: the Gaussian broadening used.
        n_matvec: the number of operator products used.
    """

    nodes: Tensor
    weights: Tensor
    grid: Tensor
    values: Tensor
    sigma: float
    n_matvec: int

    def moment(self, power: int) -> float:
        """The SLQ estimate of ``(1/n) tr(A^power)``: mean over probes of ``sum_j tau_j theta_j^power``.

        Args:
            power: the moment's order (0 gives 1).

        Returns:
            The estimate, a float.
        """
        return float((self.weights * self.nodes**power).sum(dim=1).mean())


def quadrature(alpha: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """Gauss quadrature nodes (eigenvalues of the tridiagonal T) and weights (squared first components).

    Args:
        alpha: T's diagonal, shape ``(m,)``.
        beta: T's off-diagonal, shape ``(m-1,)``.

    Returns:
        ``(theta, tau)``: the eigenvalues of T in ascending order and ``tau_j = s_j[0]^2``, each shape ``(m,)``.
    """
    T = torch.diag(alpha) + torch.diag(beta, 1) + torch.diag(beta, -1)
    theta, S = torch.linalg.eigh(T)
    return theta, S[0] ** 2


def broadened_density(
    nodes: Tensor,
    weights: Tensor,
    sigma: float | None = None,
    grid_points: int = 1000,
    *,
    span: tuple[float, float] | None = None,
) -> tuple[Tensor, Tensor, float]:
    """Gaussian-broadened density of weighted nodes, as cell averages on a uniform grid.

    ``values[c] = sum_i w_i (Phi((e_{c+1} - x_i) / sigma) - Phi((e_c - x_i) / sigma)) / (e_{c+1} - e_c)``
    for the cell edges ``e`` and the standard normal CDF ``Phi``, with ``weights`` normalised to sum to 1
    over all entries (the module's broadening rule).

    Args:
        nodes: the quadrature nodes (any shape).
        weights: their weights (same shape).
        sigma: the Gaussian's standard deviation, finite and > 0; None: 1% of the nodes' spread (of ``span``'s).
        grid_points: number of grid cells, >= 2.
        span: ``(lo, hi)`` to use instead of the nodes' least and greatest (several densities on one grid: the
            span of all their nodes); the grid is ``[lo - 6 sigma, hi + 6 sigma]``.

    Returns:
        ``(grid, values, sigma)``: cell centres, cell averages of the density, the sigma used.

    Raises:
        LandscapeError: ``sigma`` not a finite positive number, or fewer than 2 grid points.
    """
    x = nodes.reshape(-1).to(torch.float64)
    w = weights.reshape(-1).to(torch.float64)
    w = w / w.sum()
    lo, hi = (float(x.min()), float(x.max())) if span is None else (float(span[0]), float(span[1]))
    if sigma is None:
        spread = hi - lo if hi > lo else max(abs(hi), 1.0)
        sigma = 0.01 * spread
    sigma = checks.positive(sigma, "sigma")
    if grid_points < 2:
        raise LandscapeError(f"the density grid needs at least 2 points, got {grid_points}")
    require_grid_memory(grid_points, x.numel())
    edges = torch.linspace(lo - 6 * sigma, hi + 6 * sigma, grid_points + 1, dtype=torch.float64)
    width = float(edges[1] - edges[0])
    cdf = 0.5 * (1 + torch.erf((edges.unsqueeze(1) - x.unsqueeze(0)) / (sigma * math.sqrt(2))))
    values = ((cdf[1:] - cdf[:-1]) @ w) / width
    return 0.5 * (edges[1:] + edges[:-1]), values, float(sigma)


def require_grid_memory(grid_points: int, nodes: int) -> None:
    """Refuse, before it is allocated, a broadening of ``nodes`` nodes on ``grid_points`` cells that cannot fit.

    It holds the CDF at every cell edge for every node: ``8 (grid_points + 1) nodes`` bytes of the CPU's memory.

    Args:
        grid_points: cells of the density grid.
        nodes: quadrature nodes (``probes x steps``).

    Raises:
        LandscapeError: the CPU has less memory than that.
    """
    what = f"a density grid of {grid_points:,} points over {nodes:,} nodes"
    require_memory(grid_points + 1, nodes, torch.float64, torch.device("cpu"), what, "lower --grid-points")


def spectral_density(
    op: Operator,
    probes: int = 4,
    steps: int = 64,
    sigma: float | None = None,
    *,
    grid_points: int = 1000,
    seed: int | None = None,
    distribution: str = "rademacher",
) -> SpectralDensity:
    """Stochastic Lanczos quadrature: ``probes`` runs of ``steps`` Lanczos steps with full reorthogonalisation.

    Estimates the normalised spectral measure ``(1/n) sum_i delta(t - lambda_i)`` by the Gauss quadrature
    nodes ``theta_j`` and weights ``tau_j = s_j[0]^2`` of each probe's tridiagonal matrix (see the module
    docstring for the estimator and the broadening rule). Costs ``probes * steps`` operator products (fewer
    when a Krylov space becomes invariant).

    Args:
        op: the symmetric operator.
        probes: number of random probes, >= 1.
        steps: Lanczos steps per probe, >= 1 (capped at the operator's size).
        sigma: the broadening, finite and > 0; None: 1% of the nodes' spread.
        grid_points: cells of the density grid, >= 2.
        seed: seed of the probes' private generator; None draws fresh entropy (the caller's global random
            state is never touched).
        distribution: ``"rademacher"`` or ``"gaussian"`` probes.

    Returns:
        A :class:`SpectralDensity`.

    Raises:
        LandscapeError: bad counts, ``sigma`` or distribution, or a product with NaN or Inf entries.
    """
    checks.positive_int(probes, "probes")
    checks.positive_int(steps, "steps")
    if sigma is not None:
        checks.positive(sigma, "sigma")  # refused before any product is spent
    n = op.shape[0]
    Z = probe_vectors(n, probes, seed=seed, distribution=distribution, dtype=op.dtype, device=op.device)
    m = min(steps, n)
    nodes = torch.zeros(probes, m, dtype=torch.float64)
    weights = torch.zeros(probes, m, dtype=torch.float64)
    products = 0
    announce(op, probes * m)
    for p in range(probes):
        alpha, beta = lanczos_tridiagonal(op, Z[:, p], m)
        products += alpha.numel()
        theta, tau = quadrature(alpha, beta)
        size = theta.numel()
        nodes[p, :size], weights[p, :size] = theta, tau / tau.sum()
        nodes[p, size:] = theta[-1]
    grid, values, sigma = broadened_density(nodes, weights, sigma, grid_points)
    return SpectralDensity(nodes, weights, grid, values, sigma, products)
