"""A surface result read for drawing: its schema check, grid, z values, title and axis labels."""

from __future__ import annotations

import numpy as np

from landscape.errors import LandscapeError
from landscape.plot.common import (
    Array,
    Schema,
    check_arrays,
    model_name,
    wrapped,
)
from landscape.plot.scales import (
    _finite,
)
from landscape.store.read import Result

#: the arrays of a surface file: ``loss[j, i]`` (and ``accuracy``, ``done``) at ``(x_i, y_j)``
SCHEMA = Schema(
    kind="surface",
    required={
        "xcoordinates": Array(("x",), increasing=True),
        "ycoordinates": Array(("y",), increasing=True),
        "loss": Array(("y", "x")),
        "accuracy": Array(("y", "x")),
    },
    optional={
        "done": Array(("y", "x"), flag=True),
        "data_loss": Array(("y", "x")),
        "trajectory/coordinates": Array(("snapshot", 2), finite=True),
    },
    done=("done",),
    numbers=("surface_ndim", "direction_eigenvalues", "explained_variance_ratio"),
)

#: a space that a wrapped title does not break at
NBSP = "\u00a0"


def consistent(result: Result) -> None:
    """Check that a surface file (finished or not) agrees with itself.

    Its arrays must fit :data:`SCHEMA` (``loss`` of ``len(ycoordinates) x len(xcoordinates)``, rising
    coordinates, a 0/1 ``done`` mask all set when the file is marked complete) and ``surface_ndim`` (when
    stored) must agree with the grid.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming what is inconsistent and what to do.
    """
    check_arrays(result, SCHEMA)
    ny, nx = result["loss"].shape
    ndim = result.attrs.get("surface_ndim", 2 if ny > 1 else 1)
    if ndim not in (1, 2) or (ndim == 1 and ny != 1):
        raise LandscapeError(
            f"{result.path}: attribute surface_ndim={ndim!r} does not fit a grid of {ny} x {nx} "
            "points (y x x); recompute it with `landscape surface ... --force`"
        )


def check(result: Result) -> None:
    """Check that ``result`` is a surface that can be drawn.

    It must be :func:`consistent`, a plane needs two points along each axis, and at least one done grid point
    must have a finite loss.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming what is wrong with the file and what to do.
    """
    consistent(result)
    ny, nx = result["loss"].shape
    ndim = result.attrs.get("surface_ndim", 2 if ny > 1 else 1)
    if ndim == 2 and min(nx, ny) < 2:
        raise LandscapeError(
            f"{result.path}: a 2D surface of {ny} x {nx} points (y x x) cannot be drawn as a plane; "
            "compute it with at least 2 points along each of --x and --y"
        )
    done = result["done"].astype(bool) if "done" in result else np.ones((ny, nx), bool)
    if np.any(np.isfinite(result["loss"]) & done):
        return
    n, finished = done.size, int(done.sum())
    lead = f"{result.path}: no grid point has a finite loss"
    if "done" not in result:
        raise LandscapeError(
            f"{lead}: its points are not done yet or diverged; resume `landscape surface` with the "
            "same options, or choose a smaller range (--x, --y) if the loss diverged"
        )
    if finished == 0:
        raise LandscapeError(
            f"{lead}: none of its {n} points is done yet; run (or resume) `landscape surface` with "
            "the same options first"
        )
    if finished == n:
        raise LandscapeError(
            f"{lead}: all {n} points are done but the loss diverged (NaN or inf) at each; "
            "compute the surface over a smaller range (--x, --y)"
        )
    raise LandscapeError(
        f"{lead}: {n - finished} of its {n} points are not done yet and the loss diverged (NaN or "
        f"inf) at the {finished} done ones; resume `landscape surface` with the same options, or "
        "choose a smaller range (--x, --y)"
    )


def grid_of(result: Result) -> tuple[np.ndarray, np.ndarray, np.ma.MaskedArray, np.ma.MaskedArray]:
    """``(xs, ys, loss, accuracy)`` of a surface checked by :func:`check`; points not done (NaN) are masked.

    Args:
        result: a surface result.

    Returns:
        ``xs`` ``(nx,)``, ``ys`` ``(ny,)``, and masked ``loss`` and ``accuracy`` of shape ``(ny, nx)``
        (``loss[j, i]`` at ``(x_i, y_j)``; NaN and not-done points masked).

    Raises:
        LandscapeError: the surface cannot be drawn (see :func:`check`).
    """
    check(result)
    loss = np.ma.masked_invalid(np.asarray(result["loss"], dtype=float))
    acc = np.ma.masked_invalid(np.asarray(result["accuracy"], dtype=float))
    if "done" in result:
        loss = np.ma.masked_where(~result["done"].astype(bool), loss)
        acc = np.ma.masked_where(~result["done"].astype(bool), acc)
    return np.asarray(result["xcoordinates"], float), np.asarray(result["ycoordinates"], float), loss, acc


def check_zmax(result: Result, zmax: float | None, style: str = "default", log: bool = False) -> None:
    """Check that ``zmax`` leaves something of the surface to draw: it must lie above the lowest value it clips.

    The contours clip the loss at ``zmax``; the 3D view clips its ``z`` (:func:`z_of`: ``loss - min`` in the
    ``paper`` style, ``log10 loss`` with ``log``).

    Args:
        result: a 2D surface result.
        zmax: the ``--zmax`` option, or ``None`` (nothing to check).
        style: the 3D style, ``"default"`` or ``"paper"``.
        log: the ``--log`` flag.

    Raises:
        LandscapeError: the surface cannot be drawn (see :func:`check`), or ``zmax`` is at or below the lowest
            loss or the lowest ``z`` of the 3D view.
    """
    if zmax is None:
        return
    loss = grid_of(result)[2]
    above_lowest(result, zmax, loss, "loss")
    above_lowest(result, zmax, *z_of(loss, style, log))


