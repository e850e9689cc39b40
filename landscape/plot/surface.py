"""Figures of loss surfaces: contours, heatmaps, 3D surfaces, 1D curves, and a ParaView ``.vtp`` export.

A 2D surface gives ``<stem>_contour`` (labelled levels, trajectory overlaid when the file has one),
``<stem>_contourf`` (filled), ``<stem>_heatmap`` (loss and accuracy), ``<stem>_3d`` (surface; Paper A's
style: plasma-coloured wireframe of ``z = loss - min``, clipped at ``zmax``) and ``<stem>.vtp``. 1D surfaces
of all given files are overlaid in one figure of loss and accuracy (``<stem>_1d`` for one file,
``1d_<a>_vs_<b>`` for several, see :func:`landscape.plot.common.figure_name`).

Read at a glance: on a skewed surface (a narrow basin under high walls) the contour levels are spaced
geometrically above the minimum, so several lines ring the basin; the colours of contours and heatmaps, and
the loss axis of 1D curves, are log-scaled when the loss spans more than two decades (colour bars ticked at
decades or 1-2-5 steps, :func:`log_ticks`); the 3D view is clipped at a robust maximum and says where (as it
does for ``--zmax``); the axes name the directions (:func:`direction_labels`). ``--levels``,
``--level-spacing``, ``--log`` and ``--zmax`` override these defaults. The grid's orientation follows the
file: ``loss[j, i]`` is drawn at ``(x_i, y_j)``; the plane is drawn in a square box whatever the ranges of its
coordinates.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colors
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from landscape import __version__
from landscape.errors import LandscapeError
from landscape.plot import LEVEL_SPACINGS, STYLES, one_of
from landscape.plot.common import (
    Array,
    Schema,
    check_arrays,
    color,
    figure_name,
    save_figures,
    single_axes,
    wrapped,
)
from landscape.store.files import WRITTEN_BY, atomic_write
from landscape.store.result import Result

#: the arrays of a surface file: ``loss[j, i]`` (and ``accuracy``, ``done``) at ``(x_i, y_j)``
SCHEMA = Schema(
    kind="surface",
    required={
        "xcoordinates": Array(("x",), finite=True),
        "ycoordinates": Array(("y",), finite=True),
        "loss": Array(("y", "x")),
        "accuracy": Array(("y", "x")),
    },
    optional={
        "done": Array(("y", "x")),
        "data_loss": Array(("y", "x")),
        "trajectory/coordinates": Array(("snapshot", 2), finite=True),
    },
)

#: the size of figure titles (points): readable where the report shows a figure 540 pixels wide
TITLE_SIZE = 11
#: a space that a wrapped title does not break at
NBSP = "\u00a0"


def check(result: Result) -> None:
    """Check that ``result`` is a surface that can be drawn.

    Its arrays must fit :data:`SCHEMA`, ``surface_ndim`` (when stored) must agree with the grid, a plane needs
    two points along each axis, and at least one done grid point must have a finite loss.

    Args:
        result: a result file read by :func:`landscape.store.result.read_result`.

    Raises:
        LandscapeError: naming what is wrong with the file and what to do.
    """
    check_arrays(result, SCHEMA)
    ny, nx = result["loss"].shape
    ndim = result.attrs.get("surface_ndim", 2 if ny > 1 else 1)
    if ndim not in (1, 2) or (ndim == 1 and ny != 1):
        raise LandscapeError(
            f"{result.path}: attribute surface_ndim={ndim!r} does not fit a grid of {ny} x {nx} "
            "points (y x x); recompute it with `landscape surface ... --force`"
        )
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
    _above_lowest(result, zmax, loss, "loss")
    _above_lowest(result, zmax, *z_of(loss, style, log))


def _above_lowest(result: Result, zmax: float, values: np.ma.MaskedArray, what: str) -> None:
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


def title_of(result: Result) -> str:
    """A short title of a surface: the model and what its loss was computed with, wrapped to fit the figure.

    Args:
        result: a surface result.

    Returns:
        E.g. ``resnet_mini (BN eval, l2 0.0005)``; the directions are named on the axes (:func:`direction_labels`).
    """
    a = result.attrs
    details = [f"BN{NBSP}{a['bn']}"] if a.get("bn") else []
    reg = a.get("regularizer")
    if isinstance(reg, dict) and reg.get("kind", "none") != "none":
        details.append(f"{reg['kind']}{NBSP}{reg.get('coef')}")
    model = str(a.get("model", result.path.stem))
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


#: ``auto`` spacing: the surface is skewed when half its points lie within this share of the loss range
SKEWED = 0.05
#: decades that a log colour scale needs: the loss must span more (max / min > 10**LOG_DECADES)
LOG_DECADES = 2.0
#: ``above-min`` levels: the share of levels above the robust maximum, up the wall (the rest ring the basin)
WALL_SHARE = 0.2
#: the robust top of the 3D view: ``min + ROBUST_FACTOR * (75th percentile - min)`` (when below the maximum)
ROBUST_FACTOR = 4.0
#: the fewest and the most labelled ticks of a colour bar
MIN_TICKS = 3
MAX_TICKS = 8
#: multiples of a power of ten that log ticks try in turn: decades, then 1-2-5, then every digit
LOG_SUBS = ((1,), (1, 2, 5), tuple(range(1, 10)))
#: the box of the 3D view (x, y, z): square in the plane of the directions; at most this many ticks along x and y
BOX_3D = (1.0, 1.0, 0.8)
TICKS_3D = 5


def _finite(loss: np.ma.MaskedArray) -> np.ndarray:
    values = np.ma.filled(loss.astype(float), np.nan)
    return values[np.isfinite(values)]


def is_skewed(loss: np.ma.MaskedArray) -> bool:
    """Whether evenly spaced levels would leave the basin empty: half the points lie in the lowest 5% of the range.

    Args:
        loss: the surface's loss (masked where not done).

    Returns:
        ``median(loss) - min < SKEWED * (max - min)``.
    """
    v = _finite(loss)
    lo, hi = float(v.min()), float(v.max())
    return hi > lo and float(np.median(v)) - lo < SKEWED * (hi - lo)


def spans_decades(loss: np.ma.MaskedArray) -> bool:
    """Whether the loss is positive and spans more than :data:`LOG_DECADES` decades (a log colour scale fits).

    Args:
        loss: the surface's loss (masked where not done).

    Returns:
        ``min > 0`` and ``max / min > 10**LOG_DECADES``.
    """
    v = _finite(loss)
    return float(v.min()) > 0 and float(v.max()) / float(v.min()) > 10**LOG_DECADES


def robust_max(loss: np.ma.MaskedArray) -> float | None:
    """The top of a 3D view that a corner spike does not dominate, or ``None`` when nothing needs clipping.

    Args:
        loss: the surface's loss (masked where not done).

    Returns:
        ``min + ROBUST_FACTOR * (q75 - min)`` (``q75``: the 75th percentile of the loss) when that is below the
        highest loss, else ``None``.
    """
    v = _finite(loss)
    lo = float(v.min())
    top = lo + ROBUST_FACTOR * (float(np.quantile(v, 0.75)) - lo)
    return top if lo < top < float(v.max()) else None


def _basin_step(loss: np.ma.MaskedArray) -> float:
    """Half the smallest rise from the lowest point to one of its (up to 8) done neighbours; 0 when flat."""
    filled = np.ma.filled(loss.astype(float), np.nan)
    j, i = np.unravel_index(np.nanargmin(filled), filled.shape)
    around = filled[max(j - 1, 0) : j + 2, max(i - 1, 0) : i + 2] - filled[j, i]
    rises = around[np.isfinite(around) & (around > 0)]
    return float(rises.min()) / 2 if rises.size else 0.0


def _levels(loss: np.ma.MaskedArray, n: int, log: bool, zmax: float | None, spacing: str = "auto") -> np.ndarray:
    """The contour levels of ``loss``: ``n`` values from its minimum to its maximum (or ``zmax``).

    ``linear``: evenly spaced. ``log`` (or ``log=True`` with ``auto``): geometric in the loss (when its minimum is
    > 0, else linear). ``above-min``: ``min + geomspace(step, top - min, n)``, where ``step`` is half the
    smallest rise from the lowest grid point to a neighbour (at least ``1e-6`` of the range), so that the
    levels are dense where the loss changes near the minimum and sparse up the walls; when a spike rises above
    the robust maximum (:func:`robust_max`), 80% of the levels go up to that maximum and the other 20% (at least
    one) up the wall, geometrically again. ``auto``: ``above-min``
    when the surface is skewed (:func:`is_skewed`), else ``linear``.

    Args:
        loss: the surface's loss (masked where not done).
        n: the number of levels.
        log: the ``--log`` flag (geometric levels under ``auto``).
        zmax: the highest level; ``None``: the highest loss.
        spacing: one of :data:`LEVEL_SPACINGS`.

    Returns:
        ``n`` increasing levels.
    """
    lo = float(loss.min())
    hi = float(loss.max()) if zmax is None else min(float(zmax), float(loss.max()))
    if hi <= lo:
        hi = lo + 1e-12 + abs(lo) * 1e-6
    if spacing == "auto":
        spacing = "log" if log else "above-min" if is_skewed(loss) else "linear"
    if spacing == "log" and lo > 0:
        return np.geomspace(lo, hi, n)
    if spacing == "above-min":
        span = hi - lo
        step = min(max(_basin_step(loss), span * 1e-6), span / 2)
        top = robust_max(loss)
        wall = max(1, round(n * WALL_SHARE)) if top is not None and step < top - lo < span and n >= 4 else 0
        if not wall:
            return lo + np.geomspace(step, span, n)
        basin = np.geomspace(step, top - lo, n - wall)
        return lo + np.concatenate([basin, np.geomspace(top - lo, span, wall + 1)[1:]])
    return np.linspace(lo, hi, n)


def _norm(loss: np.ma.MaskedArray, levels: np.ndarray | None = None) -> Any:
    """The colour scale: log when the loss spans decades, one colour step per level for uneven levels, else linear."""
    if spans_decades(loss):
        lo = float(loss.min())
        top = float(levels[-1]) if levels is not None else float(loss.max())
        return colors.LogNorm(lo, max(top, lo * (1 + 1e-9)))
    if levels is not None and len(levels) > 2 and not np.allclose(np.diff(levels), levels[1] - levels[0]):
        return colors.BoundaryNorm(levels, 256)
    return None


def log_ticks(lo: float, hi: float) -> np.ndarray:
    """Readable ticks of a log scale over ``[lo, hi]``: decades, else 1-2-5 or every digit times a power of ten.

    The first of :data:`LOG_SUBS` that gives at least :data:`MIN_TICKS` ticks in the range is taken, thinned to
    at most :data:`MAX_TICKS` (every k-th); a range too narrow for any gets :func:`linear_ticks`.

    Args:
        lo: the lowest value (> 0).
        hi: the highest value (> ``lo``).

    Returns:
        The ticks, increasing, within ``[lo, hi]``.
    """
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for subs in LOG_SUBS:
        ticks = np.array([m * 10.0**e for e in range(first, last + 1) for m in subs])
        ticks = ticks[(ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))]
        if len(ticks) >= MIN_TICKS:
            return ticks[:: math.ceil(len(ticks) / MAX_TICKS)]
    return linear_ticks(lo, hi)


def linear_ticks(lo: float, hi: float) -> np.ndarray:
    """Round ticks over ``[lo, hi]`` (steps of 1, 2, 2.5 or 5 times a power of ten), at least :data:`MIN_TICKS`.

    Args:
        lo: the lowest value.
        hi: the highest value (> ``lo``).

    Returns:
        The ticks, increasing, within ``[lo, hi]``.
    """
    span = hi - lo
    for bins in range(MAX_TICKS - 2, 4 * MAX_TICKS):
        ticks = MaxNLocator(bins, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
        ticks = ticks[(ticks >= lo - 1e-9 * span) & (ticks <= hi + 1e-9 * span)]
        if len(ticks) >= MIN_TICKS:
            return ticks
    return np.linspace(lo, hi, MIN_TICKS)


def short(value: float) -> str:
    """A tick label: ``value`` in at most 3 significant digits (``0.01``, ``2.5``, ``1e+04``)."""
    return f"{float(value):.3g}"


def _colorbar_ticks(cbar: Any, levels: np.ndarray | None, norm: Any) -> None:
    """Label the colour bar with readable values.

    A log colour scale (or geometric levels) gets :func:`log_ticks`, evenly spaced levels (or none)
    :func:`linear_ticks`, other uneven levels (``above-min``, drawn one colour step each) at most
    :data:`MAX_TICKS` of the levels themselves.
    """
    lo, hi = (levels[0], levels[-1]) if levels is not None else (cbar.norm.vmin, cbar.norm.vmax)
    lo, hi = float(lo), float(hi)
    if hi <= lo:
        return
    even = levels is None or np.allclose(np.diff(levels), levels[1] - levels[0])
    geometric = levels is not None and lo > 0 and np.allclose(levels[1:] / levels[:-1], levels[1] / levels[0])
    if isinstance(norm, colors.LogNorm) or (geometric and not even):
        ticks = log_ticks(lo, hi)
    elif even:
        ticks = linear_ticks(lo, hi)
    else:
        ticks = levels[np.unique(np.linspace(0, len(levels) - 1, min(len(levels), MAX_TICKS)).round().astype(int))]
    cbar.minorticks_off()
    cbar.set_ticks(ticks, labels=[short(t) for t in ticks])


def _labels(ax: Any, result: Result) -> None:
    xlabel, ylabel = direction_labels(result)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def contour_figure(
    result: Result,
    *,
    levels: int = 20,
    log: bool = False,
    zmax: float | None = None,
    filled: bool = False,
    spacing: str = "auto",
) -> Figure:
    """Contour lines with labelled levels (or ``filled`` contours with a colour bar) of the loss.

    ``loss[j, i]`` is drawn at ``(x_i, y_j)``; the trajectory (PCA files) and the centre are marked. The levels
    follow ``spacing`` (see :func:`_levels`: by default dense near the minimum of a skewed surface); the colour
    scale is logarithmic when the loss spans more than two decades, else one colour step per level.

    Args:
        result: a 2D surface result.
        levels: the number of contour levels.
        log: space the levels geometrically in the loss (when the lowest loss is > 0) unless ``spacing`` says
            otherwise.
        zmax: the highest level (the loss is clipped there for ``filled``); ``None``: the highest loss.
        filled: draw filled contours with a colour bar instead of labelled lines.
        spacing: one of :data:`LEVEL_SPACINGS`.

    Returns:
        The figure.

    Raises:
        LandscapeError: the surface cannot be drawn (see :func:`check`), or ``zmax`` is not above the lowest loss.
    """
    xs, ys, loss, _ = grid_of(result)
    if zmax is not None:
        _above_lowest(result, zmax, loss, "loss")
    fig, ax = single_axes((5.8, 4.9))
    X, Y = np.meshgrid(xs, ys)
    one_of(spacing, "contour level spacing (--level-spacing)", LEVEL_SPACINGS)
    lv = _levels(loss, levels, log, zmax, spacing)
    norm = _norm(loss, lv)
    if filled:
        cs = ax.contourf(X, Y, np.ma.minimum(loss, lv[-1]), levels=lv, cmap="viridis", norm=norm, extend="both")
        spacing = "proportional" if isinstance(norm, colors.LogNorm) else "uniform"
        _colorbar_ticks(fig.colorbar(cs, ax=ax, label="loss", spacing=spacing), lv, norm)
    else:
        cs = ax.contour(X, Y, loss, levels=lv, cmap="viridis", norm=norm)
        ax.clabel(cs, inline=True, fontsize=8, fmt="%.3g")
    if "trajectory/coordinates" in result:
        t = result["trajectory/coordinates"]
        ax.plot(t[:, 0], t[:, 1], "o-", color="crimson", ms=3, lw=1, label="trajectory")
        ax.legend(loc="upper right", fontsize=9)
    if xs.min() <= 0 <= xs.max() and ys.min() <= 0 <= ys.max():
        ax.plot([0], [0], "k+", ms=8)
    _labels(ax, result)
    ax.set_title(title_of(result), fontsize=TITLE_SIZE)
    ax.set_box_aspect(1)
    return fig


def heatmap_figure(result: Result) -> Figure:
    """Two heatmaps (loss, accuracy); cell ``[j, i]`` is centred at ``(x_i, y_j)`` (pcolormesh, nearest).

    The loss is coloured on a log scale when it spans more than two decades.

    Args:
        result: a 2D surface result.

    Returns:
        The figure, loss on the left and accuracy on the right.

    Raises:
        LandscapeError: the surface cannot be drawn (see :func:`check`).
    """
    xs, ys, loss, acc = grid_of(result)
    fig = Figure(figsize=(8.4, 4.2), layout="constrained")
    for k, (z, name, cmap) in enumerate(((loss, "loss", "viridis"), (acc, "accuracy", "magma"))):
        ax = fig.add_subplot(1, 2, k + 1)
        norm = _norm(z) if name == "loss" else None
        mesh = ax.pcolormesh(xs, ys, z, shading="nearest", cmap=cmap, norm=norm)
        cbar = fig.colorbar(mesh, ax=ax, label=name)
        if name == "loss":
            _colorbar_ticks(cbar, None, norm)
        _labels(ax, result)
        ax.set_box_aspect(1)
        ax.set_title(name)
    fig.suptitle(title_of(result), fontsize=TITLE_SIZE)
    return fig


def surface3d_figure(
    result: Result, *, style: str = "default", zmax: float | None = None, log: bool = False, robust: bool = True
) -> Figure:
    """A 3D surface of the loss.

    ``paper``: Paper A's plasma-coloured wireframe of ``z = loss - min(loss)`` clipped at ``zmax``;
    ``default``: a shaded surface of the loss (log10 with ``log``), clipped at ``zmax``. Without ``zmax`` (and
    without a log10 ``z``) the view is clipped at the robust maximum (:func:`robust_max`), so that one corner spike
    does not flatten the basin. When the clip cuts the surface the figure says so (``clipped at loss - min =
    3.2, max 41 (--zmax)``).

    Args:
        result: a 2D surface result.
        style: ``"default"`` or ``"paper"``.
        zmax: clip ``z`` at this value (in the units of ``z``: ``loss - min`` for ``paper``); ``None``: the
            robust maximum when ``robust``, else no clipping.
        log: draw ``log10(loss)`` (``default`` style only; ``paper`` ignores it); no default clipping then.
        robust: clip at the robust maximum when ``zmax`` is ``None``.

    Returns:
        The figure.

    Raises:
        LandscapeError: ``style`` is unknown, the surface cannot be drawn (see :func:`check`), or ``zmax`` is not
            above the lowest ``z``.
    """
    one_of(style, "surface style (--style)", STYLES)
    xs, ys, loss, _ = grid_of(result)
    why = "--zmax"
    if zmax is None and robust and (style == "paper" or not log):
        top = robust_max(loss)
        zmax = None if top is None else top - float(loss.min()) if style == "paper" else top
        why = "robust maximum; --zmax to change"
    X, Y = np.meshgrid(xs, ys)
    Z, zlabel = z_of(loss, style, log)
    if zmax is not None:
        _above_lowest(result, zmax, Z, zlabel)
    drawn = _finite(Z)
    highest = float(drawn.max()) if drawn.size else -np.inf
    if zmax is not None:
        Z = np.ma.minimum(Z, zmax)
    Zf = np.ma.filled(Z.astype(float), np.nan)
    fig = Figure(figsize=(7, 6), layout="constrained")
    ax = fig.add_subplot(projection="3d")
    ax.set_box_aspect(BOX_3D)
    if style == "paper":
        from matplotlib import cm

        finite = Zf[np.isfinite(Zf)]
        norm = colors.Normalize(finite.min(), finite.max() if finite.max() > finite.min() else finite.min() + 1)
        facecolors = cm.plasma(norm(np.nan_to_num(Zf, nan=finite.min())))
        surf = ax.plot_surface(X, Y, Zf, rcount=Zf.shape[0], ccount=Zf.shape[1], facecolors=facecolors, shade=False)
        surf.set_facecolor((0, 0, 0, 0))
    else:
        ax.plot_surface(X, Y, Zf, cmap="viridis", linewidth=0, antialiased=True)
    ax.set_zlabel(zlabel)
    _labels(ax, result)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(TICKS_3D))
    ax.set_title(title_of(result), fontsize=TITLE_SIZE)
    if zmax is not None and highest > zmax:
        note = f"clipped at {zlabel} = {short(zmax)}, max {short(highest)} ({why})"
        ax.text2D(0.5, 0.97, note, transform=ax.transAxes, ha="center")
    return fig


def lines_figure(results: Sequence[Result], *, log: bool = False) -> Figure:
    """Loss (left axis) and accuracy (right axis, dashed) along x, one colour per file.

    The loss axis is logarithmic with ``log`` or when the loss of the files together spans more than
    :data:`LOG_DECADES` decades (:func:`spans_decades`); a loss that is zero or negative somewhere keeps a linear
    axis, and the figure says so when a log axis was asked for or the positive losses span decades.

    Args:
        results: 1D surface results (at least one); the first gives the title and the x label.
        log: a log-scale loss axis (when the loss is positive).

    Returns:
        The figure (the centre and the target are marked at alpha = 0 and 1 for target directions).

    Raises:
        LandscapeError: a surface cannot be drawn (see :func:`check`).
    """
    fig, ax = single_axes((7, 4.5))
    ax2 = ax.twinx()
    losses = []
    for k, result in enumerate(results):
        xs, _, loss, acc = grid_of(result)
        label = result.path.stem
        ax.plot(xs, loss[0], "-", color=color(k), label=f"{label} loss")
        ax2.plot(xs, acc[0], "--", color=color(k), label=f"{label} accuracy")
        losses.append(_finite(loss))
    values = np.concatenate(losses)
    positive = values[values > 0]
    wide = positive.size > 0 and float(positive.max()) / float(positive.min()) > 10**LOG_DECADES
    if values.min() > 0 and (log or wide):
        ax.set_yscale("log")
    elif log or wide:
        note = f"linear loss axis: the loss is {'zero' if values.min() == 0 else 'negative'} at some points"
        ax.text(0.02, 0.02, note, transform=ax.transAxes, fontsize=9, color="0.3")
    if results[0].attrs.get("direction_type") == "target":
        for alpha in (0.0, 1.0):  # the centre and the target model
            ax.axvline(alpha, color="0.6", lw=0.8, ls=":", label="_nolegend_")
    ax.set_xlabel(direction_labels(results[0])[0])
    ax.set_ylabel("loss")
    ax2.set_ylabel("accuracy")
    ax2.set_ylim(0, 1)
    lines = [ln for ln in ax.get_lines() + ax2.get_lines() if not ln.get_label().startswith("_")]
    ax.legend(lines, [ln.get_label() for ln in lines], fontsize=9, loc="upper center")
    ax.set_title(title_of(results[0]), fontsize=TITLE_SIZE)
    return fig


def write_vtp(
    result: Result, path: str | Path, *, zmax: float | None = None, log: bool = False, force: bool = False
) -> Path:
    """ParaView export of a 2D surface as ASCII XML PolyData (``.vtp``).

    One point ``(x_i, y_j, z)`` per grid point (index ``j*nx + i``) with ``z = loss`` (log10 with ``log``,
    clipped at ``zmax``), quads between neighbours whose four corners are done, and point arrays ``loss`` and
    ``accuracy``. The file is written atomically (see :func:`landscape.store.files.atomic_write`).

    Args:
        result: a 2D surface result.
        path: the ``.vtp`` file to write.
        zmax: clip ``z`` at this value; ``None``: no clipping.
        log: ``z = log10(loss)``.
        force: replace a file landscape did not write (see :func:`landscape.store.files.check_replaceable`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        LandscapeError: the surface cannot be drawn, or ``path`` cannot be written.
    """
    xs, ys, loss, acc = grid_of(result)
    ny, nx = loss.shape
    z = np.ma.log10(loss) if log else loss
    if zmax is not None:
        z = np.ma.minimum(z, zmax)
    X, Y = np.meshgrid(xs, ys)
    ok = ~np.ma.getmaskarray(z)
    zf = np.ma.filled(z.astype(float), np.nan)
    pts = np.stack([X.ravel(), Y.ravel(), zf.ravel()], 1)
    quads = [
        (j * nx + i, j * nx + i + 1, (j + 1) * nx + i + 1, (j + 1) * nx + i)
        for j in range(ny - 1)
        for i in range(nx - 1)
        if ok[j, i] and ok[j, i + 1] and ok[j + 1, i] and ok[j + 1, i + 1]
    ]

    def text(values: np.ndarray, fmt: str) -> str:
        return " ".join(fmt % v for v in np.asarray(values).ravel())

    root = ET.Element("VTKFile", type="PolyData", version="0.1", byte_order="LittleEndian")
    piece = ET.SubElement(
        ET.SubElement(root, "PolyData"),
        "Piece",
        NumberOfPoints=str(nx * ny),
        NumberOfVerts="0",
        NumberOfLines="0",
        NumberOfStrips="0",
        NumberOfPolys=str(len(quads)),
    )
    pdata = ET.SubElement(piece, "PointData", Scalars="loss")
    for name, arr in (("loss", loss), ("accuracy", acc)):
        da = ET.SubElement(pdata, "DataArray", type="Float64", Name=name, format="ascii")
        da.text = text(np.ma.filled(arr.astype(float), np.nan), "%.10g")
    ET.SubElement(
        ET.SubElement(piece, "Points"), "DataArray", type="Float64", NumberOfComponents="3", format="ascii"
    ).text = text(pts, "%.10g")
    polys = ET.SubElement(piece, "Polys")
    ET.SubElement(polys, "DataArray", type="Int64", Name="connectivity", format="ascii").text = text(
        np.asarray(quads, dtype=np.int64), "%d"
    )
    ET.SubElement(polys, "DataArray", type="Int64", Name="offsets", format="ascii").text = text(
        4 * np.arange(1, len(quads) + 1), "%d"
    )
    root.insert(0, ET.Comment(f" landscape {__version__} ({WRITTEN_BY}) "))
    path = Path(path)
    with atomic_write(path, force=force) as handle:
        ET.ElementTree(root).write(handle, xml_declaration=True, encoding="utf-8")
    return path


def plot(
    results: list[Result],
    out_dir: Path,
    fmt: str,
    *,
    log: bool = False,
    zmax: float | None = None,
    style: str = "default",
    levels: int = 20,
    level_spacing: str = "auto",
    vtp: bool = True,
    name: str | None = None,
    force: bool = False,
    **_: Any,
) -> list[Path]:
    """Draw every surface figure of ``results`` into ``out_dir`` (see the module doc); return the paths.

    Options: ``log`` (log loss axis / levels), ``zmax`` (clip), ``style`` (``default`` or ``paper`` 3D),
    ``levels`` (contour count), ``level_spacing`` (how the levels are spaced), ``vtp`` (write the ParaView
    file of 2D surfaces), ``name`` (the name of the 1D overlay). Other options are ignored.

    Args:
        results: surface results; planes get four figures (and a ``.vtp``) each, lines share one figure.
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        log: log loss axis / geometric contour levels / log10 3D surface and ``.vtp``.
        zmax: clip the loss (contour levels, 3D surface, ``.vtp``) at this value; ``None``: contour levels up
            to the highest loss and the 3D view clipped at the robust maximum (:func:`robust_max`).
        style: the 3D style, ``"default"`` or ``"paper"``.
        levels: the number of contour levels.
        level_spacing: one of :data:`LEVEL_SPACINGS` (see :func:`_levels`).
        vtp: also write ``<stem>.vtp`` for each plane.
        name: the 1D figure's name instead of its files' (see :func:`landscape.plot.common.figure_name`).
        force: replace files of the figures' names that landscape did not write.
        **_: other drawing options, ignored.

    Returns:
        The paths written, in order.

    Raises:
        LandscapeError: a surface cannot be drawn, ``style`` is unknown, ``zmax`` leaves nothing of a plane
            to draw (:func:`check_zmax`, before any figure is drawn), or ``out_dir`` cannot be written.
    """
    planes = [r for r in results if is_2d(r)]
    lines = [r for r in results if not is_2d(r)]
    for r in planes:
        check_zmax(r, zmax, style, log)

    def figures() -> Iterator[tuple[str, Figure]]:
        for r in planes:
            contour = {"levels": levels, "log": log, "zmax": zmax, "spacing": level_spacing}
            yield f"{r.path.stem}_contour", contour_figure(r, **contour)
            yield f"{r.path.stem}_contourf", contour_figure(r, **contour, filled=True)
            yield f"{r.path.stem}_heatmap", heatmap_figure(r)
            yield f"{r.path.stem}_3d", surface3d_figure(r, style=style, zmax=zmax, log=log)
        if lines:
            yield figure_name("1d", lines, name), lines_figure(lines, log=log)

    written = save_figures(figures(), Path(out_dir), fmt, force=force)
    if vtp:
        vtps = [Path(out_dir) / f"{r.path.stem}.vtp" for r in planes]
        written += [write_vtp(r, p, zmax=zmax, log=log, force=force) for r, p in zip(planes, vtps)]
    return written
