"""What the eigen solvers share.

The operator protocol, eigen results, Ritz ranking, memory and finiteness checks, orthogonalisation, and the
inner product through which every reduction of a solver goes (:class:`InnerProduct`: whole vectors here;
:class:`~landscape.analyses.hessian.shards.ShardedInnerProduct` for vectors split across ranks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from landscape.core.params import flat_dot, project, vector_norm
from landscape.errors import LandscapeError
from landscape.options.hessian import FD_ADAPT, FD_ATTEMPTS, FD_RESIDUAL_FLOOR
from landscape.runtime.devices import device_memory as device_memory
from landscape.runtime.devices import require_memory as require_memory


class Operator(Protocol):
    """What the solvers need: ``matvec`` on flat vectors, ``shape``, ``dtype``, ``device``.

    An operator whose vectors are split across ranks also has an ``inner`` attribute (an :class:`InnerProduct`
    that all-reduces, e.g. :class:`~landscape.analyses.hessian.shards.ShardedInnerProduct`): ``matvec`` then takes
    and returns this rank's part of each vector, and ``shape`` stays the whole operator's.

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
        eigenvectors: the Ritz vectors y as unit columns, shape ``(n, k)`` on the operator's device (this rank's
            rows when the operator's vectors are split across ranks), or None.
        residuals: ``||A y - theta y||``, shape ``(k,)``.
        errors: the estimated eigenvalue errors ``min(r, r^2/gap)``, shape ``(k,)``.
        converged: whether each pair met ``residual <= tol * max(|theta|, eps^(2/3) ||A||)`` (ARPACK's
            test on the explicit residual), shape ``(k,)``, bool.
        n_matvec: the number of operator products used.
        n_restarts: the number of thick restarts done.
        which: the ``which`` asked for (LA, SA, BE or LM).
        tol: the relative residual tolerance used (``eps^(2/3)`` when 0 was asked for).
        symmetry_defect: the largest ``|v_{j-1} . A v_j - v_j . A v_{j-1}|`` over the steps, relative to the
            operator's scale: 0 for exact symmetric products up to rounding; for central differences, their
            measured error.
        finite_difference: for products by central differences, their step and predicted error
            (:meth:`~landscape.analyses.hessian.steps.StepChoice.summary`), set by the caller that knows it; else
            None.
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
    symmetry_defect: float = 0.0
    finite_difference: dict[str, object] | None = None

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


#: what to try when an operator's products are not finite, for an operator without a ``remedy`` method
NON_FINITE_REMEDY = "a NaN weight, or a loss that overflows in this dtype: try float64"
#: what to try when an operator's products are not symmetric, for an operator without a ``remedy`` method
ASYMMETRIC_REMEDY = (
    "a custom autograd function whose backward cannot be differentiated (once_differentiable) makes "
    "double-backward products drop terms"
)


def remedy_of(op: object) -> Callable[[str], str]:
    """What to try when ``op``'s products are not a Hessian's, in its caller's words: ``remedy(problem)``.

    ``problem`` is ``"non-finite"`` or ``"asymmetric"``; an operator that knows better (the options its caller
    has, its dtype) has a ``remedy`` method; otherwise the generic advice (:data:`NON_FINITE_REMEDY`,
    :data:`ASYMMETRIC_REMEDY`).

    Args:
        op: the operator.

    Returns:
        The function from the problem to the advice.
    """
    own = getattr(op, "remedy", None)
    if callable(own):
        return own
    return lambda problem: NON_FINITE_REMEDY if problem == "non-finite" else ASYMMETRIC_REMEDY


