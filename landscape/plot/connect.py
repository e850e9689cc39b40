"""Figures of mode connectivity: loss and error along the paths, and the plane through the three points.

``<stem>_paths``: the loss (left) and the error ``1 - accuracy`` (right) against the path coordinate (``alpha``
on the line, ``t`` on the curve), the line solid and the curve dashed, one colour per split; the ends theta_A
(0) and theta_B (1) are marked, and for the first split each path's barrier is drawn as an arrow from the chord
between the end values up to the path at the coordinate where it peaks (every path's barrier is in the legend).
A file with curvature (``--curvature``) adds a row under them: the top Hessian eigenvalue (left, under the loss;
a hollow marker where Lanczos did not converge, a lower bound) and the adaptive average-case sharpness (right; a
shaded band of one Monte-Carlo standard error on either side, where the file records it).
``<stem>_plane`` (files with a Bezier curve, Garipov et al. 2018 Fig. 1): the loss of the first split and the error
of the last over the plane through theta_A, theta_B and the bend theta_c, with the three points, the line and the
curve drawn on it, at equal scale when neither axis is more than :data:`MAX_STRETCH` times the other, else in a
square box that says the stretch ("y stretched 530x"). Points not done are left out. Each figure carries a caption
of what it draws (:func:`~landscape.plot.common.captioned`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from landscape.analyses.connect.barrier import Barrier
from landscape.analyses.connect.summary import ALL_PATHS, path_barriers
from landscape.errors import LandscapeError
from landscape.options.connect import CURVATURE_QUANTITIES
from landscape.plot.common import (
    Array,
    Schema,
    captioned,
    check_arrays,
    color,
    model_name,
    save_figures,
    shown,
    wrapped,
)
from landscape.plot.grids import NBSP, has_batchnorm
from landscape.plot.scales import SPACING_WORDS, _levels, _norm, colorbar_ticks, resolved_spacing, scale_words
from landscape.store.read import Result

#: the arrays of a connect file (``split`` indexes :data:`splits`; line, curve and plane points)
SCHEMA = Schema(
    kind="connect",
    required={
        "splits": Array(("split",), text=True),
        "line/coords": Array(("point",), finite=True),
        "line/loss": Array(("split", "point")),
        "line/data_loss": Array(("split", "point")),
        "line/accuracy": Array(("split", "point")),
        "line/done": Array(("point",), flag=True),
    },
    optional={
        "curve/coords": Array(("curve_point",), finite=True),
        "curve/loss": Array(("split", "curve_point")),
        "curve/data_loss": Array(("split", "curve_point")),
        "curve/accuracy": Array(("split", "curve_point")),
        "curve/done": Array(("curve_point",), flag=True),
        **{
            f"{group}/{name}": Array(("split", point), flag=name.endswith("_converged"))
            for group, point in (("line", "point"), ("unaligned_line", "point"), ("curve", "curve_point"))
            for name in CURVATURE_QUANTITIES
        },
        "bend/history": Array(("epoch",)),
        "plane/x": Array(("x",), finite=True),
        "plane/y": Array(("y",), finite=True),
        "plane/points": Array((3, 2), finite=True),
        "plane/curve": Array(("curve_point", 2), finite=True),
        "plane/loss": Array(("split", "y", "x")),
        "plane/data_loss": Array(("split", "y", "x")),
        "plane/accuracy": Array(("split", "y", "x")),
        "plane/done": Array(("y", "x"), flag=True),
    },
    together=(
        ("curve/coords", "curve/loss", "curve/data_loss", "curve/accuracy", "curve/done"),
        ("plane/x", "plane/y", "plane/points", "plane/curve", "plane/loss", "plane/accuracy", "plane/done"),
    ),
    done=("line/done", "curve/done", "plane/done"),
    numbers=("bend_epochs_done",),
)
#: the ends' names, at coordinates 0 and 1 and on the plane
ENDS = ("θ_A", "θ_B", "θ_c")
#: filled contour levels of a plane panel; the box behind the names of the three points
LEVELS = 20
LABEL_BOX = {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8}
#: the most one axis of the plane may be stretched against the other before the plane leaves equal scale for a
#: square box that says the stretch (:func:`stretch`)
MAX_STRETCH = 4.0


def consistent(result: Result) -> None:
    """Check that ``result`` is a connect result whose arrays fit :data:`SCHEMA` (an unfinished one passes too).

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    check_arrays(result, SCHEMA)