def above_lowest(result: Result, zmax: float, values: np.ma.MaskedArray, what: str) -> None:
    """Refuse a ``--zmax`` that is not above the lowest of ``values``: every level or point would be clipped.

    Args:
        result: the surface file (named in the message).
        zmax: the clip given.
        values: the values it clips.
        what: what the values are, for the message.

    Raises:
        LandscapeError: ``zmax`` is not above the lowest finite value.
    """
    finite = _finite(values)
    lowest = float(finite.min()) if finite.size else -np.inf
    if zmax <= lowest:
        raise LandscapeError(
            f"{result.path}: --zmax {zmax:g} is not above the lowest {what} of the surface, {lowest:.6g}, so its "
            f"figures would be empty; give a --zmax above {lowest:.6g}, or leave it out"
        )


def z_of(loss: np.ma.MaskedArray, style: str = "default", log: bool = False) -> tuple[np.ma.MaskedArray, str]:
    """The height of the 3D view and its name.

    Args:
        loss: the surface's loss (masked where not done).
        style: ``"paper"``: ``loss - min``; ``"default"``: the loss (``log10`` of it with ``log``).
        log: draw ``log10(loss)`` in the default style.

    Returns:
        ``(z, label)``, e.g. ``(loss - loss.min(), "loss - min")``.
    """
    if style == "paper":
        return loss - loss.min(), "loss - min"
    return (np.ma.log10(loss), "log10 loss") if log else (loss, "loss")


def is_2d(result: Result) -> bool:
    """Whether the surface is a plane (two directions) rather than a line.

    Args:
        result: a surface result.

    Returns:
        ``surface_ndim == 2`` when that attribute is stored, else whether the grid has more than one row.
    """
    ndim = result.attrs.get("surface_ndim")
    return int(ndim) == 2 if ndim is not None else result["loss"].shape[0] > 1


def has_batchnorm(result: Result) -> bool:
    """Whether the model of a result has BatchNorm layers, as its file records (``has_batchnorm``).

    A file that does not record it has them when its statistics were re-estimated (``bn`` is ``recompute``, which
    needs them).

    Args:
        result: a result file.

    Returns:
        The recorded answer, else whether ``bn == "recompute"``.
    """
    recorded = result.attrs.get("has_batchnorm")
    return bool(recorded) if recorded is not None else result.attrs.get("bn") == "recompute"


def title_of(result: Result) -> str:
    """A short title of a surface: the model and what its loss was computed with, wrapped to fit the figure.

    Args:
        result: a surface result.

    Returns:
        E.g. ``resnet_mini (BN eval, l2 0.0005)`` (BN named only for a model with BatchNorm, :func:`has_batchnorm`);
        the directions are named on the axes (:func:`direction_labels`).
    """
    a = result.attrs
    details = [f"BN{NBSP}{a['bn']}"] if a.get("bn") and has_batchnorm(result) else []
    reg = a.get("regularizer")
    if isinstance(reg, dict) and reg.get("kind", "none") != "none":
        details.append(f"{reg['kind']}{NBSP}{reg.get('coef')}")
    model = model_name(result)
    return wrapped(f"{model} ({', '.join(details)})" if details else model)


def _normalised(norm: str | None) -> str:
    """How a direction was normalised, as a label's tail: `` (filter-normalised)``, `` (not normalised)``."""
    if norm is None:
        return ""
    return " (not normalised)" if norm == "none" else f" ({norm}-normalised)"


def direction_labels(result: Result) -> tuple[str, str]:
    """What the x and y axes of a surface are, from the file's attributes.

    ``direction_eigenvalues`` (Hessian eigenvector directions): ``eigenvector 1 (λ = 12.3)``; PCA directions:
    ``PC 1 (70.0% of variance)`` (the share when ``explained_variance_ratio`` is recorded); target directions:
    ``towards target`` along x; random directions: ``direction 1 (filter-normalised)``, the normalisation
    taken from ``norm`` (``filter``, or ``x:none,y:filter`` for a target plane).

    Args:
        result: a surface result.

    Returns:
        The labels of the x and the y axis.
    """
    a = result.attrs
    eigenvalues = a.get("direction_eigenvalues")
    if isinstance(eigenvalues, list) and len(eigenvalues) >= 1:
        named = [f"eigenvector {i + 1} (λ = {float(v):.3g})" for i, v in enumerate(eigenvalues[:2])]
        return named[0], named[1] if len(named) > 1 else "eigenvector 2"
    kind = a.get("direction_type")
    if kind == "pca":
        ratio = a.get("explained_variance_ratio")
        shares = [f" ({100 * float(r):.1f}% of variance)" for r in ratio[:2]] if isinstance(ratio, list) else []
        shares += [""] * (2 - len(shares))
        return f"PC 1{shares[0]}", f"PC 2{shares[1]}"
    norm = a.get("norm")
    per_axis = dict(part.split(":", 1) for part in norm.split(",")) if isinstance(norm, str) and ":" in norm else {}
    x_norm, y_norm = (per_axis.get("x"), per_axis.get("y")) if per_axis else (norm, norm)
    x = "towards target" if kind == "target" else f"direction 1{_normalised(x_norm)}"
    return x, f"direction 2{_normalised(y_norm)}"
