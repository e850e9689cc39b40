"""A surface's result file: its directions and arrays, the size check, resuming, and writing points."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from landscape import store
from landscape.analyses.surface.directions import RECIPE_KEYS, Directions, cosine, recipe_problem, regenerate
from landscape.analyses.surface.evaluator import PointResult
from landscape.core import params as P
from landscape.core.objective import Objective
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.options.surface import (  # noqa: F401 (re-exported)
    BN_MODES,
    COMPILE_MODES,
    DIRECTION_STORAGE,
    MAX_POINTS,
    WRITE_EVERY_S,
    SurfaceOptions,
    compile_attr,
    compile_mode,
    parse_grid,
)
from landscape.runtime import distributed as D
from landscape.runtime.devices import synchronize

#: what the directions measure rather than what the options ask for (the directions' norms and cosine, the
#: eigenvalues of Hessian directions): written once with the directions, kept out of the file's identity
MEASURED_META = (
    "x_norm",
    "y_norm",
    "cosine",
    "direction_eigenvalues",
    "direction_residuals",
    "direction_second_differences",
)


#: entries sampled from each tensor of a direction for the fingerprint's hash (evenly spaced over its flat order)
DIGEST_SAMPLES = 16
#: the largest magnitude float16 holds: a direction with a larger entry cannot be stored as ``half``
HALF_MAX = float(np.finfo(np.float16).max)


def storage_of(directions: Directions, asked: str) -> tuple[str, str | None]:
    """How the directions will be stored, and why that differs from ``asked`` (None when it does not).

    ``seed`` needs a recipe (:attr:`Directions.recipe`): directions without one (target, PCA, Hessian) are stored
    in ``full`` instead.

    Args:
        directions: the directions of the grid.
        asked: the storage asked for, one of :data:`~landscape.options.surface.DIRECTION_STORAGE`.

    Returns:
        ``(storage, note)``.

    Raises:
        LandscapeError: ``asked`` is not a storage.
    """
    if asked not in DIRECTION_STORAGE:
        raise LandscapeError(f"--store-directions must be one of {', '.join(DIRECTION_STORAGE)}, got {asked!r}")
    if asked == "seed" and directions.recipe is None:
        return "full", f"{directions.kind} directions cannot be drawn again from a seed, so they are stored in full"
    return asked, None


def as_stored(directions: Directions, storage: str) -> Directions:
    """The directions the grid is evaluated along: rounded through float16 for ``half``, else the same object.

    A run and its resumption then use the same directions bit for bit, whatever the storage.

    Args:
        directions: the directions of the grid.
        storage: ``seed``, ``half`` or ``full`` (:func:`storage_of`).

    Returns:
        The directions to evaluate along and to store.

    Raises:
        LandscapeError: ``half`` for a direction with an entry beyond float16's range.
    """
    if storage != "half":
        return directions
    rounded = []
    for axis, d in (("x", directions.x), ("y", directions.y)):
        if d is None:
            rounded.append(None)
            continue
        big = max((float(t.detach().abs().max()) for t in d.values() if t.numel()), default=0.0)
        if not big <= HALF_MAX:
            raise LandscapeError(
                f"the {axis} direction has an entry of magnitude {big:.3g}, beyond float16's {HALF_MAX:g}; "
                "use --store-directions seed or full"
            )
        rounded.append({n: t.detach().half().to(t.dtype) for n, t in d.items()})
    return replace(directions, x=rounded[0], y=rounded[1], meta=dict(directions.meta))


def half_error(directions: Directions, stored: Directions) -> dict[str, float]:
    """The relative error of the float16 rounding of each direction, ``||d - d16|| / ||d||`` in float64.

    A grid point ``a dx16 + b dy16`` lies within ``|a| e_x ||dx|| + |b| e_y ||dy||`` of ``a dx + b dy``.

    Args:
        directions: the directions as computed.
        stored: the same rounded through float16 (:func:`as_stored`).

    Returns:
        ``{"x": e_x}`` and, for a plane, ``"y": e_y`` (0 for a zero direction).
    """
    out = {}
    for axis, d, r in (("x", directions.x, stored.x), ("y", directions.y, stored.y)):
        if d is None or r is None:
            continue
        size = float(P.norm({n: t.double() for n, t in d.items()}))
        error = float(P.norm({n: t.double() - r[n].double() for n, t in d.items()}))
        out[axis] = error / size if size > 0 else 0.0
    return out


def digest(dx: Mapping[str, Tensor], dy: Mapping[str, Tensor] | None) -> dict[str, Any]:
    """The fingerprint of a pair of directions: their norms and cosine, and a hash of sampled entries.

    The hash is SHA-256 over each tensor's name and :data:`DIGEST_SAMPLES` entries evenly spaced in its flat
    order, as float64 bytes (exact for every floating dtype), x's tensors then y's.

    Args:
        dx: the x direction.
        dy: the y direction, or None.

    Returns:
        ``{"x_norm", "y_norm", "cosine", "sha256"}`` (norms and cosine in float64; ``y_norm`` and ``cosine`` None
        for a line).
    """
    h = hashlib.sha256()
    norms: dict[str, float | None] = {"x_norm": None, "y_norm": None}
    for axis, d in (("x", dx), ("y", dy)):
        if d is None:
            continue
        for name, t in d.items():
            flat = t.detach().reshape(-1)
            index = torch.linspace(0, max(flat.numel() - 1, 0), min(flat.numel(), DIGEST_SAMPLES)).round().long()
            h.update(f"{axis}/{name}:".encode())
            h.update(flat[index.to(flat.device)].double().cpu().numpy().tobytes())
        norms[f"{axis}_norm"] = float(P.norm({n: t.double() for n, t in d.items()}))
    return {**norms, "cosine": None if dy is None else cosine(dx, dy), "sha256": h.hexdigest()}


def write_directions(
    f: store.ResultFile, directions: Directions, storage: str, extra: Mapping[str, Any] | None = None
) -> None:
    """Write the directions as ``storage`` says, their recipe, fingerprint and trajectory coordinates; flush.

    ``seed``: the recipe only (``directions_recipe``); ``half``: ``directions/x/<param>`` (and ``y``) as float16;
    ``full``: the arrays in the parameters' dtype. Every storage records ``directions_storage``, the recipe when
    there is one, and the fingerprint ``directions_digest`` (:func:`digest`) of the directions the grid is
    evaluated along, which :func:`read_directions` checks.

    Args:
        f: the surface file, open for writing.
        directions: the directions of the grid, as evaluated (:func:`as_stored`).
        storage: ``seed``, ``half`` or ``full`` (:func:`storage_of`).
        extra: more root attributes to record with them (``directions_half_error``, ``directions_storage_note``).
    """
    if storage != "seed":
        for axis, d in (("x", directions.x), ("y", directions.y)):
            if d is None:
                continue
            for name, t in d.items():
                values = t.detach().cpu()
                f.write(f"directions/{axis}/{name}", (values.half() if storage == "half" else values).numpy())
    if directions.trajectory is not None:
        f.write("trajectory/coordinates", np.asarray(directions.trajectory), axes=["snapshot", "xy"])
    attrs: dict[str, Any] = {"directions_storage": storage, "directions_digest": digest(directions.x, directions.y)}
    if directions.recipe is not None:
        attrs["directions_recipe"] = directions.recipe
    f.set_attrs({**attrs, **(extra or {})})
    f.flush()


def read_directions(
    f: store.ResultFile, like: Mapping[str, Tensor], ndim: int, recipe: Mapping[str, Any] | None = None
) -> tuple[ParamDict, ParamDict | None]:
    """The directions of a surface file, on the device and in the dtype of ``like``; checked against the file.

    The file is checked against itself before its directions are used: it must record how they are stored and
    their fingerprint (``directions_digest``), which the directions drawn again from its recipe
    (:func:`~landscape.analyses.surface.directions.regenerate`, storage ``seed``) or read from ``directions/``
    (``half``, ``full``) must match. A recorded recipe must also be the run's own (``recipe``): the file's
    directions are those the run's options draw.

    Args:
        f: the surface file.
        like: the parameters the directions perturb (names, devices, dtypes): the centre.
        ndim: 1 or 2 directions.
        recipe: the recipe of the run's own directions (None: directions without one, target, PCA or Hessian).

    Returns:
        ``(dx, dy)``; ``dy`` is None for a 1D surface.

    Raises:
        LandscapeError: the file records no storage or fingerprint, its recipe is damaged or not the run's, the
            stored directions are not those of the model's parameters, or the directions do not match the
            fingerprint recorded with them.
    """
    storage, recorded = f.attr("directions_storage"), f.attr("directions_digest")
    fingerprinted = isinstance(recorded, dict) and isinstance(recorded.get("sha256"), str)
    if storage not in DIRECTION_STORAGE or not fingerprinted:
        raise LandscapeError(
            f"{f.path} records no valid storage or fingerprint of its directions, so the points it holds cannot be "
            "checked to lie on this run's surface; rerun with --force to start again"
        )
    stored_recipe = f.attr("directions_recipe")
    if storage == "seed" or stored_recipe is not None:
        problem = recipe_problem(stored_recipe)
        if problem is not None:
            raise LandscapeError(
                f"{f.path}: the directions' recipe is damaged ({problem}); rerun with --force to start again"
            )
        if recipe is not None and dict(recipe) != stored_recipe:
            field = next((k for k in RECIPE_KEYS if recipe.get(k) != stored_recipe.get(k)), "function")
            raise LandscapeError(
                f"{f.path}: its directions were drawn with {field} {str(stored_recipe.get(field))[:60]}, this run's "
                f"with {str(recipe.get(field))[:60]}: the file was altered or made by other options; rerun with "
                "--force to start again"
            )
    if storage == "seed":
        again = regenerate(stored_recipe, like)
        out = [again.x, again.y]
    else:
        out = []
        for axis in ("x", "y")[:ndim]:
            group = f"directions/{axis}"
            if f.keys(group) != sorted(like):
                raise LandscapeError(f"{f.path}: stored directions do not match the model's parameters; use --force")
            out.append({n: torch.from_numpy(f.read(f"{group}/{n}")).to(t.device, t.dtype) for n, t in like.items()})
    dx, dy = out[0], (out[1] if ndim == 2 else None)
    now = digest(dx, dy)
    if now["sha256"] != recorded["sha256"]:
        how = "drawn again from its recipe" if storage == "seed" else "read back"
        raise LandscapeError(
            f"{f.path}: the directions {how} do not match the fingerprint recorded with them (x norm "
            f"{now['x_norm']:.9g} now, {str(recorded.get('x_norm'))[:30]} recorded): the file was altered or made "
            "with another model or torch version; rerun with --force to start again"
        )
    return dx, dy


def create_arrays(f: store.ResultFile, xs: np.ndarray, ys: np.ndarray) -> None:
    """Write the coordinates and allocate ``loss``, ``data_loss``, ``accuracy`` (NaN) and ``done`` (False).

    Args:
        f: the surface file, open for writing.
        xs: the x coordinates.
        ys: the y coordinates (one 0 for a 1D surface).
    """
    f.write("xcoordinates", xs, axes=["x"])
    f.write("ycoordinates", ys, axes=["y"])
    shape = (len(ys), len(xs))
    for name in ("loss", "data_loss", "accuracy"):
        f.allocate(name, shape, "f8", fill=np.nan, axes=["y", "x"])
    f.allocate("done", shape, bool, fill=False, axes=["y", "x"])


def direction_fingerprint(directions: Directions) -> str:
    """A short text of the directions' norms and cosine, recorded to tell two draws apart.

    Args:
        directions: the directions of the grid.

    Returns:
        ``"x_norm,y_norm,cosine"``.
    """
    m = directions.meta
    return f"{m.get('x_norm', 0.0):.6g},{m.get('y_norm', 0.0):.6g},{m.get('cosine', 0.0) or 0.0:.4g}"


def check_grid_size(objective: Objective, n_points: int, shape: tuple[int, int]) -> None:
    """Refuse a grid of more than :data:`MAX_POINTS` points before anything is allocated.

    The message gives the number of points, the memory its arrays need and the time they would take at the
    cost of one point measured now on this device.

    Args:
        objective: the loss; evaluated once (only when the grid is too large) to time one point.
        n_points: the number of grid points (nx * ny).
        shape: the grid shape ``(ny, nx)``.

    Raises:
        LandscapeError: ``n_points`` is more than :data:`MAX_POINTS`.
    """
    if n_points <= MAX_POINTS:
        return
    t0 = time.perf_counter()
    objective.evaluate()
    synchronize(objective.device)
    seconds = (time.perf_counter() - t0) * n_points
    gigabytes = n_points * (3 * 8 + 1) / 1e9
    raise LandscapeError(
        f"a {shape[1]} x {shape[0]} grid has {n_points:,} points: {gigabytes:.1f} GB of arrays and about "
        f"{seconds / 3600:.0f} hours at the {seconds / n_points:.3g} s per point measured now; use at most "
        f"{MAX_POINTS:,} points (fewer NUM in --x/--y)"
    )


def resume_surface(
    f: store.ResultFile,
    directions: Directions,
    xs: np.ndarray,
    ys: np.ndarray,
    like: Mapping[str, Tensor],
    storage: str = "full",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Rank 0: set up a new file or read a resumed one; return the state every rank needs (directions, done mask).

    A resumed file's evaluation choices (``batch_points``, ``channels_last``, ``compiled``) come back with it: the
    points left are computed as its first points were.

    A new file gets its arrays and the directions stored as ``storage`` (:func:`write_directions`; ``directions``
    already as evaluated, :func:`as_stored`); a resumed one keeps the storage it was written with and its
    directions are read back and checked (:func:`read_directions`). ``extra``: root attributes recorded with the
    directions of a new file.
    """
    if f.resumed and f.attr("directions_written", False):
        chosen = f.attr("batch_points") is not None  # the first run's choices, made before its first point
        return {
            "dirs": read_directions(f, like, directions.ndim, directions.recipe),
            "done": f.read("done"),
            "bp": f.attr("batch_points"),
            "channels_last": f.attr("channels_last") if chosen else None,
            "compiled": f.attr("compiled") if chosen else None,
            "complete": f.complete,
        }
    f.delete("directions")  # a new file, or one killed before its directions were complete: (re)write them
    create_arrays(f, xs, ys)
    write_directions(f, directions, storage, extra)
    f.set_attrs({k: directions.meta[k] for k in MEASURED_META if k in directions.meta})
    f.set_attrs({"directions_written": True})
    f.flush()
    fresh = {"bp": None, "channels_last": None, "compiled": None}  # chosen by this run
    return {"dirs": None, "done": f.read("done"), **fresh, "complete": False}


