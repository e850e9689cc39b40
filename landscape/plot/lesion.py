"""Figures of lesion results (Paper A, Sec 4): accuracy drop and NLL increase when each block is removed.

One bar per lesioned block against its normalised depth, coloured by the block's kind (conv, downsample, MSA,
MLP) and named on the x axis (every k-th when there are many); MSA blocks are shaded grey and downsampling blocks
blue, one band each (as in the Fourier depth figures, :func:`landscape.plot.fourier.shade_layers`), and stage
boundaries are dashed lines. Several files overlay: files of
one architecture (the same block kinds and stages) share a panel, their bars side by side in each depth cell and
told apart by hatching; other architectures get a panel each. Blocks not yet done are left out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from landscape.plot.common import (
    Array,
    Schema,
    captioned,
    check_arrays,
    figure_name,
    labels,
    save_figures,
    wrapped,
    zero_line,
)
from landscape.plot.fourier import DEPTH_LABEL, name_blocks, shade_layers
from landscape.store.read import Result

#: bar colour of each block kind
KIND_COLORS = {"conv": "tab:blue", "downsample": "tab:cyan", "msa": "tab:red", "mlp": "tab:green"}
#: hatching of the n-th file of a panel
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")
SCHEMA = Schema(
    kind="lesion",
    required={
        "block_names": Array(("block",), text=True),
        "block_kinds": Array(("block",), text=True),
        "depth": Array(("block",), finite=True),
        "stage": Array(("block",), finite=True),
        "accuracy": Array(("block",)),
        "nll": Array(("block",)),
        "accuracy_drop": Array(("block",)),
        "done": Array(("block",), flag=True),
    },
    optional={"projected_shortcut": Array(("block",))},
    done=("done",),
    numbers=("intact_accuracy", "intact_nll"),
)


def consistent(result: Result) -> None:
    """Check that ``result`` is a lesion result whose arrays fit :data:`SCHEMA`.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    check_arrays(result, SCHEMA)


def check(result: Result) -> None:
    """Check that a lesion result can be drawn: it is :func:`consistent`.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    consistent(result)


def _values(result: Result, key: str) -> np.ndarray:
    if key == "nll_increase":
        return result["nll"] - float(result.attrs.get("intact_nll", np.nan))
    return result[key]


def mark_stages(ax: Axes, depth: np.ndarray, stage: np.ndarray) -> None:
    """Draw a dashed vertical line between consecutive blocks of different stages.

    Args:
        ax: the axes.
        depth: the normalised depth of each block.
        stage: the stage of each block.
    """
    for i in range(1, len(depth)):
        if stage[i] != stage[i - 1]:
            ax.axvline((depth[i] + depth[i - 1]) / 2, color="0.3", ls="--", lw=0.9, zorder=1)


def lesion_figure(results: Sequence[Result], key: str, ylabel: str, title: str) -> Figure:
    """``key`` per lesioned block against normalised depth; one panel per architecture.

    Args:
        results: lesion results checked by :func:`check`.
        key: ``accuracy_drop`` or ``nll_increase`` (lesioned NLL minus the intact NLL).
        ylabel: the y axis label.
        title: the title of the top panel.

    Returns:
        The figure.
    """
    groups: dict[tuple, list[int]] = {}
    for j, r in enumerate(results):
        arch = (tuple(str(k) for k in r["block_kinds"]), tuple(int(s) for s in r["stage"]))
        groups.setdefault(arch, []).append(j)
    names = labels(results)
    fig = Figure(figsize=(6.8, 1.2 + 2.9 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False)[:, 0]
    for ax, ((kinds, stages), members) in zip(axes, groups.items()):
        first = results[members[0]]
        depth = first["depth"]
        step = 1.0 / max(len(depth) - 1, 1)
        patches = shade_layers(ax, depth, kinds)
        name_blocks(ax, depth, first["block_names"])
        mark_stages(ax, depth, np.asarray(stages))
        width = 0.8 * step / len(members)
        colors = [KIND_COLORS.get(k, "0.5") for k in kinds]
        for slot, j in enumerate(members):
            r = results[j]
            done = r["done"].astype(bool)
            x = r["depth"] + (slot - (len(members) - 1) / 2) * width
            ax.bar(
                x[done],
                _values(r, key)[done],
                width=width,
                color=np.array(colors, dtype=object)[done].tolist(),
                edgecolor="black",
                linewidth=0.4,
                hatch=HATCHES[slot % len(HATCHES)],
                zorder=2,
            )
        zero_line(ax)
        ax.set_xlim(-step / 2 - 0.02, 1 + step / 2 + 0.02)
        ax.set_ylabel(ylabel)
        handles = [Patch(color=KIND_COLORS.get(k, "0.5"), label=k) for k in dict.fromkeys(kinds)]
        if len(members) > 1:
            handles += [
                Patch(facecolor="white", edgecolor="black", hatch=HATCHES[s % len(HATCHES)], label=names[j])
                for s, j in enumerate(members)
            ]
        else:
            ax.set_title(names[members[0]], fontsize=9)
        ax.legend(handles=handles + patches, fontsize=8, frameon=False, loc="best")
    axes[-1].set_xlabel(f"{DEPTH_LABEL} (dashed: stage boundaries)")
    fig.suptitle(wrapped(title))
    return fig


def figures(results: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """The lesion figures of ``results``, all files together (see :func:`plot`).

    Args:
        results: lesion results checked by :func:`check` (at least one).
        **options: drawing options; ``name`` is used, others are ignored.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.
    """
    name = options.get("name")
    yield (
        figure_name("accuracy_drop", results, name),
        captioned(
            lesion_figure(results, "accuracy_drop", "accuracy drop (intact - lesioned)", "lesion study: accuracy drop"),
            "The accuracy lost (intact - lesioned) when one block's branch is removed, block by block in forward "
            "order, one curve per file.",
        ),
    )
    yield (
        figure_name("nll_increase", results, name),
        captioned(
            lesion_figure(results, "nll_increase", "NLL increase (lesioned - intact)", "lesion study: NLL increase"),
            "The increase of the loss (NLL, lesioned - intact) when one block's branch is removed, block by block in "
            "forward order, one curve per file.",
        ),
    )


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write the lesion figures of ``results`` (all files together) to ``out_dir``; return the paths.

    An ``accuracy_drop`` and an ``nll_increase`` figure, named by :func:`landscape.plot.common.figure_name`
    (``<stem>_accuracy_drop`` for one file, ``accuracy_drop_<a>_vs_<b>`` for several, ``<name>_accuracy_drop``
    with the ``name`` option).

    Args:
        results: lesion results checked by :func:`check` (at least one).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: drawing options; ``name`` is used, others are ignored.

    Returns:
        The paths written, in order.

    Raises:
        LandscapeError: ``out_dir`` cannot be written.
    """
    return save_figures(figures(results, **options), out_dir, fmt, force=options.get("force", False))
