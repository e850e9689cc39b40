"""What every figure module shares: the array schema check, legend labels, colours, markers, axes and saving.

- :class:`Schema` / :func:`check_arrays`: the arrays a result kind must (or may) hold, with their shapes
  written in named dimensions, so that inconsistent files are one-line errors before anything is drawn.
- :func:`save_figures`: every figure is written through :func:`landscape.files.atomic_write` (an exclusive
  temporary in the target folder, moved into place), so a planted symlink is never followed and a failed
  write never leaves a half-written figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from landscape.errors import LandscapeError
from landscape.files import atomic_write
from landscape.store import Result

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: resolution of raster figures (png)
DPI = 150

#: one dimension of an array: a name shared by arrays of equal length, a fixed length, or None (any length)
Dim = str | int | None


@dataclass(frozen=True)
class Array:
    """What one array of a result must look like.

    Attributes:
        dims: one entry per axis (see :data:`Dim`); arrays naming the same dimension must agree on its length,
            and a named dimension must not be empty.
        text: whether the array holds strings (otherwise numbers or booleans).
        finite: whether every value must be finite.
    """

    dims: tuple[Dim, ...]
    text: bool = False
    finite: bool = False


@dataclass(frozen=True)
class Schema:
    """The arrays of one result kind.

    Attributes:
        kind: the result kind (also the ``landscape`` command that writes it).
        required: arrays every file of the kind holds.
        optional: arrays a file may hold; a name ending in ``/*`` stands for every array of that group.
        together: groups of optional names that a file holds all or none of.
    """

    kind: str
    required: Mapping[str, Array]
    optional: Mapping[str, Array] = field(default_factory=dict)
    together: Sequence[Sequence[str]] = ()


def check_arrays(result: Result, schema: Schema) -> None:
    """Check that ``result`` holds the arrays of ``schema`` with consistent shapes and the right kind of values.

    Args:
        result: a result file read by :func:`landscape.store.read_result`.
        schema: the arrays of its kind.

    Raises:
        LandscapeError: the file is of another kind, lacks an array, or holds one of the wrong shape or type.
    """
    if result.kind != schema.kind:
        raise LandscapeError(f"{result.path} holds a {result.kind} result, not a {schema.kind} result")
    redo = f"recompute it with `landscape {schema.kind} ... --force`"
    for name in schema.required:
        if name not in result:
            raise LandscapeError(
                f"{result.path}: the {schema.kind} result has no array {name!r} (the run that wrote "
                f"it did not finish, or the file was changed); {redo}"
            )
    for group in schema.together:
        present = [n for n in group if n in result]
        if present and len(present) < len(group):
            missing = next(n for n in group if n not in result)
            raise LandscapeError(f"{result.path}: array {present[0]!r} comes without {missing!r}; {redo}")
    checked = list(schema.required.items())
    for name, spec in schema.optional.items():
        if name.endswith("/*"):
            checked += [(n, spec) for n in sorted(result.arrays) if n.startswith(name[:-1])]
        elif name in result:
            checked.append((name, spec))
    sizes: dict[str, tuple[int, str]] = {}  # dimension -> (length, the array that fixed it)
    for name, spec in checked:
        arr = result[name]
        want = "(" + ", ".join("any" if d is None else str(d) for d in spec.dims) + ")"
        if arr.ndim != len(spec.dims):
            raise LandscapeError(
                f"{result.path}: array {name!r} has shape {arr.shape}, expected {len(spec.dims)} axes {want}; {redo}"
            )
        for axis, (dim, length) in enumerate(zip(spec.dims, arr.shape)):
            if isinstance(dim, int) and length != dim:
                raise LandscapeError(f"{result.path}: array {name!r} has shape {arr.shape}, expected {want}; {redo}")
            if isinstance(dim, str):
                if length == 0:
                    raise LandscapeError(f"{result.path}: array {name!r} is empty along {dim}; {redo}")
                known, source = sizes.setdefault(dim, (length, name))
                if known != length:
                    raise LandscapeError(
                        f"{result.path}: array {name!r} has {length} entries along {dim} (axis "
                        f"{axis}) but {source!r} has {known}; the arrays do not fit together; {redo}"
                    )
        is_text = arr.dtype.kind in "OUS"
        if is_text != spec.text or (not is_text and arr.dtype.kind not in "biuf"):
            raise LandscapeError(
                f"{result.path}: array {name!r} holds {arr.dtype} values, expected "
                f"{'text' if spec.text else 'numbers'}; {redo}"
            )
        if spec.finite and not np.all(np.isfinite(arr)):
            raise LandscapeError(f"{result.path}: array {name!r} holds values that are not finite; {redo}")


def model_name(result: Result) -> str:
    """The model a result was computed for.

    Args:
        result: a result file.

    Returns:
        Its ``model`` attribute, else the file's stem.
    """
    return str(result.attrs.get("model", result.path.stem))


def labels(results: Sequence[Result]) -> list[str]:
    """One legend label per file.

    Args:
        results: the files of one figure.

    Returns:
        The model name of each (:func:`model_name`), plus the file's stem when two files share a model.
    """
    models = [model_name(r) for r in results]
    return [m if models.count(m) == 1 else f"{m} ({r.path.stem})" for m, r in zip(models, results)]


def group_stem(results: Sequence[Result]) -> str:
    """The file-name stem of a figure that overlays ``results``.

    Args:
        results: the files of the figure (at least one).

    Returns:
        The first file's stem, plus ``+N`` when N more files are overlaid.
    """
    return results[0].path.stem + (f"+{len(results) - 1}" if len(results) > 1 else "")


def color(i: int) -> str:
    """The colour of the ``i``-th file of a figure.

    Args:
        i: the file's position in the figure.

    Returns:
        matplotlib's cycle colour ``C0``..``C9``, repeating.
    """
    return f"C{i % 10}"


def marker(i: int) -> str:
    """The marker of the ``i``-th file of a figure.

    Args:
        i: the file's position in the figure.

    Returns:
        One of :data:`MARKERS`, repeating.
    """
    return MARKERS[i % len(MARKERS)]


def single_axes(figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """A new figure with one axes.

    Args:
        figsize: width and height in inches (constrained layout).

    Returns:
        The figure and its axes.
    """
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def zero_line(ax: Axes) -> None:
    """Draw a light horizontal line at ``y = 0`` behind the data.

    Args:
        ax: the axes.
    """
    ax.axhline(0, color="0.8", lw=0.8, zorder=0)


def pi_ticks(ax: Axes, xlabel: str) -> None:
    """Make the x axis a frequency axis over ``[0, 1]`` in units of pi (ticks ``0.0π`` .. ``1.0π``).

    Args:
        ax: the axes.
        xlabel: the axis label.
    """
    ticks = np.linspace(0, 1, 6)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:.1f}π" for t in ticks])
    ax.set_xlim(0, 1)
    ax.set_xlabel(xlabel)


def save_figures(figures: Iterable[tuple[str, Figure]], out_dir: Path, fmt: str) -> list[Path]:
    """Write each ``(name, figure)`` to ``out_dir/name.fmt`` atomically (never through a symlink, never half-written).

    Args:
        figures: file names without their extension, with their figures (a generator draws each when it is due).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.

    Returns:
        The paths written, in order.

    Raises:
        LandscapeError: the folder cannot be written (permission denied, disk full, ...).
    """
    written = []
    for name, fig in figures:
        path = Path(out_dir) / f"{name}.{fmt}"
        with atomic_write(path) as handle:
            fig.savefig(handle, format=fmt, dpi=DPI, bbox_inches="tight")
        written.append(path)
    return written
