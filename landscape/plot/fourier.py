"""Figures of Fourier results (Paper A): Fig 2a, Fig 8, Fig 9, Fig 2b and the 2D mean log-amplitude maps.

Fig 2a: Delta log amplitude per block; Fig 8: high-frequency Delta log amplitude against depth; Fig 9:
feature-map variance against depth; Fig 2b: accuracy drop against noise frequency.

Several files overlay in Fig 8, 9 and 2b (one marker style per file); Fig 2a and the maps are drawn per file.
The depth figures shade each MSA block grey and each downsampling block blue (one band per block) and name
the blocks along the x axis (every k-th when there are many); files with different layer-kind sequences
(architectures) get one panel each.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from landscape.errors import LandscapeError
from landscape.plot import STYLES, one_of
from landscape.plot.common import (
    Array,
    Schema,
    captioned,
    check_arrays,
    color,
    figure_name,
    labels,
    marker,
    model_name,
    pi_ticks,
    save_figures,
    single_axes,
    wrapped,
    zero_line,
)
from landscape.store.read import Result

SHADES = {"msa": ("0.6", 0.35, "MSA block"), "downsample": ("tab:blue", 0.2, "downsampling block")}
#: the share of a block's depth cell that its band covers (the rest is a gap between neighbouring bands)
BAND = 0.8
#: the most blocks named on a depth axis (every k-th block beyond)
MAX_NAMED = 16
#: the most maps in a row of the maps figure
MAPS_PER_ROW = 4
#: the x label of the figures against depth
DEPTH_LABEL = "block, at its normalised depth"
#: the arrays of a Fourier file: one row (or entry) per layer; ``maps/NNN`` is the map of layer NNN
SCHEMA = Schema(
    kind="fourier",
    required={
        "frequencies": Array(("frequency",), increasing=True),
        "delta_log_amplitude": Array(("layer", "frequency")),
        "depth": Array(("layer",), finite=True),
        "layer_names": Array(("layer",), text=True),
        "layer_kinds": Array(("layer",), text=True),
        "variance": Array(("layer",)),
        "high_frequency": Array(("layer",)),
    },
    optional={
        "noise/frequencies": Array(("band",), finite=True),
        "noise/accuracy_drop": Array(("band",)),
        "noise/done": Array(("band",), flag=True),
        "layer_sizes": Array(("layer", 2), finite=True, nonnegative=True),
        "maps/*": Array((None, None)),
    },
    together=(("noise/frequencies", "noise/accuracy_drop", "noise/done"),),
    done=("noise/done",),
    numbers=("noise_strength", "noise_eps"),
)


def consistent(result: Result) -> None:
    """Check that ``result`` is a Fourier result whose arrays fit :data:`SCHEMA` and whose maps name its layers.

    E.g. ``layer_names`` has one entry per entry of ``high_frequency`` and per row of ``delta_log_amplitude``.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    check_arrays(result, SCHEMA)
    layers = len(result["layer_names"])
    for name in (k for k in result.arrays if k.startswith("maps/")):
        index = name.split("/")[1]
        if not index.isdigit() or int(index) >= layers:
            raise LandscapeError(
                f"{result.path}: array {name!r} names no layer (the file has {layers}); recompute "
                "it with `landscape fourier ... --force`"
            )


def check(result: Result) -> None:
    """Check that a Fourier result can be drawn: it is :func:`consistent`.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.

    Raises:
        LandscapeError: naming the array that is missing or does not fit, and what to do.
    """
    consistent(result)


