"""Reading a result file into memory (:class:`Result`) and describing it (``landscape info``)."""

from __future__ import annotations

import importlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from landscape.errors import LandscapeError, one_line
from landscape.store.attrs import as_str, decode
from landscape.store.files import file_type, os_error
from landscape.store.h5 import check_no_writer, open_h5, unreadable

#: :func:`describe` summarises a group of more than this many arrays (e.g. one per parameter) in one line
GROUP_SUMMARY = 8


#: the path a result held in memory is named by (the Python API without ``out=``)
MEMORY = "<memory>"
#: where the views of a result live: the registry's kinds (text, tables, xarray) and figures (plot, HTML). They
#: are loaded by name when asked for, as the registry loads each kind's figure module, so that the store (below
#: the analyses and the figures) never imports them
VIEWS = {"text": "landscape.analyses.view", "figures": "landscape.plot.view"}


def _view(which: str) -> Any:
    return importlib.import_module(VIEWS[which])


@dataclass(repr=False)
class Result:
    """A result read into memory (from a file, or from a run held in memory): attributes, arrays, their axes.

    ``result[name]`` is ``result.arrays[name]``; ``name in result`` asks whether that array exists;
    :meth:`attr` reads any attribute, of the root or of a group (``result.attr("trace/estimate")``). A result
    shows itself in a few lines (``repr``) and as HTML in Jupyter, and offers its kind's views: :meth:`summary`,
    :meth:`numbers`, :meth:`plot` (the figures of ``landscape plot``, in memory), :meth:`table` (the kind's
    tables, pandas) and :meth:`to_xarray` (every array with its axes). A result from a file and one held in
    memory behave the same.

    Attributes:
        path: the file read (``<memory>`` for a result held in memory).
        attrs: the root attributes, decoded (JSON strings back to dicts/lists).
        arrays: every dataset by its path in the file, e.g. ``"loss"`` or ``"eigenvectors/fc.weight"``.
        axes: the axis names of each array that has an ``axes`` attribute.
        attrs_at: the attributes of each group and array below the root, decoded, by path (an array's ``axes``
            are in :attr:`axes`), e.g. ``attrs_at["trace"]["estimate"]``; only those that have any.
    """

    path: Path
    attrs: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    axes: dict[str, list[str]] = field(default_factory=dict)
    attrs_at: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The result kind (the ``kind`` attribute: ``"surface"``, ``"hessian"``, ...)."""
        return str(self.attrs.get("kind"))

    @property
    def in_memory(self) -> bool:
        """Whether the result was never written to a file (the Python API without ``out=``)."""
        return str(self.path) == MEMORY

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def attr(self, name: str, default: Any = None) -> Any:
        """An attribute of the root (``"n_params"``) or of a group or array (``"trace/estimate"``).

        Args:
            name: the attribute's name, after its group's path and a ``/`` for one below the root.
            default: what to return when there is no such attribute.

        Returns:
            The decoded value, or ``default``.
        """
        where, _, key = name.rpartition("/")
        held = self.attrs_at.get(where, {}) if where else self.attrs
        return held.get(key, default)

    def summary(self) -> str:
        """The one-line summary of its kind's analysis (as ``landscape info`` prints it).

        Returns:
            The line; for a kind no analysis writes, or a file that contradicts itself, a line that says so.
        """
        return _view("text").summary(self)

    def inconsistency(self) -> str | None:
        """Why the result contradicts itself, by its kind's check (as ``landscape info`` and ``plot`` judge it).

        Returns:
            The first line of the contradiction (e.g. a file marked complete with points not done), or None.
        """
        return _view("text").inconsistency(self)

    def numbers(self) -> dict[str, str]:
        """Its cells of the report's summary table (column -> text), as its analysis declares them.

        Returns:
            The cells; empty for a kind that declares none.
        """
        return _view("text").numbers(self)

    def tables(self) -> list[str]:
        """The names of the tables its kind declares that this result holds (see :meth:`table`).

        Returns:
            The names, in the order the kind declares them (e.g. ``["line", "curve", "barriers"]``).
        """
        return _view("text").table_names(self)

    def table(self, name: str | None = None) -> Any:
        """One of its kind's tables as a ``pandas.DataFrame`` (needs the ``xarray`` extra, which brings pandas).

        Each kind declares its tables in its registration (``landscape.analyses.registry.Table``): rows are
        the entries of some axes (a connect path's splits and points, a sharpness run's radii, a per-block
        Hessian's blocks, a spectrum's batches and ranks), indexed by their coordinates, one column per array.

        Args:
            name: the table, one of :meth:`tables`; ``None`` for the kind's first.

        Returns:
            The table, its values equal to the arrays' (or attributes') values.

        Raises:
            LandscapeError: pandas is not installed, the kind declares no such table, or this result lacks its
                arrays.
        """
        return _view("text").table(self, name)

    def to_xarray(self) -> Any:
        """Every array that names its axes, as one ``xarray.Dataset`` (needs the ``xarray`` extra).

        Dimensions are the arrays' ``axes``; a dimension that arrays give different lengths (a probe of the
        density and one of the trace) is named after each array's group (``density/probe``, ``trace/probe``),
        or its path. Coordinates are the arrays the kind declares for its axes (a surface's ``x`` is
        ``xcoordinates``). The root attributes are the dataset's, a group's are there as ``group/name``, an
        array's own are its variable's.

        Returns:
            The dataset; its variables are the arrays by their paths (``"density/values"``).

        Raises:
            LandscapeError: xarray is not installed.
        """
        return _view("text").to_xarray(self)

    def plot(self, **options: Any) -> dict[str, Any]:
        """Its kind's figures as matplotlib Figures in memory: those ``landscape plot`` draws, nothing written.

        Args:
            **options: the drawing options of :func:`landscape.plot.plot_files` (``log``, ``zmax``, ...).

        Returns:
            Each figure by its name without the file's stem (``"contour"``, ``"density"``, ...).

        Raises:
            LandscapeError: the result's arrays cannot be drawn (an unfinished or inconsistent file), or an
                option is invalid.
        """
        return _view("figures").figures(self, **options)

    def __repr__(self) -> str:
        return _view("text").short_repr(self)

    def _repr_html_(self) -> str:
        return _view("figures").html(self)


def read_result(path: str | Path) -> Result:
    """Read every attribute and array of a result file.

    Args:
        path: the result file.

    Returns:
        The :class:`Result` with every root attribute, every dataset (strings as unicode arrays) and its axes.

    Raises:
        LandscapeError: the file does not exist, is being written by a live process, cannot be read, is not
            HDF5 (or is damaged), or has no ``kind`` attribute.
    """
    path = Path(path)
    if not path.exists():
        raise LandscapeError(f"{path} does not exist; give the path of a result file written by landscape")
    kind = path.stat().st_mode
    if not stat.S_ISREG(kind):
        raise LandscapeError(f"{path} is {file_type(kind)}, not a result file; give the path of an .h5 file")
    check_no_writer(path)
    try:
        f = open_h5(path)
    except PermissionError as exc:
        raise os_error(exc, path, "read") from exc
    except OSError:
        raise unreadable(path, reading=True) from None
    with f:
        try:
            return result_of(f, path, limit=max(MIN_DECLARED_LIMIT, DECLARED_RATIO * path.stat().st_size))
        except (OSError, RuntimeError, KeyError) as exc:  # HDF5 met a truncated or damaged object inside
            raise unreadable(path, reading=True) from exc


#: an array read from a file may declare at most this many times the file's bytes (HDF5 leaves unwritten
#: chunks out of the file, so a declared size is no proof of data) ...
DECLARED_RATIO = 1024
#: ... or this many bytes, whichever is more; a larger declaration is a damaged or crafted file
MIN_DECLARED_LIMIT = 1 << 30


def _axes(value: Any, name: str, path: str | Path) -> list[str]:
    """An array's ``axes`` attribute: a JSON list of distinct axis names (else one line naming file and array)."""
    try:
        axes = json.loads(as_str(value))
    except (ValueError, TypeError, RecursionError):
        axes = None
    if not isinstance(axes, list) or not all(isinstance(a, str) for a in axes):
        raise LandscapeError(f"{path}: the axes attribute of {name!r} is not a JSON list of names; the file is damaged")
    if len(set(axes)) < len(axes):
        raise LandscapeError(f"{path}: the axes attribute of {name!r} repeats a name ({axes}); the file is damaged")
    return axes


