"""Options of ``landscape curvature``: the Hessian beside its approximations, and how far each is from it.

:class:`CurvatureOptions` holds everything :func:`~landscape.analyses.curvature.run.run_curvature` computes from
besides the model and the output file; it validates every value when built (one-line
:class:`~landscape.errors.LandscapeError` naming the CLI option) and gives the attributes its result file records
with :meth:`~CurvatureOptions.attrs`. No torch here.
"""

from __future__ import annotations

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
)
from landscape.options.hessian import (
    BN_MODE,
    HVP_MODES,
    OPERATORS,
    describe_regularizer,
    parse_block_groups,
    split_patterns,
)

#: the operators compared with the Hessian by default (every one but the Hessian itself)
APPROXIMATIONS = tuple(op for op in OPERATORS if op != "hessian")


def _operators(value: Any) -> tuple[str, ...]:
    """The operators compared with the Hessian: a comma-separated string or a sequence, each known, none twice."""
    items = [p.strip() for p in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
    items = [p for p in items if p]
    if not items:
        raise LandscapeError(f"--operators names no operator; give some of {', '.join(APPROXIMATIONS)}")
    for item in items:
        choice(item, "--operators", APPROXIMATIONS)
    if len(set(items)) != len(items):
        raise LandscapeError(f"--operators names an operator twice ({', '.join(items)}); give each once")
    return tuple(items)


@dataclass(frozen=True)
class CurvatureOptions(FieldDefaults):
    """What ``landscape curvature`` computes: the Hessian and its approximations on one model and data, side by side.

    For the Hessian ``H`` and each operator ``A`` of :attr:`operators`: the top ``top_k`` eigenpairs (largest
    algebraic), the spectral density (SLQ, ``probes`` x ``steps``) on one grid shared by all, the principal angles
    between the top-``top_k`` eigenspaces of ``H`` and ``A``, and the relative distances ``||H - A|| / ||H||`` in
    the spectral norm (Lanczos, largest magnitude) and the Frobenius norm (Hutchinson, ``distance_samples`` probes),
    for the whole model and for every block's diagonal block (docs/analyses.md, curvature).

    Attributes:
        data: dataset spec (None: the checkpoint's dataset, else digits).
        split: dataset split of the loss.
        samples: images in the loss (None: the whole split).
        batch_size: batch size of the product passes.
        seed: seed of the samples, the start vectors and the probes.
        operators: the operators compared with the Hessian, a subset of :data:`APPROXIMATIONS` (comma-separated
            text or a sequence).
        top_k: eigenpairs of every operator (>= 1), and the dimension of the eigenspaces compared.
        tol: relative residual of a converged eigenpair (> 0), for the top eigenpairs and the spectral norms.
        ncv: Lanczos basis size (None: ``max(2k+1, 20)``).
        maxiter: maximum Lanczos restarts (None: the solver's default).
        probes: SLQ probe vectors of each density.
        steps: Lanczos steps per SLQ probe.
        sigma: Gaussian broadening of the densities (None: 1% of the spread of every operator's nodes).
        grid_points: points of the densities' shared grid.
        distance_samples: Hutchinson probes of each Frobenius norm (>= 2).
        per_block: also the distances of every block's diagonal block (the blocks of the feature taps, or
            ``block`` / ``taps``).
        block: the blocks as ``NAME=PATTERN[,PATTERN]`` items (as ``landscape hessian --block``).
        taps: ``'PATTERN=KIND'`` items naming the modules whose outputs are the blocks.
        params: comma-separated parameter-name globs: compare the operators' block of these parameters.
        criterion: data loss, one of :data:`~landscape.options.common.CRITERIA`.
        regularizer: penalty added to the loss (its Hessian belongs to every operator).
        reg_coef: its coefficient (None: the kind's default).
        hvp: how the Hessian's products are made, one of :data:`~landscape.options.hessian.HVP_MODES`.
        dtype: floating-point type of the computation, one of :data:`~landscape.options.common.DTYPES` (None: the
            model's own; the file records the type used).
        allow_stochastic: do not refuse a model whose two forward passes differ.
        augment: the data, one of :data:`~landscape.options.common.AUGMENTATIONS`.
        augment_copies: augmented copies drawn of each sample (``paper-a``).

    Raises:
        LandscapeError: an invalid value (non-finite or out-of-range number, unknown choice or operator, a bad
            ``--block`` item, ``--block`` or ``--taps`` without ``--per-block``, both of them).
    """

    data: str | None = None
    split: str = "train"
    samples: int | None = 256
    batch_size: int = 128
    seed: int = 0
    operators: tuple[str, ...] | str = APPROXIMATIONS
    top_k: int = 5
    tol: float = 1e-3
    ncv: int | None = None
    maxiter: int | None = None
    probes: int = 2
    steps: int = 32
    sigma: float | None = None
    grid_points: int = 500
    distance_samples: int = 10
    per_block: bool = True
    block: tuple[str, ...] = ()
    taps: tuple[str, ...] = ()
    params: str | None = None
    criterion: str = "cross_entropy"
    regularizer: str = "none"
    reg_coef: float | None = None
    hvp: str = "auto"
    dtype: str | None = None
    allow_stochastic: bool = False
    augment: str = "none"
    augment_copies: int = 1

    def __post_init__(self) -> None:
        if self.data is not None and not isinstance(self.data, str):
            raise LandscapeError(f"--data must be a dataset spec string, got {self.data!r}")
        object.__setattr__(self, "split", check_data_options(self.split, self.samples, self.batch_size, self.seed))
        object.__setattr__(self, "operators", _operators(self.operators))
        checks.positive_int(self.top_k, "--top-k")
        checks.positive(self.tol, "--tol")
        for name in ("ncv", "maxiter"):
            if getattr(self, name) is not None:
                checks.positive_int(getattr(self, name), f"--{name}")
        checks.positive_int(self.probes, "--probes")
        checks.positive_int(self.steps, "--steps")
        if self.sigma is not None:
            checks.positive(self.sigma, "--sigma")
        checks.whole(self.grid_points, "--grid-points", 2)
        checks.whole(self.distance_samples, "--distance-samples", 2)
        if not isinstance(self.per_block, bool) or not isinstance(self.allow_stochastic, bool):
            which = "--per-block" if not isinstance(self.per_block, bool) else "--allow-stochastic"
            raise LandscapeError(f"{which} must be True or False")
        for name in ("block", "taps"):
            value = getattr(self, name)
            object.__setattr__(self, name, tuple(str(v) for v in ([value] if isinstance(value, str) else value)))
        parse_block_groups(self.block)
        if (self.block or self.taps) and not self.per_block:
            raise LandscapeError(f"--{'block' if self.block else 'taps'} chooses the blocks of --per-block")
        if self.block and self.taps:
            raise LandscapeError("give the blocks by --block (parameter names) or --taps (modules), not both")
        if self.params is not None and (not isinstance(self.params, str) or not split_patterns(self.params)):
            raise LandscapeError(f"--params names no pattern (got {self.params!r}); give comma-separated globs")
        choice(self.criterion, "criterion", CRITERIA)
        check_regularizer(self.regularizer, self.reg_coef)
        choice(self.hvp, "--hvp", HVP_MODES)
        if self.dtype is not None:
            choice(self.dtype, "--dtype", DTYPES)
        check_augment(self.augment, self.augment_copies, self.criterion)

    @property
    def patterns(self) -> list[str]:
        """The parameter-name patterns of :attr:`params` as a list (empty: every parameter)."""
        return split_patterns(self.params)

    @property
    def block_groups(self) -> dict[str, list[str]]:
        """The ``--block`` groups: block name -> patterns (empty: the blocks of the model's feature taps)."""
        return parse_block_groups(self.block)

    @property
    def loss_criterion(self) -> str:
        """The data loss the run measures: ``soft_cross_entropy`` with an augmentation, else :attr:`criterion`."""
        return AUGMENTED_CRITERION if self.augment != "none" else self.criterion

    def attrs(self) -> dict[str, Any]:
        """The options a curvature result file records as root attributes (besides split, seed and samples).

        Returns:
            A dict of attribute name to value; a file whose attributes differ was made with other options.
        """
        out: dict[str, Any] = {
            "batch_size": int(self.batch_size),
            "operators": ["hessian", *self.operators],
            "top_k": int(self.top_k),
            "tol": float(self.tol),
            "ncv": self.ncv,
            "maxiter": self.maxiter,
            "probes": int(self.probes),
            "steps": int(self.steps),
            "sigma": self.sigma,
            "grid_points": int(self.grid_points),
            "distance_samples": int(self.distance_samples),
            "per_block": self.per_block,
            "params": self.patterns,
            "criterion": self.loss_criterion,
            "regularizer": describe_regularizer(self.regularizer, self.reg_coef),
            "hvp": self.hvp,
            "dtype": self.dtype,
            "bn_mode": BN_MODE,
            "allow_stochastic": self.allow_stochastic,
        }
        if self.per_block:
            out.update(blocks=self.block_groups, taps=list(self.taps))
        if self.augment != "none":
            out.update(augment=self.augment, augment_copies=int(self.augment_copies))
        return out


class CurvatureKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.curvature`: the fields of :class:`CurvatureOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class checks
    the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    samples: int | None
    batch_size: int
    seed: int
    operators: str | Sequence[str]
    top_k: int
    tol: float
    ncv: int | None
    maxiter: int | None
    probes: int
    steps: int
    sigma: float | None
    grid_points: int
    distance_samples: int
    per_block: bool
    block: str | Sequence[str]
    taps: str | Sequence[str]
    params: str | None
    criterion: str
    regularizer: str
    reg_coef: float | None
    hvp: str
    dtype: str | None
    allow_stochastic: bool
    augment: str
    augment_copies: int
