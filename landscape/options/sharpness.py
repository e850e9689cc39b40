"""Options of ``landscape sharpness`` and of ``landscape train --track-sharpness``, and the choices they draw from.

:class:`SharpnessOptions` holds everything :func:`~landscape.analyses.sharpness.run.run_sharpness` computes from
besides the model and the output file; it validates every value when built (one-line
:class:`~landscape.errors.LandscapeError` naming the CLI option) and gives the attributes its result file records
with :meth:`~SharpnessOptions.attrs`. The rules for radii (:func:`check_radii`) and norms (:func:`norm_name`) and
the tracking defaults of training (:data:`TRACK_BATCH_SIZE`, :data:`TRACK_TOL`, ...) are defined here, once: the
measures (``landscape.analyses.sharpness.measures``), the tracker's file and the CLI import them. No torch here.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.common import (
    AUGMENTED_CRITERION,
    CRITERIA,
    DTYPES,
    FieldDefaults,
    check_augment,
    check_data_options,
    check_regularizer,
    choice,
    refuse_without,
)
from landscape.options.hessian import BN_MODE, describe_regularizer, split_patterns

#: the two measures: the mean rise of the loss under Gaussian noise, and its largest rise in a ball
MEASURES = ("average", "worst")
#: the norms of the worst case's ball, by name: Euclidean (``2``) and max-norm (``inf``)
NORMS = ("2", "inf")
#: where the worst case's ascents start: output-diversified points (the ball's point that raises a random
#: weighting of the model's outputs, Tashiro et al. 2020) alternating with random points of the ball; every one
#: random; the first at the ball's centre, the others random
INITS = ("output", "random", "zero")
#: which parameters are perturbed: ``all`` (every variable parameter) or ``surface`` (the loss surfaces' rule:
#: tensors of two or more dimensions, position tables and learned tokens left out)
PERTURB = ("all", "surface")
#: the default radii of ``landscape sharpness`` (relative to ``|w|`` in the adaptive measures)
RHO = (0.01, 0.02, 0.05, 0.1)
#: the worst case's ascent iterations per restart (the step is halved at checkpoints of this schedule)
WORST_STEPS = 10
#: the worst case's ascents per batch and radius from different starts, the best kept. The maximum of a trained
#: network's loss over an l-inf ball has several local maxima far apart, and which one an ascent climbs depends on
#: its start: many short ascents from diverse starts find more than few long ones (benchmarks/ascent.py --mlps)
WORST_RESTARTS = 8
#: where they start (:data:`INITS`)
WORST_INIT = "output"
#: the worst case's first step over ``rho`` (2: the l-inf cube's and the l2 ball's diameter)
WORST_STEP_SIZE = 2.0
#: the fewest mini-batches whose values get a bootstrap interval (fewer give NaN bounds and say so)
MIN_INTERVAL_BATCHES = 5

#: ``landscape train --track-sharpness``: images of the fixed tracking batch (the first of the seeded order; 16
#: keeps a record near one training step of resnet_mini on digits: benchmarks/tracking.py)
TRACK_BATCH_SIZE = 16
#: ... how its Hessian-vector products are made: a kept gradient graph (on the CPU cheaper than jvp(grad))
TRACK_HVP = "graph"
#: ... Lanczos' tolerance: a record converges at ``||H y - lambda y|| <= 1e-2 lambda`` (within 1% of an eigenvalue,
#: usually ~1e-4: finer than what edge-of-stability plots show)
TRACK_TOL = 1e-2
#: ... Lanczos' basis size (a warm start converges within a few vectors)
TRACK_NCV = 8
#: ... Lanczos' restarts at most (a record that does not converge is flagged, not retried)
TRACK_MAXITER = 3


def norm_name(p: Any, name: str = "p") -> str:
    """The name of the worst case's norm: ``"2"`` or ``"inf"``, whichever way it is written.

    Args:
        p: ``2``, ``"2"``, ``"l2"``, or ``inf`` (``math.inf``, ``"inf"``, ``"linf"``, ``"infinity"``).
        name: the option's name, for the message.

    Returns:
        ``"2"`` or ``"inf"``.

    Raises:
        LandscapeError: ``p`` is neither 2 nor inf.
    """
    text = str(p).strip().lower()
    if text in ("2", "2.0", "l2"):
        return "2"
    if text in ("inf", "linf", "l-inf", "infinity"):
        return "inf"
    raise LandscapeError(f"{name} must be 2 or inf (the norm of the perturbation ball), got {p!r}")


def check_radii(rho: Any, name: str = "rho") -> tuple[float, ...]:
    """The radii as a tuple of floats; an error unless there is one at least and each is finite and ``>= 0``.

    Args:
        rho: one radius, a non-empty sequence of radii, or a string of comma- or space-separated radii.
        name: the option's name, for the message.

    Returns:
        The radii, in the order given.

    Raises:
        LandscapeError: no radius, or a radius that is NaN, infinite, negative or not a number.
    """
    if isinstance(rho, str):
        radii: list[Any] = [r for r in rho.replace(",", " ").split() if r]
    elif isinstance(rho, numbers.Real):
        radii = [rho]
    else:
        radii = list(rho)
    if not radii:
        raise LandscapeError(f"{name} must be a radius or a non-empty list of radii, e.g. 0.01,0.05,0.1")
    return tuple(checks.non_negative(r, name) for r in radii)


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise LandscapeError(f"{name} must be True or False, got {value!r}")
    return value


@dataclass(frozen=True)
class SharpnessOptions(FieldDefaults):
    """What ``landscape sharpness`` computes: average- or worst-case m-sharpness, adaptive or plain, over radii.

    Each mini-batch ``S`` of ``batch_size`` (= m) images is one draw of the measure; the result is their mean with
    a bootstrap interval over the batches (docs/analyses.md, sharpness).

    Attributes:
        data: dataset spec (None: the checkpoint's dataset, else digits).
        split: dataset split of the loss.
        samples: images used (None: the whole split); ``samples / batch_size`` batches.
        batch_size: ``m``, the images of one mini-batch ``S``.
        seed: seed of the samples, and (plus the batch's index) of each batch's noise or ascent start.
        measure: one of :data:`MEASURES`.
        rho: the radii, each finite and >= 0 (one run gives the curve over them).
        adaptive: scale the perturbation by ``c = |w| + eta`` (else ``c = 1``).
        eta: the adaptive scale's offset (ASAM's ``eta``), finite and >= 0; 0 leaves weights that are exactly 0
            unperturbed. Only with ``adaptive``.
        p: the worst case's norm, one of :data:`NORMS` (``2``, ``inf``; other spellings are read as these).
        steps: the worst case's ascent iterations per restart, batch and radius (>= 1).
        restarts: the worst case's ascents from different starts per batch and radius (>= 1), the best kept.
        step_size: the worst case's first step relative to ``rho`` (None: :data:`WORST_STEP_SIZE`, the ball's
            diameter); the ascent halves it when progress stalls.
        init: where the worst case's ascents start, one of :data:`INITS`.
        draws: the average case's noise draws per batch (>= 1).
        antithetic: the average case evaluates each draw at ``+delta`` and ``-delta``.
        params: comma-separated parameter-name patterns of the perturbed parameters (None: all).
        perturb: which of them are perturbed, one of :data:`PERTURB`: ``all``, or ``surface`` (the loss surfaces'
            default rule: biases, norm weights and other tensors of fewer than two dimensions, position tables
            and learned tokens held fixed).
        confidence: the level of the bootstrap interval, in (0, 1).
        resamples: bootstrap resamples (>= 1).
        criterion: data loss, one of :data:`~landscape.options.common.CRITERIA`.
        regularizer: penalty added to the loss, one of :data:`~landscape.options.common.REGULARIZERS`; when
            active it is part of ``L_S``.
        reg_coef: its coefficient (None: :data:`~landscape.options.common.REG_COEF_DEFAULTS`).
        dtype: floating-point type of the computation, one of :data:`~landscape.options.common.DTYPES` (None: the
            model's own; the file records the type used).
        allow_stochastic: do not refuse a model whose two forward passes differ.
        augment: the data, one of :data:`~landscape.options.common.AUGMENTATIONS` (``paper-a``: Paper A's training
            augmentation drawn once from ``seed`` and held fixed; soft-target cross-entropy).
        augment_copies: augmented copies drawn of each sample (``paper-a``).

    Raises:
        LandscapeError: an invalid value (a radius that is NaN or negative, ``p`` not 2 or inf, ``steps <= 0``,
            an unknown choice, ...), naming the CLI option; an option of the other measure (``p``, ``steps``,
            ``restarts``, ``step_size``, ``init`` without ``measure="worst"``; ``draws``, ``antithetic`` without
            ``measure="average"``) or ``eta`` without ``adaptive``, which would do nothing.
    """

    data: str | None = None
    split: str = "train"
    samples: int | None = 1024
    batch_size: int = 128
    seed: int = 0
    measure: str = "worst"
    rho: tuple[float, ...] = RHO
    adaptive: bool = True
    eta: float = 0.0
    p: str = "2"
    steps: int = WORST_STEPS
    restarts: int = WORST_RESTARTS
    step_size: float | None = None
    init: str = WORST_INIT
    draws: int = 16
    antithetic: bool = False
    params: str | None = None
    perturb: str = "all"
    confidence: float = 0.95
    resamples: int = 1000
    criterion: str = "cross_entropy"
    regularizer: str = "none"
    reg_coef: float | None = None
    dtype: str | None = None
    allow_stochastic: bool = False
    augment: str = "none"
    augment_copies: int = 1

    def __post_init__(self) -> None:
        if self.data is not None and not isinstance(self.data, str):
            raise LandscapeError(f"--data must be a dataset spec string, got {self.data!r}")
        object.__setattr__(self, "split", check_data_options(self.split, self.samples, self.batch_size, self.seed))
        choice(self.measure, "--measure", MEASURES)
        object.__setattr__(self, "rho", check_radii(self.rho, "--rho"))
        object.__setattr__(self, "p", norm_name(self.p, "--p"))
        checks.positive_int(self.steps, "--steps")
        checks.positive_int(self.restarts, "--restarts")
        object.__setattr__(self, "eta", checks.non_negative(self.eta, "--eta"))
        if self.step_size is not None:
            object.__setattr__(self, "step_size", checks.positive(self.step_size, "--step-size"))
        choice(self.init, "--init", INITS)
        checks.positive_int(self.draws, "--draws")
        for name in ("adaptive", "antithetic", "allow_stochastic"):
            _flag(getattr(self, name), f"--{name.replace('_', '-')}")
        if self.params is not None and (not isinstance(self.params, str) or not split_patterns(self.params)):
            raise LandscapeError(
                f"--params names no pattern (got {self.params!r}); give comma-separated globs such as 'fc.*' "
                "or leave it out for every parameter"
            )
        choice(self.perturb, "--perturb", PERTURB)
        checks.in_range(self.confidence, "--confidence", 0.0, 1.0, low_open=True, high_open=True)
        checks.positive_int(self.resamples, "--resamples")
        choice(self.criterion, "criterion", CRITERIA)
        check_regularizer(self.regularizer, self.reg_coef)
        if self.dtype is not None:
            choice(self.dtype, "--dtype", DTYPES)
        check_augment(self.augment, self.augment_copies, self.criterion)
        refuse_without(
            self, self.measure == "worst", "--measure worst", ("p", "steps", "restarts", "step_size", "init")
        )
        refuse_without(self, self.adaptive, "--adaptive", ("eta",))
        refuse_without(self, self.measure == "average", "--measure average", ("draws", "antithetic"))

    @property
    def patterns(self) -> list[str]:
        """The parameter-name patterns of :attr:`params` as a list (empty: every parameter)."""
        return split_patterns(self.params)

    @property
    def loss_criterion(self) -> str:
        """The data loss measured: ``soft_cross_entropy`` with an augmentation, else :attr:`criterion`."""
        return AUGMENTED_CRITERION if self.augment != "none" else self.criterion

    def attrs(self) -> dict[str, Any]:
        """The options a sharpness result file records as root attributes (besides split, seed and samples).

        Only the options of the measure run count: ``p``, ``steps``, ``restarts``, ``step_size`` and ``init`` for
        the worst case, ``draws`` and ``antithetic`` for the average case; ``augment`` and ``augment_copies``
        only with an augmentation.

        Returns:
            A dict of attribute name to value; a file whose attributes differ was made with other options.
        """
        out: dict[str, Any] = {
            "batch_size": int(self.batch_size),
            "measure": self.measure,
            "rho": list(self.rho),
            "adaptive": self.adaptive,
            "eta": float(self.eta),
            "params": self.patterns,
            **({"perturb": self.perturb} if self.perturb != "all" else {}),
            "confidence": float(self.confidence),
            "resamples": int(self.resamples),
            "criterion": self.loss_criterion,
            "regularizer": describe_regularizer(self.regularizer, self.reg_coef),
            "dtype": self.dtype,
            "bn_mode": BN_MODE,
            "allow_stochastic": self.allow_stochastic,
        }
        if self.measure == "worst":
            out.update(
                p=self.p, steps=int(self.steps), restarts=int(self.restarts), step_size=self.step_size, init=self.init
            )
        else:
            out.update(draws=int(self.draws), antithetic=self.antithetic)
        if self.augment != "none":
            out.update(augment=self.augment, augment_copies=int(self.augment_copies))
        return out


class SharpnessKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.sharpness`: the fields of :class:`SharpnessOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    samples: int | None
    batch_size: int
    seed: int
    measure: str
    rho: float | str | Sequence[float]
    adaptive: bool
    eta: float
    p: str | float
    steps: int
    restarts: int
    step_size: float | None
    init: str
    draws: int
    antithetic: bool
    params: str | None
    perturb: str
    confidence: float
    resamples: int
    criterion: str
    regularizer: str
    reg_coef: float | None
    dtype: str | None
    allow_stochastic: bool
    augment: str
    augment_copies: int
