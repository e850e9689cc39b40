"""Figures of loss surfaces: contours, heatmaps, 3D surfaces, 1D curves, and a ParaView ``.vtp`` export.

A 2D surface gives ``<stem>_contour`` (labelled levels, trajectory overlaid when the file has one),
``<stem>_contourf`` (filled), ``<stem>_heatmap`` (loss and accuracy), ``<stem>_3d`` (surface; Paper A's
style: plasma-coloured wireframe of ``z = loss - min``, clipped at ``zmax``) and ``<stem>.vtp``. 1D surfaces
of all given files are overlaid in one figure of loss and accuracy (``<stem>_1d`` for one file,
``1d_<a>_vs_<b>`` for several, see :func:`landscape.plot.common.figure_name`).

Read at a glance: when the loss spans more than two decades the contour levels are spaced geometrically in the loss,
on a skewed surface (a narrow basin under high walls) geometrically above the minimum, so several lines ring the
basin; the colour scale of contours follows their levels (log for geometric levels), that of heatmaps and the loss
axis of 1D curves are log-scaled when the loss spans more than two decades (colour bars ticked at decades or 1-2-5
steps, :func:`log_ticks`, with distinct labels); the 3D view (static and interactive alike, :func:`clip_3d`) is
clipped at a robust maximum and says where (as it does for ``--zmax``); the axes name the directions
(:func:`direction_labels`); every figure carries a caption of what it draws
(:func:`~landscape.plot.common.captioned`). ``--levels``, ``--level-spacing``, ``--log`` and ``--zmax`` override
these defaults. The grid's orientation follows the file: ``loss[j, i]`` is drawn at ``(x_i, y_j)``; the plane is
drawn in a square box whatever the ranges of its coordinates.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colors
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from landscape.analyses.surface.quadratic import quadratic_model
from landscape.errors import LandscapeError
from landscape.plot import LEVEL_SPACINGS, STYLES, one_of
from landscape.plot.common import (
    captioned,
    color,
    figure_name,
    save_figures,
    shown,
    single_axes,
)
from landscape.plot.grids import above_lowest, check_zmax, direction_labels, grid_of, is_2d, title_of, z_of
from landscape.plot.grids import check as check  # the kind's checks, beside its plot()
from landscape.plot.grids import consistent as consistent
from landscape.plot.scales import (
    LOG_DECADES,
    SPACING_WORDS,
    _finite,
    _levels,
    _norm,
    colorbar_ticks,
    resolved_spacing,
    robust_max,
    scale_words,
    short,
)
from landscape.plot.vtp import write_vtp
from landscape.store.read import Result

#: the size of figure titles (points): readable where the report shows a figure 540 pixels wide
TITLE_SIZE = 11


#: the box of the 3D view (x, y, z): square in the plane of the directions; at most this many ticks along x and y
BOX_3D = (1.0, 1.0, 0.8)
TICKS_3D = 5


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
        above_lowest(result, zmax, loss, "loss")
    fig, ax = single_axes((5.8, 4.9))
    X, Y = np.meshgrid(xs, ys)
    one_of(spacing, "contour level spacing (--level-spacing)", LEVEL_SPACINGS)
    lv = _levels(loss, levels, log, zmax, spacing)
    drawn_spacing = resolved_spacing(loss, log, spacing)
    norm = _norm(loss, lv)
    if filled:
        cs = ax.contourf(X, Y, np.ma.minimum(loss, lv[-1]), levels=lv, cmap="viridis", norm=norm, extend="both")
        bar_spacing = "proportional" if isinstance(norm, colors.LogNorm) else "uniform"
        colorbar_ticks(fig.colorbar(cs, ax=ax, label="loss", spacing=bar_spacing), lv, norm)
    else:
        cs = ax.contour(X, Y, loss, levels=lv, cmap="viridis", norm=norm)
        ax.clabel(cs, inline=True, fontsize=8, fmt="%.3g")
    trajectory = "trajectory/coordinates" in result
    if trajectory:
        t = result["trajectory/coordinates"]
        ax.plot(t[:, 0], t[:, 1], "o-", color="crimson", ms=3, lw=1, label="trajectory")
        ax.legend(loc="upper right", fontsize=9)
    centre = bool(xs.min() <= 0 <= xs.max() and ys.min() <= 0 <= ys.max())
    if centre:
        ax.plot([0], [0], "k+", ms=8)
    _labels(ax, result)
    ax.set_title(title_of(result), fontsize=TITLE_SIZE)
    ax.set_box_aspect(1)
    what = "Filled loss contours" if filled else "Loss contours"
    top = f" up to {short(lv[-1])} (the loss above drawn in the top colour)" if filled and zmax is not None else ""
    parts = [
        f"{what} on the plane of {_plane_words(result)}{' (the model at +)' if centre else ''}: {len(lv)} levels "
        f"{SPACING_WORDS[drawn_spacing]}{top}, {scale_words(norm)}.",
        "The training trajectory in red." if trajectory else "",
        _curvature_note(result),
    ]
    return captioned(fig, " ".join(parts))


def _plane_words(result: Result) -> str:
    """The plane's two directions in words, from the axis labels."""
    x, y = direction_labels(result)
    return f"{x} and {y}"


