"""The options of mode connectivity: the line and the Bezier curve between two networks, and their choices.

Used by ``landscape connect`` and :func:`landscape.analyses.connect.run.run_connect`.

:class:`ConnectOptions` holds every option but the two model sources, the output file and the run-time choices
(device, ``force``, progress bar) and validates them when it is built, so that a bad value is a one-line error
before any model, data or file is touched. The BatchNorm modes (:data:`BN_MODES`), curves (:data:`CURVES`), the
splits a path is measured on (:data:`CONNECT_SPLITS`) and the plane's margin (:data:`PLANE_MARGIN`) are defined
here, once: the cores (:mod:`landscape.analyses.connect.evaluate`) and the CLI import them. No torch here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypedDict

from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.align import CONNECT_ALIGN
from landscape.options.common import (
    REG_COEF_DEFAULTS,
    SPLIT_CHOICES,
    FieldDefaults,
    canonical_split,
    check_data_options,
    check_regularizer,
    choice,
    refuse_without,
)

#: how BatchNorm statistics are set at a point of a path: re-estimated there (default) or interpolated
BN_MODES = ("recompute", "eval")
#: the points of a path by default (``a = 0, 0.05, ..., 1``)
DEFAULT_POINTS = 21
#: the paths besides the line: none, or the quadratic Bezier curve of Garipov et al. 2018
CURVES = ("none", "bezier")
#: ``--split`` of a path: one split, or ``both`` (train and test, in that order)
BOTH = "both"
CONNECT_SPLITS = (*SPLIT_CHOICES, BOTH)
#: the plane's grid reaches this share of the three points' extent beyond them on every side (Garipov et al.)
PLANE_MARGIN = 0.2
#: ``--curvature``: Lanczos' relative tolerance of a point's top Hessian eigenvalue, and its restarts at most
CURVATURE_TOL = 1e-3
CURVATURE_MAXITER = 10
#: ... how its Hessian-vector products are made: one gradient graph kept per batch for all of the point's products
#: (fixed, not timed, so that a resumed run makes the same products and finds the same numbers)
CURVATURE_HVP = "graph"
#: ... the quantities of a point on one split, in the order
#: :func:`~landscape.analyses.connect.curvature.point_curvature` returns them (in the file's identity)
CURVATURE_QUANTITIES = (
    "top_eigenvalue",
    "top_eigenvalue_converged",
    "average_sharpness",
    "average_sharpness_stderr",
    "hessian_products",
)


def _whole(value: Any, name: str, least: int) -> int:
    """``value`` as an int; an error unless it is a whole number in ``[least, checks.MAX_INTEGER]``."""
    return checks.whole(value, name, least)


@dataclass(frozen=True)
class ConnectOptions(FieldDefaults):
    """Every option of a connectivity run but the two model sources, the output file and the run-time choices.

    Built, it is valid: ``__post_init__`` checks every value, raising a one-line
    :class:`~landscape.errors.LandscapeError` (before anything is loaded or written) otherwise.

    Attributes:
        data: dataset spec (None: the first checkpoint's dataset, else ``digits``).
        split: the split the paths are measured on, one of :data:`CONNECT_SPLITS` (``both``: train, then test).
        samples: images of each split (fixed, seeded); None for the whole split.
        batch_size: images per fixed batch.
        seed: seed of the sample choice and of the bend's training.
        steps: evenly spaced points on the line and on the curve, both ends included (at least 2).
        bn: BatchNorm statistics at a point, one of :data:`BN_MODES`: ``recompute`` (re-estimated there from the
            training samples) or ``eval`` (the endpoints' statistics interpolated with the point).
        curve: ``none`` (the line only) or ``bezier`` (also the trained quadratic Bezier curve, and the plane
            through theta_A, theta_B and its bend).
        bend_epochs: epochs of SGD on the bend (``curve="bezier"``).
        bend_lr: the bend's learning rate.
        bend_momentum: SGD momentum, in ``[0, 1)``.
        bend_weight_decay: SGD weight decay of the bend.
        bend_samples: training images the bend is trained on (fixed, seeded by :attr:`seed`); None (default) for
            every image of the training split, as Garipov et al. train it. With data given as batches (a Python
            loader) the bend is trained on those batches and this must stay None.
        plane_steps: grid points along each axis of the plane (``curve="bezier"``; at least 2).
        regularizer: penalty added to the data loss, one of :data:`~landscape.options.common.REGULARIZERS`.
        reg_coef: its coefficient (None: the kind's default).
        allow_stochastic: do not refuse a model whose two forward passes differ.
        align: permute theta_B's hidden units to match theta_A's before the paths, one of
            :data:`~landscape.options.align.CONNECT_ALIGN` (``none``, ``weights``, ``activations``); the line to
            the unaligned theta_B is measured too (``unaligned_line``).
        repair: REPAIR (Jordan et al. 2023) on the line(s): at every point each permuted ``Linear``/``Conv``
            layer's output channels are rescaled and shifted to the ends' interpolated means and standard
            deviations on the training samples (:mod:`landscape.analyses.connect.repair`).
        curvature: at every point of the line(s) and the curve, also the top Hessian eigenvalue and the adaptive
            average-case sharpness on each split (:mod:`landscape.analyses.connect.curvature`).
        curvature_rho: the average-case sharpness' radius, relative to ``|w|`` (``curvature``).
        curvature_samples: its noise draws per batch (``curvature``).

    Raises:
        LandscapeError: an invalid value (unknown choice, a count that is not a whole number in range, a number
            that is NaN, infinite or out of range), naming the CLI option; a bend or plane option without
            ``curve="bezier"`` (it would do nothing).
    """

    data: str | None = None
    split: str = "train"
    samples: int | None = 1000
    batch_size: int = 128
    seed: int = 0
    steps: int = DEFAULT_POINTS
    bn: str = "recompute"
    curve: str = "none"
    bend_epochs: int = 20
    bend_lr: float = 0.05
    bend_momentum: float = 0.9
    bend_weight_decay: float = 0.0
    bend_samples: int | None = None
    plane_steps: int = 11
    regularizer: str = "none"
    reg_coef: float | None = None
    allow_stochastic: bool = False
    align: str = "none"
    repair: bool = False
    curvature: bool = False
    curvature_rho: float = 0.05
    curvature_samples: int = 4

    def __post_init__(self) -> None:
        split = choice(str(self.split).lower(), "--split", CONNECT_SPLITS)
        first = "train" if split == BOTH else split
        check_data_options(first, self.samples, self.batch_size, self.seed)
        object.__setattr__(self, "split", split if split == BOTH else canonical_split(split))
        if self.data is not None and not isinstance(self.data, str):
            raise LandscapeError(f"--data must be a dataset spec string, got {self.data!r}")
        _whole(self.steps, "--steps", 2)
        choice(self.bn, "--bn", BN_MODES)
        choice(self.curve, "--curve", CURVES)
        choice(self.align, "--align", CONNECT_ALIGN)
        _whole(self.bend_epochs, "--bend-epochs", 1)
        object.__setattr__(self, "bend_lr", checks.positive(self.bend_lr, "--bend-lr"))
        object.__setattr__(
            self, "bend_momentum", checks.in_range(self.bend_momentum, "--bend-momentum", 0.0, 1.0, high_open=True)
        )
        object.__setattr__(
            self, "bend_weight_decay", checks.non_negative(self.bend_weight_decay, "--bend-weight-decay")
        )
        _whole(self.plane_steps, "--plane-steps", 2)
        if self.bend_samples is not None:
            _whole(self.bend_samples, "--bend-samples", 1)
        check_regularizer(self.regularizer, self.reg_coef)
        if self.reg_coef is not None:
            object.__setattr__(self, "reg_coef", checks.non_negative(self.reg_coef, "--reg-coef"))
        for name in ("allow_stochastic", "repair", "curvature"):
            if not isinstance(getattr(self, name), bool):
                raise LandscapeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        bend = ("bend_epochs", "bend_lr", "bend_momentum", "bend_weight_decay", "bend_samples", "plane_steps")
        refuse_without(self, self.curve == "bezier", "--curve bezier", bend)
        object.__setattr__(self, "curvature_rho", checks.positive(self.curvature_rho, "--curvature-rho"))
        _whole(self.curvature_samples, "--curvature-samples", 1)
        refuse_without(self, self.curvature, "--curvature", ("curvature_rho", "curvature_samples"))

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits measured, in order: ``("train",)``, ``("test",)`` or ``("train", "test")``."""
        return ("train", "test") if self.split == BOTH else (self.split,)

    @property
    def coef(self) -> float:
        """The regulariser's coefficient in force (:attr:`reg_coef`, else the kind's default)."""
        return REG_COEF_DEFAULTS[self.regularizer] if self.reg_coef is None else float(self.reg_coef)

    def attrs(self) -> dict[str, Any]:
        """The root attributes these options write into the connect file (docs/schema.md, connect).

        ``split`` (``train``, ``test`` or ``both``), ``splits`` (the list measured), ``seed``, ``batch_size``,
        ``steps``, ``bn``, ``curve``, ``regularizer`` (JSON ``{"kind", "coef"}``, as the objective describes
        it), ``allow_stochastic``; ``dataset`` when :attr:`data` is given; ``align`` when it is not ``none`` and
        ``repair`` when it is on, ``curvature`` (with ``curvature_rho``, ``curvature_samples``,
        ``curvature_tol``, ``curvature_maxiter`` and ``curvature_quantities``) when it is on (a run without them
        keeps the identity it had before the options existed); with ``curve="bezier"`` also ``bend_epochs``,
        ``bend_lr``, ``bend_momentum``, ``bend_weight_decay``, ``bend_samples`` (a count, or ``"all"``) and
        ``plane_steps`` (a line's identity does not depend on them).

        Returns:
            Attribute name -> value, as the file records it.
        """
        out: dict[str, Any] = {"split": self.split, "splits": list(self.splits), "seed": int(self.seed)}
        if self.data is not None:
            out["dataset"] = self.data
        out.update(
            batch_size=int(self.batch_size),
            steps=int(self.steps),
            bn=self.bn,
            curve=self.curve,
            regularizer=json.dumps({"kind": self.regularizer, "coef": self.coef}),
            allow_stochastic=bool(self.allow_stochastic),
        )
        if self.align != "none":
            out["align"] = self.align
        if self.repair:
            out["repair"] = True
        if self.curvature:
            out.update(
                curvature=True,
                curvature_rho=float(self.curvature_rho),
                curvature_samples=int(self.curvature_samples),
                curvature_tol=CURVATURE_TOL,
                curvature_maxiter=CURVATURE_MAXITER,
                curvature_quantities=list(CURVATURE_QUANTITIES),
            )
        if self.curve == "bezier":
            out.update(
                bend_epochs=int(self.bend_epochs),
                bend_lr=float(self.bend_lr),
                bend_momentum=float(self.bend_momentum),
                bend_weight_decay=float(self.bend_weight_decay),
                bend_samples="all" if self.bend_samples is None else int(self.bend_samples),
                plane_steps=int(self.plane_steps),
            )
        return out


class ConnectKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.connect`: the fields of :class:`ConnectOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    samples: int | None
    batch_size: int
    seed: int
    steps: int
    bn: str
    curve: str
    bend_epochs: int
    bend_lr: float
    bend_momentum: float
    bend_weight_decay: float
    bend_samples: int | None
    plane_steps: int
    regularizer: str
    reg_coef: float | None
    allow_stochastic: bool
    align: str
    repair: bool
    curvature: bool
    curvature_rho: float
    curvature_samples: int