def result_of(f: h5py.File, path: str | Path, *, limit: int | None = None) -> Result:
    """Every attribute and array of an open (self-contained) result file, read into memory.

    Args:
        f: the open file (on disk or in memory).
        path: what to call it (the file's path, or :data:`MEMORY`).
        limit: the most bytes one array may declare (None: no limit; see :data:`DECLARED_RATIO`).

    Returns:
        The :class:`Result`.

    Raises:
        LandscapeError: the file has no ``kind`` attribute, an ``axes`` attribute is not a list of names, or an
            array declares more bytes than ``limit`` or than memory holds.
    """
    attrs = {k: decode(v) for k, v in f.attrs.items()}
    if "kind" not in attrs:
        raise LandscapeError(f"{path} is not a landscape result (no 'kind' attribute)")
    result = Result(Path(path), attrs)

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            declared = int(obj.size or 0) * obj.dtype.itemsize
            if limit is not None and declared > limit:
                raise LandscapeError(
                    f"{path}: array {name!r} declares {tuple(obj.shape)} x {obj.dtype} ({declared:,} bytes) in a file "
                    f"of {os.path.getsize(path):,} bytes; the file is damaged or crafted"
                )
            try:
                data = obj[()]
                if obj.dtype.kind == "O" or h5py.check_string_dtype(obj.dtype) is not None:
                    data = np.asarray(obj.asstr(errors="backslashreplace")[()])
            except MemoryError:
                raise LandscapeError(
                    f"{path}: array {name!r} ({tuple(obj.shape)} x {obj.dtype}) does not fit in memory"
                ) from None
            result.arrays[name] = np.asarray(data)
            if "axes" in obj.attrs:
                result.axes[name] = _axes(obj.attrs["axes"], name, path)

        own = {k: decode(v) for k, v in obj.attrs.items() if k != "axes"}
        if own:
            result.attrs_at[name] = own

    f.visititems(visit)
    return result


