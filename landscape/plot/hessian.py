"""Figures of Hessian results: the SLQ spectral density and Paper A's max-eigenvalue spectra.

- ``hessian`` files: the SLQ density on a log y axis (one curve per file, the computed top/bottom
  eigenvalues as ticks along the bottom), and the computed eigenvalues when a file has them; with a ``blocks/``
  section (``--per-block``) the top eigenvalue and the trace of every block's diagonal Hessian block against
  its depth, MSA blocks shaded as in Paper A's Fig 8 (the depth axis of :mod:`landscape.plot.fourier`).
- ``spectrum`` files (Paper A Fig 1c/4): the pooled per-mini-batch eigenvalues as densities in two panels,
  negative and positive eigenvalues, linear axes, one curve per file labelled with its model name: a Gaussian
  kernel density estimate (:class:`scipy.stats.gaussian_kde`, Scott's bandwidth) for a file of at least
  :data:`~landscape.plot.KDE_MIN_VALUES` eigenvalues, a histogram (step curve) for fewer (``style``, the
  ``--spectrum-style`` option, forces one). Each panel estimates only the eigenvalues of its own sign (a kernel
  density reflected at zero, so that none of it spills across); a file with none of a sign draws nothing in that
  panel, which names it (``no negative eigenvalues: resnet_mini``). Both panels share one normalisation (the
  whole density of a file integrates to 1), so the panel areas show the share of negative and positive
  eigenvalues.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from landscape.errors import LandscapeError
from landscape.plot import KDE_MIN_VALUES, SPECTRUM_STYLES, one_of
from landscape.plot.common import (
    Array,
    Schema,
    captioned,
    check_arrays,
    color,
    figure_name,
    labels,
    save_figures,
    single_axes,
    zero_line,
)
from landscape.plot.fourier import DEPTH_LABEL, name_blocks, shade_layers
from landscape.store.read import Result

#: points at which a kernel density estimate is drawn in each panel
KDE_POINTS = 400
#: characters per line of a panel's note on the files without eigenvalues of its sign
NOTE_WIDTH = 32
#: the per-block numbers of a ``hessian`` file's ``blocks/`` section (NaN where a block is not done)
BLOCK_ARRAYS = ("top_eigenvalue", "trace", "trace_stderr", "residual", "done")
#: the arrays of a ``hessian`` file; each part (eigenvalues, density, trace) is there when it was computed
HESSIAN = Schema(
    kind="hessian",
    required={},
    optional={
        "eigenvalues": Array(("pair",)),
        "residuals": Array(("pair",), nonnegative=True),
        "converged": Array(("pair",)),
        "density/grid": Array(("grid",), increasing=True),
        "density/values": Array(("grid",), finite=True, nonnegative=True),
        "trace/samples": Array(("probe",), finite=True),
        **{f"blocks/{name}": Array(("block",)) for name in BLOCK_ARRAYS},
        "blocks/names": Array(("block",), text=True),
        "blocks/kinds": Array(("block",), text=True),
        "blocks/depth": Array(("block",), finite=True),
    },
    together=(
        ("density/grid", "density/values"),
        ("blocks/names", "blocks/kinds", "blocks/depth", *(f"blocks/{name}" for name in BLOCK_ARRAYS)),
    ),
)
#: the arrays of a ``spectrum`` file: the top eigenvalues of each mini-batch (NaN where not done)
SPECTRUM = Schema(
    kind="spectrum",
    required={"eigenvalues": Array(("batch", "rank"))},
    optional={
        "done": Array(("batch",), flag=True),
        "batch_sizes": Array(("batch",), finite=True, nonnegative=True),
        "n_matvec": Array(("batch",), finite=True),
    },
    done=("done",),
)


def consistent(result: Result) -> None:
    """Check that a ``hessian`` or ``spectrum`` file (finished or not) fits :data:`HESSIAN` or :data:`SPECTRUM`.

    E.g. a spectrum's ``batch_sizes`` has one entry per row of ``eigenvalues``, a spectrum marked complete
    has every batch done, and a batch marked done has finite eigenvalues.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    check_arrays(result, SPECTRUM if result.kind == "spectrum" else HESSIAN)
    if result.kind == "spectrum" and "done" in result:
        done = result["done"].astype(bool)
        unfinished = ~np.isfinite(result["eigenvalues"]).all(axis=1) & done
        if unfinished.any():
            raise LandscapeError(
                f"{result.path}: {int(unfinished.sum())} batches (the first: {int(np.flatnonzero(unfinished)[0])}) "
                "are marked done but their eigenvalues are not finite; recompute it with `landscape spectrum ... "
                "--force`"
            )


