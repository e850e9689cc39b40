"""Figures of sharpness results: sharpness against the radius, and sharpness against the training step.

- ``sharpness`` files: the mean over mini-batches at each radius with its bootstrap interval shaded (named in the
  legend: "95% bootstrap interval over N mini-batches"; a file of too few batches for one says so in its
  curve's label instead) and every batch's value as a faint dot, one curve per file (several models overlay);
  files of different measures (average / worst case, adaptive / plain, the norm) get one panel each.
- ``sharpness_track`` files (``landscape train --track-sharpness``): the tracked sharpness against the optimiser
  step, with the optimiser's stability threshold as a dashed line of the same colour (it follows the learning
  rate schedule), on a log axis; records whose Lanczos run did not converge are drawn hollow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from landscape.analyses.sharpness.summary import measure_name, result_interval_note
from landscape.errors import LandscapeError
from landscape.plot.common import (
    Array,
    Schema,
    captioned,
    check_arrays,
    color,
    figure_name,
    labels,
    marker,
    save_figures,
)
from landscape.store.read import Result

#: the arrays of a ``sharpness`` file (``mean``, ``low`` and ``high`` once every batch is done)
SHARPNESS = Schema(
    kind="sharpness",
    required={
        "rho": Array(("radius",), finite=True, nonnegative=True),
        "values": Array(("batch", "radius")),
        "done": Array(("batch",), flag=True),
    },
    optional={
        "stderr": Array(("batch", "radius")),
        "base_loss": Array(("batch",)),
        "batch_sizes": Array(("batch",), finite=True, nonnegative=True),
        "mean": Array(("radius",)),
        "low": Array(("radius",)),
        "high": Array(("radius",)),
        "best_iteration": Array(("batch", "radius")),
        "final_step": Array(("batch", "radius")),
        "halvings": Array(("batch", "radius")),
    },
    together=(("mean", "low", "high"),),
    done=("done",),
)
#: the arrays of a ``sharpness_track`` file: one entry per record (NaN until done)
TRACK = Schema(
    kind="sharpness_track",
    required={
        "step": Array(("record",)),
        "sharpness": Array(("record",)),
        "threshold": Array(("record",)),
        "done": Array(("record",), flag=True),
    },
    optional={
        "lr": Array(("record",)),
        "n_products": Array(("record",)),
        "residual": Array(("record",)),
        "converged": Array(("record",)),
        "warm": Array(("record",)),
    },
    writer="landscape train --track-sharpness",
    done=("done",),
)


def consistent(result: Result) -> None:
    """Check that a ``sharpness`` or ``sharpness_track`` result's arrays fit their schema (unfinished ones too).

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    check_arrays(result, TRACK if result.kind == "sharpness_track" else SHARPNESS)


def check(result: Result) -> None:
    """Check that a ``sharpness`` or ``sharpness_track`` result fits its schema and has something done to draw.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, or saying that nothing is done yet.
    """
    track = result.kind == "sharpness_track"
    consistent(result)
    if not np.asarray(result["done"], dtype=bool).any():
        what = "record" if track else "batch"
        raise LandscapeError(f"{result.path}: no {what} of the {result.kind} result is done yet; nothing to draw")


def curve_figure(results: Sequence[Result]) -> Figure:
    """Sharpness against the radius: one panel per measure, one curve per file, its interval shaded.

    The curve is the mean over the done batches (the file's ``mean`` once complete); the band is the bootstrap
    interval ``[low, high]`` when the file holds one (a complete file without one, of too few batches, says so in
    the curve's label); the dots are the batches' values. The x axis is logarithmic
    unless a radius is 0.

    Args:
        results: ``sharpness`` results checked by :func:`check`.

    Returns:
        The figure.
    """
    groups: dict[str, list[int]] = {}
    for j, r in enumerate(results):
        groups.setdefault(measure_name(r.attrs), []).append(j)
    names = labels(results)
    fig = Figure(figsize=(5.6 * len(groups), 4.0), layout="constrained")
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    for ax, (measure, members) in zip(axes, groups.items()):
        log = all(float(np.min(results[j]["rho"])) > 0 for j in members)
        for j in members:
            r = results[j]
            rho = np.asarray(r["rho"], dtype=float)
            done = np.asarray(r["done"], dtype=bool)
            values = np.asarray(r["values"], dtype=float)[done]
            mean = np.asarray(r["mean"], dtype=float) if "mean" in r else values.mean(axis=0)
            order = np.argsort(rho)
            band = "low" in r and bool(np.isfinite(r["low"]).all())
            label = names[j] if band or "mean" not in r else f"{names[j]} ({result_interval_note(r)})"
            ax.plot(rho[order], mean[order], marker=marker(j), color=color(j), lw=1.4, label=label)
            if band:
                ax.fill_between(
                    rho[order],
                    r["low"][order],
                    r["high"][order],
                    color=color(j),
                    alpha=0.18,
                    lw=0,
                    label=f"{names[j]}: {result_interval_note(r)}",
                )
            ax.plot(np.broadcast_to(rho, values.shape).ravel(), values.ravel(), ".", color=color(j), alpha=0.25, ms=3)
        if log:
            ax.set_xscale("log")
        ax.axhline(0, color="0.8", lw=0.8, zorder=0)
        m = results[members[0]].attrs.get("batch_size", "?")
        ax.set_title(f"{measure} sharpness (m = {m})", fontsize=10)
        ax.set_xlabel("radius ρ")
        ax.set_ylabel("L_S(w + δ) − L_S(w), mean over batches")
        ax.legend(fontsize=8)
    return fig