def check(result: Result) -> None:
    """Check that ``result`` is a connect file that can be drawn: it is :func:`consistent`, a line point is done.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming what is wrong with the file and what to do.
    """
    consistent(result)
    done = np.asarray(result["line/done"], dtype=bool)
    if not np.any(np.isfinite(np.asarray(result["line/loss"], dtype=float)[:, done])):
        raise LandscapeError(
            f"{result.path}: no point of the line is done with a finite loss yet; run (or resume) `landscape "
            "connect` with the same options first"
        )


def _title(result: Result) -> str:
    """The model, the two ends (file names) and the BatchNorm mode (for a model with BatchNorm)."""
    a = result.attrs
    ends = [shown(Path(str(a.get(key, end))).name) for key, end in (("checkpoint", "θ_A"), ("other_checkpoint", "θ_B"))]
    bn = f" (BN{NBSP}{shown(a.get('bn'))})" if has_batchnorm(result) else ""
    return wrapped(f"{model_name(result)}: {ends[0]} to {ends[1]}{bn}")


def _path(result: Result, group: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(coords, loss, error)`` of a path, NaN where a point is not done; None when the file has no such path."""
    if f"{group}/done" not in result:
        return None
    done = np.asarray(result[f"{group}/done"], dtype=bool)
    loss = np.where(done, np.asarray(result[f"{group}/loss"], dtype=float), np.nan)
    error = np.where(done, 1.0 - np.asarray(result[f"{group}/accuracy"], dtype=float), np.nan)
    return np.asarray(result[f"{group}/coords"], dtype=float), loss, error


def _annotate(ax: Axes, coords: np.ndarray, values: np.ndarray, at: float, height: float, colour: str) -> None:
    """The barrier: the chord between the end values, and an arrow from it up to the path where it peaks."""
    ends = values[0], values[-1]
    ax.plot([0.0, 1.0], ends, ":", color=colour, lw=0.9)
    chord = (1.0 - at) * ends[0] + at * ends[1]
    if height > 0:
        ax.annotate("", xy=(at, chord + height), xytext=(at, chord), arrowprops={"arrowstyle": "<->", "color": colour})


def paths_figure(result: Result) -> Figure:
    """Loss and error along the line (solid) and the curve (dashed), one colour per split; barriers annotated.

    Args:
        result: a connect file checked by :func:`check`.

    Returns:
        The figure, loss on the left and error on the right.
    """
    splits = [str(s) for s in result["splits"]]
    curvature = "line/top_eigenvalue" in result
    fig = Figure(figsize=(10, 7.6 if curvature else 4.2), layout="constrained")
    grid = fig.subplots(2 if curvature else 1, 2, squeeze=False)
    axes = grid[0]
    for group, coord in ALL_PATHS:
        drawn = _path(result, group)
        if drawn is None:
            continue
        coords, loss, error = drawn
        barriers: dict[str, Barrier] = path_barriers(result, group) or {}
        style = {"line": "-", "curve": "--"}.get(group, "-.")
        for k, split in enumerate(splits):
            b = barriers.get(split)
            for ax, values, which in ((axes[0], loss[k], "loss"), (axes[1], error[k], "error")):
                tail = (
                    "" if b is None else f", B = {getattr(b, which):.3g} at {coord} = {getattr(b, f'{which}_at'):.2g}"
                )
                ax.plot(coords, values, style, color=color(k), marker=".", ms=4, label=f"{group} ({split}){tail}")
                if b is not None and k == 0:
                    _annotate(ax, coords, values, getattr(b, f"{which}_at"), getattr(b, which), color(k))
    for ax, name in ((axes[0], "loss"), (axes[1], "error (1 - accuracy)")):
        ax.set_xlim(-0.04, 1.04)
        ax.set_xticks([0.0, 0.25, 0.5, 0.75, 1.0], [f"0\n{ENDS[0]}", "0.25", "0.5", "0.75", f"1\n{ENDS[1]}"])
        ax.set_xlabel("α (line) / t (curve)")
        ax.set_ylabel(name)
        ax.legend(fontsize=8, loc="best")
    axes[1].set_ylim(bottom=0)
    if curvature:
        _curvature_panels(result, grid[1], splits)
    fig.suptitle(_title(result), fontsize=11)
    paths = [group for group, _ in ALL_PATHS if f"{group}/done" in result]
    styles = {"line": "the line (solid)", "curve": "the Bezier curve (dashed)"}
    return captioned(
        fig,
        f"Loss (left) and error 1 - accuracy (right) along {' and '.join(styles.get(p, p) for p in paths)} from θ_A "
        f"(0) to θ_B (1) on {', '.join(splits)}, one colour per split; the arrows are the barriers of the "
        f"{splits[0]} split above the chord between the ends, every barrier in the legend."
        + (
            " Under them, the top Hessian eigenvalue (a hollow marker: Lanczos did not converge, a lower bound) and "
            "the adaptive average-case sharpness, shaded one Monte-Carlo standard error either side."
            if curvature
            else ""
        )
        + " Points not done are left out.",
    )


def _curvature_panels(result: Result, axes: Any, splits: list[str]) -> None:
    """Under the loss and error: the top Hessian eigenvalue and the average-case sharpness along each path."""
    rho = result.attrs.get("curvature_rho")
    for group, _ in ALL_PATHS:
        if f"{group}/top_eigenvalue" not in result:
            continue
        done = np.asarray(result[f"{group}/done"], dtype=bool)
        coords = np.asarray(result[f"{group}/coords"], dtype=float)
        style = {"line": "-", "curve": "--"}.get(group, "-.")
        converged = np.asarray(result[f"{group}/top_eigenvalue_converged"], dtype=bool)
        for k, split in enumerate(splits):
            top = np.where(done, np.asarray(result[f"{group}/top_eigenvalue"][k], dtype=float), np.nan)
            sharp = np.where(done, np.asarray(result[f"{group}/average_sharpness"][k], dtype=float), np.nan)
            axes[0].plot(coords, top, style, color=color(k), marker=".", ms=4, label=f"{group} ({split})")
            loose = done & ~converged[k]
            if loose.any():
                axes[0].plot(coords[loose], top[loose], "o", mfc="none", color=color(k), ms=7)
            axes[1].plot(coords, sharp, style, color=color(k), marker=".", ms=4, label=f"{group} ({split})")
            if f"{group}/average_sharpness_stderr" in result:  # older files do not record it
                se = np.where(done, np.asarray(result[f"{group}/average_sharpness_stderr"][k], dtype=float), np.nan)
                axes[1].fill_between(coords, sharp - se, sharp + se, color=color(k), alpha=0.15, lw=0)
    for ax, name in ((axes[0], "top Hessian eigenvalue λ_max"), (axes[1], f"average-case sharpness (ρ = {rho})")):
        ax.set_xlim(-0.04, 1.04)
        ax.set_xticks([0.0, 0.25, 0.5, 0.75, 1.0], [f"0\n{ENDS[0]}", "0.25", "0.5", "0.75", f"1\n{ENDS[1]}"])
        ax.set_xlabel("α (line) / t (curve)")
        ax.set_ylabel(name)
        ax.legend(fontsize=8, loc="best")


def stretch(xs: np.ndarray, ys: np.ndarray) -> float:
    """How much a square box stretches the plane's y axis against its x axis: ``range(x) / range(y)``.

    Args:
        xs: the plane's x coordinates (distances in parameter space).
        ys: its y coordinates (the same unit).

    Returns:
        The factor (1 for a square plane, above 1 when y is the shorter side); 1 when a range is zero.
    """
    rx, ry = float(np.ptp(xs)), float(np.ptp(ys))
    return rx / ry if rx > 0 and ry > 0 else 1.0


def _plane_panel(fig: Figure, ax: Axes, result: Result, z: np.ma.MaskedArray, label: str, cmap: str) -> str:
    """Draw one panel of the plane; return how its levels and colours were chosen, in words ("" when none)."""
    xs, ys = np.asarray(result["plane/x"], dtype=float), np.asarray(result["plane/y"], dtype=float)
    X, Y = np.meshgrid(xs, ys)
    words = ""
    if z.count() >= 2 and float(z.max()) > float(z.min()):
        loss = label.startswith("loss")
        levels = _levels(z, LEVELS, False, None) if loss else np.linspace(float(z.min()), float(z.max()), LEVELS)
        norm = _norm(z, levels) if loss else None
        cs = ax.contourf(X, Y, z, levels=levels, cmap=cmap, norm=norm, extend="both")
        colorbar_ticks(fig.colorbar(cs, ax=ax, label=label), levels, norm)
        spacing = resolved_spacing(z, False, "auto") if loss else "linear"
        words = f"{label}: {LEVELS} levels {SPACING_WORDS[spacing]}, {scale_words(norm)}"
    points, curve = np.asarray(result["plane/points"], dtype=float), np.asarray(result["plane/curve"], dtype=float)
    ax.plot(points[:2, 0], points[:2, 1], "--", color="white", lw=1.2, label="line")
    ax.plot(curve[:, 0], curve[:, 1], "-", color="white", lw=1.6, label="curve")
    for (x, y), name in zip(points, ENDS):
        ax.plot([x], [y], "o", color="white", mec="black", ms=6)
        ax.annotate(name, (x, y), xytext=(5, 5), textcoords="offset points", fontsize=10, bbox=LABEL_BOX)
    ax.set_xlabel("along θ_B - θ_A (distance)")
    ax.set_ylabel("towards θ_c (distance)")
    factor = stretch(xs, ys)
    if 1 / MAX_STRETCH <= factor <= MAX_STRETCH:
        ax.set_aspect("equal")
    else:
        ax.set_box_aspect(1)
        axis, by = ("y", factor) if factor > 1 else ("x", 1 / factor)
        ax.text(0.02, 0.02, f"{axis} stretched {by:.3g}x", transform=ax.transAxes, fontsize=9, bbox=LABEL_BOX)
    ax.set_title(label)
    return words


def plane_figure(result: Result) -> Figure:
    """The loss of the first split and the error of the last on the plane of theta_A, theta_B and the bend.

    Args:
        result: a connect file with a plane (checked by :func:`check`).

    Returns:
        The figure: two panels, the three points, the line and the curve marked.
    """
    splits = [str(s) for s in result["splits"]]
    done = np.asarray(result["plane/done"], dtype=bool)
    loss = np.ma.masked_invalid(np.where(done, np.asarray(result["plane/loss"][0], dtype=float), np.nan))
    acc = np.asarray(result["plane/accuracy"][-1], dtype=float)
    error = np.ma.masked_invalid(np.where(done, 1.0 - acc, np.nan))
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    scales = [
        _plane_panel(fig, left, result, loss, f"loss ({splits[0]})", "viridis"),
        _plane_panel(fig, right, result, error, f"error ({splits[-1]})", "magma"),
    ]
    left.legend(fontsize=8, loc="best")
    fig.suptitle(_title(result), fontsize=11)
    factor = stretch(np.asarray(result["plane/x"], dtype=float), np.asarray(result["plane/y"], dtype=float))
    if 1 / MAX_STRETCH <= factor <= MAX_STRETCH:
        scale = "drawn at equal scale on both axes"
    else:
        axis, by = ("y", factor) if factor > 1 else ("x", 1 / factor)
        scale = f"drawn in a square box, {axis} stretched {by:.3g}x against the other axis"
    return captioned(
        fig,
        f"The plane through θ_A, θ_B and the bend θ_c (Garipov et al. 2018), {scale}, with the line (dashed) and "
        f"the Bezier curve (solid); {'; '.join(s for s in scales if s)}. Points not done are left out.",
    )


def figures(results: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """Each connect file's figures: ``<stem>_paths`` and, with a plane, ``<stem>_plane``.

    Args:
        results: connect files checked by :func:`check`.
        **options: drawing options, ignored.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.
    """
    for r in results:
        yield f"{r.path.stem}_paths", paths_figure(r)
        if "plane/done" in r and np.asarray(r["plane/done"], dtype=bool).any():
            yield f"{r.path.stem}_plane", plane_figure(r)


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write each connect file's figures (:func:`figures`) to ``out_dir``.

    Args:
        results: connect files checked by :func:`check`.
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: the drawing options of :func:`figures`; ``force`` replaces files landscape did not write.

    Returns:
        The paths written, in order.

    Raises:
        LandscapeError: ``out_dir`` cannot be written.
    """
    return save_figures(figures(results, **options), out_dir, fmt, force=options.get("force", False))


def overlaid(result: Result) -> bool:
    """A connect file never joins a figure of several models: each is the path between its own pair.

    Args:
        result: a connect file.

    Returns:
        False.
    """
    return False