def require_finite(values: Tensor, products: int, remedy: str = NON_FINITE_REMEDY) -> Tensor:
    """``values`` unchanged; an error when the operator's product that gave them holds NaN or Inf.

    Args:
        values: the product ``A v`` (or anything computed from it that is non-finite exactly when it is,
            such as ``V^T A v``: ``0 * inf`` is NaN).
        products: how many products have been made, this one included (for the message).
        remedy: what to try (:func:`remedy_of`).

    Returns:
        ``values``.

    Raises:
        LandscapeError: ``values`` holds a NaN or an Inf.
    """
    if not bool(torch.isfinite(values).all()):
        raise LandscapeError(
            f"the Hessian-vector product returned non-finite values (NaN or Inf) at product {products}; check that "
            f"the model's weights, the inputs and the loss are finite at this point ({remedy})"
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


def asymmetric(upper: float, lower: float, scale: float, eps: float, tolerance: float | None = None) -> bool:
    """Whether two couplings that a symmetric operator makes equal differ by more than it allows.

    Args:
        upper: ``v_i . A v_j``.
        lower: ``v_j . A v_i``.
        scale: the operator's scale (``||A||`` as estimated so far).
        eps: the machine epsilon of the products' dtype.
        tolerance: the relative difference an operator of approximate products allows (default ``10 sqrt(eps)``).

    Returns:
        True when ``|upper - lower|`` exceeds ``max(tolerance, 10 sqrt(eps)) * scale``.
    """
    allowed = 10 * math.sqrt(eps) if tolerance is None else max(tolerance, 10 * math.sqrt(eps))
    return abs(upper - lower) > allowed * max(scale, 1e-300)


def require_symmetric(
    upper: float,
    lower: float,
    scale: float,
    eps: float,
    products: int,
    remedy: str = ASYMMETRIC_REMEDY,
    explain: Callable[[float, float, int], str | None] | None = None,
    tolerance: float | None = None,
) -> None:
    """Refuse an operator whose products are not symmetric: ``v_{j-1} . A v_j`` must equal ``v_j . A v_{j-1}``.

    A Hessian is symmetric; products that lose a second-derivative term (a custom autograd function whose
    backward is not differentiable, marked ``once_differentiable``) are not, and would give wrong eigenvalues.
    The two couplings may differ by rounding, ``10 sqrt(eps)`` of the operator's scale, or by the ``tolerance``
    an operator of approximate products allows (central differences: the largest product error they accept).
    The operator's own explanation (``explain``) comes first; otherwise the general message ends with ``remedy``.

    Args:
        upper: ``v_i . A v_j``.
        lower: ``v_j . A v_i``.
        scale: the operator's scale (``||A||`` as estimated so far).
        eps: the machine epsilon of the products' dtype.
        products: the products made so far.
        remedy: what to try, for the general message (:func:`remedy_of`).
        explain: the operator's own message for asymmetric products (its ``explain_asymmetry``), None for the
            general one.
        tolerance: the relative difference allowed (default ``10 sqrt(eps)``).

    Raises:
        LandscapeError: the couplings differ by more than that.
    """
    if asymmetric(upper, lower, scale, eps, tolerance):
        message = explain(upper, lower, products) if explain is not None else None
        raise LandscapeError(
            message
            or f"the operator is not symmetric (v_i . A v_j = {upper:.6g} but v_j . A v_i = {lower:.6g} at product "
            f"{products}): its products are not a Hessian's: {remedy}"
        )


class OperatorChecks:
    """What a solver reads from its operator beyond its products: their error floor, their asymmetry and its cause.

    An operator of approximate products (central differences) may offer ``product_error(curvature)``,
    ``asymmetry_tolerance``, ``explain_asymmetry(upper, lower, products)``, ``adapt_step(vector)`` and
    ``curvature_scale`` (:func:`~landscape.analyses.hessian.lanczos.lanczos`); an exact one offers none.

    What to try when the products are not finite or not symmetric is the operator's ``remedy(problem)``
    (:func:`remedy_of`); an operator's ``explain_asymmetry`` (central differences: the kinks, the measured defect)
    takes precedence over the remedy for asymmetric products.

    Args:
        operator: the operator, or None (exact products, the general message).
        remedy: ``problem -> advice`` (default :func:`remedy_of` of ``operator``).

    Attributes:
        defect: the largest ``|v_{j-1} . A v_j - v_j . A v_{j-1}| / scale`` seen so far (the symmetry defect).
        remedy: ``problem -> advice``, ``problem`` one of ``non-finite`` and ``asymmetric``.
    """

    def __init__(self, operator: object | None, remedy: Callable[[str], str] | None = None) -> None:
        self.operator = operator
        self.remedy = remedy or remedy_of(operator)
        self.defect = 0.0
        self.absolute = 0.0
        self.adapted = 0

    def adapt(self, vector: Tensor) -> bool:
        """Ask the operator to measure along ``vector`` and shorten its step; True when it did (start again)."""
        self.adapted += 1
        if self.operator.adapt_step(vector):  # type: ignore[union-attr]
            self.defect = self.absolute = 0.0
            return True
        return False

    def beyond(self, anorm: float) -> bool:
        """Whether the largest Ritz value exceeds twice the curvature the operator's step was chosen for."""
        scale = getattr(self.operator, "curvature_scale", None)
        return scale is not None and self.adapted < FD_ATTEMPTS and anorm > 2 * scale

    def floor(self, anorm: float) -> float:
        """The residual that counts as converged whatever ``tol`` (0 for exact products).

        For approximate products: the larger of ``FD_RESIDUAL_FLOOR * product_error(anorm)`` and the largest
        symmetry defect seen (absolute).
        """
        error = getattr(self.operator, "product_error", None)
        predicted = float(error(anorm)) if error is not None else 0.0
        return max(FD_RESIDUAL_FLOOR * predicted, self.absolute) if predicted > 0 else 0.0

    def finite(self, values: Tensor, products: int) -> Tensor:
        """``values`` unchanged; an error naming the remedy when they hold NaN or Inf (``require_finite``)."""
        return require_finite(values, products, self.remedy("non-finite"))

    def check(self, upper: float, lower: float, scale: float, eps: float, products: int, vector: Tensor) -> bool:
        """Record the symmetry defect of two couplings; beyond the allowed, adapt the operator or refuse it.

        An operator with ``adapt_step(vector)`` (central differences) whose couplings differ by more than
        :data:`~landscape.options.hessian.FD_ADAPT` of the scale is asked to shorten its step for the vector last
        multiplied (until it declines, at most :data:`~landscape.options.hessian.FD_ATTEMPTS` times); when it
        does, the solver starts again, and the defects recorded so far are those of discarded products.

        Returns:
            True when the operator adapted (start again); False when the couplings are symmetric enough.

        Raises:
            LandscapeError: asymmetric beyond the allowed, and not adapted (``require_symmetric``).
        """
        tolerance = getattr(self.operator, "asymmetry_tolerance", None)
        adapt = getattr(self.operator, "adapt_step", None)
        if adapt is not None and self.adapted < FD_ATTEMPTS and asymmetric(upper, lower, scale, eps, FD_ADAPT):
            if self.adapt(vector):
                return True
            self.adapted = FD_ATTEMPTS  # declined: the asymmetry is not the truncation's; ask no more
        self.defect = max(self.defect, abs(upper - lower) / max(scale, 1e-300))
        self.absolute = max(self.absolute, abs(upper - lower))
        explain = getattr(self.operator, "explain_asymmetry", None)
        require_symmetric(upper, lower, scale, eps, products, self.remedy("asymmetric"), explain, tolerance)
        return False


class InnerProduct:
    """The reductions of the solvers over vectors that this process holds whole (the default).

    Every sum over a vector's entries that a solver makes goes through one of these methods, so that a subclass
    can hold only a part of each vector and add the parts of all ranks
    (:class:`~landscape.analyses.hessian.shards.ShardedInnerProduct`). Here each is torch's own expression.
    """

    def local_length(self, n: int) -> int:
        """How many of a length-``n`` vector's entries this process holds: all of them.

        Args:
            n: the length of the whole vector.

        Returns:
            ``n``.
        """
        return n

    def dot(self, a: Tensor, b: Tensor) -> Tensor:
        """``a . b``.

        Args:
            a: a vector.
            b: a vector of the same length.

        Returns:
            The 0-dim inner product (:func:`landscape.core.params.flat_dot`: partial sums added in float64).
        """
        return flat_dot(a, b)

    def project(self, basis: Tensor, r: Tensor) -> Tensor:
        """``basis^T r``: the inner products of ``r`` with each column of ``basis``.

        Args:
            basis: an ``(n, j)`` matrix.
            r: a vector of length ``n``.

        Returns:
            The ``(j,)`` coefficients (:func:`landscape.core.params.project`: partial sums added in float64).
        """
        return project(basis, r)

    def norm(self, x: Tensor, dim: int | None = None) -> Tensor:
        """``||x||_2`` (of each column with ``dim=0``).

        Args:
            x: a vector (or a matrix with ``dim``).
            dim: the dimension to reduce (None: all).

        Returns:
            The norm(s), summed in float64 (:func:`landscape.core.params.vector_norm`).
        """
        return vector_norm(x, dim=dim)

    def random_unit(self, n: int, dtype: torch.dtype, device: torch.device, generator: torch.Generator) -> Tensor:
        """A unit Gaussian vector of length ``n`` (:func:`random_unit`).

        Args:
            n: the length of the whole vector.
            dtype: the dtype of the result.
            device: the device of the result.
            generator: the CPU generator to draw from.

        Returns:
            The vector, shape ``(n,)``.
        """
        return random_unit(n, dtype, device, generator)


#: the reductions of vectors held whole, the solvers' default
LOCAL = InnerProduct()


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


def orthogonalize(r: Tensor, basis: Tensor, inner: InnerProduct = LOCAL) -> tuple[Tensor, Tensor]:
    """Remove from ``r`` its components along the orthonormal columns of ``basis`` (Gram-Schmidt twice).

    Returns ``(r - basis c, c)`` with ``c = basis^T r`` accumulated over both passes.

    Args:
        r: the vector, shape ``(n,)``.
        basis: orthonormal columns, shape ``(n, j)`` (``j = 0`` allowed).
        inner: the inner product (:class:`InnerProduct`; its ``project`` forms ``basis^T r``).

    Returns:
        ``(r_perp, c)``: the orthogonalised vector, shape ``(n,)``, and the coefficients, shape ``(j,)``.
    """
    if basis.shape[1] == 0:
        return r, r.new_zeros(0)
    c = inner.project(basis, r)
    r = r - basis @ c
    c2 = inner.project(basis, r)
    return r - basis @ c2, c + c2


def new_direction(basis: Tensor, generator: torch.Generator, n: int, inner: InnerProduct = LOCAL) -> Tensor | None:
    """A random unit vector orthogonal to ``basis`` (None when the basis already spans the space).

    Args:
        basis: orthonormal columns, shape ``(inner.local_length(n), j)``.
        generator: the CPU generator to draw from.
        n: the length of the whole vectors.
        inner: the inner product.

    Returns:
        The vector (this process's part of it), or None.
    """
    j = basis.shape[1]
    if j >= n:
        return None
    for _ in range(3):
        r, _ = orthogonalize(inner.random_unit(n, basis.dtype, basis.device, generator), basis, inner)
        norm = inner.norm(r)
        if norm > 0.5:
            return r / norm
    return None
