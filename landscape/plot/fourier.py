"""Figures of Fourier results (Paper A): Fig 2a, Fig 8, Fig 9, Fig 2b and the 2D mean log-amplitude maps.

Fig 2a: Delta log amplitude per block; Fig 8: high-frequency Delta log amplitude against depth; Fig 9:
feature-map variance against depth; Fig 2b: accuracy drop against noise frequency.

Several files overlay in Fig 8, 9 and 2b (one marker style per file); Fig 2a and the maps are drawn per file.
The depth figures shade MSA blocks grey and downsampling blocks blue; files with different layer-kind
sequences (architectures) get one panel each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from landscape.store import Result

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
SHADES = {"msa": ("0.6", 0.35, "MSA block"), "downsample": ("tab:blue", 0.2, "downsampling block")}


def labels(results: Sequence[Result]) -> list[str]:
    """One legend label per file: the model name, plus the file name when two files share a model."""
    models = [str(r.attrs.get("model", r.path.stem)) for r in results]
    return [m if models.count(m) == 1 else f"{m} ({r.path.stem})" for m, r in zip(models, results)]


def _pi_ticks(ax: Axes, normalised: bool) -> None:
    ticks = np.linspace(0, 1, 6)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:.1f}π" for t in ticks])
    ax.set_xlim(0, 1)
    ax.set_xlabel("frequency (normalised to each layer's highest)" if normalised else "frequency")


def profile_figure(result: Result) -> Figure:
    """Paper A Fig 2a: one Delta log amplitude curve per block, coloured by normalised depth (plasma_r)."""
    fig = Figure(figsize=(5.2, 4.0), layout="constrained")
    ax = fig.add_subplot()
    freq, delta, depth = result["frequencies"], result["delta_log_amplitude"], result["depth"]
    cmap, norm = "plasma_r", Normalize(0.0, 1.0)
    mappable = ScalarMappable(norm=norm, cmap=cmap)
    for i in range(delta.shape[0]):
        keep = ~np.isnan(delta[i])
        ax.plot(freq[keep], delta[i, keep], color=mappable.to_rgba(depth[i]), lw=1.4)
    _pi_ticks(ax, result.attrs.get("frequency_axis", "normalised") == "normalised")
    ax.set_ylabel("Δ log amplitude")
    ax.axhline(0, color="0.8", lw=0.8, zorder=0)
    fig.colorbar(mappable, ax=ax, label="normalised depth")
    ax.set_title(f"{result.attrs.get('model', result.path.stem)}: {result.attrs.get('profile', 'diagonal')} profile")
    return fig


def shade_layers(ax: Axes, depth: np.ndarray, kinds: Sequence[str]) -> list[Patch]:
    """Shade each MSA block grey and each downsampling block blue over its depth cell; return legend patches."""
    step = 1.0 / max(len(depth) - 1, 1)
    used: dict[str, Patch] = {}
    for d, kind in zip(depth, kinds):
        if kind in SHADES:
            color, alpha, name = SHADES[kind]
            ax.axvspan(d - step / 2, d + step / 2, color=color, alpha=alpha, lw=0, zorder=0)
            used.setdefault(kind, Patch(color=color, alpha=alpha, label=name))
    return list(used.values())


def depth_figure(results: Sequence[Result], key: str, ylabel: str, title: str, log: bool = False) -> Figure:
    """``key`` (per layer) against normalised depth; one panel per architecture (layer-kind sequence).

    Files of the same architecture are overlaid in one panel, shaded by their layer kinds (MSA grey,
    downsampling blue); every file keeps its own marker across panels.
    """
    groups: dict[tuple[str, ...], list[int]] = {}
    for j, result in enumerate(results):
        groups.setdefault(tuple(str(k) for k in result["layer_kinds"]), []).append(j)
    names = labels(results)
    fig = Figure(figsize=(6.4, 1.0 + 2.8 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (kinds, members) in zip(axes, groups.items()):
        depth = results[members[0]]["depth"]
        patches = shade_layers(ax, depth, kinds)
        for j in members:
            ax.plot(results[j]["depth"], results[j][key], marker=MARKERS[j % len(MARKERS)], ms=4.5, lw=1.3,
                    color=f"C{j % 10}", label=names[j])
        half = 0.5 / max(len(depth) - 1, 1)
        ax.set_xlim(-half, 1 + half)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        handles, texts = ax.get_legend_handles_labels()
        ax.legend(handles + patches, texts + [p.get_label() for p in patches], fontsize=8, frameon=False,
                  loc="best")
    axes[-1].set_xlabel("normalised depth")
    axes[0].set_title(title)
    return fig


def noise_figure(results: Sequence[Result]) -> Figure:
    """Paper A Fig 2b: accuracy drop (percentage points) against the noise band's centre frequency."""
    fig = Figure(figsize=(5.2, 3.8), layout="constrained")
    ax = fig.add_subplot()
    for j, (result, label) in enumerate(zip(results, labels(results))):
        done = result["noise/done"].astype(bool)
        ax.plot(result["noise/frequencies"][done], 100 * result["noise/accuracy_drop"][done],
                marker=MARKERS[j % len(MARKERS)], ms=4.5, lw=1.3, label=label)
    ticks = np.linspace(0, 1, 6)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:.1f}π" for t in ticks])
    ax.set_xlim(0, 1)
    ax.axhline(0, color="0.8", lw=0.8, zorder=0)
    ax.set_xlabel("noise frequency (centre of the band)")
    ax.set_ylabel("accuracy drop (percentage points)")
    strength = results[0].attrs.get("noise_strength")
    ax.set_title(f"robustness to band-limited noise (RMS {strength})")
    ax.legend(fontsize=8, frameon=False)
    return fig


