"""Reading a result file into memory (:class:`Result`) and describing it (``landscape info``)."""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from landscape.errors import LandscapeError
from landscape.store.attrs import as_str, decode
from landscape.store.files import (
    file_type,
    os_error,
)
from landscape.store.h5 import check_no_writer, open_h5, unreadable

#: :func:`describe` summarises a group of more than this many arrays (e.g. one per parameter) in one line
GROUP_SUMMARY = 8


@dataclass
class Result:
    """A result file read into memory: root attributes, arrays by path, and each array's axes.

    ``result[name]`` is ``result.arrays[name]``; ``name in result`` asks whether that array exists.

    Attributes:
        path: the file read.
        attrs: the root attributes, decoded (JSON strings back to dicts/lists).
        arrays: every dataset by its path in the file, e.g. ``"loss"`` or ``"eigenvectors/fc.weight"``.
        axes: the axis names of each array that has an ``axes`` attribute.
    """

    path: Path
    attrs: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    axes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The result kind ("surface", "hessian", "fourier" or "spectrum")."""
        return str(self.attrs.get("kind"))

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __contains__(self, name: str) -> bool:
        return name in self.arrays


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
        raise unreadable(path) from None
    with f:
        return result_of(f, path)


def result_of(f: h5py.File, path: str | Path) -> Result:
    """Every attribute and array of an open (self-contained) result file, read into memory.

    Args:
        f: the open file (on disk or in memory).
        path: what to call it (the file's path, or ``<memory>``).

    Returns:
        The :class:`Result`.

    Raises:
        LandscapeError: the file has no ``kind`` attribute.
    """
    attrs = {k: decode(v) for k, v in f.attrs.items()}
    if "kind" not in attrs:
        raise LandscapeError(f"{path} is not a landscape result (no 'kind' attribute)")
    result = Result(Path(path), attrs)

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            data = obj[()]
            if obj.dtype.kind == "O" or h5py.check_string_dtype(obj.dtype) is not None:
                data = np.asarray(obj.asstr()[()])
            result.arrays[name] = np.asarray(data)
            if "axes" in obj.attrs:
                result.axes[name] = json.loads(as_str(obj.attrs["axes"]))

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
        The summary, one line per attribute and per array (dtype, shape, axes; done counts for ``done``).

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
    return "\n".join(lines)


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