def _curvature_note(result: Result) -> str:
    """For Hessian directions of a piecewise-linear network: the eigenvalue is not the curve's curvature."""
    kinks = result.attrs.get("kinked_operations")
    if not isinstance(kinks, list) or not kinks:
        return ""
    measured = result.attrs.get("direction_second_differences")
    steps = result.attrs.get("second_difference_steps")
    eigen = result.attrs.get("direction_eigenvalues")
    note = (
        f"The network is piecewise linear ({', '.join(str(k) for k in kinks)}): its Hessian is the curvature of one "
        "linear piece, not of the loss across the kinks"
    )
    if isinstance(measured, list) and isinstance(eigen, list) and isinstance(steps, list) and measured:
        note += (
            f"; the second difference at the centre along x is {short(measured[0])} (step {short(steps[0])}) "
            f"against λ = {short(eigen[0])}"
        )
    return note + "."


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
            colorbar_ticks(cbar, None, norm)
        _labels(ax, result)
        ax.set_box_aspect(1)
        ax.set_title(name)
    fig.suptitle(title_of(result), fontsize=TITLE_SIZE)
    scale = "log colour scale" if _norm(loss) is not None else "linear colour scale"
    return captioned(
        fig,
        f"Loss ({scale}) and accuracy at every point of the grid on the plane of {_plane_words(result)}; "
        "each cell centred at its point.",
    )


def clip_3d(
    loss: np.ma.MaskedArray, style: str = "default", log: bool = False, zmax: float | None = None, robust: bool = True
) -> tuple[float | None, str]:
    """Where a 3D view of ``loss`` is clipped, by the one rule the static and the interactive views share.

    ``zmax`` when given (in the units of ``z``, :func:`z_of`); else, without a log10 ``z`` and with ``robust``,
    the robust maximum (:func:`robust_max`, as ``loss - min`` for ``paper``); else none.

    Args:
        loss: the surface's loss.
        style: ``"default"`` or ``"paper"``.
        log: ``z`` is ``log10(loss)`` (default style).
        zmax: the clip asked for, or None.
        robust: clip at the robust maximum when ``zmax`` is None.

    Returns:
        ``(clip, why)``: the clip in the units of ``z`` (None: none), and the option that set it in words.
    """
    if zmax is not None:
        return zmax, "--zmax"
    if robust and (style == "paper" or not log):
        top = robust_max(loss)
        if top is not None:
            return (top - float(loss.min()) if style == "paper" else top), "robust maximum; --zmax to change"
    return None, ""


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
    zmax, why = clip_3d(loss, style, log, zmax, robust)
    X, Y = np.meshgrid(xs, ys)
    Z, zlabel = z_of(loss, style, log)
    if zmax is not None:
        above_lowest(result, zmax, Z, zlabel)
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
    clipped = zmax is not None and highest > zmax
    if clipped:
        note = f"clipped at {zlabel} = {short(zmax)}, max {short(highest)} ({why})"
        ax.text2D(0.5, 0.97, note, transform=ax.transAxes, ha="center")
    drawing = "a plasma wireframe" if style == "paper" else "a shaded surface"
    clip = f", clipped at {short(zmax)} (the highest is {short(highest)}; {why})" if clipped else ""
    plane, note = _plane_words(result), _curvature_note(result)
    return captioned(fig, f"The {zlabel} over the plane of {plane} in 3D, as {drawing}{clip}. {note}")


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
        label = shown(result.path.stem)
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
    modelled = _quadratic_models(ax, results)
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
    axis = "log" if ax.get_yscale() == "log" else "linear"
    parts = [
        f"Loss (solid, {axis} axis) and accuracy (dashed) along {direction_labels(results[0])[0]} through the model "
        "(0: its own weights)"
        + (", the target at 1" if results[0].attrs.get("direction_type") == "target" else "")
        + ".",
        "Dotted: the quadratic model L(0) + λa²/2 of the Hessian eigenvalue λ." if modelled else "",
        *(_curvature_note(r) for r in results),
    ]
    return captioned(fig, " ".join(p for p in parts if p))