def maps_figure(result: Result) -> Figure:
    """The centred 2D mean log-amplitude map of each layer (zero frequency in the middle), minus its centre."""
    names = sorted(k for k in result.arrays if k.startswith("maps/"))
    cols = min(6, len(names))
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
        ax.imshow(rel[name], cmap="viridis", norm=norm, origin="lower",
                  extent=(-1 - 1 / w, 1 - 1 / w, -1 - 1 / h, 1 - 1 / h))
        ax.set_title(layer_names[int(name.split("/")[1])], fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        axes.append(ax)
    fig.colorbar(ScalarMappable(norm=norm, cmap="viridis"), ax=axes, label="Δ log amplitude", shrink=0.8)
    fig.suptitle(f"{result.attrs.get('model', result.path.stem)}: mean log amplitude - log A(0), (-π, π)²")
    return fig


def plot(results: list[Result], out_dir: Path, fmt: str, **options: Any) -> list[Path]:
    """Write every Fourier figure of ``results`` to ``out_dir``; return the paths."""
    written: list[Path] = []

    def save(fig: Figure, name: str) -> None:
        path = out_dir / f"{name}.{fmt}"
        fig.savefig(path, dpi=150)
        written.append(path)

    stem = results[0].path.stem + (f"+{len(results) - 1}" if len(results) > 1 else "")
    for result in results:
        save(profile_figure(result), f"{result.path.stem}_delta_log_amplitude")
        if any(k.startswith("maps/") for k in result.arrays):
            save(maps_figure(result), f"{result.path.stem}_maps")
    save(depth_figure(results, "high_frequency", "Δ log amplitude at the highest frequency",
                      "high-frequency amplitude by depth"), f"{stem}_high_frequency")
    variance = [r["variance"] for r in results]
    spread = max(np.nanmax(v) for v in variance) / max(min(np.nanmin(v) for v in variance), 1e-300)
    save(depth_figure(results, "variance", "feature-map variance", "feature-map variance by depth",
                      log=spread > 50), f"{stem}_variance")
    noisy = [r for r in results if "noise/accuracy_drop" in r]
    if noisy:
        save(noise_figure(noisy), f"{stem}_noise")
    return written
