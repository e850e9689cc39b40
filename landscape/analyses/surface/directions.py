"""Directions in parameter space for loss surfaces: random (normalised), target, PCA of a trajectory.

A direction is a params dict shaped like the centre ``theta``. A surface evaluates
``L(theta + a * dx + b * dy)`` over a grid of ``(a, b)``.

Normalisations of a random Gaussian direction ``d`` against the centre ``theta`` (per tensor ``p``):

- ``filter`` (Li et al. 2018): for every slice ``i`` along dim 0 (one output filter / row),
  ``d[i] <- d[i] / ||d[i]|| * ||theta[i]||``.
- ``dim0`` (Paper A's official code): norms taken over dim 0 with keepdim, one per (in, kh, kw) column,
  ``d <- d / ||d||_dim0 * ||theta||_dim0``.
- ``layer``: ``d_p <- d_p / ||d_p|| * ||theta_p||`` (one norm per tensor).
- ``weight``: ``d <- d * theta`` elementwise.
- ``none``: the raw Gaussian.

Tensors with ``ndim < 2`` (biases, norm affine parameters) get a zero direction by default, and so do
tensors whose name matches a zero pattern (default :data:`DEFAULT_ZERO_PATTERNS`: the position parameters of
:data:`POSITION_PARAMETER_PATTERNS`, which training also exempts from weight decay, and learned tokens).
Options that would leave a surface flat, or a direction with NaN or infinite entries, are one-line errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from landscape.core import params as P
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.options.names import matches_any
from landscape.options.surface import (  # noqa: F401 (options of a surface, defined there; re-exported)
    DEFAULT_ZERO_PATTERNS,
    LEARNED_TOKEN_PATTERNS,
    NORMS,
    POSITION_PARAMETER_PATTERNS,
)

#: a distance at most this fraction of the parameters' norm counts as none: a target this close to the centre is
#: the centre itself, trajectory snapshots this close to each other are one point
SAME_POINT_RTOL = 1e-12
#: how random directions are drawn, recorded in their recipe: one CPU ``torch.Generator`` seeded with the recipe's
#: seed, ``torch.randn`` in float64 for every parameter in order (x then y), cast to the parameter's dtype
GENERATOR = "torch.Generator(cpu).manual_seed(seed); torch.randn float64 per parameter in order, x then y"


@dataclass
class Directions:
    """The directions of a surface and what is known about them.

    ``x`` and ``y`` are params dicts (``y`` is None for a 1D surface); ``kind`` is ``random``, ``target``,
    ``pca`` or ``hessian`` (:mod:`landscape.analyses.surface.hessian_directions`); ``meta`` holds attributes
    recorded in the result file (normalisation, cosine, explained variance, ...); ``trajectory`` holds the (n, 2)
    coordinates of trajectory snapshots in the plane (PCA).

    Attributes:
        x: the first direction, a params dict shaped like the centre.
        y: the second direction, or ``None`` for a line.
        kind: ``"random"``, ``"target"``, ``"pca"`` or ``"hessian"``.
        meta: attributes recorded in the result file (``norm``, ``x_norm``, ``y_norm``, ``cosine``, ...).
        trajectory: the ``(n, 2)`` coordinates of the trajectory snapshots (PCA only; else ``None``).
        recipe: how to draw the directions again bit for bit from the centre (:func:`regenerate`): the
            generator, seed, normalisation and the parameters' names and shapes; ``None`` for directions that
            cannot be drawn again (target, PCA, Hessian), which a result file must store in full.
    """

    x: ParamDict
    y: ParamDict | None = None
    kind: str = "random"
    meta: dict[str, Any] = field(default_factory=dict)
    trajectory: np.ndarray | None = None
    recipe: dict[str, Any] | None = None

    @property
    def ndim(self) -> int:
        """1 for a line, 2 for a plane."""
        return 1 if self.y is None else 2

    def cosine(self) -> float | None:
        """Cosine of the angle between ``x`` and ``y`` (None for 1D).

        Returns:
            <x, y> / (||x|| ||y||) (see :func:`cosine`), or ``None`` when ``y`` is ``None``.
        """
        return None if self.y is None else cosine(self.x, self.y)


def normalize(direction: Tensor, theta: Tensor, norm: str) -> Tensor:
    """Scale one tensor of a direction against the matching tensor of ``theta`` (see the module doc).

    E.g. ``filter``: ``d[i] <- d[i] / ||d[i]|| * ||theta[i]||`` for each slice ``i`` along dim 0; a slice with
    ``||d[i]|| = 0`` stays zero.

    Args:
        direction: one tensor ``d`` of the raw direction.
        theta: the centre's tensor of the same shape.
        norm: one of :data:`NORMS` (``filter``, ``dim0``, ``layer``, ``weight``, ``none``).

    Returns:
        The normalised tensor, of ``direction``'s shape (a new tensor).

    Raises:
        LandscapeError: ``norm`` is unknown.
    """
    d = direction
    if norm == "none":
        return d.clone()
    if norm == "weight":
        return d * theta
    if norm == "layer":
        return _rescale(d, torch.linalg.vector_norm(d), torch.linalg.vector_norm(theta))
    if norm in ("filter", "dim0"):
        if d.ndim < 2 and norm == "filter" or d.ndim == 0:
            return _rescale(d, d.abs(), theta.abs())
        dims = tuple(range(1, d.ndim)) if norm == "filter" else (0,)
        dn = torch.linalg.vector_norm(d, dim=dims, keepdim=True)
        return _rescale(d, dn, torch.linalg.vector_norm(theta, dim=dims, keepdim=True))
    raise LandscapeError(f"unknown normalisation {norm!r}; choose one of {', '.join(NORMS)}")


def _rescale(d: Tensor, d_norm: Tensor, target_norm: Tensor) -> Tensor:
    """``d / d_norm * target_norm`` with zero where ``d_norm`` is zero (no epsilon bias)."""
    safe = torch.where(d_norm > 0, d_norm, torch.ones_like(d_norm))
    return d * (target_norm / safe)


def random_direction(
    theta: Mapping[str, Tensor],
    *,
    generator: torch.Generator,
    norm: str = "filter",
    ignore_1d: bool = True,
    zero_patterns: Sequence[str] = DEFAULT_ZERO_PATTERNS,
) -> ParamDict:
    """A Gaussian direction (drawn on the CPU from ``generator``, in ``theta``'s order) normalised by ``norm``.

    Every tensor is drawn, zeroed or not, so the stream of random numbers does not depend on the options. The
    draw and the normalisation both run on the CPU (in ``theta``'s dtype) and the result is then moved to
    ``theta``'s device, so that the same seed gives the same direction bit for bit on every device.
    Tensors with ndim < 2 (if ``ignore_1d``) or a name matching ``zero_patterns`` are zero.

    Args:
        theta: the centre, a params dict.
        generator: the CPU generator the Gaussian entries are drawn from (advanced by every tensor).
        norm: the normalisation, one of :data:`NORMS` (see :func:`normalize`).
        ignore_1d: give tensors with ``ndim < 2`` (biases, norm affine parameters) a zero direction.
        zero_patterns: name patterns (see :func:`matches`) whose tensors get a zero direction.

    Returns:
        The direction, a params dict of ``theta``'s names, shapes, devices and dtypes.

    Raises:
        LandscapeError: if ``norm`` is unknown, if the zero patterns and ``ignore_1d`` leave no tensor to
            perturb, or if normalisation scales every perturbed tensor to zero (the surface would be flat).
    """
    if norm not in NORMS:
        raise LandscapeError(f"unknown normalisation {norm!r}; choose one of {', '.join(NORMS)}")
    out: ParamDict = {}
    perturbed = 0
    for name, t in theta.items():
        g = torch.randn(t.shape, generator=generator, dtype=torch.float64).to(dtype=t.dtype)
        if (ignore_1d and t.ndim < 2) or matches_any(name, zero_patterns):
            out[name] = torch.zeros_like(t)
        else:
            out[name] = normalize(g, t.detach().cpu(), norm).to(t.device)
            perturbed += 1
    if not perturbed and theta:
        raise LandscapeError(_nothing_to_perturb(theta, ignore_1d, zero_patterns))
    if theta and not any(bool(t.ne(0).any()) for t in out.values()):  # NaN entries are not zero: reported later
        raise LandscapeError(
            f"every tensor the direction perturbs is zero in the centre, so {norm} normalisation "
            "scales the direction to zero (the surface would be flat); use --norm none"
        )
    return out


def _nothing_to_perturb(theta: Mapping[str, Tensor], ignore_1d: bool, zero_patterns: Sequence[str]) -> str:
    """The one-line message for options that leave every tensor of a direction zero, naming which options."""
    by_patterns = all(matches_any(name, zero_patterns) for name in theta)
    by_1d = ignore_1d and all(t.ndim < 2 for t in theta.values())
    patterns = ", ".join(zero_patterns)
    if by_patterns:
        return (
            f"the zero patterns ({patterns}) match every parameter, leaving no parameter to perturb (the "
            "surface would be flat); give --zero / zero_patterns that leave some weights free"
        )
    if by_1d:
        return (
            "every parameter has ndim < 2 and those are left fixed by default, leaving no parameter to perturb "
            "(the surface would be flat); pass --keep-1d (ignore_1d=False)"
        )
    return (
        f"the zero patterns ({patterns}) together with leaving ndim < 2 tensors fixed leave no parameter to "
        "perturb (the surface would be flat); pass --keep-1d (ignore_1d=False) or fewer --zero patterns"
    )


def _check_ndim(ndim: Any) -> int:
    """``ndim`` if it is 1 (a line) or 2 (a plane); a one-line error otherwise."""
    if isinstance(ndim, bool) or ndim not in (1, 2):
        raise LandscapeError(f"ndim must be 1 (a line) or 2 (a plane), got {ndim!r}")
    return int(ndim)


def random_directions(
    theta: Mapping[str, Tensor],
    *,
    ndim: int = 2,
    seed: int = 0,
    norm: str = "filter",
    ignore_1d: bool = True,
    zero_patterns: Sequence[str] = DEFAULT_ZERO_PATTERNS,
) -> Directions:
    """One (``ndim=1``) or two seeded random normalised directions; ``x`` is drawn before ``y``.

    Args:
        theta: the centre, a params dict.
        ndim: 1 for a line (``x`` only), 2 for a plane.
        seed: the seed of the CPU generator both directions are drawn from.
        norm: the normalisation, one of :data:`NORMS` (see :func:`normalize`).
        ignore_1d: give tensors with ``ndim < 2`` a zero direction.
        zero_patterns: name patterns (see :func:`matches`) whose tensors get a zero direction.

    Returns:
        :class:`Directions` of kind ``random``, with ``meta`` holding the options, ``x_norm`` (``y_norm``) and,
        for a plane, ``cosine``.

    Raises:
        LandscapeError: if ``ndim`` is not 1 or 2, the options leave nothing to perturb, or a direction has
            NaN or infinite entries (a centre with NaN or infinite weights).
    """
    ndim = _check_ndim(ndim)
    gen = torch.Generator().manual_seed(int(seed))
    kw = {"generator": gen, "norm": norm, "ignore_1d": ignore_1d, "zero_patterns": tuple(zero_patterns)}
    x = random_direction(theta, **kw)
    y = random_direction(theta, **kw) if ndim == 2 else None
    meta = {"direction_type": "random", "norm": norm, "ignore_1d": ignore_1d, "zero_patterns": list(zero_patterns)}
    recipe = {
        "function": "random_directions",
        "generator": GENERATOR,
        "seed": int(seed),
        "ndim": ndim,
        "norm": norm,
        "ignore_1d": bool(ignore_1d),
        "zero_patterns": list(zero_patterns),
        "params": [[name, list(t.shape)] for name, t in theta.items()],
    }
    return _with_norms(Directions(x, y, "random", meta, recipe=recipe), {"the centre checkpoint": theta})


#: the seeds a ``torch.Generator`` takes: from -2**63 to 2**64 - 1
SEED_RANGE = (-(2**63), 2**64 - 1)
#: what a recipe records (:func:`random_directions`)
RECIPE_KEYS = ("function", "generator", "seed", "ndim", "norm", "ignore_1d", "zero_patterns", "params")


def recipe_problem(recipe: Any) -> str | None:
    """What makes ``recipe`` something other than a recipe :func:`random_directions` writes, or None.

    A recipe is a dict of ``function`` and ``generator`` (text), ``seed`` (a whole number a ``torch.Generator``
    takes, :data:`SEED_RANGE`), ``ndim`` (1 or 2), ``norm`` (one of :data:`NORMS`), ``ignore_1d`` (true or
    false), ``zero_patterns`` (a list of text) and ``params`` (a list of ``[name, shape]``, a shape a list of
    non-negative whole numbers).

    Args:
        recipe: what a file holds as the recipe (any JSON value).

    Returns:
        The first problem in words (``"its seed is 'abc', not a whole number"``), or None for a well-formed recipe.
    """
    if not isinstance(recipe, Mapping):
        return f"it is {type(recipe).__name__} {str(recipe)[:40]!r}, not a record of the draw"
    missing = [key for key in RECIPE_KEYS if key not in recipe]
    if missing:
        return f"it has no {', '.join(missing)}"
    seed, ndim, params = recipe["seed"], recipe["ndim"], recipe["params"]
    if not _whole(seed) or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        return f"its seed is {str(seed)[:40]!r}, not a whole number a torch.Generator takes"
    if not _whole(ndim) or ndim not in (1, 2):
        return f"its ndim is {str(ndim)[:40]!r}, not 1 or 2"
    if recipe["norm"] not in NORMS:
        return f"its norm is {str(recipe['norm'])[:40]!r}, not one of {', '.join(NORMS)}"
    if not isinstance(recipe["ignore_1d"], bool):
        return f"its ignore_1d is {str(recipe['ignore_1d'])[:40]!r}, not true or false"
    if not isinstance(recipe["zero_patterns"], list) or not all(isinstance(p, str) for p in recipe["zero_patterns"]):
        return "its zero_patterns are not a list of names"
    shaped = isinstance(params, list) and all(
        isinstance(entry, list)
        and len(entry) == 2
        and isinstance(entry[0], str)
        and isinstance(entry[1], list)
        and all(_whole(n) and n >= 0 for n in entry[1])
        for entry in params
    )
    return None if shaped else "its params are not a list of [name, shape]"


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def regenerate(recipe: Any, theta: Mapping[str, Tensor]) -> Directions:
    """The directions a :attr:`Directions.recipe` describes, drawn again from the centre ``theta``.

    Bit for bit those of the first draw when ``theta`` is the same centre (the draw and the normalisation run
    on the CPU from a ``torch.Generator`` of the recipe's seed; the caller's global RNG is not touched).

    Args:
        recipe: the recipe recorded with the directions (a dict, as :func:`random_directions` makes it).
        theta: the centre, a params dict with the recipe's parameter names and shapes.

    Returns:
        The directions, with the same recipe.

    Raises:
        LandscapeError: the recipe is damaged (:func:`recipe_problem`), is not one this version can draw, or its
            parameters are not ``theta``'s (:func:`check_compatible`).
    """
    problem = recipe_problem(recipe)
    if problem is not None:
        raise LandscapeError(f"the directions' recipe is damaged ({problem}); rerun with --force to start again")
    if recipe["function"] != "random_directions" or recipe["generator"] != GENERATOR:
        raise LandscapeError(
            f"the directions' recipe ({str(recipe['function'])[:40]!r}, generator {str(recipe['generator'])[:80]!r}) "
            "is not one this version of landscape can draw again; use the version that made the file, or --force "
            "to start again"
        )
    shapes = {name: tuple(shape) for name, shape in recipe["params"]}
    check_compatible({n: torch.empty(s, device="meta") for n, s in shapes.items()}, theta, "the directions' recipe")
    return random_directions(
        {n: theta[n] for n in shapes},
        ndim=recipe["ndim"],
        seed=recipe["seed"],
        norm=recipe["norm"],
        ignore_1d=recipe["ignore_1d"],
        zero_patterns=tuple(recipe["zero_patterns"]),
    )


def differences(theta: Mapping[str, Tensor], other: Mapping[str, Tensor]) -> tuple[list[str], list[str], list[str]]:
    """How the names and shapes of ``other`` differ from ``theta``'s (the matching of :func:`check_compatible`).

    Args:
        theta: the reference, name -> tensor.
        other: the dict to compare, name -> tensor.

    Returns:
        ``(missing, extra, wrong)``: the names of ``theta`` that ``other`` lacks (in ``theta``'s order), the names
        of ``other`` that ``theta`` lacks (in ``other``'s order), and the names in both whose shapes differ (in
        ``theta``'s order). All three are empty when the two match.
    """
    missing = [n for n in theta if n not in other]
    extra = [n for n in other if n not in theta]
    wrong = [n for n in theta if n in other and tuple(other[n].shape) != tuple(theta[n].shape)]
    return missing, extra, wrong


def check_compatible(theta: Mapping[str, Tensor], other: Mapping[str, Tensor], what: str) -> None:
    """Raise a one-line error unless ``other`` has exactly ``theta``'s parameter names and shapes.

    Args:
        theta: the centre, a params dict.
        other: the params dict to compare (a target checkpoint, a trajectory snapshot, ...).
        what: how the error names ``other``, e.g. ``"the target"``.

    Raises:
        LandscapeError: a name of ``theta`` is missing from ``other``, ``other`` has an extra name, or a shape
            differs.
    """
    missing, extra, wrong = differences(theta, other)
    if missing or extra or wrong:
        detail = (
            f"missing {missing[:2]}" if missing else f"unexpected {extra[:2]}" if extra else f"shape of {wrong[:2]}"
        )
        raise LandscapeError(f"{what} does not match the centre model ({detail}); give a checkpoint of the same model")


def target_direction(theta: Mapping[str, Tensor], other: Mapping[str, Tensor], what: str = "the target") -> ParamDict:
    """``other - theta``: alpha = 1 along it lands exactly on ``other`` (no normalisation).

    Args:
        theta: the centre, a params dict.
        other: the target, a params dict of the same names and shapes (cast to ``theta``'s device and dtype).
        what: how an error names ``other``.

    Returns:
        ``{n: other[n] - theta[n]}``, detached, on ``theta``'s devices and dtypes.

    Raises:
        LandscapeError: ``other`` does not match ``theta`` (see :func:`check_compatible`).
    """
    check_compatible(theta, other, what)
    return {n: other[n].detach().to(t.device, t.dtype) - t.detach() for n, t in theta.items()}


def target_directions(
    theta: Mapping[str, Tensor],
    other: Mapping[str, Tensor],
    *,
    ndim: int = 1,
    seed: int = 0,
    norm: str = "filter",
    ignore_1d: bool = True,
    zero_patterns: Sequence[str] = DEFAULT_ZERO_PATTERNS,
) -> Directions:
    """Target directions: x = ``other - theta``; for a plane, y is a seeded random direction normalised by ``norm``.

    Args:
        theta: the centre, a params dict.
        other: the target, a params dict of the same names and shapes.
        ndim: 1 for a line (``x`` only), 2 for a plane.
        seed: the seed of the random ``y`` direction (plane only).
        norm: the normalisation of ``y``, one of :data:`NORMS`; ``x`` is never normalised.
        ignore_1d: give tensors of ``y`` with ``ndim < 2`` a zero direction.
        zero_patterns: name patterns whose tensors of ``y`` get a zero direction.

    Returns:
        :class:`Directions` of kind ``target``, with ``meta`` holding the options, the norms and, for a
        plane, the cosine.

    Raises:
        LandscapeError: if ``ndim`` is not 1 or 2, ``other`` does not match ``theta``, ``other`` equals
            ``theta`` (``||other - theta|| <= 1e-12 ||theta||``: a zero x direction), the options leave nothing
            of y to perturb, or a direction has NaN or infinite entries.
    """
    ndim = _check_ndim(ndim)
    x = target_direction(theta, other)
    x_norm = float(P.norm({n: t.double() for n, t in x.items()}))
    theta_norm = float(P.norm({n: t.detach().double() for n, t in theta.items()}))
    if x_norm <= SAME_POINT_RTOL * theta_norm:  # NaN compares false: a non-finite target is reported below
        raise LandscapeError(
            f"the target equals the centre checkpoint (||target - centre|| = {x_norm:.3g}), so the "
            "x direction is zero; give a different --target checkpoint or use random directions"
        )
    y = None
    if ndim == 2:
        gen = torch.Generator().manual_seed(int(seed))
        y = random_direction(theta, generator=gen, norm=norm, ignore_1d=ignore_1d, zero_patterns=zero_patterns)
    meta: dict[str, Any] = {"direction_type": "target", "norm": "none" if ndim == 1 else f"x:none,y:{norm}"}
    if ndim == 2:  # these options shape the random y direction only; x holds every tensor
        meta.update(ignore_1d=ignore_1d, zero_patterns=list(zero_patterns))
    return _with_norms(Directions(x, y, "target", meta), {"the centre checkpoint": theta, "the target": other})


def pca_directions(
    theta: Mapping[str, Tensor], snapshots: Sequence[Mapping[str, Tensor]], *, ndim: int = 2
) -> Directions:
    """Principal directions of a training trajectory around the centre ``theta`` (Li et al. 2018, sec. 7).

    Rows ``theta_i - theta`` of the snapshots are centred over snapshots (as sklearn's PCA does) and the
    top right-singular vectors (unit norm) are the directions; ``explained_variance_ratio`` is
    ``s_k^2 / sum s^2``. The trajectory's coordinates are the projections ``<theta_i - theta, d_k>``
    (directions are orthonormal, so these are the coordinates in the plane). Signs are fixed so that the
    largest-magnitude entry of each direction is positive.

    Args:
        theta: the centre, a params dict.
        snapshots: the trajectory's params dicts (at least ``ndim + 1``), each of ``theta``'s names and shapes.
        ndim: the number of principal directions, 1 or 2.

    Returns:
        :class:`Directions` of kind ``pca`` with unit-norm directions, ``meta["explained_variance_ratio"]``
        (``ndim`` floats) and ``trajectory`` of shape ``(len(snapshots), 2)`` (second column zero for a line).

    Raises:
        LandscapeError: if ``ndim`` is not 1 or 2, there are fewer than ``ndim + 1`` snapshots, a snapshot does
            not match ``theta``, the snapshots do not move, or a tensor of the centre or a snapshot is not finite.
    """
    ndim = _check_ndim(ndim)
    if len(snapshots) < ndim + 1:
        raise LandscapeError(f"PCA directions need at least {ndim + 1} trajectory snapshots, got {len(snapshots)}")
    sources: dict[str, Mapping[str, Tensor]] = {"the centre checkpoint": theta}
    for i, snap in enumerate(snapshots):
        check_compatible(theta, snap, f"trajectory snapshot {i + 1}")
        sources[f"trajectory snapshot {i + 1}"] = snap
    for name in theta:
        if (source := _non_finite_source(name, sources)) is not None:
            raise LandscapeError(
                f"{source}'s {name!r} has NaN or infinite entries, so no PCA direction can be "
                "computed; leave that snapshot out of --trajectory or use finite checkpoints"
            )
    base = P.flatten({n: t.detach().double().cpu() for n, t in theta.items()})
    rows = torch.stack([P.flatten({n: s[n].detach().double().cpu() for n in theta}) - base for s in snapshots])
    centred = rows - rows.mean(0, keepdim=True)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    scale = max(float(torch.linalg.vector_norm(base)), float(torch.linalg.vector_norm(rows, dim=1).max()))
    if not s[0] > SAME_POINT_RTOL * scale:
        raise LandscapeError(
            "the trajectory snapshots are all the same point, so they have no principal direction; "
            "give snapshots from different steps of a training run"
        )
    comps = vh[:ndim].clone()
    for k in range(ndim):
        if comps[k, comps[k].abs().argmax()] < 0:
            comps[k] = -comps[k]
    ratio = (s[:ndim] ** 2 / (s**2).sum()).tolist()
    coords = (rows @ comps.T).numpy()
    like = {n: t.detach() for n, t in theta.items()}
    cpu_like = {n: t.cpu() for n, t in like.items()}
    dirs = [{n: v.to(like[n].device, like[n].dtype) for n, v in P.unflatten(c, cpu_like).items()} for c in comps]
    meta = {"direction_type": "pca", "norm": "none", "explained_variance_ratio": ratio, "n_snapshots": len(snapshots)}
    traj = coords if ndim == 2 else np.stack([coords[:, 0], np.zeros(len(coords))], 1)
    return _with_norms(Directions(dirs[0], dirs[1] if ndim == 2 else None, "pca", meta, trajectory=traj), sources)


def cosine(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> float:
    """<a, b> / (||a|| ||b||) over all tensors, computed in float64 (0 if either is zero).

    Args:
        a: a params dict.
        b: a params dict with (at least) ``a``'s names and shapes.

    Returns:
        The cosine of the angle between ``a`` and ``b``, a float in ``[-1, 1]``.
    """
    a64 = {n: t.double() for n, t in a.items()}
    b64 = {n: b[n].double() for n in a}
    na, nb = float(P.norm(a64)), float(P.norm(b64))
    return 0.0 if na == 0 or nb == 0 else float(P.dot(a64, b64)) / (na * nb)


def _non_finite_source(name: str, sources: Mapping[str, Mapping[str, Tensor]]) -> str | None:
    """The first of ``sources`` (described by its key) whose tensor ``name`` has NaN or infinite entries."""
    return next((what for what, params in sources.items() if not torch.isfinite(params[name]).all()), None)


def _with_norms(d: Directions, sources: Mapping[str, Mapping[str, Tensor]]) -> Directions:
    """Record the norms (and cosine) of ``d``; refuse a direction with NaN or infinite entries.

    ``sources`` are the parameter dicts the directions were made from, keyed by a description (e.g. ``"the
    centre checkpoint"``); a non-finite direction names its tensor and the source that is not finite there.
    """
    for axis, direction in (("x", d.x), ("y", d.y)):
        if direction is None:
            continue
        for name, t in direction.items():
            if not torch.isfinite(t).all():
                source = _non_finite_source(name, sources)
                cause = (
                    f"{source}'s {name!r} has NaN or infinite entries"
                    if source is not None
                    else f"normalising {name!r} overflowed its dtype {t.dtype}"
                )
                raise LandscapeError(
                    f"the {axis} direction has NaN or infinite entries in {name!r} ({cause}); "
                    "use a checkpoint whose weights are finite"
                )
        d.meta[f"{axis}_norm"] = float(P.norm({n: t.double() for n, t in direction.items()}))
    if d.y is not None:
        d.meta["cosine"] = d.cosine()
    return d
