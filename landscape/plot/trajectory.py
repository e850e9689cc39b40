"""Figures of trajectory results (Paper A Fig 1b): training snapshots in polar coordinates.

Each snapshot is drawn at angle ``phi_t`` (its angle to the initial weights) and radius ``r_t = ||theta_t -
theta_0||``; every file is one coloured line from the start (the origin, marked with a black star) to its last
snapshot (a larger marker). All files overlay in one polar figure, so the trajectories of several models (one
file each) can be compared as in Fig 1b. The angular axis spans ``[0, 1.15 max phi]``, as the angles are small.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

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
    wrapped,
)
from landscape.store.read import Result

#: the arrays of a trajectory file: one entry per snapshot, the initial weights first
SCHEMA = Schema(
    kind="trajectory",
    required={
        "distance": Array(("snapshot",), finite=True),
        "angle": Array(("snapshot",)),
        "norm": Array(("snapshot",), finite=True),
        "epoch": Array(("snapshot",)),
        "snapshots": Array(("snapshot",), text=True),
    },
    optional={"step": Array(("snapshot",)), "paths": Array(("snapshot",), text=True)},
)


def consistent(result: Result) -> None:
    """Check that ``result`` is a trajectory result whose arrays fit :data:`SCHEMA`.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    check_arrays(result, SCHEMA)


def check(result: Result) -> None:
    """Check that a trajectory result can be drawn: it is :func:`consistent`.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    consistent(result)


def polar_figure(results: list[Result]) -> Figure:
    """Paper A Fig 1b: every file's snapshots at (angle, distance) on one polar axes, the start marked.

    Args:
        results: trajectory results checked by :func:`check` (at least one).

    Returns:
        The figure; snapshots whose angle is NaN (all-zero weights) are left out.
    """
    largest = 0.0
    for result in results:
        angle = result["angle"][~np.isnan(result["angle"])]
        largest = max([largest, *map(float, angle)])
    thetamax = min(180.0, max(1.0, 1.15 * math.degrees(largest)))
    fig = Figure(figsize=(7.5, 5.2), layout="constrained")  # the wedge is drawn in a square box: give it room
    ax = fig.add_subplot(projection="polar")
    for j, (result, label) in enumerate(zip(results, labels(results))):
        angle, distance = result["angle"], result["distance"]
        keep = ~np.isnan(angle)
        ax.plot(angle[keep], distance[keep], color=color(j), marker=marker(j), ms=3.5, lw=1.4, label=label)
        ax.plot(angle[keep][-1:], distance[keep][-1:], color=color(j), marker=marker(j), ms=8, ls="none")
    ax.plot([0.0], [0.0], marker="*", color="black", ms=12, ls="none", label="start (θ₀)", zorder=5)
    ax.set_thetamin(0.0)
    ax.set_thetamax(thetamax)
    ticks = np.linspace(0.0, thetamax, 3)  # a narrow wedge has room for few angle labels
    ax.set_thetagrids(ticks, labels=[f"{t:.3g}°" for t in ticks])
    ax.set_rlim(0.0, None)
    ax.set_title(wrapped("training trajectories: angle φ to θ₀ (degrees), radius ‖θ − θ₀‖"))
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def figures(results: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """The trajectory figures of ``results``, all files together (see :func:`plot`).

    Args:
        results: trajectory results checked by :func:`check` (at least one).
        **options: drawing options; ``name`` is used, others are ignored.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.
    """
    name = options.get("name")
    yield (
        figure_name("trajectory", results, name),
        captioned(
            polar_figure(results),
            "Training snapshots in polar coordinates: distance from the initial weights (radius) and angle to them, "
            "the start marked with a star, one line per file.",
        ),
    )


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write the polar trajectory figure of ``results`` to ``out_dir``; return its path.

    One figure for all files, named by :func:`landscape.plot.common.figure_name` (``<stem>_trajectory`` for one
    file, ``trajectory_<a>_vs_<b>`` for several, ``<name>_trajectory`` with the ``name`` option).

    Args:
        results: trajectory results checked by :func:`check` (at least one).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: drawing options; ``name`` is used, others are ignored.

    Returns:
        The paths written.

    Raises:
        LandscapeError: ``out_dir`` cannot be written.
    """
    return save_figures(figures(results, **options), out_dir, fmt, force=options.get("force", False))
