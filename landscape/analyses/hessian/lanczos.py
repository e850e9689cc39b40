"""Thick-restart Lanczos for a few extreme eigenpairs of a symmetric operator, in torch on its device.

The basis ``V`` is kept orthonormal by full reorthogonalisation (classical Gram-Schmidt applied twice), so
converged eigenvalues are never found twice (no "ghost" copies). Alongside ``V`` the products ``W = A V``
are stored (twice the memory of plain Lanczos): the projected matrix is ``T = V^T A V`` exactly and the
reported Ritz residuals ``||A y - theta y||`` are computed from ``W`` without extra products. While iterating,
the residual of ``y = V s`` is taken from the Lanczos relation ``A V = V T + r e_j^T`` (which holds to
rounding under full reorthogonalisation, across thick restarts too): ``||A y - theta y|| = ||r|| |s_j|``, with
``r`` the newest vector's component outside the basis, so a step costs no work of size ``n x j`` beyond the
reorthogonalisation. When the basis holds
``ncv`` vectors it is restarted (Wu & Simon's thick restart): the most wanted Ritz vectors are kept together
with the last Lanczos vector and the iteration continues from there.

Convergence (ARPACK's rule, Lehoucq et al.): a wanted Ritz pair ``(theta, y)``, ``||y|| = 1``, is converged when
its residual ``r = ||A y - theta y||`` is at most ``tol * max(|theta|, eps^(2/3) ||A||)`` (the floor, with ``||A||``
estimated by the largest Ritz value seen, only matters for ``theta`` near 0). Such a pair lies within ``r`` of an
eigenvalue of ``A``, and within about ``r^2 / g`` where ``g`` is the gap to the rest of the spectrum. The solver
stops when every wanted pair passes the test on the residual from the Lanczos relation; the flags it returns are
the test again on the explicit residuals ``||W s - theta V s||``, so a pair flagged converged meets it. The gap
estimate ``min(r, r^2 / g)`` (``g`` the gap to the nearest other Ritz value) is reported as ``errors`` but never
decides: while a cluster of top eigenvalues is unresolved the gap is overstated and so is the estimate's
confidence. Exactly repeated eigenvalues: a single start vector only sees one copy in exact arithmetic;
rounding errors let well-separated copies appear after restarts, but no guarantee is made (use a block method
when multiplicities matter): a converged pair is an eigenpair, not necessarily the k-th wanted one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Hashable, Mapping

import torch
from torch import Tensor

from landscape.analyses.hessian.linalg import (
    LOCAL,
    EigenResult,
    InnerProduct,
    Operator,
    OperatorChecks,
    new_direction,
    orthogonalize,
    rank_ritz,
    remedy_of,
    require_memory,
)
from landscape.analyses.hessian.probes import local_generator
from landscape.core.params import vector_norm
from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.hessian import WHICH


def check_request(n: int, k: int, which: str, ncv: int | None) -> int:
    """Check an eigen request before any product is made, and choose the basis size.

    Args:
        n: the operator's size.
        k: the number of eigenpairs asked for.
        which: one of :data:`~landscape.options.hessian.WHICH`.
        ncv: the basis size asked for, or None for ``min(n, max(2k + 1, 20))``.

    Returns:
        The basis size ``ncv``.

    Raises:
        LandscapeError: an unknown ``which``, ``k`` not a whole number in ``[1, n]``, or an ``ncv`` not a whole number
            in ``(k, n]``.
    """
    if which not in WHICH:
        raise LandscapeError(f"unknown which={which!r}; choose one of {', '.join(WHICH)}")
    k = checks.positive_int(k, "k")
    if k > n:
        raise LandscapeError(f"k must lie in [1, {n}] (the operator's size), got {k}")
    m = min(n, max(2 * k + 1, 20)) if ncv is None else checks.positive_int(ncv, "ncv")
    if m > n or (m <= k and m < n):
        raise LandscapeError(f"ncv must satisfy k < ncv <= n (k={k}, n={n}), got {m}")
    return m


def lanczos(
    op: Operator,
    k: int = 6,
    which: str = "LA",
    ncv: int | None = None,
    tol: float = 1e-6,
    maxiter: int | None = None,
    v0: Tensor | None = None,
    seed: int | None = None,
    return_eigenvectors: bool = True,
    callback: Callable[[int, Tensor, Tensor], None] | None = None,
) -> EigenResult:
    """Find k eigenpairs of a symmetric operator by thick-restart Lanczos with full reorthogonalisation.

    Runs on ``op.device`` in ``op.dtype``; the small projected eigenproblems run in float64 on the CPU.
    A pair ``(theta, y)`` with residual ``r = ||A y - theta y||`` is converged when
    ``r <= tol * max(|theta|, eps^(2/3) ||A||)`` (ARPACK's rule, the module's docstring); it then lies within ``r``
    of an eigenvalue of ``A`` (within about ``r^2 / gap`` of it). An operator with
    a ``plan_products(count)`` method is told how many more products the solver expects (the basis still to
    fill): :class:`~landscape.analyses.hessian.operator.HessianOperator` uses it to choose how to make them.
    An operator with an ``inner`` attribute (:class:`~landscape.analyses.hessian.linalg.InnerProduct`) has its
    vectors split across ranks: every vector of the solver is then this rank's part, and every reduction goes
    through ``inner`` (:class:`~landscape.analyses.hessian.shards.ShardedInnerProduct`). Operators of approximate
    products (central differences) may offer three more attributes: ``start_vector(generator)``, the start vector
    when ``v0`` is not given (None: the Gaussian one); ``product_error(curvature)``, the predicted error
    ``||A u - H u||`` of a unit vector's product along a curvature (the largest Ritz value), under which a residual
    cannot be resolved: a residual within :data:`~landscape.options.hessian.FD_RESIDUAL_FLOOR` times it, or within
    the largest symmetry defect measured (``|v_{j-1} . A v_j - v_j . A v_{j-1}|``), counts as converged; and
    ``explain_asymmetry(upper, lower, products)``, the message of products that are not symmetric, which differ
    by more than ``asymmetry_tolerance`` of ``||A||`` (default ``10 sqrt(eps)``; central differences allow
    :data:`~landscape.options.hessian.FD_MAX_ERROR`, the largest error of a product they accept).

    The arguments follow ``scipy.sparse.linalg.eigsh``.

    Args:
        op: the symmetric operator.
        k: how many eigenpairs.
        which: LA largest, SA smallest, BE both ends, LM largest magnitude.
        ncv: basis size (default ``min(n, max(2k+1, 20))``).
        tol: relative residual of a converged pair, finite and >= 0 (0: ``eps^(2/3)`` of the dtype, the finest
            a residual computed in it is trusted to meet).
        maxiter: maximum number of restarts (default ``max(100, 10 n / ncv)``).
        v0: starting vector (default: Gaussian from ``seed``); with ``op.inner``, this rank's part of it.
        seed: seed of the start vector's private generator; None draws fresh entropy (the caller's global
            random state is never touched); with ``op.inner`` every rank must pass the same seed.
        return_eigenvectors: whether to form the Ritz vectors.
        callback: ``callback(n_matvec, wanted_ritz_values, wanted_errors)``, called after every product (the
            errors are the gap estimates ``min(r, r^2 / gap)``).

    Returns:
        An :class:`EigenResult`; a pair whose explicit residual misses the tolerance (not converged within
        ``maxiter``, or held above it by rounding) carries ``converged=False``.

    Raises:
        LandscapeError: bad ``k``/``which``/``ncv``/``tol``/``v0``, or a product with NaN or Inf entries.
    """
    steps = lanczos_steps(
        op.shape[0],
        op.dtype,
        op.device,
        k=k,
        which=which,
        ncv=ncv,
        tol=tol,
        maxiter=maxiter,
        v0=v0,
        seed=seed,
        return_eigenvectors=return_eigenvectors,
        callback=callback,
        plan=getattr(op, "plan_products", None),
        inner=getattr(op, "inner", LOCAL),
        remedy=remedy_of(op),
        operator=op,
    )
    return drive(steps, op.matvec)


#: a Lanczos run as a generator: it yields the vector it needs multiplied, is sent ``A v``, returns the result
LanczosSteps = Generator[Tensor, Tensor, EigenResult]


def drive(steps: LanczosSteps, matvec: Callable[[Tensor], Tensor]) -> EigenResult:
    """Run a solver generator to its end, answering each vector it yields with ``matvec`` of it.

    Args:
        steps: a generator from :func:`lanczos_steps`.
        matvec: the operator's product ``v -> A v``.

    Returns:
        The generator's result.
    """
    try:
        vector = next(steps)
        while True:
            vector = steps.send(matvec(vector))
    except StopIteration as stop:
        return stop.value


def drive_together(
    runs: Mapping[Hashable, LanczosSteps], products: Callable[[list[Hashable], Tensor], Tensor]
) -> dict[Hashable, EigenResult]:
    """Run several solver generators in lockstep, answering all their pending vectors with one call per step.

    Each step stacks the vectors the unfinished runs ask for into a ``(m, n)`` matrix and calls
    ``products(keys, V)``, which returns the ``(m, n)`` products (row ``i`` for run ``keys[i]``); a run that
    has finished leaves the group, so later calls carry fewer rows.

    Args:
        runs: the generators (from :func:`lanczos_steps`) by key.
        products: ``(keys, V) -> A_key V_key`` row by row.

    Returns:
        Each run's result by key.
    """
    pending: dict[Hashable, Tensor] = {}
    results: dict[Hashable, EigenResult] = {}

    def advance(key: Hashable, answer: Tensor | None) -> None:
        try:
            pending[key] = next(runs[key]) if answer is None else runs[key].send(answer)
        except StopIteration as stop:
            pending.pop(key, None)
            results[key] = stop.value

    for key in runs:
        advance(key, None)
    while pending:
        keys = list(pending)
        out = products(keys, torch.stack([pending[key] for key in keys]))
        for key, row in zip(keys, out):
            advance(key, row)
    return results


def lanczos_steps(
    n: int,
    dtype: torch.dtype,
    device: torch.device | str,
    *,
    k: int = 6,
    which: str = "LA",
    ncv: int | None = None,
    tol: float = 1e-6,
    maxiter: int | None = None,
    v0: Tensor | None = None,
    seed: int | None = None,
    return_eigenvectors: bool = True,
    callback: Callable[[int, Tensor, Tensor], None] | None = None,
    plan: Callable[[int], None] | None = None,
    inner: InnerProduct = LOCAL,
    remedy: Callable[[str], str] | None = None,
    operator: object | None = None,
) -> LanczosSteps:
    """:func:`lanczos` as a generator of its products, so that many runs can share one vectorised product.

    The generator yields each vector ``v`` (shape ``(inner.local_length(n),)``: ``(n,)`` unless the vectors are split
    across ranks; ``dtype`` on ``device``) whose product it needs and
    must be sent ``A v``; it returns the :class:`EigenResult` (``StopIteration.value``; :func:`drive` runs it).
    The arguments are validated here, before the first product; they mean what they mean in :func:`lanczos`.
    Given the same products, the results are those of :func:`lanczos` bit for bit (it is this generator).

    Args:
        n: the operator's size.
        dtype: the dtype of the vectors.
        device: the device of the vectors.
        k: how many eigenpairs.
        which: LA, SA, BE or LM.
        ncv: basis size (default ``min(n, max(2k+1, 20))``).
        tol: relative residual of a converged pair (0: ``eps^(2/3)``).
        maxiter: maximum number of restarts (default ``max(100, 10 n / ncv)``).
        v0: starting vector (default: Gaussian from ``seed``).
        seed: seed of the start vector's private generator.
        return_eigenvectors: whether to form the Ritz vectors.
        callback: ``callback(n_matvec, wanted_ritz_values, wanted_errors)``, called after every product.
        plan: called with the number of products the solver expects next (the basis to fill) before they
            are asked for.
        inner: the inner product every reduction goes through (default: whole vectors on this process).
        remedy: what to try when the products are not finite or not symmetric (the operator's, see
            :func:`~landscape.analyses.hessian.linalg.remedy_of`; default ``operator``'s, else the generic advice).
        operator: the operator, for its optional ``start_vector``, ``product_error`` and ``explain_asymmetry``
            (:func:`lanczos`; its ``explain_asymmetry`` comes before ``remedy``).

    Returns:
        The generator.

    Raises:
        LandscapeError: bad ``k``/``which``/``ncv``/``tol``/``v0`` (at once); a product with NaN or Inf entries
            (when it is sent).
    """
    m = check_request(n, k, which, ncv)
    device = torch.device(device)
    local = inner.local_length(n)
    require_memory(2 * m + 1, local, dtype, device, f"the Lanczos basis (ncv={m}) and its products", "lower --ncv")
    eps = torch.finfo(dtype).eps
    tol = checks.non_negative(tol, "tol") or eps ** (2 / 3)
    maxiter = max(100, 10 * n // m) if maxiter is None else checks.whole(maxiter, "maxiter")
    gen = local_generator(seed)
    start = getattr(operator, "start_vector", None)
    if v0 is None:
        offered = start(gen) if start is not None else None
        v = inner.random_unit(n, dtype, device, gen) if offered is None else offered.to(device=device, dtype=dtype)
    else:
        v = v0.detach().to(device=device, dtype=dtype).reshape(-1).clone()
        if v.numel() != local:
            raise LandscapeError(f"v0 must be a finite nonzero vector of length {local}")
        norm = inner.norm(v)
        if not torch.isfinite(norm) or norm == 0:
            raise LandscapeError(f"v0 must be a finite nonzero vector of length {local}")
        v = v / norm
    hooks = OperatorChecks(operator, remedy)
    steps = (n, v, m, k, which, tol, eps, maxiter, gen, return_eigenvectors, callback, plan, inner, hooks)
    return _lanczos_steps(*steps)


def _lanczos_steps(
    n: int,
    v: Tensor,
    m: int,
    k: int,
    which: str,
    tol: float,
    eps: float,
    maxiter: int,
    gen: torch.Generator,
    return_eigenvectors: bool,
    callback: Callable[[int, Tensor, Tensor], None] | None,
    plan: Callable[[int], None] | None,
    inner: InnerProduct,
    hooks: OperatorChecks,
) -> LanczosSteps:
    dtype, device, local = v.dtype, v.device, v.numel()
    # stored column by column (each basis vector contiguous): the (local, j) views below are transposed matrices
    V = torch.zeros(m + 1, local, dtype=dtype, device=device).T
    W = torch.zeros(m, local, dtype=dtype, device=device).T
    T = torch.zeros(m, m, dtype=torch.float64)
    start = v.clone()
    V[:, 0] = v
    j, restarts, products, anorm = 0, 0, 0, 0.0
    state = None
    coupling: float | None = None  # v_j . A v_{j-1} from the previous step (None right after a restart)
    while True:
        if plan is not None:
            plan(m - j)
        while j < m:
            w = (yield V[:, j].clone()).reshape(-1)
            products += 1
            W[:, j] = w
            r, h = orthogonalize(w, V[:, : j + 1], inner)
            hc = hooks.finite(h.to("cpu", torch.float64), products)  # non-finite whenever w is; already on the CPU
            if coupling is not None and hooks.check(
                float(hc[j - 1]), coupling, max(anorm, float(hc.abs().max())), eps, products, V[:, j]
            ):  # the operator shortened its step: the products so far are discarded, the solve starts again
                j, anorm, state, coupling = _fresh(V, W, T, start, plan, m)
                continue
            T[: j + 1, j] = hc
            T[j, : j + 1] = hc
            beta = inner.norm(r)
            j += 1
            state = _ritz(T[:j, :j], float(beta), k, which)
            anorm = max(anorm, float(state.theta.abs().max()))
            if hooks.beyond(anorm):  # a curvature the step was not chosen for: measure along its Ritz vector
                top = int(torch.argmax(state.theta.abs()))
                y = V[:, :j] @ state.S[:, top].to(device=device, dtype=dtype)
                if hooks.adapt(y):  # shortened: the products so far are discarded; start again from that vector
                    start = y / inner.norm(y)
                    j, anorm, state, coupling = _fresh(V, W, T, start, plan, m)
                    continue
            state.judge(tol, eps, anorm, hooks.floor(anorm))
            if callback is not None:
                callback(products, state.values, state.errors)
            if state.done:
                break
            if float(beta) <= eps * max(anorm, 1e-300) * math.sqrt(n):  # invariant subspace: new direction
                fresh = new_direction(V[:, :j], gen, n, inner)
                if fresh is None:
                    break
                V[:, j] = fresh
                coupling = float(inner.dot(fresh, r))  # about 0: r is negligible
            else:
                V[:, j] = r / beta
                coupling = float(beta)  # v_j . A v_{j-1} = ||r||: the next column must show it back
        if state is not None and (state.done or j == n or restarts >= maxiter):
            break
        # thick restart: keep the most wanted Ritz vectors and the last Lanczos vector
        keep = min(max(k, k + (m - k) // 2), m - 1)
        theta, S = torch.linalg.eigh(T)
        idx = rank_ritz(theta, which)[:keep]
        Sk = S[:, idx].to(device=device, dtype=dtype)
        V[:, :keep], V[:, keep] = V[:, :m] @ Sk, V[:, m].clone()
        W[:, :keep] = W[:, :m] @ Sk
        T.zero_()
        T[:keep, :keep] = torch.diag(theta[idx])
        j = keep
        restarts += 1
        coupling = None  # the new column couples to every kept Ritz vector, not to one predecessor
    assert state is not None
    floor = eps ** (2 / 3) * anorm
    result = state.result(
        V[:, : state.size],
        W[:, : state.size],
        which,
        tol,
        floor,
        products,
        restarts,
        return_eigenvectors,
        inner,
        hooks.floor(anorm),
    )
    result.symmetry_defect = hooks.defect
    return result


def _fresh(
    V: Tensor, W: Tensor, T: Tensor, start: Tensor, plan: Callable[[int], None] | None, m: int
) -> tuple[int, float, None, None]:
    """Empty the basis for a new start from ``start``; the solver's ``(j, anorm, state, coupling)`` anew."""
    V.zero_(), W.zero_(), T.zero_()
    V[:, 0] = start
    if plan is not None:
        plan(m)
    return 0, 0.0, None, None


class _RitzState:
    """The wanted Ritz pairs of one projected matrix, with their residuals and error estimates."""

    def __init__(self, theta: Tensor, S: Tensor, wanted: Tensor, residuals: Tensor, required: int) -> None:
        self.theta, self.S, self.wanted, self.residuals = theta, S, wanted, residuals
        self.required = required
        self.size = S.shape[0]
        # gap: distance to the nearest other Ritz value (a cluster of Ritz values keeps the gap small and the
        # bound close to the residual: safe, if slow, for multiple eigenvalues)
        gap = self._gaps()
        # without a second Ritz value there is no gap estimate: the bound is the residual itself
        self.errors = torch.where(torch.isfinite(gap), torch.minimum(residuals, residuals**2 / gap), residuals)
        self.converged = torch.zeros(len(wanted), dtype=torch.bool)
        self.done = False

    def _gaps(self) -> Tensor:
        """Each wanted Ritz value's distance to the nearest other Ritz value (inf when there is none)."""
        dist = (self.theta.unsqueeze(0) - self.theta[self.wanted].unsqueeze(1)).abs()
        dist[torch.arange(len(self.wanted)), self.wanted] = math.inf
        return dist.min(dim=1).values

    @property
    def values(self) -> Tensor:
        """The wanted Ritz values."""
        return self.theta[self.wanted]

    def judge(self, tol: float, eps: float, anorm: float, noise: float = 0.0) -> None:
        """Mark the pairs whose residual is within ``tol`` (relative, floored at eps^(2/3) ||A||) or ``noise``.

        Done when all are.
        """
        self.converged = converged(self.residuals, self.values, tol, eps ** (2 / 3) * anorm, noise)
        self.done = bool(len(self.wanted) == self.required and self.converged.all())

    def result(
        self,
        V: Tensor,
        W: Tensor,
        which: str,
        tol: float,
        floor: float,
        products: int,
        restarts: int,
        vectors: bool,
        inner: InnerProduct,
        noise: float = 0.0,
    ) -> EigenResult:
        """The wanted pairs in ascending algebraic order, residuals ``||W s - theta V s||`` and flags judged on them."""
        order = torch.argsort(self.values)
        wanted = self.wanted[order]
        Sw = self.S[:, wanted].to(device=V.device, dtype=V.dtype)
        Y = V @ Sw
        R = W @ Sw - Y * self.theta[wanted].to(device=V.device, dtype=V.dtype)
        residuals = inner.norm(R, dim=0).to("cpu", torch.float64)
        gap = self._gaps()[order]
        errors = torch.where(torch.isfinite(gap), torch.minimum(residuals, residuals**2 / gap), residuals)
        return EigenResult(
            eigenvalues=self.theta[wanted].clone(),
            eigenvectors=Y if vectors else None,
            residuals=residuals,
            errors=errors,
            converged=converged(residuals, self.theta[wanted], tol, floor, noise),
            n_matvec=products,
            n_restarts=restarts,
            which=which,
            tol=tol,
        )


def converged(residuals: Tensor, values: Tensor, tol: float, floor: float, noise: float = 0.0) -> Tensor:
    """ARPACK's test: which Ritz pairs have ``||A y - theta y|| <= max(tol * max(|theta|, floor), noise)``.

    Args:
        residuals: the residuals of unit Ritz vectors, shape ``(k,)``.
        values: the Ritz values, shape ``(k,)``.
        tol: the relative tolerance.
        floor: the scale below which ``|theta|`` is not trusted (``eps^(2/3) ||A||``).
        noise: the residual the products cannot resolve (approximate products; 0 for exact ones).

    Returns:
        The flags, shape ``(k,)``, bool.
    """
    return residuals <= torch.clamp(tol * torch.clamp(values.abs(), min=floor), min=noise)


def _ritz(T: Tensor, beta: float, k: int, which: str) -> _RitzState:
    """Rayleigh-Ritz on the projected matrix ``T``: wanted Ritz values, residuals ``beta |s_last|``.

    ``beta`` is the norm of the newest product's component outside the basis (the Lanczos relation).
    """
    theta, S = torch.linalg.eigh(T)
    wanted = rank_ritz(theta, which)[: min(k, theta.numel())]
    residuals = beta * S[-1, wanted].abs()
    return _RitzState(theta, S, wanted, residuals, k)


def lanczos_tridiagonal(op: Operator, v0: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """``steps`` Lanczos steps from ``v0`` with full reorthogonalisation: the tridiagonal ``T``'s entries.

    Returns ``(alpha, beta)`` in float64 on the CPU: the diagonal (m,) and the off-diagonal (m-1,) of
    ``T = Q^T A Q`` for the Krylov basis ``Q`` of ``v0``. Stops early (m < steps) when the Krylov space is
    invariant, in which case ``T``'s eigenvalues are exactly eigenvalues of ``A``.

    Args:
        op: the symmetric operator.
        v0: the start vector (normalised here).
        steps: the most Lanczos steps (capped at the operator's size).

    Returns:
        ``(alpha, beta)`` as above.

    Raises:
        LandscapeError: a product with NaN or Inf entries.
    """
    n = op.shape[0]
    steps = min(int(steps), n)
    require_memory(steps, n, op.dtype, op.device, f"a Lanczos quadrature of {steps} steps", "lower --steps")
    Q = torch.zeros(steps, n, dtype=op.dtype, device=op.device).T  # each basis vector contiguous
    q = v0.to(device=op.device, dtype=op.dtype).reshape(-1)
    Q[:, 0] = q / vector_norm(q)
    alpha: list[float] = []
    beta: list[float] = []
    anorm = 0.0
    eps = torch.finfo(op.dtype).eps
    hooks = OperatorChecks(op)
    j = 0
    while j < steps:
        w = op.matvec(Q[:, j]).reshape(-1)
        r, h = orthogonalize(w, Q[:, : j + 1])
        alpha.append(float(h[j]))
        b = float(vector_norm(r))
        hooks.finite(torch.tensor([alpha[-1], b]), j + 1)  # NaN/Inf anywhere in w reaches both
        if j > 0 and hooks.check(float(h[j - 1]), beta[-1], max(anorm, abs(alpha[-1]) + b), eps, j + 1, Q[:, j]):
            alpha, beta, anorm, j = [], [], 0.0, 0  # the operator shortened its step: start again from v0
            continue
        anorm = max(anorm, abs(alpha[-1]) + b)
        if j + 1 == steps or b <= eps * max(anorm, 1e-300) * math.sqrt(n):
            break
        beta.append(b)
        Q[:, j + 1] = r / b
        j += 1
    return torch.tensor(alpha, dtype=torch.float64), torch.tensor(beta, dtype=torch.float64)