def _quadratic_models(ax: Any, results: Sequence[Result]) -> bool:
    """Along a unit Hessian eigenvector, the quadratic model ``L(0) + lambda_1 a^2 / 2``, dotted, within the axis.

    Drawn for each file with ``direction_eigenvalues`` whose grid holds the centre ``a = 0``; the loss axis keeps
    the range of the measured curves. For a piecewise-linear network (``kinked_operations``) the legend says that
    the model is not the curve's curvature and gives the measured second difference. Returns whether any was drawn.
    """
    drawn = [(k, r) for k, r in enumerate(results) if isinstance(r.attrs.get("direction_eigenvalues"), list)]
    limits = ax.get_ylim()
    any_drawn = False
    for k, result in drawn:
        xs, _, loss, _ = grid_of(result)
        centre = np.flatnonzero(xs == 0.0)
        if centre.size == 0 or not np.isfinite(loss[0, centre[0]]):
            continue
        top = float(result.attrs["direction_eigenvalues"][0])
        dense = np.linspace(float(xs[0]), float(xs[-1]), 201)
        model = quadratic_model(float(loss[0, centre[0]]), [top], dense)
        label = f"{shown(result.path.stem)} L(0) + λa²/2 (λ = {top:.3g})"
        kinks = result.attrs.get("kinked_operations")
        if isinstance(kinks, list) and kinks:
            measured = result.attrs.get("direction_second_differences")
            label += f"; kinks ({kinks[0]}): not the curve's curvature" + (
                f", measured {short(measured[0])}" if isinstance(measured, list) and measured else ""
            )
        ax.plot(dense, model, ":", color=color(k), lw=1.4, label=label)
        any_drawn = True
    if drawn:
        ax.set_ylim(limits)
    return any_drawn


def figures(
    results: list[Result],
    *,
    log: bool = False,
    zmax: float | None = None,
    style: str = "default",
    levels: int = 20,
    level_spacing: str = "auto",
    name: str | None = None,
    **_: Any,
) -> Iterator[tuple[str, Figure]]:
    """Every surface figure of ``results`` (see the module doc): four per plane, one for all lines together.

    Args:
        results: surface results.
        log: log loss axis / geometric contour levels / log10 3D surface.
        zmax: clip the loss (contour levels, 3D surface) at this value; ``None``: contour levels up to the
            highest loss and the 3D view clipped at the robust maximum (:func:`robust_max`).
        style: the 3D style, ``"default"`` or ``"paper"``.
        levels: the number of contour levels.
        level_spacing: one of :data:`LEVEL_SPACINGS` (see :func:`_levels`).
        name: the 1D figure's name instead of its files' (see :func:`landscape.plot.common.figure_name`).
        **_: other drawing options, ignored.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.

    Raises:
        LandscapeError: ``zmax`` leaves nothing of a plane to draw (:func:`check_zmax`), before any figure.
    """
    planes = [r for r in results if is_2d(r)]
    lines = [r for r in results if not is_2d(r)]
    for r in planes:
        check_zmax(r, zmax, style, log)
    for r in planes:
        contour = {"levels": levels, "log": log, "zmax": zmax, "spacing": level_spacing}
        yield f"{r.path.stem}_contour", contour_figure(r, **contour)
        yield f"{r.path.stem}_contourf", contour_figure(r, **contour, filled=True)
        yield f"{r.path.stem}_heatmap", heatmap_figure(r)
        yield f"{r.path.stem}_3d", surface3d_figure(r, style=style, zmax=zmax, log=log)
    if lines:
        yield figure_name("1d", lines, name), lines_figure(lines, log=log)


