"""Figures of curvature results: the operators' densities overlaid, and their distances from the Hessian.

Two figures per file: ``<stem>_densities`` (the main one), every operator's SLQ density on the shared grid, one curve
each (log y, floored at ``1e-8`` of the highest), its top eigenvalues as ticks; ``<stem>_distances``, each
approximation's relative spectral and Frobenius distance from the Hessian as bars (the Frobenius estimate with its
standard error) and, with blocks, the spectral distance of every block's diagonal block against the block's place.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from landscape.errors import LandscapeError
from landscape.plot.common import (
    Array,
    Schema,
    captioned,
    check_arrays,
    color,
    figure_name,
    model_name,
    save_figures,
    single_axes,
    wrapped,
)
from landscape.store.read import Result

#: the arrays of a curvature file (docs/schema.md, curvature)
SCHEMA = Schema(
    kind="curvature",
    required={
        "operators": Array(("operator",), text=True),
        "approximations": Array(("approximation",), text=True),
        "spectra/eigenvalues": Array(("operator", "pair")),
        "spectra/residuals": Array(("operator", "pair")),
        "spectra/converged": Array(("operator", "pair"), flag=True),
        "spectra/angles": Array(("operator", "pair")),
        "spectra/nodes": Array(("operator", "probe", "node")),
        "spectra/weights": Array(("operator", "probe", "node")),
        "spectra/done": Array(("operator",), flag=True),
        "distance/spectral": Array(("approximation",)),
        "distance/spectral_converged": Array(("approximation",), flag=True),
        "distance/frobenius": Array(("approximation",)),
        "distance/frobenius_stderr": Array(("approximation",)),
        "distance/done": Array(("approximation",), flag=True),
    },
    optional={
        "density/grid": Array(("eigenvalue",), finite=True, increasing=True),
        "density/values": Array(("operator", "eigenvalue"), finite=True, nonnegative=True),
        "blocks/names": Array(("block",), text=True),
        "blocks/kinds": Array(("block",), text=True),
        "blocks/size": Array(("block",), nonnegative=True),
        "blocks/spectral": Array(("block", "approximation")),
        "blocks/spectral_converged": Array(("block", "approximation"), flag=True),
        "blocks/frobenius": Array(("block", "approximation")),
        "blocks/frobenius_stderr": Array(("block", "approximation")),
        "blocks/hessian_spectral_norm": Array(("block",)),
        "blocks/done": Array(("block",), flag=True),
    },
    together=(("density/grid", "density/values"),),
    done=("spectra/done", "distance/done", "blocks/done"),
    numbers=("n_samples", "n_params"),
)


def consistent(result: Result) -> None:
    """Check that ``result`` is a curvature result whose arrays fit :data:`SCHEMA` (finished or not).

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    check_arrays(result, SCHEMA)


def check(result: Result) -> None:
    """Check that a curvature result can be drawn: it is :func:`consistent` and holds its densities.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: the arrays do not fit, or the run did not reach its densities.
    """
    consistent(result)
    if "density/values" not in result:
        raise LandscapeError(
            f"{result.path}: the curvature run has not reached its densities yet; run `landscape curvature` again "
            "with the same options to finish it"
        )


def _text(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values).reshape(-1)]


def density_figure(result: Result) -> Figure:
    """Every operator's density on the shared grid (log y), its top eigenvalues as ticks below the curves.

    Args:
        result: a curvature result checked by :func:`check`.

    Returns:
        The figure.
    """
    grid = np.asarray(result["density/grid"], dtype=float)
    values = np.asarray(result["density/values"], dtype=float)
    floor = max(float(values.max()) * 1e-8, 1e-300)
    fig, ax = single_axes((6.5, 4.2))
    for i, name in enumerate(_text(result["operators"])):
        ax.plot(grid, np.maximum(values[i], floor), color=color(i), lw=1.4 if i == 0 else 1.1, label=name)
        top = np.asarray(result["spectra/eigenvalues"][i], dtype=float)
        top = top[np.isfinite(top)]
        ax.plot(top, np.full(top.size, floor * 10 ** (1 + i / 2)), "|", color=color(i), ms=10)
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.set_xlabel("eigenvalue")
    ax.set_ylabel("density (SLQ, one shared broadening)")
    ax.set_title(
        wrapped(f"Curvature operators of {model_name(result)}, {result.attrs.get('n_params', '?')} parameters")
    )
    ax.legend(fontsize=8)
    return fig


