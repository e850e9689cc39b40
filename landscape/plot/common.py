"""What every figure module shares: the array schema check, legend labels, colours, markers, axes and saving.

- :class:`Schema` / :func:`check_arrays`: the arrays a result kind must (or may) hold, with their shapes
  written in named dimensions, so that inconsistent files are one-line errors before anything is drawn.
- :func:`captioned` / :func:`caption_of` / :func:`read_caption`: what a figure draws, attached by the code that
  draws it and written into the file's metadata.
- :func:`save_figures`: every figure is written through :func:`landscape.store.files.atomic_write` (an exclusive
  temporary in the target folder, moved into place), so a planted symlink is never followed and a failed
  write never leaves a half-written figure.
"""

from __future__ import annotations

import hashlib
import html
import io
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from landscape.errors import LandscapeError
from landscape.store.attrs import as_str
from landscape.store.files import WRITTEN_BY, atomic_write
from landscape.store.read import Result
from landscape.version import __version__

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
        nonnegative: whether no value may be below 0 (NaN is allowed unless ``finite``).
        flag: whether every value must be 0 or 1 (a done mask: booleans, or numbers that are 0 or 1).
        increasing: whether the values must rise strictly with finite steps (grid coordinates): ``x[i + 1] -
            x[i]`` finite and ``> 0``.
    """

    dims: tuple[Dim, ...]
    text: bool = False
    finite: bool = False
    nonnegative: bool = False
    flag: bool = False
    increasing: bool = False


@dataclass(frozen=True)
class Schema:
    """The arrays of one result kind.

    Attributes:
        kind: the result kind (also the ``landscape`` command that writes it).
        required: arrays every file of the kind holds.
        optional: arrays a file may hold; a name ending in ``/*`` stands for every array of that group.
        together: groups of optional names that a file holds all or none of.
        writer: the command that writes the kind, named in the errors (None: ``landscape <kind>``).
        done: the done masks (:attr:`Array.flag` arrays) that a file marked ``complete`` must have all set.
        numbers: root attributes that, where a file has them (not None), must be a finite number or a list of them.
    """

    kind: str
    required: Mapping[str, Array]
    optional: Mapping[str, Array] = field(default_factory=dict)
    together: Sequence[Sequence[str]] = ()
    writer: str | None = None
    done: Sequence[str] = ()
    numbers: Sequence[str] = ()


def check_arrays(result: Result, schema: Schema) -> None:
    """Check that ``result`` holds the arrays of ``schema`` with consistent shapes and the right kind of values.

    Args:
        result: a result file read by :func:`landscape.store.read.read_result`.
        schema: the arrays of its kind.

    Raises:
        LandscapeError: the file is of another kind, lacks an array, holds one of the wrong shape or type or
            with values it may not hold (:class:`Array`), is marked complete with a done mask not all set, or
            has a number attribute (:attr:`Schema.numbers`) that is not a finite number.
    """
    if result.kind != schema.kind:
        raise LandscapeError(f"{result.path} holds a {result.kind} result, not a {schema.kind} result")
    redo = f"recompute it with `{schema.writer or 'landscape ' + schema.kind} ... --force`"
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
        _check_values(result, name, arr, spec, redo)
    _check_done(result, schema, redo)
    _check_number_attrs(result, schema, redo)


def _check_values(result: Result, name: str, arr: np.ndarray, spec: Array, redo: str) -> None:
    """Refuse values ``spec`` does not allow: not finite, negative, a flag not 0 or 1, coordinates that do not rise."""
    if (spec.finite or spec.increasing) and not np.all(np.isfinite(arr)):
        raise LandscapeError(f"{result.path}: array {name!r} holds values that are not finite; {redo}")
    if spec.nonnegative and np.any(arr < 0):
        raise LandscapeError(f"{result.path}: array {name!r} holds negative values, which it cannot; {redo}")
    if spec.flag and not np.all((arr == 0) | (arr == 1)):
        raise LandscapeError(f"{result.path}: array {name!r} holds values other than 0 and 1 (a done mask); {redo}")
    if spec.increasing:
        with np.errstate(over="ignore", invalid="ignore"):
            steps = np.diff(np.asarray(arr, dtype=float))
        if not np.all(np.isfinite(steps) & (steps > 0)):
            raise LandscapeError(
                f"{result.path}: array {name!r} does not rise strictly in finite steps (coordinates of a grid); {redo}"
            )


def _check_done(result: Result, schema: Schema, redo: str) -> None:
    """Refuse a file marked complete whose done masks are not all set: it would be read as finished."""
    if not result.attrs.get("complete"):
        return
    for name in schema.done:
        if name in result and not np.all(result[name]):
            mask = result[name].astype(bool)
            raise LandscapeError(
                f"{result.path}: the file is marked complete but {int(mask.size - mask.sum())} of the {mask.size} "
                f"entries of {name!r} are not done; resume the run with the same options, or {redo}"
            )


def _check_number_attrs(result: Result, schema: Schema, redo: str) -> None:
    """Refuse a number attribute (:attr:`Schema.numbers`) that is not a finite number or a list of them."""
    for key in schema.numbers:
        value = result.attrs.get(key)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in values) or not (
            np.all(np.isfinite(np.asarray(values, dtype=float)))
        ):
            raise LandscapeError(f"{result.path}: attribute {key}={value!r} is not a finite number; {redo}")


#: the most characters of a name read from a file (a model, a file name) that a title, legend or folder shows
SHOWN_CHARS = 60
_HIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def shown(text: object) -> str:
    """A name read from a file (a ``model`` attribute, a file name) as a title, legend or folder may show it.

    Bytes that are not UTF-8 and control characters (a newline, a carriage return, DEL, U+0085 ...) become
    backslash escapes; a name longer than :data:`SHOWN_CHARS` keeps its start and ends with ``…`` and 8 hex
    digits of its SHA-256, so that two long names stay apart.

    Args:
        text: the name (any value: it is shown as text).

    Returns:
        At most :data:`SHOWN_CHARS` printable characters.
    """
    text = _HIDDEN.sub(lambda m: repr(m.group())[1:-1], as_str(text))
    if len(text) <= SHOWN_CHARS:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: SHOWN_CHARS - 9]}…{digest}"


def model_name(result: Result) -> str:
    """The model a result was computed for, as it may be shown (:func:`shown`).

    Args:
        result: a result file.

    Returns:
        Its ``model`` attribute, else the file's stem.
    """
    return shown(result.attrs.get("model", result.path.stem))


def labels(results: Sequence[Result]) -> list[str]:
    """One legend label per file.

    Args:
        results: the files of one figure.

    Returns:
        The model name of each (:func:`model_name`), plus the file's stem when two files share a model.
    """
    models = [model_name(r) for r in results]
    return [m if models.count(m) == 1 else f"{m} ({shown(r.path.stem)})" for m, r in zip(models, results)]


#: how many model names an overlay's file name lists before it says "and N more"
NAMED_IN_FILE = 3
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """``text`` as a piece of a file name: runs of other characters than letters, digits, ``._-`` become ``_``.

    Args:
        text: e.g. a model's name (``timm:vit_tiny``).

    Returns:
        The piece (``timm_vit_tiny``); ``result`` when nothing is left.
    """
    return _UNSAFE.sub("_", text).strip("._") or "result"


def figure_name(kind: str, results: Sequence[Result], name: str | None = None) -> str:
    """The file name (without extension) of a figure of ``kind`` drawn from all of ``results`` together.

    One file: ``<stem>_<kind>`` (e.g. ``resnet_mini_spectrum_spectrum``). Several files (an overlay):
    ``<kind>_<a>_vs_<b>_vs_<c>`` naming the models overlaid (their file stems when two files share a model);
    past :data:`NAMED_IN_FILE` files, the first two and ``and_<N>_more``. A ``name`` given by the user
    (``landscape plot --name``) replaces the stem or the list of models: ``<name>_<kind>``.

    Args:
        kind: what the figure shows (``spectrum``, ``high_frequency``, ...).
        results: the files the figure draws (at least one).
        name: a name chosen by the user (checked by :func:`check_name`), or ``None``.

    Returns:
        The file name, of letters, digits and ``._-`` only.
    """
    if name is not None:
        return f"{safe_name(name)}_{kind}"
    if len(results) == 1:
        return f"{results[0].path.stem}_{kind}"
    models = [model_name(r) for r in results]
    if len(set(models)) < len(models):
        models = [r.path.stem for r in results]
    parts = [safe_name(m) for m in models]
    more = f"_and_{len(parts) - 2}_more" if len(parts) > NAMED_IN_FILE else ""
    return f"{kind}_" + "_vs_".join(parts[:2] if more else parts) + more


def check_name(name: str | None) -> str | None:
    """Check a figure name given by the user (``--name``): a plain file-name stem.

    Args:
        name: the name, or ``None`` (figures named after their files).

    Returns:
        ``name``.

    Raises:
        LandscapeError: ``name`` is empty, too long, or holds characters other than letters, digits and
            ``._-`` (a path separator among them), or starts with ``.`` or ``-``.
    """
    if name is None:
        return None
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}", name):
        raise LandscapeError(
            f"--name must be 1 to 100 letters, digits, '.', '_' or '-' (not starting with '.' or '-', "
            f"no path separators), got {name!r}"
        )
    return name


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


#: the metadata key of a figure file that holds its caption, by format
CAPTION_KEYS = {"png": "Description", "svg": "Description", "pdf": "Subject"}


def captioned(fig: Figure, caption: str) -> Figure:
    """Attach to ``fig`` what it draws, in one or two sentences made from the drawing's own choices.

    The caption travels with the figure: :func:`caption_of` reads it in memory, :func:`save_figures` writes it
    into the file's metadata (:data:`CAPTION_KEYS`) and :func:`read_caption` reads it back (the report's captions).

    Args:
        fig: the figure.
        caption: what it draws (its levels, scales, clipping, what is left out).

    Returns:
        ``fig``.
    """
    fig.landscape_caption = " ".join(caption.split())  # type: ignore[attr-defined]
    return fig


def caption_of(fig: Figure) -> str:
    """What ``fig`` draws, as :func:`captioned` attached it (``""`` for a figure without a caption).

    Args:
        fig: the figure.

    Returns:
        The caption.
    """
    return str(getattr(fig, "landscape_caption", ""))


def read_caption(content: bytes, fmt: str) -> str:
    """The caption a figure written by :func:`save_figures` holds in its metadata (``""`` when none or unreadable).

    Args:
        content: the figure file's bytes (read by the caller, who decides how a file may be opened).
        fmt: ``png`` or ``svg`` (a PDF's caption is its ``Subject``, not read here).

    Returns:
        The caption.
    """
    if fmt == "svg":
        found = re.search(r"<dc:description>(.*?)</dc:description>", content.decode("utf-8", errors="replace"), re.S)
        return html.unescape(found.group(1)) if found else ""
    if fmt == "png":
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(content)) as image:
                return str(getattr(image, "text", {}).get(CAPTION_KEYS["png"], ""))
        except (OSError, UnidentifiedImageError, ValueError):
            return ""
    return ""


def figure_metadata(fmt: str, caption: str = "") -> dict[str, str]:
    """The metadata every figure carries: who wrote it, with the mark of a file landscape wrote, and its caption.

    See :func:`landscape.store.files.written_by_landscape`.

    Args:
        fmt: ``png``, ``pdf`` or ``svg``.
        caption: what the figure draws (:func:`caption_of`); left out when empty.

    Returns:
        The ``metadata`` argument of ``Figure.savefig`` (PNG: ``Software``; PDF and SVG: ``Creator``; the
        caption under :data:`CAPTION_KEYS`).
    """
    meta = {"Software" if fmt == "png" else "Creator": f"landscape {__version__} ({WRITTEN_BY})"}
    if caption:
        meta[CAPTION_KEYS[fmt]] = caption
    return meta


def save_figures(figures: Iterable[tuple[str, Figure]], out_dir: Path, fmt: str, *, force: bool = False) -> list[Path]:
    """Write each ``(name, figure)`` to ``out_dir/name.fmt`` atomically (never through a symlink, never half-written).

    A figure replaces a file of its name only when landscape wrote that file, or with ``force``; never what is
    not a regular file (:func:`landscape.store.files.check_replaceable`).

    Args:
        figures: file names without their extension, with their figures (a generator draws each when it is due).
        out_dir: an existing folder.
        fmt: ``png``, ``pdf`` or ``svg``.
        force: replace files of those names that landscape did not write, and symbolic links (never followed).

    Returns:
        The paths written, in order.

    Raises:
        LandscapeError: a file of a figure's name may not be replaced, or the folder cannot be written
            (permission denied, disk full, ...).
    """
    written = []
    for name, fig in figures:
        path = Path(out_dir) / f"{name}.{fmt}"
        with atomic_write(path, force=force, kind="figure") as handle:
            meta = figure_metadata(fmt, caption_of(fig))
            fig.savefig(handle, format=fmt, dpi=DPI, bbox_inches="tight", metadata=meta)
        written.append(path)
    return written


def wrapped(text: str, width: int = 48) -> str:
    """A title broken into lines of at most ``width`` characters (at spaces), so that it fits a small figure.

    Args:
        text: the title.
        width: the most characters per line; 48 fit a 6 inch wide figure at 11 points.

    Returns:
        ``text`` with newlines between its lines (a word longer than ``width`` stays whole).
    """
    return "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)) or text