def track_figure(results: Sequence[Result]) -> Figure:
    """Sharpness against the optimiser step, with the stability threshold dashed (log y), one colour per file.

    Args:
        results: ``sharpness_track`` results checked by :func:`check`.

    Returns:
        The figure.
    """
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    names = labels(results)
    positive = True
    for j, r in enumerate(results):
        done = np.asarray(r["done"], dtype=bool)
        step = np.asarray(r["step"], dtype=float)[done]
        sharp = np.asarray(r["sharpness"], dtype=float)[done]
        threshold = np.asarray(r["threshold"], dtype=float)[done]
        converged = np.asarray(r["converged"], dtype=bool)[done] if "converged" in r else np.ones_like(done[done])
        what = "preconditioned sharpness" if r.attrs.get("preconditioned") else "sharpness"
        ax.plot(step, sharp, color=color(j), lw=1.4, label=f"{names[j]}: {what}")
        ax.plot(step[converged], sharp[converged], marker(j), color=color(j), ms=4)
        ax.plot(step[~converged], sharp[~converged], marker(j), color=color(j), ms=4, mfc="none")
        finite = np.isfinite(threshold)
        ax.plot(step[finite], threshold[finite], "--", color=color(j), lw=1.0, label=f"{names[j]}: threshold")
        positive &= bool((sharp > 0).all())
    if positive:
        ax.set_yscale("log")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("top Hessian eigenvalue of the tracking batch")
    ax.set_title("Sharpness during training (dashed: stability threshold)", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def figures(results: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """The figure of ``sharpness`` or ``sharpness_track`` results (one kind per call).

    ``sharpness``: a ``sharpness`` figure (:func:`curve_figure`); ``sharpness_track``: a ``sharpness_track``
    figure (:func:`track_figure`), each named by :func:`landscape.plot.common.figure_name`.

    Args:
        results: results of one kind, checked by :func:`check` (at least one; the first decides the kind).
        **options: drawing options; ``name`` is used, others are ignored.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.
    """
    kind = results[0].kind
    name = figure_name(kind, results, options.get("name"))
    if kind == "sharpness_track":
        yield name, captioned(track_figure(results), track_caption(results))
    else:
        yield name, captioned(curve_figure(results), curve_caption(results))


def curve_caption(results: Sequence[Result]) -> str:
    """What :func:`curve_figure` draws for ``results``, in words.

    Args:
        results: ``sharpness`` results.

    Returns:
        The caption: the measures, the radius axis, the band when a file has one.
    """
    measures = sorted({measure_name(r.attrs) for r in results})
    log = all(float(np.min(r["rho"])) > 0 for r in results)
    band = any("low" in r and np.isfinite(r["low"]).all() for r in results)
    return (
        f"{' and '.join(measures).capitalize()} sharpness L_S(w + δ) − L_S(w) against the radius ρ "
        f"({'log' if log else 'linear'} axis), one panel per measure: the mean over the mini-batches done as a line"
        + (", the file's interval over batches (low to high) shaded" if band else "")
        + ", each batch's value as a dot."
    )


def track_caption(results: Sequence[Result]) -> str:
    """What :func:`track_figure` draws for ``results``, in words.

    Args:
        results: ``sharpness_track`` results.

    Returns:
        The caption.
    """
    positive = all(
        bool((np.asarray(r["sharpness"], dtype=float)[np.asarray(r["done"], dtype=bool)] > 0).all()) for r in results
    )
    what = (
        "preconditioned top Hessian eigenvalue"
        if any(r.attrs.get("preconditioned") for r in results)
        else ("top Hessian eigenvalue")
    )
    return (
        f"The {what} of the tracking batch every N optimiser steps ({'log' if positive else 'linear'} axis; hollow "
        "markers: not converged) against the optimiser's stability threshold (dashed)."
    )


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write the figure of ``sharpness`` or ``sharpness_track`` results (:func:`figures`) to ``out_dir``.

    Args:
        results: results of one kind, checked by :func:`check` (at least one; the first decides the kind).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: drawing options; ``name`` and ``force`` are used, others are ignored.

    Returns:
        The paths written.

    Raises:
        LandscapeError: ``out_dir`` cannot be written.
    """
    return save_figures(figures(results, **options), out_dir, fmt, force=options.get("force", False))
