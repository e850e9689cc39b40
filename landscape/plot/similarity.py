"""Figures of feature-similarity results: the linear CKA matrix between blocks as a heat map.

One figure per file, ``<stem>_similarity``: the first model's blocks down the rows (forward order from the top),
the second model's (or the same model's) along the columns, each tick labelled with the block's name and kind;
MSA blocks are written in red and marked by a red strip along the top and right edges. The colour bar spans 0..1.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from landscape.errors import LandscapeError
from landscape.plot.common import Array, Schema, captioned, check_arrays, figure_name, model_name, save_figures, wrapped
from landscape.store.attrs import as_str
from landscape.store.read import Result

#: the colour of MSA blocks' tick labels and strips
MSA_COLOR = "tab:red"
#: at most this many ticks are labelled per axis (every k-th block beyond)
MAX_TICKS = 24
#: the size of the tick labels (points), and the side of the matrix: inches per block, within limits
TICK_SIZE = 8
INCHES_PER_BLOCK = 0.13
SIDE = (4.5, 8.0)
SCHEMA = Schema(
    kind="similarity",
    required={
        "cka": Array(("layer_a", "layer_b")),
        "names_a": Array(("layer_a",), text=True),
        "kinds_a": Array(("layer_a",), text=True),
        "names_b": Array(("layer_b",), text=True),
        "kinds_b": Array(("layer_b",), text=True),
        "hsic_xy": Array(("layer_a", "layer_b"), finite=True),
        "hsic_xx": Array(("layer_a",), finite=True),
        "hsic_yy": Array(("layer_b",), finite=True),
        "n_batches": Array((), finite=True),
    },
    numbers=("n_samples",),
)


def consistent(result: Result) -> None:
    """Check that ``result`` is a similarity result whose arrays fit :data:`SCHEMA`.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    check_arrays(result, SCHEMA)


def check(result: Result) -> None:
    """Check that a similarity result can be drawn: it is :func:`consistent` and sums at least one minibatch.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    consistent(result)
    if int(result["n_batches"]) < 1:
        raise LandscapeError(
            f"{result.path}: the similarity result sums no minibatch; recompute it with `landscape similarity ... "
            "--force`"
        )


def _text(values: Any) -> list[str]:
    return [as_str(v) for v in values]


def _label_axis(ax: Axes, axis: str, names: Sequence[str], kinds: Sequence[str]) -> None:
    """Tick every block (every k-th past :data:`MAX_TICKS`) as ``name (kind)``, MSA blocks in red."""
    step = max(1, int(np.ceil(len(names) / MAX_TICKS)))
    ticks = list(range(0, len(names), step))
    text = [f"{names[i]} ({kinds[i]})" for i in ticks]
    if axis == "x":
        ax.set_xticks(ticks)
        ax.set_xticklabels(text, rotation=90, fontsize=TICK_SIZE)
        labels = ax.get_xticklabels()
    else:
        ax.set_yticks(ticks)
        ax.set_yticklabels(text, fontsize=TICK_SIZE)
        labels = ax.get_yticklabels()
    for label, i in zip(labels, ticks):
        if kinds[i] == "msa":
            label.set_color(MSA_COLOR)
            label.set_fontweight("bold")
    from matplotlib.patches import Rectangle

    for i, kind in enumerate(kinds):  # a strip just outside the matrix (top, right) marks every MSA block
        if kind != "msa":
            continue
        if axis == "x":  # x in data units, y in axes units
            strip = Rectangle((i - 0.5, 1.01), 1.0, 0.02, transform=ax.get_xaxis_transform())
        else:  # x in axes units, y in data units
            strip = Rectangle((1.01, i - 0.5), 0.02, 1.0, transform=ax.get_yaxis_transform())
        strip.set(color=MSA_COLOR, clip_on=False, lw=0)
        ax.add_patch(strip)


def heatmap_figure(result: Result) -> Figure:
    """The CKA matrix of one file as a heat map (viridis, 0..1), block names and kinds on both axes.

    Args:
        result: a similarity result checked by :func:`check`.

    Returns:
        The figure (NaN entries, from a block whose features do not vary, are left blank).
    """
    cka = np.asarray(result["cka"], dtype=float)
    names_a, kinds_a = _text(result["names_a"]), _text(result["kinds_a"])
    names_b, kinds_b = _text(result["names_b"]), _text(result["kinds_b"])
    rows, cols = cka.shape
    size = float(np.clip(INCHES_PER_BLOCK * max(rows, cols) + 3.0, *SIDE))
    fig = Figure(figsize=(size + 1.2, size), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(cka, vmin=0.0, vmax=1.0, cmap="viridis", origin="upper", interpolation="nearest")
    _label_axis(ax, "x", names_b, kinds_b)
    _label_axis(ax, "y", names_a, kinds_a)
    fig.colorbar(image, ax=ax, label="linear CKA (minibatch unbiased)", shrink=0.8)
    a = model_name(result)
    within = result.attrs.get("comparison", "within") == "within"
    b = a if within else str(result.attrs.get("other_model", "other"))
    ax.set_ylabel(f"{a} blocks")
    ax.set_xlabel(f"{b} blocks" + ("" if not any(k == "msa" for k in kinds_a + kinds_b) else "  (MSA blocks in red)"))
    ax.set_title(
        wrapped(f"CKA {a}" + ("" if within else f" vs {b}") + f", {result.attrs.get('n_samples', '?')} samples"),
        fontsize=11,
        pad=16,
    )
    return fig


def figures(results: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """The CKA heat map of every file (``<stem>_similarity``, or ``NAME_<stem>_similarity`` with a name).

    Args:
        results: similarity results (checked by :func:`check`).
        **options: the drawing options of :func:`landscape.plot.plot_files`; only ``name`` is used.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.
    """
    name = options.get("name")
    for result in results:
        stem = figure_name("similarity", [result])
        if name is not None:
            stem = figure_name("similarity", [result], name if len(results) == 1 else f"{name}_{result.path.stem}")
        yield (
            stem,
            captioned(
                heatmap_figure(result),
                "The linear CKA similarity of every pair of blocks' outputs (rows: the first model's blocks, columns: "
                + ("the same model's" if result.attrs.get("comparison", "within") == "within" else "the other model's")
                + ").",
            ),
        )


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write the CKA heat map of every file (:func:`figures`) to ``out_dir``.

    Args:
        results: similarity results (checked by :func:`check`).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: the drawing options of :func:`landscape.plot.plot_files`; ``name`` and ``force`` are used.

    Returns:
        The written paths.
    """
    return save_figures(figures(results, **options), out_dir, fmt, force=options.get("force", False))


def overlaid(result: Result) -> bool:
    """A CKA map has a figure of its own: files of several models are never drawn together.

    Args:
        result: a similarity file.

    Returns:
        False.
    """
    return False
