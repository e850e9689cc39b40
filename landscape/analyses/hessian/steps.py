"""The step of central-difference Hessian-vector products, chosen at each point from a measured error.

A central difference of gradients along a unit vector ``s`` with a displacement of length ``h``,

    C_h(s) = (g(theta + h s) - g(theta - h s)) / (2 h) = H s + (h^2 / 6) D^3 g[s, s, s] + rounding / h + ...,

carries two errors: **truncation**, ``A h^2`` (the fourth derivative of the loss along ``s``, which grows with the
curvature along ``s``: largest along the top eigenvectors, where the curvature changes fastest), and **rounding**,
``B / h``: the gradient's own rounding error in its dtype, and the rounding of ``theta +- h s`` to the weights'
lattice, which changes the direction actually differenced. Neither is known before it is measured: no rule of the
form ``u^a (1 + ||theta||)`` fits networks (on a ViT of 255,050 weights, ``u^(1/3) (1 + ||theta||)`` = 0.15 has a
truncation error of 99% along the top eigenvector; the best step is 1.7e-4). So :func:`choose_step` measures both,
once per point, on a probe that sees the top curvature, and takes the step that balances them.

The measurement (5 gradients where the truncation follows its ``h^2`` law at once; docs/analyses.md, "Finite
differences"):

1. ``g0 = g(theta)``, and ``g(theta + e)`` for ``e`` one unit in the last place of every weight (random signs) in
   the lattice the weights are rounded to in the forward pass (float32, or bfloat16 under a bfloat16 forward): the
   gradient's change under a rounding-level change of the weights, ``nu = ||g(theta + e) - g0||``, bounds the
   rounding of a difference at step ``h`` by ``B / h``, ``B = nu`` (measured: 0.6-0.7 ``nu / h``).
2. The probe ``s``: the unit vector along ``g0 / ||g0|| + w`` for a seeded Gaussian unit vector ``w`` (the gradient
   lies mostly in the top curvature directions; ``w`` gives every direction a part, so that ``s`` is also a start
   vector for Lanczos).
3. Along ``s`` at ``t = -h1, +h1, +2 h1`` (three gradients), the central difference ``C`` and the third difference
   ``tau = (g(2 h1) - 3 g(h1) + 3 g0 - g(-h1)) / (6 h1) = (h1^2 / 6) D^3 g[s, s, s] + ...``, the truncation of ``C``
   itself; ``P = C - tau`` (a product of ``s`` whose truncation is ``O(h1^4)``). While ``||tau|| / ||P||`` exceeds
   :data:`~landscape.options.hessian.FD_ASYMPTOTIC` the expansion is not yet asymptotic and ``h1`` is shortened
   (at most :data:`~landscape.options.hessian.FD_ATTEMPTS` times).
4. When no probe step is in the asymptotic range (the truncation does not fall as ``h1^2``: the gradient jumps
   across the kinks of ReLU-like operations), the model below is not trusted and the products' error is measured
   at the chosen step instead: the asymmetry ``|u . C_h(s) - s . C_h(u)|`` of two products (4 gradients), which a
   symmetric Hessian does not have.
5. The truncation grows with the curvature ``c`` along the direction differenced, as ``c^2`` in norm (measured on
   ViTs: along the top eigenvector 2-3 times the probe's). It is scaled from the probe, ``||tau|| = kappa h1^2
   ||P||^2``, to ``Lambda = ||P||^2 / |s . P|``, the curvature that the probe's product shows (a Rayleigh quotient
   of ``H`` weighted towards its largest eigenvalues, at least ``||P|| = ||H s||``; on a trained ViT 1099 for a
   largest eigenvalue 1108): ``A = kappa h1^2 Lambda^2 / h1^2``, and ``h = (B / (2 A))^(1/3)`` is the minimum of
   ``A h^2 + B / h``. The predicted relative error of a product, ``(A h^2 + B / h) / Lambda``, is the two-step
   estimate recorded with every result; :meth:`StepChoice.product_error` gives it at a larger curvature.

The step is the length of every later displacement ``eps v`` (``eps = h / ||v||``). The caller refuses products
whose predicted error exceeds :data:`~landscape.options.hessian.FD_MAX_ERROR`, naming the cause.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from landscape.analyses.hessian.linalg import InnerProduct
from landscape.options.hessian import FD_ASYMPTOTIC, FD_ATTEMPTS, FD_FIRST_STEP, FD_TARGET

#: ``shift -> g(theta + shift)``: the (local part of the) flat gradient at the point moved by ``shift`` (added in the
#: weights' dtype, so rounded to their lattice); None: at the point itself
PointGradient = Callable[[Tensor | None], Tensor]
#: the most ``Lambda = ||P||^2 / |s . P|`` may exceed ``||P||``: the top eigenvalue was 1.6-2.3 times ``||P||`` on four
#: ViTs, and a probe whose curvature is near 0 (positive and negative eigenvalues cancelling at an initialisation)
#: would otherwise make ``Lambda``, and the shortening of the step, arbitrarily large (20 times the top eigenvalue
#: on the zoo's vit_mini at one image)
MAX_GROWTH = 4.0


@dataclass
class StepChoice:
    """The step of a point's central differences and what its measurement found (the two-step estimate).

    Attributes:
        step: ``h``, the length of every displacement ``eps v``.
        error: the predicted relative error of a product at ``step``, ``(A h^2 + B / h) / scale``.
        truncation: its truncation part ``A h^2 / scale``.
        rounding: its rounding part ``B / (h scale)``.
        noise: ``B = nu``, the gradient's change under a rounding-level change of the weights.
        lattice: the dtype the weights are rounded to in the forward pass (where ``nu`` was measured).
        scale: ``Lambda = ||H s||^2 / |s . H s|``, the curvature the errors are relative to.
        curvature: ``s . H s``, the probe's curvature.
        product_norm: ``||H s||``.
        probe_steps: the steps ``h1`` at which the probe's third difference was measured, in order.
        probe_truncation: ``||tau|| / ||P||`` at each of them (relative truncation of the probe's difference).
        gradients: the gradients the measurement took.
        asymptotic: whether the last probe step was within the asymptotic range (``probe_truncation <=
            FD_ASYMPTOTIC``); False when every attempt was beyond it: the ``h^2`` law failed (kinks), the prediction
            is not trusted, and two products at the step are measured instead (``asymmetry``).
        asymmetry: when not ``asymptotic``, ``|u . C_h(s) - s . C_h(u)| / ||C_h(s)||`` for the probe ``s`` and ``u``
            along its product (the couplings a symmetric matrix makes equal): the measured error; else None.
        adapted: how many times the step was shortened after the measurement (:func:`remeasure`, along the top
            Ritz vector or along a vector whose products came out asymmetric); ``probe_steps`` and
            ``probe_truncation`` also hold those measurements.
    """

    step: float
    error: float
    truncation: float
    rounding: float
    noise: float
    lattice: str
    scale: float
    curvature: float
    product_norm: float
    probe_steps: list[float] = field(default_factory=list)
    probe_truncation: list[float] = field(default_factory=list)
    gradients: int = 0
    asymptotic: bool = True
    asymmetry: float | None = None
    adapted: int = 0

    @property
    def coefficient(self) -> float:
        """``A``: a unit vector's difference at step ``h`` has the truncation ``A h^2`` at the largest curvature."""
        return self.truncation * self.scale / self.step**2

    @property
    def accuracy(self) -> float:
        """The error that decides whether the products are used: the measured asymmetry, else the prediction."""
        return self.error if self.asymmetry is None else max(self.error, self.asymmetry)

    def summary(self) -> dict[str, object]:
        """The record of a result file (docs/schema.md, ``hvp_choice``'s ``finite_difference``).

        Returns:
            The attributes as plain numbers, lists and strings.
        """
        return {
            "step": self.step,
            "estimated_error": self.error,
            "truncation": self.truncation,
            "rounding": self.rounding,
            "noise": self.noise,
            "lattice": self.lattice,
            "scale": self.scale,
            "probe_curvature": self.curvature,
            "probe_product_norm": self.product_norm,
            "probe_steps": list(self.probe_steps),
            "probe_truncation": list(self.probe_truncation),
            "gradients": self.gradients,
            "asymptotic": self.asymptotic,
            "asymmetry": self.asymmetry,
            "adapted": self.adapted,
        }

    def product_error(self, curvature: float = 0.0) -> float:
        """The predicted error ``||C_h u - H u||`` of a unit vector ``u`` along which the curvature is ``curvature``.

        ``A h^2 (max(curvature, Lambda) / Lambda)^2 + B / h``: the truncation grows as the curvature squared.

        Args:
            curvature: the curvature along ``u`` (e.g. the largest Ritz value seen); below ``Lambda``, ``Lambda``.

        Returns:
            The absolute error (gradient units).
        """
        grow = max(abs(curvature) / self.scale, 1.0) if self.scale > 0 else 1.0
        return (self.truncation * grow**2 + self.rounding) * self.scale


@contextmanager
def full_float32(device: torch.device | str) -> Iterator[None]:
    """Float32 matmuls and convolutions computed in float32, not TF32, on a CUDA device (elsewhere nothing).

    TF32 rounds their operands to 2^-11 of themselves (cuDNN's convolutions do by default on Ampere and later GPUs,
    matmuls with ``torch.set_float32_matmul_precision("high")``): a displacement below that is lost, so central
    differences take their gradients without it. The caller's settings are restored afterwards.

    Args:
        device: where the gradients run.

    Yields:
        Nothing; the gradients run inside the ``with`` block.
    """
    if torch.device(device).type != "cuda":
        yield
        return
    with warnings.catch_warnings():  # the legacy flags, the ones torch's default reads, may warn of the new ones
        warnings.simplefilter("ignore")
        conv, matmul = torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cudnn.allow_tf32 = conv
            torch.set_float32_matmul_precision(matmul)


def ulp_shift(theta: Tensor, lattice: torch.dtype, generator: torch.Generator) -> Tensor:
    """One unit in the last place of every entry of ``theta`` in ``lattice``, with random signs, in ``theta``'s dtype.

    Args:
        theta: the weights (flat).
        lattice: the dtype whose rounding is measured (float32; bfloat16 under a bfloat16 forward).
        generator: the CPU generator of the signs.

    Returns:
        ``e`` with ``|e_i| = ulp(theta_i)`` in ``lattice``: ``theta + e`` is the neighbouring lattice point.
    """
    x = theta.detach().to(lattice)
    up = torch.nextafter(x, torch.full_like(x, math.inf))
    ulp = up.to(torch.float64) - x.to(torch.float64)
    signs = torch.randint(0, 2, (theta.numel(),), generator=generator, dtype=torch.int64).reshape(theta.shape)
    return (ulp * (2.0 * signs.to(ulp.device, torch.float64) - 1.0)).to(theta.dtype)


def choose_step(
    gradient: PointGradient,
    theta: Tensor,
    start: Tensor,
    inner: InnerProduct,
    *,
    lattice: torch.dtype,
    generator: torch.Generator,
) -> tuple[StepChoice, Tensor, Tensor | None, Tensor]:
    """The step of a point's central differences, chosen from its measured truncation and rounding (module doc).

    Every rank of a sharded operator calls it together with its parts of the vectors (``inner`` reduces).

    Args:
        gradient: ``shift -> g(theta + shift)`` (:data:`PointGradient`).
        theta: the point (this rank's part), flat, in the weights' dtype.
        start: a unit vector ``w`` (this rank's part), added to the gradient's direction for the probe.
        inner: the reductions over the vectors (whole, or split across ranks).
        lattice: the dtype the weights are rounded to in the forward pass.
        generator: the CPU generator of the rounding-level perturbation's signs.

    Returns:
        ``(choice, s, P, d)``: the :class:`StepChoice`, the probe ``s`` (unit, in the gradients' dtype), its product
        ``P`` (float64) or None when its own error (``O(h1^4)``, about ``probe_truncation^2``) would exceed the
        predicted error of a product at the chosen step, and the gradient's direction ``d = g0 / ||g0||`` (zero for
        a zero gradient). Vectors are combined in float64 one at a time: the measurement holds about eight vectors of
        the weights' size at once.
    """
    g0 = gradient(None)
    gradients = 1
    nu = _norm(inner, _combine(gradient(ulp_shift(theta, lattice, generator)), (-1.0, g0)))
    gradients += 1
    g_norm = _norm(inner, g0)
    direction = g0 / g_norm if math.isfinite(g_norm) and g_norm > 0 else torch.zeros_like(g0)
    x = _combine(direction, (1.0, start))
    s = (x / inner.norm(x)).to(g0.dtype)
    del x
    h = FD_FIRST_STEP * (nu / g_norm) ** (1.0 / 3.0) if g_norm > 0 and nu > 0 else FD_FIRST_STEP
    steps: list[float] = []
    ratios: list[float] = []
    for attempt in range(FD_ATTEMPTS):
        tau, product = _third_difference(gradient, theta.dtype, g0, s, h)
        gradients += 3
        scale, cut = _norm(inner, product), _norm(inner, tau)
        del tau
        ratio = cut / scale if scale > 0 else math.inf
        steps.append(h)
        ratios.append(ratio)
        if ratio <= FD_ASYMPTOTIC or attempt + 1 == FD_ATTEMPTS or not math.isfinite(ratio):
            break
        h *= math.sqrt(FD_TARGET / ratio)  # into the range where the h^2 law holds
    del g0
    curvature = float(inner.dot(s.double(), product))
    norm = max(scale, 1e-300)
    grow = min(norm / abs(curvature), MAX_GROWTH) if curvature != 0 else MAX_GROWTH
    scale = norm * grow  # Lambda = ||P||^2 / |s . P|
    a = (cut / h**2) * grow**2
    b = nu
    best = (b / (2 * a)) ** (1.0 / 3.0) if a > 0 else h
    if not math.isfinite(best) or best <= 0:
        best = h
    truncation, rounding = a * best**2 / scale, b / best / scale
    asymptotic = ratios[-1] <= FD_ASYMPTOTIC
    measured, own = None, None
    if not asymptotic:  # the h^2 law did not hold (kinks): the error of two products at the step, measured
        measured, own = _asymmetry(gradient, theta.dtype, s, product, best, inner)
        gradients += 4
    choice = StepChoice(
        step=best,
        error=truncation + rounding,
        truncation=truncation,
        rounding=rounding,
        noise=nu,
        lattice=str(lattice).replace("torch.", ""),
        scale=scale,
        curvature=curvature,
        product_norm=norm,
        probe_steps=steps,
        probe_truncation=ratios,
        gradients=gradients,
        asymptotic=asymptotic,
        asymmetry=measured,
    )
    if own is not None:  # the probe's difference at the chosen step
        return choice, s, own, direction
    # P's own error: the O(h1^4) remainder (about ratio^2) and its rounding, less than at the chosen step when h1 >= h
    reusable = math.isfinite(ratios[-1]) and ratios[-1] ** 2 <= choice.error and h >= best
    return choice, s, product if reusable else None, direction


def _combine(first: Tensor, *terms: tuple[float, Tensor]) -> Tensor:
    """``first + sum_i c_i t_i`` accumulated in float64, one vector at a time (no float64 copy of each term)."""
    out = first.to(torch.float64, copy=True)
    for c, t in terms:
        out.add_(t, alpha=c)
    return out


def _norm(inner: InnerProduct, x: Tensor) -> float:
    """``||x||`` over the whole vector, summed in float64."""
    return float(inner.norm(x.to(torch.float64)))


def _third_difference(
    gradient: PointGradient, dtype: torch.dtype, g0: Tensor, v: Tensor, h: float
) -> tuple[Tensor, Tensor]:
    """Along the unit ``v`` at ``t = -h, h, 2h`` (3 gradients): ``tau``, the truncation of ``C_h v``, and the rest.

    ``tau = (g(2h) - 3 g(h) + 3 g0 - g(-h)) / (6 h)``, both accumulated in float64, one gradient at a time.
    """
    plus = gradient((h * v).to(dtype))
    product = _combine(plus)
    tau = _combine(gradient((2 * h * v).to(dtype)), (-3.0, plus), (3.0, g0))
    del plus
    minus = gradient((-h * v).to(dtype))
    tau.sub_(minus).div_(6 * h)
    product.sub_(minus).div_(2 * h).sub_(tau)
    return tau, product


def _asymmetry(
    gradient: PointGradient, dtype: torch.dtype, s: Tensor, product: Tensor, step: float, inner: InnerProduct
) -> tuple[float, Tensor]:
    """``|u . C_h(s) - s . C_h(u)| / ||C_h(s)||`` for ``u`` the part of the probe's product orthogonal to ``s``.

    A Hessian is symmetric, so the two couplings differ only by the differences' errors (4 gradients).

    Returns:
        The relative asymmetry and ``C_h(s)``.
    """

    def central(v: Tensor) -> Tensor:
        shift = (step * v).to(dtype)
        return _combine(gradient(shift), (-1.0, gradient(-shift))).div_(2 * step)

    wide = s.to(torch.float64)
    u = _combine(product, (-float(inner.dot(wide, product)), wide))
    norm = _norm(inner, u)
    del wide
    if not math.isfinite(norm) or norm == 0:
        return 0.0, central(s)
    u = (u / norm).to(dtype)
    cs = central(s)
    cu = central(u)
    couplings = float(inner.dot(u.double(), cs)) - float(inner.dot(s.double(), cu))
    return abs(couplings) / max(_norm(inner, cs), 1e-300), cs


def remeasure(
    gradient: PointGradient, dtype: torch.dtype, g0: Tensor, v: Tensor, choice: StepChoice, inner: InnerProduct
) -> tuple[StepChoice, bool]:
    """The truncation measured along ``v`` at the step in use, and the step shortened when it must be.

    A solver calls it for a direction the probe may not have foreseen: the top Ritz vector once its value exceeds
    twice the scale the step was chosen for, or a vector whose products came out asymmetric beyond
    :data:`~landscape.options.hessian.FD_ADAPT`. The third difference along ``v`` at the step ``h`` in use
    (3 gradients) gives its truncation ``A_v = ||tau|| / h^2`` directly, at the curvature ``||P_v||``; when that is
    the largest seen it replaces the probe's scaled one (else the larger counts), and the balanced step is taken
    again, only ever shorter.

    Args:
        gradient: ``shift -> g(theta + shift)``.
        dtype: the weights' dtype (the shifts').
        g0: ``g(theta)`` (this rank's part).
        v: the direction (this rank's part; normalised here).
        choice: the step in use.
        inner: the reductions over the vectors.

    Returns:
        ``(choice, shortened)``: the :class:`StepChoice` with the measurement appended to ``probe_steps`` and
        ``probe_truncation``, its scale and predicted errors updated (and ``adapted`` one more when shortened),
        and whether the step is at least 1.5 times shorter (the solver then starts again).
    """
    u = (v / _norm(inner, v)).to(dtype)
    h = choice.step
    tau, product = _third_difference(gradient, dtype, g0, u, h)
    cut = _norm(inner, tau)
    norm = max(_norm(inner, product), 1e-300)
    del tau, product
    if norm >= choice.scale:  # measured at the largest curvature seen: it replaces the probe's extrapolation
        scale, a = norm, cut / h**2
    else:
        scale, a = choice.scale, max(choice.coefficient, (cut / h**2) * (choice.scale / norm) ** 2)
    best = (choice.noise / (2 * a)) ** (1.0 / 3.0) if a > 0 else h
    shortened = best * 1.5 <= h
    step = best if shortened else h
    truncation, rounding = a * step**2 / scale, choice.noise / step / scale
    new = StepChoice(
        step=step,
        error=truncation + rounding,
        truncation=truncation,
        rounding=rounding,
        noise=choice.noise,
        lattice=choice.lattice,
        scale=scale,
        curvature=choice.curvature,
        product_norm=choice.product_norm,
        probe_steps=[*choice.probe_steps, h],
        probe_truncation=[*choice.probe_truncation, cut / norm],
        gradients=choice.gradients + 3,
        asymptotic=choice.asymptotic,
        asymmetry=choice.asymmetry,
        adapted=choice.adapted + int(shortened),
    )
    return new, shortened