def plot(
    results: list[Result],
    out_dir: Path,
    fmt: str,
    *,
    log: bool = False,
    zmax: float | None = None,
    vtp: bool = True,
    force: bool = False,
    **options: Any,
) -> list[Path]:
    """Draw every surface figure of ``results`` (:func:`figures`) into ``out_dir``; return the paths.

    Options: those of :func:`figures` (``log``, ``zmax``, ``style``, ``levels``, ``level_spacing``, ``name``),
    and ``vtp`` (write the ParaView file of 2D surfaces). Other options are ignored.

    Args:
        results: surface results; planes get four figures (and a ``.vtp``) each, lines share one figure.
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        log: log loss axis / geometric contour levels / log10 3D surface and ``.vtp``.
        zmax: clip the loss at this value (figures and ``.vtp``).
        vtp: also write ``<stem>.vtp`` for each plane.
        force: replace files of the figures' names that landscape did not write.
        **options: the other drawing options of :func:`figures`.

    Returns:
        The paths written, in order.

    Raises:
        LandscapeError: a surface cannot be drawn, ``style`` is unknown, ``zmax`` leaves nothing of a plane
            to draw (:func:`check_zmax`, before any figure is drawn), or ``out_dir`` cannot be written.
    """
    planes = [r for r in results if is_2d(r)]
    drawn = figures(results, log=log, zmax=zmax, **options)
    written = save_figures(drawn, Path(out_dir), fmt, force=force)
    if vtp:
        vtps = [Path(out_dir) / f"{r.path.stem}.vtp" for r in planes]
        written += [write_vtp(r, p, zmax=zmax, log=log, force=force) for r, p in zip(planes, vtps)]
    return written


def overlaid(result: Result) -> bool:
    """Whether a surface file joins a figure of several models: a 1D line does, a 2D plane has figures of its own.

    Args:
        result: a surface file.

    Returns:
        True for a 1D surface.
    """
    return not is_2d(result)


def interactive(result: Result, go: Any, title: str) -> Any:
    """A rotatable 3D view of a 2D surface (plotly), or None for a 1D one or a grid that cannot be drawn.

    Args:
        result: a surface file.
        go: ``plotly.graph_objects``.
        title: the view's title.

    Returns:
        The plotly figure, or None.
    """
    if not is_2d(result):
        return None
    try:
        xs, ys, loss, _ = grid_of(result)
    except LandscapeError:
        return None
    x_label, y_label = direction_labels(result)
    top, why = clip_3d(loss)
    z = np.ma.filled(loss.astype(float), np.nan)
    highest = float(np.nanmax(z)) if np.isfinite(z).any() else np.nan
    if top is not None and highest > top:
        z = np.minimum(z, top)
        title = f"{title}, clipped at loss = {short(top)}, max {short(highest)} ({why.split(';')[0]})"
    fig = go.Figure(go.Surface(x=xs, y=ys, z=z, colorscale="Viridis", colorbar={"title": "loss"}))
    fig.update_layout(
        title=title,
        scene={"xaxis_title": x_label, "yaxis_title": y_label, "zaxis_title": "loss"},
        width=720,
        height=560,
        margin={"l": 0, "r": 0, "t": 40, "b": 0},
    )
    return fig