def distance_figure(result: Result) -> Figure:
    """Each approximation's relative distance from the Hessian (bars), and per block when the file has blocks.

    Args:
        result: a curvature result checked by :func:`check`.

    Returns:
        The figure (one panel, or two with blocks).
    """
    names = _text(result["approximations"])
    blocks = "blocks/done" in result and np.asarray(result["blocks/done"], dtype=bool).any()
    fig = Figure(figsize=(10.5 if blocks else 5.5, 4.2), layout="constrained")
    ax = fig.add_subplot(1, 2 if blocks else 1, 1)
    x = np.arange(len(names))
    spectral = np.asarray(result["distance/spectral"], dtype=float)
    frob = np.asarray(result["distance/frobenius"], dtype=float)
    error = np.asarray(result["distance/frobenius_stderr"], dtype=float)
    ax.bar(x - 0.2, spectral, 0.4, label="spectral ||H - A||_2 / ||H||_2", color=color(0))
    ax.bar(x + 0.2, frob, 0.4, yerr=np.nan_to_num(error), label="Frobenius (Hutchinson, ± s.e.)", color=color(1))
    ax.set_xticks(x, names)
    ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
    ax.set_ylabel("relative distance from the Hessian")
    ax.set_title("whole model")
    ax.legend(fontsize=8)
    if blocks:
        right = fig.add_subplot(1, 2, 2)
        done = np.asarray(result["blocks/done"], dtype=bool)
        rows = np.asarray(result["blocks/spectral"], dtype=float)
        labels = _text(result["blocks/names"])
        for j, name in enumerate(names):
            right.plot(np.flatnonzero(done), rows[done, j], marker="o", ms=3, color=color(j + 2), label=name)
        right.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        right.axhline(1.0, color="0.5", lw=0.8, ls=":")
        right.set_ylabel("spectral distance of the diagonal block")
        right.set_title("per block")
        right.legend(fontsize=8)
    return fig


def figures(results: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """The densities and the distances of every file (``<stem>_densities``, ``<stem>_distances``).

    Args:
        results: curvature results (checked by :func:`check`).
        **options: the drawing options of :func:`landscape.plot.plot_files`; only ``name`` is used.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.
    """
    name = options.get("name")
    for result in results:
        own = name if len(results) == 1 or name is None else f"{name}_{result.path.stem}"
        yield (
            figure_name("densities", [result], own),
            captioned(
                density_figure(result),
                "The spectral density of the Hessian and of each approximation (stochastic Lanczos quadrature, one "
                "broadening and one grid for all); the ticks are each operator's top eigenvalues.",
            ),
        )
        yield (
            figure_name("distances", [result], own),
            captioned(
                distance_figure(result),
                "How far each approximation A is from the Hessian H: ||H - A|| / ||H|| in the spectral norm (Lanczos) "
                "and the Frobenius norm (Hutchinson), for the whole model and for each block's diagonal block.",
            ),
        )


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write every file's figures (:func:`figures`) to ``out_dir``.

    Args:
        results: curvature results (checked by :func:`check`).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: the drawing options of :func:`landscape.plot.plot_files`; ``name`` and ``force`` are used.

    Returns:
        The written paths.
    """
    return save_figures(figures(results, **options), out_dir, fmt, force=options.get("force", False))


def overlaid(result: Result) -> bool:
    """A curvature file has figures of its own: files of several models are never drawn together.

    Args:
        result: a curvature file.

    Returns:
        False.
    """
    return False
