"""The HDF5 result files: create, resume, append-and-flush, read, describe.

One file per run. Root attributes hold the kind, the provenance and the analysis options; arrays name
their axes in an ``axes`` attribute. A file is first written complete-but-empty under a temporary name and
moved into place, then filled point by point with a flush after each write, so a run killed at any moment
leaves a valid file that a rerun of the same command resumes. The attribute ``identity`` (JSON of every
option that determines the numbers) decides whether an existing file belongs to the same run.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from landscape import __version__
from landscape.errors import LandscapeError

KINDS = ("surface", "hessian", "fourier", "spectrum")
#: :func:`describe` summarises a group of more than this many arrays (e.g. one per parameter) in one line
GROUP_SUMMARY = 8
#: attributes that describe how a run happened, not what it computes; they never block a resume
VOLATILE = frozenset({"created", "command", "landscape_version", "torch_version", "device", "complete", "identity"})


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, str) and value[:1] in "[{n" and value not in ("nan",):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def identity_of(attrs: Mapping[str, Any]) -> str:
    """Canonical JSON of the attributes that determine a run's numbers (all but :data:`VOLATILE`)."""
    kept = {k: _encode(v) for k, v in attrs.items() if k not in VOLATILE}
    return json.dumps(kept, sort_keys=True, default=str)


def now() -> str:
    """The current UTC time in ISO 8601."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _open_h5(path: Path, mode: str, not_hdf5: str) -> h5py.File:
    """Open an existing file; a file held by a running writer and a file that is not HDF5 are one-line errors."""
    try:
        return h5py.File(path, mode)
    except OSError as exc:
        if "lock" in str(exc):
            raise LandscapeError(f"{path} is being written by a running analysis; wait for that run to end") from exc
        raise LandscapeError(f"{path} {not_hdf5}") from exc


def open_result(
    path: str | Path, kind: str, attrs: Mapping[str, Any], *, force: bool = False
) -> tuple[h5py.File, bool]:
    """Open ``path`` for writing a result of ``kind``; return ``(file, resumed)``.

    A new file is created with ``attrs`` (plus ``kind``, ``created``, ``landscape_version``). An existing
    file with the same kind and identity is reopened to resume (``resumed=True``). An existing file from
    other options is an error unless ``force``, which deletes it first. A file that is not HDF5 is never
    overwritten without ``force``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown result kind {kind!r}")
    path = Path(path)
    full = {"kind": kind, **attrs}
    identity = identity_of(full)
    if path.exists() and not force:
        f = _open_h5(path, "r+", "exists and is not a readable HDF5 file; use --force to overwrite it")
        old_kind = _decode(f.attrs.get("kind"))
        old_identity = _as_str(f.attrs.get("identity", "{}"))
        if old_kind == kind and old_identity == identity:
            return f, True
        f.close()
        theirs = json.loads(old_identity)
        ours = json.loads(identity)
        differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        detail = f" (differs in: {', '.join(differ[:6])})" if differ else ""
        raise LandscapeError(
            f"{path} holds a {old_kind or 'different'} result from other options{detail}; "
            "use --force to overwrite it or --out to write elsewhere"
        )
    if path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        for key, value in full.items():
            f.attrs[key] = _encode(value)
        f.attrs["identity"] = identity
        f.attrs["created"] = now()
        f.attrs["landscape_version"] = __version__
        f.attrs["complete"] = False
    os.replace(tmp, path)
    return h5py.File(path, "r+"), False


def require_dataset(
    f: h5py.File, name: str, shape: Sequence[int], dtype: Any, *, fill: Any = 0, axes: Sequence[str] | None = None
) -> h5py.Dataset:
    """Return dataset ``name``, creating it filled with ``fill`` (and its ``axes`` attribute) if absent."""
    if name in f:
        ds = f[name]
        if tuple(ds.shape) != tuple(shape):
            raise LandscapeError(
                f"{f.filename}: dataset {name} has shape {ds.shape}, expected {tuple(shape)}; use --force"
            )
        return ds
    ds = f.create_dataset(name, shape=tuple(shape), dtype=dtype, fillvalue=fill)
    if axes is not None:
        ds.attrs["axes"] = json.dumps(list(axes))
    f.flush()
    return ds


def write_array(f: h5py.File, name: str, data: Any, *, axes: Sequence[str] | None = None) -> h5py.Dataset:
    """Write a whole array (replacing an existing one) with its ``axes`` attribute, then flush."""
    if name in f:
        del f[name]
    arr = np.asarray(data)
    if arr.dtype.kind == "U":
        ds = f.create_dataset(name, data=arr.astype(object), dtype=h5py.string_dtype())
    else:
        ds = f.create_dataset(name, data=arr)
    if axes is not None:
        ds.attrs["axes"] = json.dumps(list(axes))
    f.flush()
    return ds


def set_attrs(f: h5py.File | h5py.Group | h5py.Dataset, values: Mapping[str, Any]) -> None:
    """Set attributes (dicts, lists and None stored as JSON)."""
    for key, value in values.items():
        f.attrs[key] = _encode(value)


def mark_complete(f: h5py.File) -> None:
    """Record that every point of the run is done and flush."""
    f.attrs["complete"] = True
    f.flush()


@dataclass
class Result:
    """A result file read into memory: root attributes, arrays by path, and each array's axes."""

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
    """Read every attribute and array of a result file."""
    path = Path(path)
    if not path.exists():
        raise LandscapeError(f"{path} does not exist; give the path of a result file written by landscape")
    f = _open_h5(path, "r", "is not an HDF5 file; give a result file written by landscape")
    with f:
        attrs = {k: _decode(v) for k, v in f.attrs.items()}
        if "kind" not in attrs:
            raise LandscapeError(f"{path} is not a landscape result (no 'kind' attribute)")
        result = Result(path, attrs)

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                if obj.dtype.kind == "O" or h5py.check_string_dtype(obj.dtype) is not None:
                    data = np.asarray(obj.asstr()[()])
                result.arrays[name] = np.asarray(data)
                if "axes" in obj.attrs:
                    result.axes[name] = json.loads(_as_str(obj.attrs["axes"]))

        f.visititems(visit)
    return result


def _as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def describe(path: str | Path) -> str:
    """A human-readable summary of a result file: kind, provenance, options and arrays with their axes."""
    result = read_result(path)
    lines = [f"{result.path}: {result.kind} result" + ("" if result.attrs.get("complete") else " (incomplete)")]
    for key in sorted(result.attrs):
        if key == "identity":
            continue
        lines.append(f"  {key}: {result.attrs[key]}")
    lines.append("  arrays:")
    groups: dict[str, list[np.ndarray]] = {}
    for name, arr in result.arrays.items():
        groups.setdefault(name.rpartition("/")[0], []).append(arr)
    shown: set[str] = set()
    for name, arr in sorted(result.arrays.items()):
        group = name.rpartition("/")[0]
        if group and len(groups[group]) > GROUP_SUMMARY:  # e.g. one array per parameter: one line
            if group not in shown:
                shown.add(group)
                members = groups[group]
                dtypes = ",".join(sorted({str(a.dtype) for a in members}))
                lines.append(f"    {group}/: {len(members)} arrays, {sum(a.size for a in members)} values ({dtypes})")
            continue
        axes = result.axes.get(name)
        extra = f" ({int(arr.sum())} of {arr.size} done)" if name == "done" and arr.dtype == bool else ""
        lines.append(f"    {name}: {arr.dtype} {tuple(arr.shape)}" + (f" axes={axes}" if axes else "") + extra)
    return "\n".join(lines)
