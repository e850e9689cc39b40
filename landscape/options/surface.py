"""The options of a loss surface and their choices.

Used by ``landscape surface`` and :func:`landscape.analyses.surface.run.run_surface`.

:class:`SurfaceOptions` holds every option but the model source, the output file and the run-time choices
(device, ``force``, progress bar); it validates them all, and parses the grids, when it is built, so that a
bad value is a one-line error before any model, data or file is touched. :meth:`SurfaceOptions.attrs` gives
the attributes these options leave in the result file. The normalisations (:data:`NORMS`), BatchNorm modes
(:data:`BN_MODES`) and default zero patterns (:data:`DEFAULT_ZERO_PATTERNS`) are defined here, once: the
library (``landscape.analyses.surface.directions``, ``landscape.analyses.surface.run``) and the CLI import them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict

import numpy as np

from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.common import (
    AUGMENTED_CRITERION,
    REG_COEF_DEFAULTS,
    FieldDefaults,
    auto_or_count,
    check_augment,
    check_data_options,
    check_regularizer,
    choice,
)
from landscape.options.hessian import HVP_MODES, HessianOptions, check_operator

#: normalisations of a random direction against the centre (see :mod:`landscape.analyses.surface.directions`)
NORMS = ("filter", "dim0", "layer", "weight", "none")
#: BatchNorm statistics at each grid point: the centre model's (eval) or re-estimated at the point (recompute)
BN_MODES = ("eval", "recompute")
#: ``--directions``: seeded random directions (normalised by ``--norm``), or the top unit eigenvectors of the
#: surface's own Hessian (computed by Lanczos, or read from a ``landscape hessian --eigenvectors`` file)
DIRECTION_KINDS = ("random", "hessian")
#: which eigenvectors are "top" for Hessian directions: largest (LA), smallest (SA) or largest in magnitude (LM)
DIRECTION_WHICH = ("LA", "SA", "LM")
#: the one definition of position parameters (fnmatch globs over parameter names): learned position embeddings
#: and relative-position tables of the zoo (``pos_embed``, ``*.rel_pos.table``, ``*.rel_pos.cls_bias``), timm
#: (``pos_embed``, ``relative_position_bias_table``, ``rel_pos_h``) and torchvision (``encoder.pos_embedding``,
#: ``relative_position_bias_table``). Training gives them no weight decay (``landscape.train``); a surface keeps
#: them fixed by default (part of :data:`DEFAULT_ZERO_PATTERNS`).
POSITION_PARAMETER_PATTERNS = ("*pos_embed*", "*pos_embedding*", "*rel_pos*", "*relative_position*", "*position_bias*")
#: learned tokens of the zoo, timm (``cls_token``, ``reg_token``) and torchvision (``class_token``). Unlike position
#: parameters they keep weight decay in training (the zoo's recipe, with which the README's demo numbers were
#: measured), but they are no filter of a layer either, so a surface keeps them fixed by default too
LEARNED_TOKEN_PATTERNS = ("*cls_token*", "*class_token*", "*reg_token*")
#: name patterns whose tensors get a zero direction by default: position parameters and learned tokens
DEFAULT_ZERO_PATTERNS = POSITION_PARAMETER_PATTERNS + LEARNED_TOKEN_PATTERNS
#: ``--compile``: ``auto`` (compile when the measured / recorded build or load time pays back over the points left,
#: within the set-up's share of them), ``on`` (compile; eager if compiling fails) or ``off`` (eager)
COMPILE_MODES = ("auto", "on", "off")
#: ``--store-directions``: how a surface file keeps its directions: ``seed`` (the recipe that draws random directions
#: again bit for bit, and their fingerprint; directions without a recipe are stored in full), ``half`` (float16
#: arrays; the grid is evaluated along the rounded directions and the rounding error is recorded), ``full``
DIRECTION_STORAGE = ("seed", "half", "full")
#: the default x and y grids (MIN:MAX:NUM): a 21 x 21 plane over [-1, 1]^2
GRID = "-1:1:21"
#: the y grid that makes a surface a 1D line (``--y none``; None in Python)
NO_GRID = "none"
#: the largest grid a surface may have (its arrays and its ``done`` mask are read into memory)
MAX_POINTS = 1_000_000
#: the most memory the stacked parameters of one vectorised call may take for ``--batch-points auto`` to try vmap
#: (k points stack k copies of the parameters; above this bound auto takes the loop, which holds one)
VMAP_STACK_BYTES = 256 * 2**20
#: with ``--batch-points auto`` / ``--compile auto``: the share of the plain loop's predicted time (the points left
#: times the first point's seconds) that choosing how to evaluate may spend beyond it (vmap trial, exporting,
#: building or loading and checking a compiled package); a build is stopped at the end of it
SETUP_SHARE = 0.2
#: finished points wait at most this many seconds before they are written to the file (and at its close; an
#: interruption writes them too): a kill loses at most this much work, and a grid of fast points is not slowed by a
#: write per point (4 array writes and 2 flushes, 1.7 ms, 5% of a 36 ms point of resnet_mini)
WRITE_EVERY_S = 1.0
#: a vmap trial is predicted to cost this many times the loop's seconds for its points (measured 3.3 on CPU)
VMAP_TRIAL_SLOWDOWN = 4.0
#: vmap is taken when its seconds per point are under this share of the loop's
VMAP_GAIN = 0.8

_GRID = re.compile(r"^\s*([-+]?[0-9.eE+-]+)\s*:\s*([-+]?[0-9.eE+-]+)\s*:\s*([0-9]+)\s*$")


def grid_text(value: Any, option: str = "--x") -> str:
    """A grid as the options hold it (text): ``"MIN:MAX:NUM"``, or its coordinates comma-separated.

    ``"MIN:MAX:NUM"`` and ``"c0,c1,..."`` are kept as given; a tuple ``(MIN, MAX, NUM)`` becomes ``"MIN:MAX:NUM"``;
    a list or a numpy array of coordinates becomes ``"c0,c1,..."`` (each float's ``repr``: exact).

    Args:
        value: a string, a ``(MIN, MAX, NUM)`` tuple, or a list or 1-D array of coordinates.
        option: the option's name, for the message.

    Returns:
        The grid as text (:func:`parse_grid` checks and reads it).

    Raises:
        LandscapeError: a value of another type, a tuple that is not three numbers with a whole NUM, or
            coordinates that are not numbers in one dimension.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        if len(value) != 3 or not all(isinstance(v, (int, float, np.integer, np.floating)) for v in value):
            raise LandscapeError(
                f"bad grid {option} {value!r}: a tuple is (MIN, MAX, NUM), e.g. (-1, 1, 21); give coordinates as a "
                "list or an array"
            )
        lo, hi, num = value
        if float(num) != int(num):
            raise LandscapeError(f"bad grid {option} {value!r}: NUM must be a whole number")
        return f"{float(lo)!r}:{float(hi)!r}:{int(num)}"
    if isinstance(value, (list, np.ndarray)) or type(value).__name__ == "Tensor":
        try:
            points = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise LandscapeError(f"bad grid {option}: its coordinates must be numbers, got {value!r}") from None
        if points.ndim != 1:
            raise LandscapeError(f"bad grid {option}: give the coordinates in one dimension, got shape {points.shape}")
        return ",".join(repr(float(p)) for p in points)
    raise LandscapeError(
        f"bad grid {option} {value!r}: give MIN:MAX:NUM (text), a (MIN, MAX, NUM) tuple or a list of coordinates"
    )


def is_point_list(spec: str) -> bool:
    """Whether a grid's text lists its coordinates (``"c0,c1,..."``) rather than ``MIN:MAX:NUM``.

    Args:
        spec: the grid as text.

    Returns:
        True when it has no ``:``.
    """
    return ":" not in str(spec)


def parse_grid(spec: str, option: str = "--x") -> np.ndarray:
    """Parse a grid: ``"MIN:MAX:NUM"`` into ``numpy.linspace(MIN, MAX, NUM)``, or ``"c0,c1,..."`` as the coordinates.

    Args:
        spec: ``MIN:MAX:NUM`` (inclusive of both ends; ``NUM = 1`` gives ``[MIN]``), or comma-separated
            coordinates in increasing order (:func:`grid_text` writes a tuple, list or array so).
        option: the option name used in error messages (``--x`` or ``--y``).

    Returns:
        The grid coordinates.

    Raises:
        LandscapeError: the spec is neither form, MIN or MAX (a coordinate) is not finite, NUM < 1, MIN >= MAX with
            NUM > 1 (coordinates not increasing), or ``MAX - MIN`` overflows a float.
    """
    if is_point_list(spec):
        return _points(str(spec), option)
    m = _GRID.match(str(spec))
    example = "-1:1:21" if option.startswith("--") else "(-1, 1, 21)"
    if not m:
        raise LandscapeError(f"bad grid {option} {spec!r}: write MIN:MAX:NUM, e.g. {example}")
    try:
        lo, hi, num = float(m.group(1)), float(m.group(2)), int(m.group(3))
    except ValueError:
        raise LandscapeError(f"bad grid {option} {spec!r}: write MIN:MAX:NUM, e.g. {example}") from None
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise LandscapeError(f"bad grid {option} {spec!r}: MIN and MAX must be finite numbers")
    if num < 1:
        raise LandscapeError(f"bad grid {option} {spec!r}: NUM must be at least 1")
    if num > 1 and not lo < hi:
        raise LandscapeError(f"bad grid {option} {spec!r}: MIN must be smaller than MAX")
    if num > 1 and not np.isfinite(hi - lo):
        raise LandscapeError(
            f"bad grid {option} {spec!r}: MAX - MIN overflows a float (its points would be NaN); give a narrower range"
        )
    return np.linspace(lo, hi, num)


def _points(spec: str, option: str) -> np.ndarray:
    """Comma-separated coordinates: at least one, finite, increasing, and not MIN:MAX:NUM written with commas."""
    items = [p for p in spec.split(",") if p.strip()]
    try:
        points = np.array([float(p) for p in items], dtype=np.float64)
    except ValueError:
        raise LandscapeError(f"bad grid {option} {spec!r}: write MIN:MAX:NUM or comma-separated coordinates") from None
    if _min_max_num_with_commas(items, points):
        lo, hi, num = points
        python = not option.startswith("--")
        grid = f"({lo:g}, {hi:g}, {int(num)})" if python else f"{lo:g}:{hi:g}:{int(num)}"
        point = f"[{lo:g}, {hi:g}, {num:g}]" if python else f"{lo:g},{hi:g},{num:.1f}"
        raise LandscapeError(
            f"bad grid {option} {spec!r}: it reads as the three points {lo:g}, {hi:g} and {num:g}, but it looks like "
            f"MIN:MAX:NUM written with commas: give {grid} for {int(num)} points from {lo:g} to {hi:g}, or {point} "
            "for those three points"
        )
    if points.size == 0:
        raise LandscapeError(f"bad grid {option} {spec!r}: give at least one coordinate")
    if not np.isfinite(points).all():
        raise LandscapeError(f"bad grid {option} {spec!r}: the coordinates must be finite numbers")
    if points.size > 1 and not (np.diff(points) > 0).all():
        raise LandscapeError(f"bad grid {option} {spec!r}: the coordinates must increase")
    return points


def _min_max_num_with_commas(items: list[str], points: np.ndarray) -> bool:
    """Whether three comma-separated numbers look like ``MIN,MAX,NUM`` (as ``-1,1,21`` does).

    The last is a whole number written without a point, at least 3, and far beyond the other two (its gap over
    twice theirs); ``21.0`` (or a Python list) says it is a point.
    """
    if len(items) != 3 or not re.fullmatch(r"\s*\+?[0-9]+\s*", items[2]):
        return False
    lo, hi, num = (float(p) for p in points)
    return num >= 3 and lo < hi < num and num - hi > 2 * (hi - lo)


def _grid_num(spec: str, option: str) -> int:
    """The number of points of a valid grid, read without building it (:func:`parse_grid` checks the rest)."""
    if is_point_list(spec):
        return len([p for p in str(spec).split(",") if p.strip()])
    m = _GRID.match(str(spec))
    if not m:
        parse_grid(spec, option)  # raises the one-line message
    return int(m.group(3)) if m else 0


def split_patterns(patterns: Any) -> tuple[str, ...]:
    """Comma-separated name patterns (a string or a sequence of strings) as one tuple of patterns.

    Args:
        patterns: one comma-separated string, or an iterable of them.

    Returns:
        The stripped, non-empty patterns in order.

    Raises:
        LandscapeError: an item of ``patterns`` is not a string.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    out = []
    for item in patterns:
        if not isinstance(item, str):
            raise LandscapeError(f"--zero takes name patterns (strings), got {item!r}")
        out += [p.strip() for p in item.split(",") if p.strip()]
    return tuple(out)


def compile_mode(value: Any) -> str:
    """The ``--compile`` mode of ``value``: one of :data:`COMPILE_MODES`; True is ``on`` and False ``off``.

    Args:
        value: ``"auto"``, ``"on"``, ``"off"`` (any case, spaces ignored) or a bool.

    Returns:
        ``"auto"``, ``"on"`` or ``"off"``.

    Raises:
        LandscapeError: any other value.
    """
    if isinstance(value, (bool, np.bool_)):
        return "on" if value else "off"
    if isinstance(value, str) and value.strip().lower() in COMPILE_MODES:
        return value.strip().lower()
    raise LandscapeError(f"--compile must be one of {', '.join(COMPILE_MODES)}, got {value!r}")


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise LandscapeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


@dataclass(frozen=True)
class SurfaceOptions(FieldDefaults):
    """Every option of a loss surface but the model source, the output file and the run-time choices.

    Built, it is valid: ``__post_init__`` checks every value and parses the grids, raising a one-line
    :class:`~landscape.errors.LandscapeError` (before anything is loaded or written) otherwise.

    Attributes:
        data: dataset spec (None: the checkpoint's dataset, else ``digits``).
        split: :data:`~landscape.options.common.SPLITS`.
        samples: images used (fixed, seeded); None for the whole split.
        batch_size: images per fixed batch.
        x: x grid ``MIN:MAX:NUM`` (inclusive), a ``(MIN, MAX, NUM)`` tuple, or the coordinates as a list, an array
            or comma-separated text (increasing); held as text (:func:`grid_text`).
        y: y grid as ``x`` (default :data:`GRID`, a plane); None or ``"none"`` (:data:`NO_GRID`) makes the surface
            a 1D line.
        norm: normalisation of random directions, one of :data:`NORMS`.
        seed: seed of the directions and of the sample choice.
        directions: ``random`` or ``hessian`` (:data:`DIRECTION_KINDS`): x (and y) the top-1 (and top-2) unit
            eigenvectors of the objective's Hessian at the centre, so coordinates are distances in parameter space;
            not with ``target`` or ``trajectory``.
        which: which eigenvectors are "top" for ``directions="hessian"``, one of :data:`DIRECTION_WHICH`.
        eigen_tol: the Lanczos relative tolerance of computed Hessian directions (> 0; the default of
            ``landscape hessian --tol``; tighten it for float64 models, where the directions' accuracy matters).
        eigenvectors: a ``landscape hessian --eigenvectors`` file of the same checkpoint and objective to read the
            Hessian directions from (``directions="hessian"``); None computes them (Lanczos).
        target: second checkpoint: x = target - centre (x = 1 lands on it); y random for a plane.
        trajectory: training snapshots: PCA directions of the trajectory (not with ``target``).
        regularizer: penalty added to the data loss, one of :data:`~landscape.options.common.REGULARIZERS`.
        reg_coef: its coefficient (None: the kind's default, :data:`~landscape.options.common.REG_COEF_DEFAULTS`).
        bn: BatchNorm statistics, one of :data:`BN_MODES`.
        ignore_1d: give tensors with ndim < 2 a zero direction.
        zero_patterns: name patterns with a zero direction (comma-separated items are split); None:
            :data:`DEFAULT_ZERO_PATTERNS`.
        allow_stochastic: do not refuse a model whose two forward passes differ.
        batch_points: points per vectorised call (1: a loop) or ``"auto"`` (the faster, measured); a string of
            digits is read as the number.
        compile: compile the per-point loss ahead of time into a package kept in the cache folder
            (:mod:`landscape.analyses.surface.setup`): one of :data:`COMPILE_MODES` (``auto``: only when it pays
            back over the points left, the set-up bounded by :data:`SETUP_SHARE` of their time, or built in the
            background while the points go on where a core is spare; ``on``: always,
            eager if compiling fails; ``off``); True and False are read as ``on`` and ``off``.
        augment: the data of every point, one of :data:`~landscape.options.common.AUGMENTATIONS`: ``none``
            (the fixed images with hard labels) or ``paper-a`` (Paper A's training augmentation with Mixup/CutMix,
            drawn once from ``seed`` and held fixed; the loss is then the soft-target cross-entropy).
        augment_copies: augmented copies drawn of each sample (``paper-a``; the data are ``copies x samples``).
        store_directions: how the file keeps the directions, one of :data:`DIRECTION_STORAGE` (``seed``: random
            directions by their recipe; target, PCA and Hessian directions are then stored in ``full``). Not part
            of the file's identity: a resumed file keeps the storage it was written with.
        hvp: how the Hessian-vector products of computed Hessian directions are made, one of
            :data:`~landscape.options.hessian.HVP_MODES` (only with ``directions="hessian"`` and no
            ``eigenvectors``; recorded when it is not ``auto``).
        operator: the curvature operator whose eigenvectors are the Hessian directions, one of
            :data:`~landscape.options.hessian.OPERATORS` (only with ``directions="hessian"``; recorded when it is not
            ``hessian``; an eigenvector file must be of the same operator).

    Raises:
        LandscapeError: an invalid value (bad grid, unknown choice, non-finite or out-of-range number), naming
            the CLI option.
    """

    #: the command line's flags that are not a field's name with ``-`` (how a Python error names them)
    CLI_FLAGS: ClassVar[dict[str, str]] = {"--zero": "zero_patterns", "--keep-1d": "ignore_1d=False"}

    data: str | None = None
    split: str = "train"
    samples: int | None = 1000
    batch_size: int = 128
    x: str | tuple[float, float, int] | Sequence[float] = GRID
    y: str | tuple[float, float, int] | Sequence[float] | None = GRID
    norm: str = "filter"
    seed: int = 0
    directions: str = "random"
    which: str = "LA"
    eigen_tol: float = HessianOptions.tol
    eigenvectors: str | Path | None = None
    target: str | Path | None = None
    trajectory: tuple[str | Path, ...] = ()
    regularizer: str = "none"
    reg_coef: float | None = None
    bn: str = "eval"
    ignore_1d: bool = True
    zero_patterns: tuple[str, ...] | None = None
    allow_stochastic: bool = False
    batch_points: int | str = "auto"
    compile: str = "auto"
    augment: str = "none"
    augment_copies: int = 1
    store_directions: str = "seed"
    hvp: str = "auto"
    operator: str = "hessian"

    def __post_init__(self) -> None:
        if isinstance(self.y, str) and self.y.strip().lower() == NO_GRID:
            object.__setattr__(self, "y", None)
        object.__setattr__(self, "x", grid_text(self.x, "--x"))
        if self.y is not None:
            object.__setattr__(self, "y", grid_text(self.y, "--y"))
        object.__setattr__(self, "split", check_data_options(self.split, self.samples, self.batch_size, self.seed))
        check_augment(self.augment, self.augment_copies)
        if self.data is not None and not isinstance(self.data, str):
            raise LandscapeError(f"--data must be a dataset spec string, got {self.data!r}")
        nx = _grid_num(self.x, "--x")
        ny = 1 if self.y is None else _grid_num(self.y, "--y")
        if nx * ny > MAX_POINTS:
            raise LandscapeError(
                f"a {nx} x {ny} grid has {nx * ny:,} points; use at most {MAX_POINTS:,} points (fewer NUM in --x/--y)"
            )
        parse_grid(self.x, "--x")
        if self.y is not None:
            parse_grid(self.y, "--y")
        choice(self.norm, "normalisation", NORMS)
        choice(self.bn, "BatchNorm mode", BN_MODES)
        choice(self.store_directions, "--store-directions", DIRECTION_STORAGE)
        check_regularizer(self.regularizer, self.reg_coef)
        if self.reg_coef is not None:
            object.__setattr__(self, "reg_coef", checks.non_negative(self.reg_coef, "--reg-coef"))
        trajectory = self.trajectory
        if isinstance(trajectory, (str, Path)):
            trajectory = (trajectory,)
        object.__setattr__(self, "trajectory", tuple(trajectory))
        if self.target is not None and self.trajectory:
            raise LandscapeError("give either --target or --trajectory, not both")
        self._check_hessian_directions()
        if self.trajectory and len(self.trajectory) < self.ndim + 1:
            raise LandscapeError(
                f"PCA directions of a {self.ndim}D surface need at least {self.ndim + 1} --trajectory "
                f"snapshots, got {len(self.trajectory)}; give more snapshots"
                + (f" or --y {NO_GRID} for a line" if self.ndim == 2 else "")
            )
        if self.zero_patterns is not None:
            object.__setattr__(self, "zero_patterns", split_patterns(self.zero_patterns))
        for name in ("ignore_1d", "allow_stochastic"):
            object.__setattr__(self, name, _flag(getattr(self, name), name))
        object.__setattr__(self, "compile", compile_mode(self.compile))
        object.__setattr__(self, "batch_points", auto_or_count(self.batch_points, "--batch-points"))
        if self.batch_points != "auto" and self.batch_points > nx * ny:
            raise LandscapeError(
                f"--batch-points {self.batch_points} is more than the {nx * ny} points of the grid; "
                f"give at most {nx * ny} (or auto)"
            )

    def _check_hessian_directions(self) -> None:
        """``--directions``, ``--which`` and ``--eigenvectors``: known choices, used together, alone."""
        choice(self.directions, "--directions", DIRECTION_KINDS)
        choice(self.which, "--which", DIRECTION_WHICH)
        object.__setattr__(self, "eigen_tol", checks.positive(self.eigen_tol, "--eigen-tol"))
        if self.eigenvectors is not None and not isinstance(self.eigenvectors, (str, Path)):
            raise LandscapeError(f"--eigenvectors must be the path of a hessian file, got {self.eigenvectors!r}")
        choice(self.hvp, "--hvp", HVP_MODES)
        check_operator(self.operator, self.hvp)
        if self.operator != "hessian" and self.directions != "hessian":
            raise LandscapeError(
                "--operator chooses whose eigenvectors the Hessian directions are; add --directions hessian"
            )
        if self.hvp != "auto" and (self.directions != "hessian" or self.eigenvectors is not None):
            raise LandscapeError(
                "--hvp chooses how computed Hessian directions are made; use it with --directions hessian and "
                "no --eigenvectors"
            )
        if self.directions != "hessian":
            if self.eigenvectors is not None:
                raise LandscapeError("--eigenvectors gives Hessian directions; add --directions hessian")
            return
        if self.target is not None or self.trajectory:
            given = "--target" if self.target is not None else "--trajectory"
            raise LandscapeError(f"--directions hessian makes its own directions; drop {given}")
        if self.bn == "recompute":
            raise LandscapeError(
                "--directions hessian takes eigenvectors of the loss with the running BatchNorm statistics, which "
                "--bn recompute does not measure; use --bn eval"
            )

    @property
    def xcoords(self) -> np.ndarray:
        """The x grid coordinates (parsed :attr:`x`)."""
        return parse_grid(self.x, "--x")

    @property
    def ycoords(self) -> np.ndarray | None:
        """The y grid coordinates (parsed :attr:`y`); None for a 1D surface."""
        return None if self.y is None else parse_grid(self.y, "--y")

    @property
    def ndim(self) -> int:
        """1 for a line (no :attr:`y`), 2 for a plane."""
        return 1 if self.y is None else 2

    @property
    def patterns(self) -> tuple[str, ...]:
        """The zero patterns in force (:attr:`zero_patterns`, else :data:`DEFAULT_ZERO_PATTERNS`)."""
        return DEFAULT_ZERO_PATTERNS if self.zero_patterns is None else tuple(self.zero_patterns)

    def attrs(self) -> dict[str, Any]:
        """The root attributes these options write into the surface file (docs/schema.md, surface).

        These are the options' part of the file's identity: ``split``, ``seed``/``direction_seed``,
        ``batch_size``, the direction attributes (``direction_type``, ``norm``, ``ignore_1d``/``zero_patterns``
        where they shape a random direction, ``target``, ``trajectory``/``n_snapshots``, ``which``, ``eigen_tol``
        and (unless ``auto``) ``hvp`` of computed Hessian directions, ``operator`` unless ``hessian``; the directions
        add ``eigen_source``, the eigenvector file's ``which`` and the block ``hessian_params``), ``surface_ndim``,
        ``xgrid``/``ygrid`` (and ``xgrid_points``/``ygrid_points`` of a grid given point by point), ``bn``,
        ``regularizer`` and ``compile`` (``auto``, or True/False for ``on``/``off``,
        as files made before ``auto`` existed recorded them); ``dataset`` when :attr:`data` is given;
        ``augment``, ``augment_copies`` and ``criterion`` only with an augmentation (so that files made before
        these options existed still resume).
        What the run measures (``n_samples``, direction norms, ``batch_points``, ...) is not among them, nor is
        :attr:`store_directions` (a resumed file keeps the storage it was written with).

        Returns:
            Attribute name -> value, as the file records it.
        """
        xs, ys = self.xcoords, self.ycoords
        out: dict[str, Any] = {
            "split": self.split,
            "seed": int(self.seed),
            "batch_size": int(self.batch_size),
            "direction_seed": int(self.seed),
        }
        if self.data is not None:
            out["dataset"] = self.data
        shaping = {"ignore_1d": self.ignore_1d, "zero_patterns": list(self.patterns)}
        if self.target is not None:
            out.update(
                target=str(self.target),
                direction_type="target",
                norm="none" if self.ndim == 1 else f"x:none,y:{self.norm}",
            )
            if self.ndim == 2:  # these options shape the random y direction only
                out.update(shaping)
        elif self.directions == "hessian":
            out.update(direction_type="hessian", norm="none")
            if self.operator != "hessian":  # files of Hessian directions made before --operator existed still resume
                out.update(operator=self.operator)
            if self.eigenvectors is None:
                out.update(which=self.which, eigen_tol=float(self.eigen_tol))
                if self.hvp != "auto":  # files made before --hvp existed made their products the auto way
                    out.update(hvp=self.hvp)
        elif self.trajectory:
            out.update(
                trajectory=[str(p) for p in self.trajectory],
                direction_type="pca",
                norm="none",
                n_snapshots=len(self.trajectory),
            )
        else:
            out.update(direction_type="random", norm=self.norm, **shaping)
        coef = REG_COEF_DEFAULTS[self.regularizer] if self.reg_coef is None else float(self.reg_coef)
        out.update(
            surface_ndim=self.ndim,
            xgrid=[float(xs[0]), float(xs[-1]), int(xs.size)],
            ygrid=None if ys is None else [float(ys[0]), float(ys[-1]), int(ys.size)],
            bn=self.bn,
            regularizer=json.dumps({"kind": self.regularizer, "coef": coef}),
            compile=compile_attr(self.compile),
        )
        for axis, spec, points in (("x", self.x, xs), ("y", self.y, ys)):
            if spec is not None and is_point_list(spec):  # the ends and count alone do not name these points
                out[f"{axis}grid_points"] = [float(p) for p in points]
        if self.augment != "none":
            out.update(augment=self.augment, augment_copies=int(self.augment_copies), criterion=AUGMENTED_CRITERION)
        return out


def compile_attr(mode: str) -> bool | str:
    """The ``compile`` attribute (part of a surface file's identity) of a mode of :data:`COMPILE_MODES`.

    Args:
        mode: ``auto``, ``on`` or ``off``.

    Returns:
        True for ``on``, False for ``off`` (as files made before ``auto`` existed recorded them), else ``mode``.
    """
    return {"on": True, "off": False}.get(mode, mode)


if TYPE_CHECKING:  # the keywords' types name torch's Tensor; these options import no torch
    from torch import Tensor


class SurfaceKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.surface`: the fields of :class:`SurfaceOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    samples: int | None
    batch_size: int
    x: str | tuple[float, float, int] | Sequence[float] | np.ndarray | Tensor
    y: str | tuple[float, float, int] | Sequence[float] | np.ndarray | Tensor | None
    norm: str
    seed: int
    directions: str
    which: str
    eigen_tol: float
    eigenvectors: str | Path | None
    target: str | Path | None
    trajectory: str | Path | Sequence[str | Path]
    regularizer: str
    reg_coef: float | None
    bn: str
    ignore_1d: bool
    zero_patterns: str | Sequence[str] | None
    allow_stochastic: bool
    batch_points: int | str
    compile: str | bool
    augment: str
    augment_copies: int
    store_directions: str
    hvp: str
    operator: str
