"""Central differences at one point for an operator: its step, its probe, and the refusal where they cannot be accurate.

:class:`CentralDifferences` holds what an operator of central-difference products (the Hessian operator in its
``finite-difference`` mode, the FSDP operator) needs beyond its gradients: the step chosen at the point
(:func:`~landscape.analyses.hessian.steps.choose_step`, once), the probe and its product (offered to Lanczos as
its start vector, so that the measurement's product is not made twice), the predicted error of a product, and
the one-line refusals. Central differences fail for three reasons, each named by the refusal it causes:

- **kinks**: a ReLU, LeakyReLU, max pooling or another piecewise-linear operation (:mod:`landscape.models.kinks`)
  whose pre-activations the displacement moves across zero; the gradient jumps there, the exact Hessian (which
  takes their second derivative as 0) does not see it, and the jumps do not shrink with the step;
- **a 16-bit forward** (``torch.autocast`` to bfloat16 or float16, or FSDP's mixed precision with a 16-bit
  ``param_dtype``): every weight is rounded to 2^-8 (bfloat16) of itself in the forward pass, so a displacement is
  resolved only at lengths whose truncation error is large (docs/analyses.md measures it);
- otherwise, a truncation and a rounding error that no step makes small together.

Messages name the command line's flags in quoted form (``--hvp 'graph'``), which a Python call of
``landscape.hessian`` shows as its keywords (``hvp='graph'``); ``fsdp_lanczos``, a Python function without those
options, gets its own advice (``python=True``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from landscape.analyses.hessian.linalg import InnerProduct, remedy_of, require_finite
from landscape.analyses.hessian.probes import local_generator
from landscape.analyses.hessian.steps import PointGradient, StepChoice, choose_step, remeasure
from landscape.errors import LandscapeError
from landscape.models.kinks import kinked_operations as kinked_operations
from landscape.options.hessian import FD_MAX_ERROR

#: entries of the probe's Gaussian vector kept to recognise the same draw (a solver's start from the same seed)
FINGERPRINT = 64
#: floating dtypes whose rounding makes central differences inaccurate when the forward pass runs in them
SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def forward_lattice(dtype: torch.dtype, device: torch.device | str) -> torch.dtype:
    """The dtype the weights are rounded to in the forward pass: the autocast dtype when one is active, else theirs.

    Args:
        dtype: the weights' dtype.
        device: where the forward runs (autocast is per device type).

    Returns:
        ``torch.get_autocast_dtype(device type)`` under an active autocast of a coarser dtype, else ``dtype``.
    """
    kind = torch.device(device).type
    if torch.is_autocast_enabled(kind):
        cast = torch.get_autocast_dtype(kind)
        if torch.finfo(cast).eps > torch.finfo(dtype).eps:
            return cast
    return dtype


def require_accurate(choice: StepChoice, explain: Callable[[str], str]) -> None:
    """Refuse a step whose products' error (predicted or measured) exceeds ``FD_MAX_ERROR``.

    Args:
        choice: the measured step (:func:`~landscape.analyses.hessian.steps.choose_step`).
        explain: ``finding -> message`` of the operator (:func:`refusal` with the model's cause).

    Raises:
        LandscapeError: the one-line refusal.
    """
    if choice.accuracy <= FD_MAX_ERROR:
        return
    if choice.asymmetry is not None and choice.asymmetry > FD_MAX_ERROR:
        pairs = ", ".join(f"{r:.2g} at {h:.2g}" for h, r in zip(choice.probe_steps, choice.probe_truncation))
        finding = (
            f"no step gives accurate products here (the truncation did not fall as the step squared: {pairs}; two "
            f"products at the step {choice.step:.2g} differ from symmetric by {choice.asymmetry:.2g} of their size)"
        )
    else:
        finding = (
            f"no step gives accurate products here (predicted error {choice.error:.2g} of the curvature at the best "
            f"step {choice.step:.2g}: truncation {choice.truncation:.2g}, rounding {choice.rounding:.2g})"
        )
    raise LandscapeError(explain(finding))


def refusal(
    finding: str,
    *,
    kinks: list[str],
    lattice: torch.dtype,
    dtype: torch.dtype,
    python: bool,
    float64: bool | None = None,
) -> str:
    """The one-line refusal of central differences: ``finding``, its cause and what to do.

    Args:
        finding: what was measured, e.g. the predicted error or the asymmetry of two products.
        kinks: the model's piecewise-linear operations (:func:`~landscape.models.kinks.kinked_operations`).
        lattice: the dtype the weights are rounded to in the forward pass (:func:`forward_lattice`).
        dtype: the weights' dtype.
        python: advice for ``fsdp_lanczos`` (Python arguments, a sharded model) instead of ``landscape.hessian``'s.
        float64: whether float64 weights may be advised (default: ``dtype`` is not float64); False where the caller
            has no ``--dtype`` (a surface along Hessian directions).

    Returns:
        The message.
    """
    coarse = dtype != torch.float64 if float64 is None else float64
    head = ("fsdp_lanczos: " if python else "--hvp 'finite-difference': ") + "central differences of gradients: "
    if lattice in SIXTEEN_BIT:
        bits = round(-math.log2(torch.finfo(lattice).eps)) + 1
        cause = (
            f"the forward pass runs in {str(lattice).replace('torch.', '')}, which rounds every weight to 2^-{bits} "
            "of itself, so a displacement is resolved only at lengths whose truncation error is large"
        )
        fix = (
            "give fully_shard a MixedPrecisionPolicy with param_dtype=torch.float32 (or none)"
            if python
            else "run it in float32, outside torch.autocast"
        )
    elif kinks:
        cause = (
            f"the displacement crosses kinks of the model's piecewise-linear {', '.join(kinks)}, where the gradient "
            "jumps (the exact Hessian takes their second derivative as 0), and the jumps do not shrink with the step"
        )
        if python:
            fix = (
                "make its products exact unsharded, landscape.hessian(model, data, hvp='graph'), where it fits one "
                "device"
                + (", shard float64 weights (model.double() before fully_shard: a far shorter step)" if coarse else "")
                + ", or analyse a smooth surrogate (GELU in place of ReLU)"
            )
        else:
            fix = "use --hvp 'graph' or --hvp 'jvp' (exact products)" + (
                ", or --dtype 'float64' (a far shorter step, which crosses fewer kinks)" if coarse else ""
            )
    else:
        cause = "the truncation and rounding errors of this model's differences cannot both be made small"
        if python:
            fix = "shard float64 weights (model.double() before fully_shard)" if coarse else ""
        else:
            fix = "use --hvp 'graph' or --hvp 'jvp' (exact products)" + (", or --dtype 'float64'" if coarse else "")
    return head + f"{finding}: {cause}" + (f"; {fix}" if fix else "")


class CentralDifferences:
    """One point's central differences for an operator on flat vectors: step, probe, predicted error, refusals.

    Args:
        gradient: ``shift -> g(theta + shift)``, the (local part of the) flat gradient of the operator's loss.
        theta: the point (this rank's part), flat, in the weights' dtype.
        inner: the reductions over the operator's vectors.
        n: the length of the whole vectors.
        dtype: the dtype of the operator's vectors.
        device: their device.
        lattice: ``() -> the dtype the weights are rounded to in the forward pass`` (read when the step is chosen).
        explain: ``finding -> the one-line refusal`` (:func:`refusal` with the model's cause).
        remedy: ``problem -> advice`` of the operator (:func:`~landscape.analyses.hessian.linalg.remedy_of`), for
            a measurement whose gradients are not finite (a NaN weight, an overflow): default the generic advice.

    Attributes:
        choice: the step chosen (:class:`~landscape.analyses.hessian.steps.StepChoice`), or None before.
        gradients: the gradients spent at this point so far: the step's measurement (when made here) and two per
            product (the operator counts them, :meth:`count`); the probe's product, reused, costs none.
    """

    def __init__(
        self,
        gradient: PointGradient,
        theta: Tensor,
        inner: InnerProduct,
        n: int,
        dtype: torch.dtype,
        device: torch.device,
        lattice: Callable[[], torch.dtype],
        explain: Callable[[str], str],
        remedy: Callable[[str], str] | None = None,
    ) -> None:
        self.gradient, self.theta, self.inner, self.n = gradient, theta, inner, n
        self.dtype, self.device, self.lattice, self.explain = dtype, device, lattice, explain
        self.remedy = remedy or remedy_of(None)
        self.choice: StepChoice | None = None
        self.gradients = 0
        #: (the first entries of w, s, H s or None) of the probe measured here
        self._probe: tuple[Tensor, Tensor, Tensor | None] | None = None
        self._g0: Tensor | None = None  # g(theta), kept for a later measurement along another direction

    def step(self, start: Tensor | None = None) -> StepChoice:
        """The step: measured at the first call (on the probe of ``start``), then kept.

        Args:
            start: the unit vector ``w`` the probe adds to the gradient's direction (this rank's part); default
                the Gaussian unit vector of seed 0.

        Returns:
            The choice.

        Raises:
            LandscapeError: the measurement's gradients are not finite (the first product's refusal, with the
                operator's remedy), or no step gives products within ``FD_MAX_ERROR`` (:func:`require_accurate`).
        """
        if self.choice is None:
            if start is None:
                start = self.inner.random_unit(self.n, self.dtype, self.device, local_generator(0))
            w = start.to(self.dtype)
            choice, s, product, _ = choose_step(
                self.gradient, self.theta, w, self.inner, lattice=self.lattice(), generator=local_generator(0)
            )
            self.gradients += choice.gradients
            # non-finite gradients (a NaN weight, an overflow) are the products' problem, not the step's
            measured = torch.tensor([choice.product_norm, choice.curvature, choice.noise], dtype=torch.float64)
            require_finite(measured, 1, self.remedy("non-finite"))
            require_accurate(choice, self.explain)
            self.choice = choice
            kept = None if product is None else product.to(self.dtype)
            self._probe = (w[:FINGERPRINT].clone(), s.to(self.dtype), kept)
        return self.choice

    def adapt(self, v: Tensor) -> bool:
        """Measure the truncation along ``v`` and shorten the step when it must be (``steps.remeasure``).

        Args:
            v: the direction (this rank's part): the top Ritz vector, or the vector whose products came out
                asymmetric.

        Returns:
            True when the step was shortened (the solver then starts again).

        Raises:
            LandscapeError: the predicted error at the (shortened) step exceeds ``FD_MAX_ERROR``.
        """
        if self.choice is None:
            return False
        if self._g0 is None:
            self._g0 = self.gradient(None).to(self.dtype)
            self.gradients += 1
        new, shortened = remeasure(self.gradient, self.theta.dtype, self._g0, v, self.choice, self.inner)
        self.gradients += 3
        require_accurate(new, self.explain)
        self.choice = new
        return shortened

    @property
    def scale(self) -> float | None:
        """The curvature the step was chosen for (its ``scale``), or None before it is."""
        return None if self.choice is None else self.choice.scale

    def count(self, products: int = 1) -> None:
        """Count the gradients of ``products`` central differences (two each).

        Args:
            products: how many were made.
        """
        self.gradients += 2 * products

    def adopt(self, choice: StepChoice) -> None:
        """Take a step chosen by another operator at the same point (no probe of its own: no start vector offered).

        Args:
            choice: the step.
        """
        if self.choice is None:
            self.choice = choice

    def start_vector(self, generator: torch.Generator) -> Tensor | None:
        """A Lanczos start vector that sees the point's top curvature: ``normalise(d + w)`` (None: none offered).

        ``d`` is the gradient's direction at the point and ``w`` the Gaussian unit vector drawn from ``generator``
        (the start Lanczos draws otherwise, in the same way). When the step is measured here with this ``w``, the
        vector is its probe, whose product the measurement already made (:meth:`probe_product`).

        Args:
            generator: the solver's generator.

        Returns:
            This rank's part of the unit start vector, in :attr:`dtype`; None when the step was adopted.
        """
        if self.choice is not None and self._probe is None:
            return None
        w = self.inner.random_unit(self.n, self.dtype, self.device, generator)
        self.step(w)
        assert self._probe is not None
        if torch.equal(self._probe[0], w[:FINGERPRINT]):  # the same draw: the probe itself
            return self._probe[1]
        g = self.gradient(None).double()  # another draw (another solver's seed): its own start
        self.gradients += 1
        norm = self.inner.norm(g)
        x = (g / norm if bool(torch.isfinite(norm)) and float(norm) > 0 else torch.zeros_like(g)) + w.double()
        return (x / self.inner.norm(x)).to(self.dtype)

    def probe_product(self, v: Tensor) -> Tensor | None:
        """The probe's product when ``v`` is the probe (made by the measurement), else None.

        Args:
            v: this rank's part of a vector, in :attr:`dtype`.

        Returns:
            A copy of the product, or None.
        """
        if self._probe is None or self._probe[2] is None or not torch.equal(v, self._probe[1]):
            return None
        return self._probe[2].clone()

    def product_error(self, curvature: float = 0.0) -> float:
        """The predicted error of a unit vector's product (:meth:`StepChoice.product_error`).

        Args:
            curvature: the curvature along the vector (e.g. the largest Ritz value seen).

        Returns:
            The absolute error; 0 before the step is chosen.
        """
        return self.choice.product_error(curvature) if self.choice is not None else 0.0

    def asymmetry(self, upper: float, lower: float, products: int) -> str:
        """The refusal of products that are not symmetric (the solvers' check).

        Args:
            upper: ``v_i . A v_j``.
            lower: ``v_j . A v_i``.
            products: the products made so far.

        Returns:
            The one-line message.
        """
        defect = f"v_i . A v_j = {upper:.6g} but v_j . A v_i = {lower:.6g} at product {products}"
        return self.explain(f"its products are not symmetric ({defect})")
