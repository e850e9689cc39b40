"""A surface's result file: its directions and arrays, the size check, resuming, and writing points."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from landscape import store
from landscape.analyses.surface.directions import Directions
from landscape.analyses.surface.evaluator import PointResult
from landscape.core.objective import Objective
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.options.surface import (  # noqa: F401 (re-exported)
    BN_MODES,
    COMPILE_MODES,
    MAX_POINTS,
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


def write_directions(f: store.ResultFile, directions: Directions) -> None:
    """Write the directions (``directions/x/<param>``, ``directions/y/<param>``, trajectory coordinates), flush.

    Args:
        f: the surface file, open for writing.
        directions: the directions of the grid.
    """
    for axis, d in (("x", directions.x), ("y", directions.y)):
        if d is None:
            continue
        for name, t in d.items():
            f.write(f"directions/{axis}/{name}", t.detach().cpu().numpy())
    if directions.trajectory is not None:
        f.write("trajectory/coordinates", np.asarray(directions.trajectory), axes=["snapshot", "xy"])
    f.flush()


def read_directions(f: store.ResultFile, like: Mapping[str, Tensor], ndim: int) -> tuple[ParamDict, ParamDict | None]:
    """The directions stored in a surface file, on the device and in the dtype of ``like``.

    Args:
        f: the surface file.
        like: the parameters the directions perturb (names, devices, dtypes).
        ndim: 1 or 2 directions.

    Returns:
        ``(dx, dy)``; ``dy`` is None for a 1D surface.

    Raises:
        LandscapeError: the stored directions are not those of the model's parameters.
    """
    out = []
    for axis in ("x", "y")[:ndim]:
        group = f"directions/{axis}"
        if f.keys(group) != sorted(like):
            raise LandscapeError(f"{f.path}: stored directions do not match the model's parameters; use --force")
        out.append({n: torch.from_numpy(f.read(f"{group}/{n}")).to(t.device, t.dtype) for n, t in like.items()})
    return out[0], (out[1] if ndim == 2 else None)


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
) -> dict[str, Any]:
    """Rank 0: set up a new file or read a resumed one; return the state every rank needs (directions, done mask)."""
    if f.resumed and f.attr("directions_written", False):
        return {
            "dirs": read_directions(f, like, directions.ndim),
            "done": f.read("done"),
            "bp": f.attr("batch_points"),
            "complete": f.complete,
        }
    f.delete("directions")  # a new file, or one killed before its directions were complete: (re)write them
    create_arrays(f, xs, ys)
    write_directions(f, directions)
    f.set_attrs({k: directions.meta[k] for k in MEASURED_META if k in directions.meta})
    f.set_attrs({"directions_written": True})
    f.flush()
    return {"dirs": None, "done": f.read("done"), "bp": None, "complete": False}


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


def write_points(f: store.ResultFile, results: Sequence[PointResult]) -> None:
    """Write the values, then mark each point done (values flushed first: a kill leaves undone points NaN)."""
    for j, i, loss, data_loss, acc in results:
        f.write_at("loss", (j, i), loss)
        f.write_at("data_loss", (j, i), data_loss)
        f.write_at("accuracy", (j, i), acc)
    f.flush()
    for j, i, *_ in results:
        f.write_at("done", (j, i), True)
    f.mark_done()
