"""Figures for every result kind.

Each kind has a module ``landscape.plot.<kind>`` exposing
``plot(results: list[Result], out_dir: Path, fmt: str, **options) -> list[Path]``; results of one kind
are drawn together (several spectra or Fourier files overlay in one figure). Figures are built with
``matplotlib.figure.Figure`` (no pyplot state, no display needed).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from landscape.errors import LandscapeError
from landscape.store import Result, read_result

#: result kind -> module that draws it
PLOTTERS = {
    "surface": "landscape.plot.surface",
    "hessian": "landscape.plot.hessian",
    "spectrum": "landscape.plot.hessian",
    "fourier": "landscape.plot.fourier",
}
FORMATS = ("png", "pdf", "svg")


def plot_files(
    paths: Sequence[str | Path], out_dir: str | Path | None = None, fmt: str = "png", **options: Any
) -> list[Path]:
    """Draw every figure for the result files ``paths``; files of the same kind are overlaid.

    Figures go to ``out_dir`` (default: the folder of the first file). Returns the written paths.
    """
    if fmt not in FORMATS:
        raise LandscapeError(f"unknown figure format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not paths:
        raise LandscapeError("no result files given; pass one or more .h5 files written by landscape")
    results = [read_result(p) for p in paths]
    out = Path(out_dir) if out_dir is not None else Path(paths[0]).parent
    out.mkdir(parents=True, exist_ok=True)
    by_kind: dict[str, list[Result]] = {}
    for result in results:
        if result.kind not in PLOTTERS:
            raise LandscapeError(f"{result.path}: no figures for result kind {result.kind!r}")
        by_kind.setdefault(result.kind, []).append(result)
    written: list[Path] = []
    for kind, group in by_kind.items():
        module = importlib.import_module(PLOTTERS[kind])
        written += module.plot(group, out, fmt, **options)
    return written
