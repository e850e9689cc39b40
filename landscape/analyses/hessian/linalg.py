"""What the eigen solvers share.

The operator protocol, eigen results, Ritz ranking, memory and finiteness checks, orthogonalisation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from landscape.errors import LandscapeError
from landscape.runtime.devices import device_memory as device_memory
from landscape.runtime.devices import require_memory as require_memory


class Operator(Protocol):
    """What the solvers need: ``matvec`` on flat vectors, ``shape``, ``dtype``, ``device``.

    Attributes:
        shape: ``(n, n)``.
        dtype: the dtype of the vectors ``matvec`` takes and returns.
        device: the device of those vectors.
    """

    shape: tuple[int, int]
    dtype: torch.dtype
    device: torch.device

    def matvec(self, v: Tensor) -> Tensor:
        """Return ``A v``.

        Args:
            v: a flat vector of shape ``(n,)`` in :attr:`dtype` on :attr:`device`.

        Returns:
            ``A v``, shape ``(n,)``.
        """
        ...


class DenseOperator:
    """A symmetric matrix (or a function ``v -> A v`` with a given size) seen as an :class:`Operator`.

    Args:
        matrix: the symmetric ``(n, n)`` matrix; its dtype and device are the operator's.
        fn: instead of ``matrix``, a function ``v -> A v`` on flat vectors.
        n: the size of ``fn``'s vectors (required with ``fn``).
        dtype: the dtype of ``fn``'s vectors (ignored with ``matrix``).
        device: the device of ``fn``'s vectors (ignored with ``matrix``).

    Attributes:
        n_matvec: the number of products made so far.

    Raises:
        ValueError: neither ``matrix`` nor both ``fn`` and ``n`` are given.
    """

    def __init__(
        self,
        matrix: Tensor | None = None,
        *,
        fn: Callable[[Tensor], Tensor] | None = None,
        n: int | None = None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> None:
        if matrix is None and (fn is None or n is None):
            raise ValueError("give a matrix, or a function together with its size n")
        self.matrix = matrix
        self.fn = fn
        size = int(matrix.shape[0]) if matrix is not None else int(n)  # type: ignore[arg-type]
        self.shape = (size, size)
        self.dtype = matrix.dtype if matrix is not None else dtype
        self.device = matrix.device if matrix is not None else torch.device(device)
        self.n_matvec = 0

    def matvec(self, v: Tensor) -> Tensor:
        """Return ``A v`` (and count the product in :attr:`n_matvec`).

        Args:
            v: a vector of shape ``(n,)`` (or a matrix ``(n, m)`` with a dense ``matrix``).

        Returns:
            ``matrix @ v``, or ``fn(v)``.
        """
        self.n_matvec += 1
        return self.matrix @ v if self.matrix is not None else self.fn(v)  # type: ignore[misc]


@dataclass
class EigenResult:
    """Eigenpairs found by :func:`lanczos`, in ascending algebraic order (as ``scipy.sparse.linalg.eigsh``).

    ``eigenvalues`` (k,), ``eigenvectors`` (n, k) unit columns or None, ``residuals`` (k,) = ||A y - theta y||,
    ``errors`` (k,) the estimated eigenvalue errors ``min(r, r^2/gap)``, ``converged`` (k,) bool,
    ``n_matvec`` operator products used, ``n_restarts`` thick restarts done.

    Attributes:
        eigenvalues: the Ritz values theta, shape ``(k,)``, float64 on the CPU.
        eigenvectors: the Ritz vectors y as unit columns, shape ``(n, k)`` on the operator's device, or None.
        residuals: ``||A y - theta y||``, shape ``(k,)``.
        errors: the estimated eigenvalue errors ``min(r, r^2/gap)``, shape ``(k,)``.
        converged: whether each pair met ``residual <= tol * max(|theta|, eps^(2/3) ||A||)`` (ARPACK's
            test on the explicit residual), shape ``(k,)``, bool.
        n_matvec: the number of operator products used.
        n_restarts: the number of thick restarts done.
        which: the ``which`` asked for (LA, SA, BE or LM).
        tol: the relative residual tolerance used (``eps^(2/3)`` when 0 was asked for).
    """

    eigenvalues: Tensor
    eigenvectors: Tensor | None
    residuals: Tensor
    errors: Tensor
    converged: Tensor
    n_matvec: int
    n_restarts: int
    which: str
    tol: float

    @property
    def all_converged(self) -> bool:
        """Whether every requested eigenvalue met the tolerance."""
        return bool(self.converged.all())


def rank_ritz(theta: Tensor, which: str) -> Tensor:
    """Indices of Ritz values from most to least wanted for ``which``.

    LA: largest first; SA: smallest first; LM: largest magnitude first; BE: alternately the largest and the
    smallest (largest first), so the first k hold ceil(k/2) from the top and floor(k/2) from the bottom.

    Args:
        theta: the Ritz values, shape ``(m,)``.
        which: ``"LA"``, ``"SA"``, ``"LM"`` or ``"BE"`` (any other value is taken as BE).

    Returns:
        A permutation of ``0..m-1`` (int64), most wanted first.
    """
    if which == "LA":
        return torch.argsort(theta, descending=True)
    if which == "SA":
        return torch.argsort(theta)
    if which == "LM":
        return torch.argsort(theta.abs(), descending=True)
    asc = torch.argsort(theta).tolist()
    out = []
    while asc:
        out.append(asc.pop())
        if asc:
            out.append(asc.pop(0))
    return torch.tensor(out, dtype=torch.long)


def require_finite(values: Tensor, products: int) -> Tensor:
    """``values`` unchanged; an error when the operator's product that gave them holds NaN or Inf.

    Args:
        values: the product ``A v`` (or anything computed from it that is non-finite exactly when it is,
            such as ``V^T A v``: ``0 * inf`` is NaN).
        products: how many products have been made, this one included (for the message).

    Returns:
        ``values``.

    Raises:
        LandscapeError: ``values`` holds a NaN or an Inf.
    """
    if not bool(torch.isfinite(values).all()):
        raise LandscapeError(
            f"the Hessian-vector product returned non-finite values (NaN or Inf) at product {products}; check that "
            "the model's weights, the inputs and the loss are finite at this point (a NaN weight, or a loss that "
            "overflows in this dtype: try float64)"
        )
    return values


def announce(op: object, count: int) -> None:
    """Tell an operator with a ``plan_products`` method that about ``count`` products are coming next.

    Args:
        op: the operator (one without the method is left alone).
        count: the number of products the caller expects to make.
    """
    plan = getattr(op, "plan_products", None)
    if plan is not None:
        plan(count)


def require_symmetric(upper: float, lower: float, scale: float, eps: float, products: int) -> None:
    """Refuse an operator whose products are not symmetric: ``v_{j-1} . A v_j`` must equal ``v_j . A v_{j-1}``.

    A Hessian is symmetric; products that lose a second-derivative term (a custom autograd function whose
    backward is not differentiable, marked ``once_differentiable``) are not, and would give wrong eigenvalues.
    The two couplings may differ by rounding, ``10 sqrt(eps)`` of the operator's scale.
    """
    if abs(upper - lower) > 10 * math.sqrt(eps) * max(scale, 1e-300):
        raise LandscapeError(
            f"the operator is not symmetric (v_i . A v_j = {upper:.6g} but v_j . A v_i = {lower:.6g} at product "
            f"{products}): its products are not a Hessian's. A custom autograd function whose backward cannot be "
            "differentiated (once_differentiable) makes double-backward products drop terms; try --hvp jvp (with "
            "--hvp finite-difference the differences cross kinks of ReLU-like activations: try --dtype float64)"
        )


def random_unit(n: int, dtype: torch.dtype, device: torch.device, generator: torch.Generator) -> Tensor:
    """A Gaussian vector normalised to unit length (drawn on CPU from ``generator``, so seeds are portable).

    Args:
        n: the length.
        dtype: the dtype of the result (drawn in float64).
        device: the device of the result.
        generator: the CPU generator to draw from.

    Returns:
        ``g / ||g||`` for ``g ~ N(0, I_n)``, shape ``(n,)``.
    """
    v = torch.randn(n, generator=generator, dtype=torch.float64)
    return (v / torch.linalg.vector_norm(v)).to(device=device, dtype=dtype)


def orthogonalize(r: Tensor, basis: Tensor) -> tuple[Tensor, Tensor]:
    """Remove from ``r`` its components along the orthonormal columns of ``basis`` (Gram-Schmidt twice).

    Returns ``(r - basis c, c)`` with ``c = basis^T r`` accumulated over both passes.

    Args:
        r: the vector, shape ``(n,)``.
        basis: orthonormal columns, shape ``(n, j)`` (``j = 0`` allowed).

    Returns:
        ``(r_perp, c)``: the orthogonalised vector, shape ``(n,)``, and the coefficients, shape ``(j,)``.
    """
    if basis.shape[1] == 0:
        return r, r.new_zeros(0)
    c = basis.T @ r
    r = r - basis @ c
    c2 = basis.T @ r
    return r - basis @ c2, c + c2


def new_direction(basis: Tensor, generator: torch.Generator) -> Tensor | None:
    """A random unit vector orthogonal to ``basis`` (None when the basis already spans the space)."""
    n, j = basis.shape
    if j >= n:
        return None
    for _ in range(3):
        r, _ = orthogonalize(random_unit(n, basis.dtype, basis.device, generator), basis)
        norm = torch.linalg.vector_norm(r)
        if norm > 0.5:
            return r / norm
    return None
