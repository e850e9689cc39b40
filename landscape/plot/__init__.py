"""Figures for every result kind, and the HTML report.

Each analysis names its figure module in its registration (:mod:`landscape.analyses.registry`): a module
exposing ``check(result: Result) -> None`` (its arrays fit the kind, else a one-line error), ``figures(results:
list[Result], **options)`` (each ``(name, Figure)``) and ``plot(results: list[Result], out_dir: Path, fmt: str,
**options) -> list[Path]`` (the figures written); results of one kind are drawn together (several spectra or
Fourier files overlay in one figure). Figures are built with ``matplotlib.figure.Figure`` (no pyplot state, no
display needed) and written atomically (:func:`landscape.plot.common.save_figures`); :func:`draw_figures` gives
the same figures in memory. Every file and option is checked before the first figure is drawn.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from landscape.analyses.registry import analysis_of
from landscape.errors import LandscapeError
from landscape.options.checks import finite, positive_int
from landscape.plot.common import check_name, model_name, safe_name
from landscape.store.files import ensure_folder
from landscape.store.read import Result, read_result

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("png", "pdf", "svg")
#: figure styles: ``default``, or ``paper`` (surfaces: Paper A's plasma wireframe of loss - min in 3D; Fourier:
#: Fig 2a as released, the last block left out and deep blocks yellow)
STYLES = ("default", "paper")
#: contour level spacings (see :func:`landscape.plot.scales._levels`)
LEVEL_SPACINGS = ("auto", "linear", "above-min", "log")
#: how spectra are drawn: ``kde`` (Gaussian kernel density), ``hist`` (histogram), ``auto`` (kde from
#: :data:`KDE_MIN_VALUES` values of a file on, else hist)
SPECTRUM_STYLES = ("auto", "kde", "hist")
#: the fewest eigenvalues of a file that ``auto`` draws as a kernel density estimate
KDE_MIN_VALUES = 20
#: the most contour levels (``--levels``): more are neither readable nor cheap to draw
MAX_LEVELS = 1000


class UndrawableError(LandscapeError):
    """Result files whose figures failed while they were drawn: values their kind's check did not foresee.

    The report gives the file this one-line note and goes on; ``plot`` prints it as its one-line error.
    """


def draw_kind(module: Any, kind: str, group: list[Result], out: Path, fmt: str, **options: Any) -> list[Path]:
    """The figures of ``group`` (files of one ``kind``) drawn by ``module.plot``; a failure of drawing is one line.

    Args:
        module: the kind's figure module.
        kind: the result kind.
        group: its checked files.
        out: an existing folder.
        fmt: the figure format.
        **options: the drawing options.

    Returns:
        The paths written.

    Raises:
        UndrawableError: drawing raised an error that is neither a :class:`LandscapeError` nor an ``OSError``
            (the values of a file that matplotlib or numpy cannot draw), naming the files and the error.
        LandscapeError: an option does not fit a file, or the folder cannot be written.
    """
    try:
        with np.errstate(all="ignore"):  # overflow in drawing extreme values: the figure or the one line says it
            return module.plot(group, out, fmt, **options)
    except (LandscapeError, OSError, MemoryError):
        raise
    except Exception as exc:
        raise undrawable(kind, group, exc) from exc


def undrawable(kind: str, group: list[Result], exc: Exception) -> UndrawableError:
    """The one-line error for figures of ``group`` (files of one ``kind``) that failed while they were drawn.

    Args:
        kind: the result kind.
        group: its files.
        exc: what drawing raised.

    Returns:
        The error, naming the files and the error.
    """
    names = ", ".join(str(r.path) for r in group)
    detail = (str(exc).strip().splitlines() or [""])[0][:200]
    return UndrawableError(
        f"{names}: the {kind} figures cannot be drawn from the values the file holds ({type(exc).__name__}: "
        f"{detail}); look at them with `landscape info`, or recompute it with `landscape {kind} ... --force`"
    )


def one_of(value: str, name: str, allowed: Sequence[str]) -> str:
    """Check a choice.

    Args:
        value: the value given.
        name: how the user names it (e.g. ``"surface style (--style)"``).
        allowed: the choices.

    Returns:
        ``value``.

    Raises:
        LandscapeError: ``value`` is not in ``allowed``.
    """
    if value not in allowed:
        raise LandscapeError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")
    return value


def check_options(fmt: str, options: dict[str, Any]) -> dict[str, Any]:
    """Check the figure format and the drawing options; return the options with numbers as int/float.

    Args:
        fmt: the figure format (one of :data:`FORMATS`).
        options: ``zmax`` (None or finite), ``levels`` (whole number from 2 to :data:`MAX_LEVELS`), ``style``
            (one of :data:`STYLES`), ``level_spacing`` (one of :data:`LEVEL_SPACINGS`), ``bins`` (whole number >= 1),
            ``spectrum_style`` (one of :data:`SPECTRUM_STYLES`), ``name`` (None or a plain file-name stem); others
            pass unchanged.

    Returns:
        The checked options.

    Raises:
        LandscapeError: an option is out of its range, not finite, or not one of its choices.
    """
    one_of(fmt, "figure format (--format)", FORMATS)
    checked = dict(options)
    if checked.get("zmax") is not None:
        checked["zmax"] = finite(checked["zmax"], "--zmax")
    if "levels" in checked:
        levels = checked["levels"]
        if isinstance(levels, int) and not isinstance(levels, bool) and levels < 2:
            raise LandscapeError(f"--levels must be a whole number >= 2 (contours need two levels), got {levels}")
        checked["levels"] = positive_int(levels, "--levels")
        if checked["levels"] > MAX_LEVELS:
            raise LandscapeError(
                f"--levels must be at most {MAX_LEVELS} (more lines than a figure can show), got {checked['levels']}"
            )
    if "style" in checked:
        one_of(checked["style"], "surface style (--style)", STYLES)
    if "level_spacing" in checked:
        one_of(checked["level_spacing"], "contour level spacing (--level-spacing)", LEVEL_SPACINGS)
    if "bins" in checked:
        checked["bins"] = positive_int(checked["bins"], "bins")
    if "spectrum_style" in checked:
        one_of(checked["spectrum_style"], "spectrum style (--spectrum-style)", SPECTRUM_STYLES)
    if "name" in checked:
        checked["name"] = check_name(checked["name"])
    return checked


def figures_of(kind: str, result: Result | None = None) -> Any:
    """The module that draws the figures of result kind ``kind`` (from the analysis registry).

    Args:
        kind: the result kind.
        result: the file it is asked for (named in the error).

    Returns:
        The module (or object) with ``check`` and ``plot``.

    Raises:
        LandscapeError: no registered analysis writes that kind.
    """
    try:
        return analysis_of(kind).figure_module()
    except LandscapeError:
        where = f"{result.path}: " if result is not None else ""
        raise LandscapeError(f"{where}no figures for result kind {kind!r}") from None


def named(results: Sequence[Result]) -> list[Result]:
    """``results`` with a file stem for each one held in memory: ``<model>_<kind>`` (numbered when shared).

    A result held in memory has no file name, which its figures' names (and legends) are made of.

    Args:
        results: results read from files or held in memory.

    Returns:
        The same results, those in memory named (copies; the arrays are shared).
    """
    out: list[Result] = []
    taken = {r.path.stem for r in results if not r.in_memory}
    for r in results:
        if r.in_memory:
            stem = base = safe_name(f"{model_name(r) if 'model' in r.attrs else 'result'}_{r.kind}")
            k = 1
            while stem in taken:
                k += 1
                stem = f"{base}_{k}"
            taken.add(stem)
            r = replace(r, path=Path(stem))
        out.append(r)
    return out


def _checked(items: Sequence[str | Path | Result]) -> tuple[dict[str, list[Result]], dict[str, Any]]:
    """The results of ``items`` (read when paths, named when in memory) by kind, checked; their figure modules."""
    if not items:
        raise LandscapeError("no result files given; pass one or more .h5 files written by landscape, or results")
    results = named([p if isinstance(p, Result) else read_result(p) for p in items])
    by_kind: dict[str, list[Result]] = {}
    for result in results:
        by_kind.setdefault(result.kind, []).append(result)
    modules = {kind: figures_of(kind, group[0]) for kind, group in by_kind.items()}
    for kind, group in by_kind.items():
        for result in group:
            modules[kind].check(result)
    return by_kind, modules


def iter_figures(kind: str, module: Any, group: list[Result], **options: Any) -> Iterator[tuple[str, Figure]]:
    """The figures of ``group`` (checked results of one ``kind``) by its module's ``figures``, drawn when due.

    Args:
        kind: the result kind.
        module: the kind's figure module.
        group: its checked results.
        **options: the drawing options (checked by :func:`check_options`).

    Yields:
        Each figure's name (its file's, without the suffix) and the figure.

    Raises:
        LandscapeError: an option does not fit a result, or the kind's module draws no figures in memory.
        UndrawableError: a result's values cannot be drawn.
    """
    draw = getattr(module, "figures", None)
    if draw is None:
        raise LandscapeError(f"the {kind} figures cannot be drawn in memory; write them with plot_files")
    drawn = draw(group, **options)
    while True:
        try:
            with np.errstate(all="ignore"):
                item = next(drawn)
        except StopIteration:
            return
        except (LandscapeError, MemoryError):
            raise
        except Exception as exc:
            raise undrawable(kind, group, exc) from exc
        yield item


def draw_figures(results: Sequence[str | Path | Result], **options: Any) -> dict[str, Figure]:
    """Every figure of ``results`` as matplotlib Figures in memory: those :func:`plot_files` writes, by name.

    Nothing is written. Results of one kind are drawn together (overlaid) as by :func:`plot_files`.

    Args:
        results: result files or results (read, or held in memory).
        **options: drawing options (see :func:`check_options` and each kind's ``figures``).

    Returns:
        Each figure by the name of its file without the suffix (a result held in memory is named
        ``<model>_<kind>``, see :func:`named`).

    Raises:
        LandscapeError: a file is missing, unreadable or inconsistent, or an option is invalid;
            :class:`UndrawableError`: a result's values cannot be drawn.
    """
    options = check_options("png", options)
    by_kind, modules = _checked(results)
    return {
        name: fig
        for kind, group in by_kind.items()
        for name, fig in iter_figures(kind, modules[kind], group, **options)
    }


def plot_files(
    paths: Sequence[str | Path | Result], out_dir: str | Path | None = None, fmt: str = "png", **options: Any
) -> list[Path]:
    """Draw every figure for the result files ``paths``; files of the same kind are overlaid.

    Every file's arrays and every option are checked before anything is drawn, and each figure is written
    atomically, so an error leaves the figures already in ``out_dir`` as they were.

    Args:
        paths: result files written by ``landscape``, or results (:class:`~landscape.store.read.Result`, read
            from a file or held in memory: such a one's figures are named ``<model>_<kind>_...``).
        out_dir: the folder for the figures (created if needed); default: the folder of the first file (a result
            held in memory has none: give ``out_dir``).
        fmt: ``png``, ``pdf`` or ``svg``.
        **options: drawing options (see :func:`check_options` and each kind's ``plot``).

    Returns:
        The written paths.

    Raises:
        LandscapeError: a file is missing, unreadable or inconsistent, an option is invalid, the folder
            cannot be created or written, no folder is given for a result held in memory first, or
            (:class:`UndrawableError`) a file's values cannot be drawn.
    """
    options = check_options(fmt, options)
    by_kind, modules = _checked(paths)
    first = paths[0]
    if out_dir is None and isinstance(first, Result) and first.in_memory:
        raise LandscapeError("the first result is held in memory, in no folder; give out_dir, the figures' folder")
    folder = Path(out_dir) if out_dir is not None else Path(first.path if isinstance(first, Result) else first).parent
    out = ensure_folder(folder)
    written: list[Path] = []
    for kind, group in by_kind.items():
        written += draw_kind(modules[kind], kind, group, out, fmt, **options)
    return written