def check(result: Result) -> None:
    """Check that a ``hessian`` or ``spectrum`` result can be drawn: it is :func:`consistent`.

    A ``hessian`` result must also hold eigenvalues or a density.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    consistent(result)
    if result.kind == "hessian" and not any(k in result for k in ("eigenvalues", "density/values", "blocks/done")):
        raise LandscapeError(
            f"{result.path}: the hessian result has neither eigenvalues, a density nor blocks to draw; "
            "compute them with `landscape hessian` (--top-k, --density, --per-block)"
        )


def density_figure(results: list[Result]) -> Figure:
    """SLQ densities (log y), one curve per file, eigenvalues as ticks; trace estimates in the legend.

    Args:
        results: ``hessian`` results; files without ``density/values`` are skipped.

    Returns:
        The figure (densities floored at ``1e-8`` of their maximum for the log axis).
    """
    fig, ax = single_axes((6.0, 4.0))
    for i, (label, res) in enumerate(zip(labels(results), results)):
        if "density/values" not in res:
            continue
        values = res["density/values"]
        floor = max(float(values.max()) * 1e-8, 1e-300)
        if "trace/samples" in res:
            s = res["trace/samples"]
            label += f" (trace {s.mean():.4g}"
            label += f" ± {s.std(ddof=1) / np.sqrt(len(s)):.2g})" if len(s) > 1 else ")"
        ax.plot(res["density/grid"], np.maximum(values, floor), color=color(i), lw=1.3, label=label)
        if "eigenvalues" in res:
            ax.plot(res["eigenvalues"], np.full(len(res["eigenvalues"]), floor * 10), "|", color=color(i), ms=12)
    ax.set_yscale("log")
    ax.set_ylim(
        bottom=min(
            (max(float(r["density/values"].max()) * 1e-8, 1e-300) for r in results if "density/values" in r),
            default=None,
        )
    )
    ax.set_xlabel("eigenvalue")
    ax.set_ylabel("density (SLQ, Gaussian-broadened)")
    ax.set_title("Hessian spectral density")
    ax.legend(fontsize=8)
    return fig


def eigenvalue_figure(results: list[Result]) -> Figure:
    """The computed eigenvalues of each file against their rank, with residual error bars.

    Args:
        results: ``hessian`` results; files without ``eigenvalues`` are skipped.

    Returns:
        The figure.
    """
    fig, ax = single_axes((5.0, 3.6))
    for i, (label, res) in enumerate(zip(labels(results), results)):
        if "eigenvalues" not in res:
            continue
        ev = res["eigenvalues"]
        ax.errorbar(
            np.arange(len(ev)) + 0.08 * i,
            ev,
            yerr=res.arrays.get("residuals"),
            fmt="o",
            color=color(i),
            label=f"{label} ({res.attrs.get('which', '')})",
            capsize=3,
        )
    zero_line(ax)
    ax.set_xlabel("index (ascending)")
    ax.set_ylabel("eigenvalue (bars: residual ||Hv - λv||)")
    ax.set_title("Hessian eigenvalues")
    ax.legend(fontsize=8)
    return fig


def blocks_figure(results: list[Result]) -> Figure:
    """The top eigenvalue and the trace of every block's diagonal Hessian block against depth (two panels).

    One curve per file (the blocks done), the trace with its standard error as bars; the first file's MSA (and
    downsampling) blocks are shaded and its block names tick the depth axis, as in the Fourier figures.

    Args:
        results: ``hessian`` results with a ``blocks/`` section.

    Returns:
        The figure.
    """
    fig = Figure(figsize=(6.4, 6.4), layout="constrained")
    top_ax, trace_ax = fig.subplots(2, 1, sharex=True)
    first = results[0]
    depth = np.asarray(first["blocks/depth"], dtype=float)
    patches = shade_layers(top_ax, depth, [str(k) for k in first["blocks/kinds"]])
    shade_layers(trace_ax, depth, [str(k) for k in first["blocks/kinds"]])
    for i, (label, res) in enumerate(zip(labels(results), results)):
        done = np.asarray(res["blocks/done"], dtype=bool)
        d = np.asarray(res["blocks/depth"], dtype=float)[done]
        top_ax.plot(d, np.asarray(res["blocks/top_eigenvalue"])[done], "o-", color=color(i), ms=4, label=label)
        trace_ax.errorbar(
            d,
            np.asarray(res["blocks/trace"])[done],
            yerr=np.asarray(res["blocks/trace_stderr"])[done],
            fmt="o-",
            color=color(i),
            ms=4,
            capsize=2,
        )
    name_blocks(trace_ax, depth, [str(n) for n in first["blocks/names"]])
    for ax in (top_ax, trace_ax):
        zero_line(ax)
    top_ax.set_ylabel("λ_max(H[B, B])")
    trace_ax.set_ylabel("tr(H[B, B]) (bars: stderr)")
    trace_ax.set_xlabel(DEPTH_LABEL)
    top_ax.set_title("Curvature per block: diagonal Hessian blocks")
    handles, texts = top_ax.get_legend_handles_labels()
    top_ax.legend(handles + patches, texts + [p.get_label() for p in patches], fontsize=8, frameon=False)
    return fig


def spectrum_figure(results: list[Result], bins: int = 40, *, style: str = "auto") -> Figure:
    """Paper A's max-eigenvalue spectra: pooled eigenvalues as densities, negative and positive panels.

    Each panel draws only the eigenvalues of its sign, scaled by their share of the file's eigenvalues; a file
    with none of a sign draws nothing in that panel and is named in its note (``no negative eigenvalues: m``).

    Args:
        results: ``spectrum`` results; the finite eigenvalues of the done mini-batches of each are pooled.
        bins: histogram bins per panel.
        style: ``kde`` (a Gaussian kernel density estimate of the eigenvalues of the panel's sign,
            :class:`scipy.stats.gaussian_kde`, reflected at zero, drawn as a line at :data:`KDE_POINTS` points),
            ``hist`` (a histogram), or ``auto``: ``kde`` for a file of at least
            :data:`~landscape.plot.KDE_MIN_VALUES` values, ``hist`` for fewer. Eigenvalues of one sign that are
            all equal (or a single one) are drawn as a histogram (a kernel density needs a spread).

    Returns:
        The figure; each file's density integrates to 1 over both panels together (the reflected KDE of each
        sign over its half-line, of which the panel shows the data's range).

    Raises:
        LandscapeError: ``style`` is not one of :data:`~landscape.plot.SPECTRUM_STYLES`.
    """
    one_of(style, "spectrum style (--spectrum-style)", SPECTRUM_STYLES)
    fig = Figure(figsize=(7.0, 3.4), layout="constrained")
    neg_ax, pos_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 2]})
    pooled = [_pooled(r) for r in results]
    everything = np.concatenate(pooled) if pooled else np.zeros(0)
    lo = min(float(everything.min()), 0.0) if everything.size else 0.0
    hi = max(float(everything.max()), 0.0) if everything.size else 0.0
    names = labels(results)
    for i, (label, values) in enumerate(zip(names, pooled)):
        smooth = style == "kde" or (style == "auto" and values.size >= KDE_MIN_VALUES)
        for ax, part, limits in ((neg_ax, values[values < 0], (lo, 0.0)), (pos_ax, values[values >= 0], (0.0, hi))):
            if part.size and limits[0] < limits[1]:
                _draw_sign(ax, part, values.size, limits, bins, smooth, color(i), label)
    _panel(neg_ax, "negative", (lo, 0.0), [n for n, v in zip(names, pooled) if not np.any(v < 0)])
    _panel(pos_ax, "positive", (0.0, hi), [n for n, v in zip(names, pooled) if not np.any(v >= 0)])
    neg_ax.set_ylabel("density")
    k = results[0]["eigenvalues"].shape[1] if results else 0
    fig.suptitle(f"Max-eigenvalue spectra (top-{k} per mini-batch, pooled)")
    handles = {h.get_label(): h for ax in (neg_ax, pos_ax) for h in ax.get_legend_handles_labels()[0]}
    if handles:
        pos_ax.legend([handles[n] for n in names if n in handles], [n for n in names if n in handles], fontsize=9)
    return fig


def _draw_sign(
    ax: Axes, part: np.ndarray, total: int, limits: tuple[float, float], bins: int, smooth: bool, c: str, label: str
) -> None:
    """Draw the eigenvalues ``part`` of one sign (of ``total`` in the file) over ``limits``: a KDE or a histogram."""
    kde = _kde(part) if smooth else None
    share = part.size / total
    if kde is not None:
        x = np.linspace(*limits, KDE_POINTS)
        y = share * (kde(x) + kde(-x))
        ax.plot(x, y, color=c, lw=1.4, label=label)
        ax.fill_between(x, y, color=c, alpha=0.15, lw=0, label="_nolegend_")
        return
    edges = np.linspace(*limits, bins + 1)
    counts, _ = np.histogram(part, edges)
    dens = counts / (total * (edges[1] - edges[0]))
    ax.stairs(dens, edges, color=c, lw=1.4, label=label)
    ax.stairs(dens, edges, color=c, alpha=0.15, fill=True, label="_nolegend_")


def _kde(values: np.ndarray) -> Any:
    """The Gaussian kernel density estimate of ``values``, or ``None`` when they have no spread."""
    if values.size < 2 or float(np.ptp(values)) == 0.0:
        return None
    from scipy.stats import gaussian_kde

    try:
        return gaussian_kde(values)
    except np.linalg.LinAlgError:
        return None


def _pooled(result: Result) -> np.ndarray:
    ev = result["eigenvalues"]
    if "done" in result:
        ev = ev[result["done"].astype(bool)]
    ev = ev.reshape(-1)
    return ev[np.isfinite(ev)]


def _panel(ax: Axes, sign: str, limits: tuple[float, float], without: list[str]) -> None:
    """Title and limits of the panel of ``sign`` eigenvalues; a note naming the files ``without`` any of them."""
    ax.set_title(f"{sign} eigenvalues", fontsize=10)
    ax.set_xlabel("eigenvalue")
    if limits[0] < limits[1]:
        ax.set_xlim(*limits)
    if not without:
        return
    empty = not ax.get_legend_handles_labels()[0]
    note = "\n".join(textwrap.wrap(f"no {sign} eigenvalues: {', '.join(without)}", NOTE_WIDTH))
    where = (0.5, 0.5) if empty else (0.5, 0.95)
    box = {"facecolor": "white", "alpha": 0.8, "lw": 0}
    ax.text(*where, note, transform=ax.transAxes, ha="center", va="center" if empty else "top", color="0.3", bbox=box)
    if empty:
        ax.set_xticks([])
        ax.set_yticks([])


def figures(results: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """The figures of ``hessian`` or ``spectrum`` results (one kind per call).

    ``hessian``: a ``density`` figure (files with a density), an ``eigenvalues`` figure (files with
    eigenvalues) and a ``blocks`` figure (files with blocks done). ``spectrum``: a ``spectrum`` figure;
    ``bins`` (option, default 40) per panel and ``spectrum_style`` (option, default ``auto``, see
    :func:`spectrum_figure`). Each figure is named by :func:`landscape.plot.common.figure_name`:
    ``<stem>_spectrum`` for one file, ``spectrum_<a>_vs_<b>`` for several, ``<name>_spectrum`` with the
    ``name`` option.

    Args:
        results: results of one kind, checked by :func:`check` (at least one; the first decides the kind).
        **options: drawing options; ``bins``, ``spectrum_style`` and ``name`` are used, others are ignored.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.
    """
    name = options.get("name")
    if results[0].kind == "spectrum":
        style = options.get("spectrum_style", "auto")
        bins = int(options.get("bins", 40))
        yield (
            figure_name("spectrum", results, name),
            captioned(spectrum_figure(results, bins, style=style), spectrum_caption(results, bins, style)),
        )
        return
    with_density = [r for r in results if "density/values" in r]
    with_eigen = [r for r in results if "eigenvalues" in r]
    with_blocks = [r for r in results if "blocks/done" in r and np.asarray(r["blocks/done"]).any()]
    if with_density:
        traced = any("trace/samples" in r for r in with_density)
        yield (
            figure_name("density", with_density, name),
            captioned(
                density_figure(with_density),
                "The Hessian's eigenvalue density at the model by stochastic Lanczos quadrature (Gaussian-broadened, "
                "log axis, floored at 1e-8 of its peak), one curve per file"
                + ("; the Lanczos eigenvalues as ticks" if any("eigenvalues" in r for r in with_density) else "")
                + ("; the trace estimate ± its standard error in the legend." if traced else "."),
            ),
        )
    if with_eigen:
        yield (
            figure_name("eigenvalues", with_eigen, name),
            captioned(
                eigenvalue_figure(with_eigen),
                "The Hessian's extreme eigenvalues at the model by Lanczos, ascending, with the residual ||Hv - λv|| "
                "of each pair as its bar; the legend names which end of the spectrum (LA, SA, LM, BE).",
            ),
        )
    if with_blocks:
        yield (
            figure_name("blocks", with_blocks, name),
            captioned(
                blocks_figure(with_blocks),
                "Curvature per block: the top eigenvalue (top) and the trace ± its standard error (bottom) of each "
                "block's diagonal Hessian block H[B, B] against depth, one curve per file (blocks done); MSA and "
                "downsampling blocks shaded.",
            ),
        )


def spectrum_caption(results: list[Result], bins: int, style: str) -> str:
    """What :func:`spectrum_figure` draws for ``style``, in words.

    Args:
        results: the spectrum files drawn.
        bins: histogram bins per panel.
        style: one of :data:`~landscape.plot.SPECTRUM_STYLES`.

    Returns:
        The caption.
    """
    sizes = [_pooled(r).size for r in results]
    smooth = [style == "kde" or (style == "auto" and n >= KDE_MIN_VALUES) for n in sizes]
    how = (
        "as kernel densities"
        if all(smooth)
        else f"as histograms of {bins} bins"
        if not any(smooth)
        else f"as kernel densities (files of at least {KDE_MIN_VALUES} values) or histograms of {bins} bins"
    )
    k = results[0]["eigenvalues"].shape[1]
    return (
        f"The top-{k} Hessian eigenvalues of every mini-batch's loss, pooled over the batches, {how}: negative ones "
        "left, positive ones right, each scaled by its share of the file's eigenvalues (Paper A's max-eigenvalue "
        "spectrum)."
    )


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write the figures of ``hessian`` or ``spectrum`` results (:func:`figures`) to ``out_dir``.

    Args:
        results: results of one kind, checked by :func:`check` (at least one; the first decides the kind).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: the drawing options of :func:`figures`; ``force`` replaces files landscape did not write.

    Returns:
        The paths written, in order.

    Raises:
        LandscapeError: ``spectrum_style`` is unknown, or ``out_dir`` cannot be written.
    """
    return save_figures(figures(results, **options), out_dir, fmt, force=options.get("force", False))