def describe(path: str | Path | Result, summary: str | None = None) -> str:
    """A human-readable summary of a result file: kind, provenance, options and arrays with their axes.

    A group of more than :data:`GROUP_SUMMARY` arrays is summarised in one line.

    Args:
        path: the result file, or the file already read.
        summary: a one-line summary to put under the first line (its analysis's, see
            :func:`landscape.analyses.registry.summarize`).

    Returns:
        The summary, one line per attribute and per array (dtype, shape, axes; done counts for ``done``), and
        one line per group or array with attributes of its own (e.g. ``trace: estimate=..., stderr=...``).

    Raises:
        LandscapeError: the file cannot be read (see :func:`read_result`).
    """
    result = path if isinstance(path, Result) else read_result(path)
    lines = [f"{result.path}: {result.kind} result" + ("" if result.attrs.get("complete") else " (incomplete)")]
    if summary is not None:
        lines.append(f"  summary: {summary}")
    for key in sorted(result.attrs):
        if key == "identity":
            continue
        lines.append(f"  {key}: {result.attrs[key]}")
    lines.append("  arrays:")
    groups = large_groups(result.arrays)
    shown: set[str] = set()
    for name, arr in sorted(result.arrays.items()):
        group = name.rpartition("/")[0]
        if group in groups:  # e.g. one array per parameter: one line
            if group not in shown:
                shown.add(group)
                members = [result.arrays[member] for member in groups[group]]
                dtypes = ",".join(sorted({str(a.dtype) for a in members}))
                lines.append(f"    {group}/: {len(members)} arrays, {sum(a.size for a in members)} values ({dtypes})")
            continue
        axes = result.axes.get(name)
        extra = f" ({int(arr.sum())} of {arr.size} done)" if name == "done" and arr.dtype == bool else ""
        lines.append(f"    {name}: {arr.dtype} {tuple(arr.shape)}" + (f" axes={axes}" if axes else "") + extra)
    if result.attrs_at:
        lines.append("  attributes of groups and arrays:")
        for where, values in sorted(result.attrs_at.items()):
            lines.append(f"    {where}: " + ", ".join(f"{k}={v}" for k, v in sorted(values.items())))
    return "\n".join(one_line(line) for line in lines)  # values from the file cannot start a line


def large_groups(arrays: dict[str, np.ndarray]) -> dict[str, list[str]]:
    """The groups of more than :data:`GROUP_SUMMARY` arrays, which descriptions summarise (e.g. one per parameter).

    Args:
        arrays: arrays by their path in the file (:attr:`Result.arrays`).

    Returns:
        Each such group's path (the part of its arrays' paths before the last ``/``) -> its arrays' paths.
    """
    groups: dict[str, list[str]] = {}
    for name in arrays:
        group = name.rpartition("/")[0]
        if group:
            groups.setdefault(group, []).append(name)
    return {group: names for group, names in groups.items() if len(names) > GROUP_SUMMARY}