def check_finite_surface(result: store.Result) -> None:
    """Refuse (after the run, the file kept) a surface none of whose finished points has a finite loss."""
    loss, done = result["loss"], result["done"].astype(bool)
    if done.any() and not np.isfinite(loss[done]).any():
        raise LandscapeError(
            f"{result.path}: every grid point's loss is NaN or Inf: the model diverges along these "
            "directions or at its centre; check the checkpoint, or use a smaller grid (--x/--y)"
        )


def portable_state(state: dict[str, Any]) -> dict[str, Any]:
    """The state with the directions on CPU, so that it can be broadcast to every rank."""
    if state.get("dirs") is None or not D.active():
        return state
    return {**state, "dirs": tuple(None if d is None else {n: t.cpu() for n, t in d.items()} for d in state["dirs"])}


#: the arrays of a surface's grid that hold each point's values, in the order of a point's values
VALUE_ARRAYS = ("loss", "data_loss", "accuracy")


def read_grid(f: store.ResultFile) -> dict[str, np.ndarray]:
    """The surface's grid arrays as the file holds them (values and ``done``), to be updated and written back."""
    return {name: f.read(name) for name in (*VALUE_ARRAYS, "done")}


def write_points(
    f: store.ResultFile, results: Sequence[PointResult], grid: dict[str, np.ndarray] | None = None
) -> None:
    """Write finished points: their values as the box of the grid they span, flush, then their ``done`` flags, flush.

    The values are flushed before the flags, so a kill in between leaves the points not done and the file valid.
    Each array is written once, as the box of rows and columns the points span (a 1D line's new stretch, not the
    whole line), from ``grid`` (the file's arrays mirrored in memory, updated here).

    Args:
        f: the open surface file.
        results: ``(j, i, loss, data_loss, accuracy)`` of each point.
        grid: the mirror of the file's arrays (:func:`read_grid`), kept from one call to the next; None: read now.
    """
    if not results:
        return
    grid = read_grid(f) if grid is None else grid
    rows, cols = [j for j, *_ in results], [i for _, i, *_ in results]
    slab = (slice(min(rows), max(rows) + 1), slice(min(cols), max(cols) + 1))  # the box of the points, not whole rows
    for j, i, *values in results:
        for name, value in zip(VALUE_ARRAYS, values):
            grid[name][j, i] = value
    for name in VALUE_ARRAYS:
        f.write_at(name, slab, grid[name][slab])
    f.flush()
    for j, i, *_ in results:
        grid["done"][j, i] = True
    f.write_at("done", slab, grid["done"][slab])
    f.mark_done()


class PendingPoints:
    """Finished points held back until ``every_s`` seconds have passed since the last write, then written together.

    The first points are written at once (a live file shows them); later ones wait. A grid of fast points is then not
    slowed by a write per point (four array writes and two flushes, 1.7 ms, 5% of a 36 ms point of
    ``resnet_mini``), and a kill loses at most ``every_s`` seconds of work.

    Args:
        write: writes a group of points (e.g. :func:`write_points` into the open file).
        every_s: the longest a finished point waits while others finish
            (:data:`~landscape.options.surface.WRITE_EVERY_S`).
    """

    def __init__(self, write: Callable[[list[PointResult]], None], every_s: float = WRITE_EVERY_S) -> None:
        self._write, self.every_s = write, every_s
        self.points: list[PointResult] = []
        self.last = -float("inf")  # nothing written yet: the first points go at once

    def add(self, results: Sequence[PointResult]) -> None:
        """Take finished points; write all that wait once ``every_s`` has passed since the last write."""
        self.points.extend(results)
        if time.monotonic() - self.last >= self.every_s:
            self.write()

    def write(self) -> None:
        """Write every point that waits (nothing when none does)."""
        if self.points:
            self._write(self.points)
        self.points = []
        self.last = time.monotonic()