def profile_figure(result: Result, style: str = "default") -> Figure:
    """Paper A Fig 2a: one Delta log amplitude curve per block, coloured by normalised depth (plasma_r).

    ``default``: every block, in forward order, coloured ``plasma_r(depth)`` (the first block yellow, the last
    dark). ``paper``: as the released figure (``fourier_analysis.ipynb``): the last block left out, the others
    drawn deepest first, the ``i``-th drawn curve coloured ``plasma_r(i / n_layers)``, so that block ``k`` is
    ``plasma_r((n_layers - 2 - k) / n_layers)`` (deep blocks yellow, shallow ones dark); the colour bar shows that
    mapping over the depths drawn.

    Args:
        result: a Fourier result checked by :func:`check`.
        style: ``"default"`` or ``"paper"`` (:data:`landscape.plot.STYLES`).

    Returns:
        The figure (NaN entries of a curve are left out).

    Raises:
        LandscapeError: ``style`` is not one of :data:`landscape.plot.STYLES`.
    """
    one_of(style, "figure style (--style)", STYLES)
    fig, ax = single_axes((5.2, 4.0))
    freq, delta, depth = result["frequencies"], result["delta_log_amplitude"], result["depth"]
    n = delta.shape[0]
    if style == "paper":
        plasma_r = colormaps["plasma_r"]
        for i, k in enumerate(range(n - 2, -1, -1)):
            keep = ~np.isnan(delta[k])
            ax.plot(freq[keep], delta[k, keep], color=plasma_r(i / n), lw=1.4)
        # block k's colour plasma((k + 2) / n), linear in its depth k / (n - 1): a cut of plasma over the depths drawn
        mappable = (
            ScalarMappable(
                norm=Normalize(float(depth[0]), float(depth[n - 2])),
                cmap=ListedColormap(colormaps["plasma"](np.linspace(2.0 / n, 1.0, 256))),
            )
            if n > 2
            else None
        )
    else:
        mappable = ScalarMappable(norm=Normalize(0.0, 1.0), cmap="plasma_r")
        for i in range(n):
            keep = ~np.isnan(delta[i])
            ax.plot(freq[keep], delta[i, keep], color=mappable.to_rgba(depth[i]), lw=1.4)
    normalised = result.attrs.get("frequency_axis", "normalised") == "normalised"
    pi_ticks(ax, "frequency (normalised to each layer's highest)" if normalised else "frequency")
    ax.set_ylabel("Δ log amplitude")
    zero_line(ax)
    if mappable is not None:
        fig.colorbar(mappable, ax=ax, label="normalised depth")
    last = " (last block left out)" if style == "paper" else ""
    ax.set_title(wrapped(f"{model_name(result)}: {result.attrs.get('profile', 'diagonal')} profile{last}", 44))
    return fig


def shade_layers(ax: Axes, depth: np.ndarray, kinds: Sequence[str]) -> list[Patch]:
    """Shade each MSA block grey and each downsampling block blue, one band per block; return legend patches.

    Each band covers :data:`BAND` of the block's depth cell (``1 / (L - 1)`` wide), so that consecutive blocks of
    a kind stay separate bands.

    Args:
        ax: the axes to shade.
        depth: the normalised depth of each layer, shape ``(L,)``.
        kinds: the kind of each layer (``"msa"`` and ``"downsample"`` are shaded; others are not).

    Returns:
        One legend patch per kind shaded, in the order first met.
    """
    half = BAND / 2 / max(len(depth) - 1, 1)
    used: dict[str, Patch] = {}
    for d, kind in zip(depth, kinds):
        if kind in SHADES:
            color, alpha, name = SHADES[kind]
            ax.axvspan(d - half, d + half, color=color, alpha=alpha, lw=0, zorder=0)
            used.setdefault(kind, Patch(color=color, alpha=alpha, label=name))
    return list(used.values())


def name_blocks(ax: Axes, depth: np.ndarray, names: Sequence[str]) -> None:
    """Tick the x axis at the blocks' depths with their names: every block, or every k-th past :data:`MAX_NAMED`.

    When only every k-th block is named, every block still gets a minor tick.

    Args:
        ax: the axes.
        depth: the normalised depth of each block.
        names: the name of each block.
    """
    every = math.ceil(len(names) / MAX_NAMED)
    ticks = list(range(0, len(names), every))
    ax.set_xticks([float(depth[i]) for i in ticks])
    ax.set_xticklabels([str(names[i]) for i in ticks], rotation=45, ha="right", rotation_mode="anchor", fontsize=8)
    ax.set_xticks([float(d) for d in depth] if every > 1 else [], minor=True)


