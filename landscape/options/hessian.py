"""Options of ``landscape hessian`` and ``landscape spectrum``, and the Hessian choices they draw from.

:class:`HessianOptions` holds everything :func:`~landscape.analyses.hessian.run.run_hessian` computes from besides the
model and the output file; :class:`SpectrumOptions` does the same for
:func:`~landscape.analyses.hessian.run.run_spectrum`. Both validate every value when built (one-line
:class:`~landscape.errors.LandscapeError` naming the CLI option) and give the attributes their result file
records with :meth:`~HessianOptions.attrs`. No torch here: the CLI declares its options from this module.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.common import (
    AUGMENTED_CRITERION,
    CRITERIA,
    DTYPES,
    REG_COEF_DEFAULTS,
    auto_or_count,
    check_augment,
    check_data_options,
    check_regularizer,
    choice,
    refuse_without,
)

#: kinds of eigenvalues: largest / smallest algebraic, both ends, largest magnitude (scipy's names)
WHICH = ("LA", "SA", "BE", "LM")
#: how Hessian-vector products are made: a kept gradient graph, a kept trace, jvp(grad) each time, measured (auto),
#: or the central difference of two gradients (approximate; no double backward)
HVP_MODES = ("auto", "graph", "linearize", "jvp", "finite-difference")
#: the curvature operators every Hessian analysis can take (docs/analyses.md, curvature operators): the Hessian, the
#: generalised Gauss-Newton, the empirical Fisher, the residual H - G and K-FAC
OPERATORS = ("hessian", "ggn", "empirical-fisher", "residual", "kfac")
#: the operators whose products take second derivatives of the network (--hvp chooses how)
SECOND_ORDER_OPERATORS = ("hessian", "residual")
#: stochastic trace estimators
TRACE_METHODS = ("hutchinson", "hutch++")
#: the fewest products each trace estimator needs (a standard error; Hutch++'s sketch, exact part and probes)
TRACE_MIN_SAMPLES = {"hutchinson": 2, "hutch++": 6}
#: how many entries of a random vector split across ranks are drawn at a time: every rank draws the whole vector
#: from the seed in pieces of this many entries and keeps the entries it holds (so that the vector is the same
#: whatever the number of ranks, and a rank never holds more than this many entries it does not keep)
SHARDED_DRAW_CHUNK = 2**20
#: central differences (landscape.analyses.hessian.steps): the first probe step is this times ``(nu / ||g||)^(1/3)``
#: (``nu`` the gradient's change under a rounding-level change of the weights), in the weights' units; only where the
#: measurement starts (measured asymptotic from 1e-3 to 1e-2 on three ViTs, where this gives 2e-3 to 4e-3)
FD_FIRST_STEP = 0.25
#: the largest relative truncation ``||tau|| / ||P||`` of the probe's difference at which its h^2 law is trusted
FD_ASYMPTOTIC = 0.05
#: the relative truncation a probe step beyond that range is shortened to
FD_TARGET = 0.01
#: probe steps tried at most (each three gradients)
FD_ATTEMPTS = 3
#: the largest predicted relative error of a central-difference product that is used (refused above it): a product
#: error of 1e-2 moves a Rayleigh quotient by up to 1e-2 of the curvature
FD_MAX_ERROR = 1e-2
#: a measured asymmetry of two central-difference couplings above this share of the curvature makes the solver
#: measure the truncation along the vector it multiplied and, when the step is shortened, start again (accepted
#: runs measured 9.5e-6 to 7.5e-4 on four ViTs; the 4.6e-2 once seen on torchvision's vit_b_16, and timm's vit_tiny's
#: 1.2e-3, were the float32 norms of Lanczos' basis, since summed in float64)
FD_ADAPT = 3e-3
#: a Lanczos residual below this many times the products' predicted error counts as converged (their rounding part
#: is noise that no basis removes from a residual)
FD_RESIDUAL_FLOOR = 2.0
#: per-mini-batch eigenvalue solvers of ``landscape spectrum``
SOLVERS = ("lanczos", "pyhessian")
#: BatchNorm mode of every Hessian (recorded in the result file)
BN_MODE = "eval"


def split_patterns(params: str | None) -> list[str]:
    """The comma-separated parameter-name patterns of ``params`` as a list (empty for None).

    Args:
        params: comma-separated parameter-name globs (e.g. ``"fc.*,head.*"``), or None.

    Returns:
        The stripped, non-empty patterns in order.
    """
    if params is None:
        return []
    return [p.strip() for p in params.split(",") if p.strip()]


def parse_block_groups(items: Any, name: str = "--block") -> dict[str, list[str]]:
    """The parameter-name groups of ``--block NAME=PATTERN[,PATTERN]`` items: block name -> patterns, in order.

    Args:
        items: a sequence of ``"NAME=PATTERN[,PATTERN...]"`` strings (a single string is one item).
        name: the option's name, for the message.

    Returns:
        The groups in the order given (empty for no item).

    Raises:
        LandscapeError: an item without ``=``, with an empty name or no pattern, or a name given twice.
    """
    groups: dict[str, list[str]] = {}
    for item in [items] if isinstance(items, str) else list(items):
        block, sep, patterns = str(item).partition("=")
        block = block.strip()
        if not sep or not block or not split_patterns(patterns):
            raise LandscapeError(f"{name} takes NAME=PATTERN[,PATTERN], e.g. 'early=layer1.*,stem.*'; got {item!r}")
        if block in groups:
            raise LandscapeError(f"{name}: block {block!r} is given twice; give each block once")
        groups[block] = split_patterns(patterns)
    return groups


def describe_regularizer(kind: str, coef: float | None) -> str:
    """The JSON description of a regulariser that result files record (None: the kind's default coefficient).

    Args:
        kind: the regulariser, one of :data:`~landscape.options.common.REGULARIZERS`.
        coef: its coefficient, or None for the kind's default (0.0 for an unknown kind).

    Returns:
        A JSON string ``{"kind": kind, "coef": coef}``.
    """
    value = REG_COEF_DEFAULTS.get(kind, 0.0) if coef is None else coef
    return json.dumps({"kind": kind, "coef": float(value)})


def _flag(value: Any, name: str) -> None:
    if not isinstance(value, bool):
        raise LandscapeError(f"{name} must be True or False, got {value!r}")


def _optional_int(value: Any, name: str) -> None:
    if value is not None:
        checks.positive_int(value, name)


def _whole_non_negative(value: Any, name: str) -> None:
    checks.whole(value, name, 0)


def _optional_str(value: Any, name: str) -> None:
    if value is not None and not isinstance(value, str):
        raise LandscapeError(f"{name} must be a string, got {value!r}")


def check_operator(operator: Any, hvp: Any = "auto") -> str:
    """Refuse an unknown ``--operator`` and a ``--hvp`` given to an operator whose products take no second derivative.

    Args:
        operator: one of :data:`OPERATORS`.
        hvp: the ``--hvp`` asked for (only ``hessian`` and ``residual`` use it).

    Returns:
        ``operator``.

    Raises:
        LandscapeError: an unknown operator, or ``hvp`` other than ``auto`` with ``ggn``, ``empirical-fisher`` or
            ``kfac``.
    """
    choice(operator, "--operator", OPERATORS)
    if hvp != "auto" and operator not in SECOND_ORDER_OPERATORS:
        raise LandscapeError(
            f"--hvp chooses how Hessian products are made, and the {operator} operator takes no second derivative of "
            "the network (its products are a jvp and a vjp, or Kronecker factors): drop --hvp"
        )
    return str(operator)


def _common(o: HessianOptions | SpectrumOptions) -> None:
    """Checks both classes share: data, eigen solver, loss and product options."""
    _optional_str(o.data, "--data")
    object.__setattr__(o, "split", check_data_options(o.split, o.samples, o.batch_size, o.seed))
    choice(o.which, "--which", WHICH)
    checks.positive(o.tol, "--tol")
    _optional_int(o.ncv, "--ncv")
    _optional_int(o.maxiter, "--maxiter")
    choice(o.criterion, "criterion", CRITERIA)
    check_regularizer(o.regularizer, o.reg_coef)
    choice(o.hvp, "--hvp", HVP_MODES)
    check_operator(o.operator, o.hvp)
    if o.dtype is not None:
        choice(o.dtype, "--dtype", DTYPES)
    _flag(o.allow_stochastic, "--allow-stochastic")
    check_augment(o.augment, o.augment_copies, o.criterion)


class _LossOptions:
    """What both option classes share beyond their checks (:func:`_common`): the loss measured and its attributes."""

    criterion: str
    regularizer: str
    reg_coef: float | None
    hvp: str
    operator: str
    dtype: str | None
    allow_stochastic: bool
    augment: str
    augment_copies: int

    @property
    def loss_criterion(self) -> str:
        """The data loss the run measures: ``soft_cross_entropy`` with an augmentation, else :attr:`criterion`."""
        return AUGMENTED_CRITERION if self.augment != "none" else self.criterion

    def _loss_attrs(self) -> dict[str, Any]:
        """The root attributes of the loss and its products.

        ``augment`` and ``augment_copies`` are there only with an augmentation, ``operator`` only for an operator
        other than the Hessian (files made before them still resume; an absent ``operator`` is ``hessian``).
        """
        attrs = {
            "criterion": self.loss_criterion,
            "regularizer": describe_regularizer(self.regularizer, self.reg_coef),
            "hvp": self.hvp,
            "dtype": self.dtype,
            "bn_mode": BN_MODE,
            "allow_stochastic": self.allow_stochastic,
        }
        if self.augment != "none":
            attrs.update(augment=self.augment, augment_copies=int(self.augment_copies))
        if self.operator != "hessian":
            attrs.update(operator=self.operator)
        return attrs


@dataclass(frozen=True)
class HessianOptions(_LossOptions):
    """What ``landscape hessian`` computes: Lanczos eigenpairs, SLQ density and trace of the loss Hessian.

    Attributes:
        data: dataset spec (None: the checkpoint's dataset, else digits).
        split: dataset split of the loss.
        samples: images in the loss (None: the whole split).
        batch_size: batch size of the Hessian-vector product passes.
        seed: seed of the samples, the Lanczos start vector and the probes.
        top_k: eigenpairs to compute (0: none).
        which: kind of eigenpairs, one of :data:`WHICH`.
        tol: relative residual of a converged eigenpair, ``||H y - lambda y|| <= tol |lambda|`` (> 0).
        ncv: Lanczos basis size (None: ``max(2k+1, 20)``).
        maxiter: maximum Lanczos restarts (None: the solver's default).
        eigenvectors: also store the eigenvectors.
        density: also compute the SLQ spectral density.
        probes: SLQ probe vectors.
        steps: Lanczos steps per SLQ probe.
        sigma: Gaussian broadening of the density (None: 1% of the node spread).
        grid_points: points of the density's grid.
        trace: also estimate the trace.
        trace_samples: Hessian-vector products spent on the trace.
        trace_method: trace estimator, one of :data:`TRACE_METHODS`.
        params: comma-separated parameter-name globs of a per-layer Hessian block (None: all parameters).
        criterion: data loss, one of :data:`~landscape.options.common.CRITERIA`.
        regularizer: penalty added to the loss, one of :data:`~landscape.options.common.REGULARIZERS`.
        reg_coef: its coefficient (None: :data:`~landscape.options.common.REG_COEF_DEFAULTS`).
        hvp: how products are made, one of :data:`HVP_MODES` (``hessian`` and ``residual`` only).
        operator: the curvature operator analysed, one of :data:`OPERATORS` (docs/analyses.md).
        dtype: floating-point type of the computation, one of :data:`~landscape.options.common.DTYPES` (None: the
            model's own; the file records the type used).
        allow_stochastic: do not refuse a model whose two forward passes differ.
        augment: the data, one of :data:`~landscape.options.common.AUGMENTATIONS` (``paper-a``: Paper A's training
            augmentation drawn once from ``seed`` and held fixed for every product; soft-target cross-entropy).
        augment_copies: augmented copies drawn of each sample (``paper-a``).
        per_block: also the top eigenvalue and the trace of every block's diagonal Hessian block.
        block: the blocks of ``per_block`` as ``NAME=PATTERN[,PATTERN]`` items (:func:`parse_block_groups`);
            empty: the model's blocks as its feature taps find them.
        taps: ``'PATTERN=KIND'`` items naming the modules whose outputs are the blocks of ``per_block``, for models
            no family rule knows (as ``landscape fourier --taps``); empty: the family rules.

    Raises:
        LandscapeError: an invalid value (non-finite or out-of-range number, unknown choice, a bad ``--block``
            item or ``--block`` without ``--per-block``), nothing to compute (``top_k=0`` without ``density``,
            ``trace`` or ``per_block``), or an option without the one it acts with (``probes``, ``steps``,
            ``sigma``, ``grid_points`` without ``density``; ``trace_samples``, ``trace_method`` without ``trace`` or
            ``per_block``; ``eigenvectors`` without ``top_k >= 1``).
    """

    data: str | None = None
    split: str = "train"
    samples: int | None = 1024
    batch_size: int = 128
    seed: int = 0
    top_k: int = 5
    which: str = "LA"
    tol: float = 1e-4
    ncv: int | None = None
    maxiter: int | None = None
    eigenvectors: bool = False
    density: bool = False
    probes: int = 4
    steps: int = 64
    sigma: float | None = None
    grid_points: int = 1000
    trace: bool = False
    trace_samples: int = 99
    trace_method: str = "hutch++"
    params: str | None = None
    criterion: str = "cross_entropy"
    regularizer: str = "none"
    reg_coef: float | None = None
    hvp: str = "auto"
    operator: str = "hessian"
    dtype: str | None = None
    allow_stochastic: bool = False
    augment: str = "none"
    augment_copies: int = 1
    per_block: bool = False
    block: tuple[str, ...] = ()
    taps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _common(self)
        _whole_non_negative(self.top_k, "--top-k")
        object.__setattr__(
            self, "block", tuple(str(b) for b in ([self.block] if isinstance(self.block, str) else self.block))
        )
        parse_block_groups(self.block)
        object.__setattr__(
            self, "taps", tuple(str(t) for t in ([self.taps] if isinstance(self.taps, str) else self.taps))
        )
        if (self.block or self.taps) and not self.per_block:
            raise LandscapeError(
                f"--{'block' if self.block else 'taps'} chooses the blocks of --per-block; add --per-block"
            )
        if self.block and self.taps:
            raise LandscapeError(
                "give the blocks of --per-block by --block (parameter names) or --taps (modules), not both"
            )
        for name in ("eigenvectors", "density", "trace", "per_block"):
            _flag(getattr(self, name), f"--{name}")
        checks.positive_int(self.probes, "--probes")
        checks.positive_int(self.steps, "--steps")
        if self.sigma is not None:
            checks.positive(self.sigma, "--sigma")
        checks.positive_int(self.grid_points, "--grid-points")
        choice(self.trace_method, "--trace-method", TRACE_METHODS)
        least = TRACE_MIN_SAMPLES[self.trace_method]
        checks.whole(self.trace_samples, f"--trace-samples (of {self.trace_method})", least)
        _optional_str(self.params, "--params")
        if self.params is not None and not split_patterns(self.params):
            raise LandscapeError(
                f"--params names no pattern (got {self.params!r}); give comma-separated globs "
                "such as 'fc.*' or leave it out for every parameter"
            )
        if self.top_k == 0 and not self.density and not self.trace and not self.per_block:
            raise LandscapeError("nothing to compute: give --top-k >= 1, --density, --trace or --per-block")
        refuse_without(self, self.density, "--density", ("probes", "steps", "sigma", "grid_points"))
        refuse_without(self, self.trace or self.per_block, "--trace or --per-block", ("trace_samples", "trace_method"))
        refuse_without(self, self.top_k > 0, "--top-k >= 1", ("eigenvectors",))

    @property
    def patterns(self) -> list[str]:
        """The parameter-name patterns of :attr:`params` as a list (empty: every parameter)."""
        return split_patterns(self.params)

    @property
    def block_groups(self) -> dict[str, list[str]]:
        """The ``--block`` groups: block name -> patterns (empty: the blocks of the model's feature taps)."""
        return parse_block_groups(self.block)

    def attrs(self) -> dict[str, Any]:
        """The options a hessian result file records as root attributes (besides split, seed and samples).

        ``per_block`` and ``blocks`` only with ``per_block`` (a file without blocks keeps the identity it had).

        Returns:
            A dict of attribute name to value; a file whose attributes differ was made with other options.
        """
        blocks = {"per_block": True, "blocks": self.block_groups, "taps": list(self.taps)} if self.per_block else {}
        return {
            **blocks,
            "batch_size": self.batch_size,
            "top_k": self.top_k,
            "which": self.which,
            "tol": self.tol,
            "ncv": self.ncv,
            "maxiter": self.maxiter,
            "eigenvectors": self.eigenvectors,
            "density": self.density,
            "probes": self.probes,
            "steps": self.steps,
            "sigma": self.sigma,
            "grid_points": self.grid_points,
            "trace": self.trace,
            "trace_samples": self.trace_samples,
            "trace_method": self.trace_method,
            "params": self.patterns,
            **self._loss_attrs(),
        }


@dataclass(frozen=True)
class SpectrumOptions(_LossOptions):
    """What ``landscape spectrum`` computes: Paper A's top-k Hessian eigenvalues of every mini-batch.

    Attributes:
        data: dataset spec (None: the checkpoint's dataset, else digits).
        split: dataset split the mini-batches come from.
        batch_size: mini-batch size (Paper A: 16).
        fraction: share of the split used, in (0, 1] (Paper A: 10%); ignored when ``samples`` is given.
        samples: number of images instead of ``fraction`` (None: use ``fraction``).
        seed: seed of the sample choice and the start vectors.
        top_k: eigenvalues per mini-batch (>= 1).
        which: kind of eigenvalues, one of :data:`WHICH` (lanczos solver only).
        solver: one of :data:`SOLVERS`.
        tol: relative residual of a converged eigenpair, ``||H y - lambda y|| <= tol |lambda|`` (> 0).
        ncv: Lanczos basis size (None: the solver's default).
        maxiter: Lanczos restarts / PyHessian iterations per eigenvalue (None: the solver's default).
        criterion: data loss, one of :data:`~landscape.options.common.CRITERIA`.
        regularizer: penalty added to the loss, one of :data:`~landscape.options.common.REGULARIZERS`.
        reg_coef: its coefficient (None: :data:`~landscape.options.common.REG_COEF_DEFAULTS`).
        hvp: how products are made, one of :data:`HVP_MODES` (``hessian`` and ``residual`` only).
        operator: the curvature operator of each mini-batch, one of :data:`OPERATORS` (docs/analyses.md).
        dtype: floating-point type of the computation, one of :data:`~landscape.options.common.DTYPES` (None: the
            model's own; the file records the type used).
        allow_stochastic: do not refuse a model whose two forward passes differ.
        augment: the data, one of :data:`~landscape.options.common.AUGMENTATIONS` (``paper-a``: Paper A's training
            augmentation drawn once from ``seed`` and held fixed; every mini-batch mixed within itself).
        augment_copies: augmented copies drawn of each sample (``paper-a``).
        group: mini-batches computed together (one ``vmap`` call per product, Lanczos runs in lockstep), or
            ``"auto"``: measured (1 where ``vmap`` is slower; on a GPU the most that fit in memory); with
            ``hvp="finite-difference"`` one batch at a time (the grouped products are exact).

    Raises:
        LandscapeError: an invalid value (non-finite or out-of-range number, unknown choice), neither
            ``fraction`` nor ``samples``, ``solver`` or ``group`` with another ``operator`` than the Hessian, or a
            ``group`` above 1 with ``hvp="finite-difference"``.
    """

    data: str | None = None
    split: str = "train"
    batch_size: int = 16
    fraction: float | None = 0.1
    samples: int | None = None
    seed: int = 0
    top_k: int = 5
    which: str = "LM"
    solver: str = "lanczos"
    tol: float = 1e-3
    ncv: int | None = None
    maxiter: int | None = None
    criterion: str = "cross_entropy"
    regularizer: str = "none"
    reg_coef: float | None = None
    hvp: str = "auto"
    operator: str = "hessian"
    dtype: str | None = None
    allow_stochastic: bool = False
    augment: str = "none"
    augment_copies: int = 1
    group: int | str = "auto"

    def __post_init__(self) -> None:
        _common(self)
        object.__setattr__(self, "group", auto_or_count(self.group, "--group"))
        if self.fraction is not None:
            checks.in_range(self.fraction, "--fraction", 0.0, 1.0, low_open=True)
        elif self.samples is None:
            raise LandscapeError("give --fraction (a share of the split) or --samples (a number of images)")
        checks.positive_int(self.top_k, "--top-k")
        choice(self.solver, "--solver", SOLVERS)
        if self.operator != "hessian" and self.solver != "lanczos":
            raise LandscapeError(f"--solver {self.solver} computes Hessian eigenvalues only; drop it with --operator")
        if self.operator != "hessian" and self.group not in ("auto", 1):
            raise LandscapeError(
                f"--group computes several batches' Hessian products at once; --operator {self.operator} runs one "
                "batch at a time: drop --group"
            )
        if self.hvp == "finite-difference" and self.group not in ("auto", 1):
            raise LandscapeError(
                f"--group {self.group} makes exact products of the batches together (vmap); central differences "
                "(--hvp 'finite-difference') are made one batch at a time: give --group 1 or leave it out"
            )

    def attrs(self) -> dict[str, Any]:
        """The options a spectrum result file records as root attributes (besides split, seed and samples).

        Returns:
            A dict of attribute name to value; a file whose attributes differ was made with other options.
        """
        return {
            "batch_size": self.batch_size,
            "fraction": self.fraction,
            "top_k": self.top_k,
            "which": self.which,
            "solver": self.solver,
            "tol": self.tol,
            "ncv": self.ncv,
            "maxiter": self.maxiter,
            **self._loss_attrs(),
        }


class HessianKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.hessian`: the fields of :class:`HessianOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    samples: int | None
    batch_size: int
    seed: int
    top_k: int
    which: str
    tol: float
    ncv: int | None
    maxiter: int | None
    eigenvectors: bool
    density: bool
    probes: int
    steps: int
    sigma: float | None
    grid_points: int
    trace: bool
    trace_samples: int
    trace_method: str
    params: str | None
    criterion: str
    regularizer: str
    reg_coef: float | None
    hvp: str
    operator: str
    dtype: str | None
    allow_stochastic: bool
    augment: str
    augment_copies: int
    per_block: bool
    block: str | Sequence[str]
    taps: str | Sequence[str]


class SpectrumKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.spectrum`: the fields of :class:`SpectrumOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    batch_size: int
    fraction: float | None
    samples: int | None
    seed: int
    top_k: int
    which: str
    solver: str
    tol: float
    ncv: int | None
    maxiter: int | None
    criterion: str
    regularizer: str
    reg_coef: float | None
    hvp: str
    operator: str
    dtype: str | None
    allow_stochastic: bool
    augment: str
    augment_copies: int
    group: int | str