def depth_figure(results: Sequence[Result], key: str, ylabel: str, title: str, log: bool = False) -> Figure:
    """``key`` (per layer) against normalised depth; one panel per architecture (layer-kind sequence).

    Files of the same architecture are overlaid in one panel, shaded by their layer kinds (MSA grey,
    downsampling blue, one band per block) and ticked with the first file's block names
    (:func:`name_blocks`); every file keeps its own marker across panels.

    Args:
        results: Fourier results checked by :func:`check`.
        key: the per-layer array to draw, e.g. ``"high_frequency"`` or ``"variance"``.
        ylabel: the y axis label.
        title: the title of the top panel.
        log: a log-scale y axis.

    Returns:
        The figure, one panel per distinct ``layer_kinds`` sequence.
    """
    groups: dict[tuple[str, ...], list[int]] = {}
    for j, result in enumerate(results):
        groups.setdefault(tuple(str(k) for k in result["layer_kinds"]), []).append(j)
    names = labels(results)
    fig = Figure(figsize=(6.4, 1.6 + 3.2 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False)[:, 0]
    for ax, (kinds, members) in zip(axes, groups.items()):
        depth = results[members[0]]["depth"]
        patches = shade_layers(ax, depth, kinds)
        name_blocks(ax, depth, results[members[0]]["layer_names"])
        for j in members:
            ax.plot(
                results[j]["depth"], results[j][key], marker=marker(j), ms=4.5, lw=1.3, color=color(j), label=names[j]
            )
        half = 0.5 / max(len(depth) - 1, 1)
        ax.set_xlim(-half, 1 + half)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        handles, texts = ax.get_legend_handles_labels()
        ax.legend(handles + patches, texts + [p.get_label() for p in patches], fontsize=8, frameon=False, loc="best")
    axes[-1].set_xlabel(DEPTH_LABEL)
    axes[0].set_title(title)
    return fig


def noise_figure(results: Sequence[Result]) -> Figure:
    """Paper A Fig 2b: accuracy drop (percentage points) against the noise band's centre frequency.

    Args:
        results: Fourier results holding the ``noise/*`` arrays; only bands marked done are drawn.

    Returns:
        The figure, one curve per file.
    """
    fig, ax = single_axes((5.2, 3.8))
    for j, (result, label) in enumerate(zip(results, labels(results))):
        done = result["noise/done"].astype(bool)
        ax.plot(
            result["noise/frequencies"][done],
            100 * result["noise/accuracy_drop"][done],
            marker=marker(j),
            ms=4.5,
            lw=1.3,
            label=label,
        )
    pi_ticks(ax, "noise frequency (centre of the band)")
    zero_line(ax)
    ax.set_ylabel("accuracy drop (percentage points)")
    attrs = results[0].attrs
    if attrs.get("noise_construction") == "official":
        scale = f"official construction, eps {attrs.get('noise_eps')}"
    else:
        scale = f"RMS {attrs.get('noise_strength')}"
    ax.set_title(f"robustness to band-limited noise ({scale})")
    ax.legend(fontsize=8, frameon=False)
    return fig


def maps_figure(result: Result) -> Figure:
    """The centred 2D mean log-amplitude map of each layer (zero frequency in the middle), minus its centre.

    Args:
        result: a Fourier result holding at least one ``maps/NNN`` array.

    Returns:
        The figure, one panel per map (up to :data:`MAPS_PER_ROW` per row) on one shared colour scale.
    """
    names = sorted(k for k in result.arrays if k.startswith("maps/"))
    cols = min(MAPS_PER_ROW, len(names))
    rows = math.ceil(len(names) / cols)
    fig = Figure(figsize=(1.9 * cols, 2.0 * rows + 0.4), layout="constrained")
    layer_names = [str(n) for n in result["layer_names"]]
    rel = {}
    for name in names:
        m = result[name]
        rel[name] = m - m[m.shape[0] // 2, m.shape[1] // 2]
    norm = Normalize(min(float(np.min(r)) for r in rel.values()), max(float(np.max(r)) for r in rel.values()))
    axes = []
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        h, w = rel[name].shape
        # pixel centres at the DFT frequencies 2 (i - h//2) / h, in units of pi
        ax.imshow(
            rel[name], cmap="viridis", norm=norm, origin="lower", extent=(-1 - 1 / w, 1 - 1 / w, -1 - 1 / h, 1 - 1 / h)
        )
        ax.set_title(layer_names[int(name.split("/")[1])], fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        axes.append(ax)
    fig.colorbar(ScalarMappable(norm=norm, cmap="viridis"), ax=axes, label="Δ log amplitude", shrink=0.8)
    fig.suptitle(wrapped(f"{model_name(result)}: mean log amplitude - log A(0), (-π, π)²", 60))
    return fig


def figures(results: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """Every Fourier figure of ``results``.

    Per file ``<stem>_delta_log_amplitude`` (and ``<stem>_maps`` when it holds maps); for all files together
    a ``high_frequency`` figure, a ``variance`` figure (log axis when the variances span more than 50x) and,
    when a file holds noise results, a ``noise`` figure, each named by
    :func:`landscape.plot.common.figure_name` (``<stem>_variance`` for one file, ``variance_<a>_vs_<b>`` for
    several, ``<name>_variance`` with the ``name`` option).

    Args:
        results: Fourier results checked by :func:`check` (at least one).
        **options: drawing options; ``name`` (the name of the figures of all files together) and ``style``
            (``paper``: Fig 2a as released, see :func:`profile_figure`) are used, others are ignored.

    Yields:
        Each figure's name (its file's, without the suffix) and the figure, drawn when it is due.
    """
    name, style = options.get("name"), options.get("style", "default")
    for result in results:
        profile = (
            "every block but the last, deep blocks yellow (Fig 2a as released)"
            if style == "paper"
            else "every block, from the first (yellow) to the last (dark)"
        )
        yield (
            f"{result.path.stem}_delta_log_amplitude",
            captioned(
                profile_figure(result, style),
                f"The relative log amplitude Δ log amplitude of the feature maps' Fourier transform against frequency "
                f"(0 to π), one line per block: {profile} (Paper A's Fourier analysis).",
            ),
        )
        if any(k.startswith("maps/") for k in result.arrays):
            yield (
                f"{result.path.stem}_maps",
                captioned(
                    maps_figure(result),
                    "The mean log amplitude of each block's feature maps over the 2D frequency plane.",
                ),
            )
    shading = "; MSA and downsampling blocks shaded, one panel per architecture"
    yield (
        figure_name("high_frequency", results, name),
        captioned(
            depth_figure(
                results,
                "high_frequency",
                "Δ log amplitude at the highest frequency",
                "high-frequency amplitude by depth",
            ),
            f"The relative log amplitude at the highest frequency, block by block against normalised depth{shading}.",
        ),
    )
    variance = [r["variance"] for r in results]
    spread = max(np.nanmax(v) for v in variance) / max(min(np.nanmin(v) for v in variance), 1e-300)
    yield (
        figure_name("variance", results, name),
        captioned(
            depth_figure(results, "variance", "feature-map variance", "feature-map variance by depth", log=spread > 50),
            f"The variance of each block's feature maps against normalised depth ({'log' if spread > 50 else 'linear'} "
            f"axis){shading}.",
        ),
    )
    noisy = [r for r in results if "noise/accuracy_drop" in r]
    if noisy:
        yield (
            figure_name("noise", noisy, name),
            captioned(
                noise_figure(noisy),
                "The accuracy drop (percentage points) under band-limited noise against the band's centre frequency, "
                "one curve per file (bands done).",
            ),
        )


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write every Fourier figure of ``results`` (:func:`figures`) to ``out_dir``; return the paths.

    Args:
        results: Fourier results checked by :func:`check` (at least one).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: the drawing options of :func:`figures`; ``force`` replaces files landscape did not write.

    Returns:
        The paths written, in order.

    Raises:
        LandscapeError: ``out_dir`` cannot be written.
    """
    return save_figures(figures(results, **options), out_dir, fmt, force=options.get("force", False))
