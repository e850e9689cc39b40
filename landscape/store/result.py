"""The HDF5 result files: create, resume, append-and-flush, read, describe.

One file per run. Root attributes hold the kind, the provenance and the analysis options; arrays name
their axes in an ``axes`` attribute. A file is first written complete-but-empty under a temporary name and
moved into place, then filled point by point with a flush after each write, so a run killed at any moment
leaves a valid file that a rerun of the same command resumes. The attribute ``identity`` (JSON of every
option that determines the numbers) decides whether an existing file belongs to the same run.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from landscape.errors import LandscapeError
from landscape.store.attrs import as_str, decode, encode, identity_of, now
from landscape.store.files import atomic_write, check_replaceable, ensure_folder, open_regular, os_error
from landscape.store.h5 import (
    abandon,
    check_no_writer,
    foreign_storage,
    h5py_failures,
    open_h5,
    refuse_foreign,
    unreadable,
)
from landscape.store.locks import WriterLock, last_writer
from landscape.store.oserrors import write_failure
from landscape.store.read import MEMORY, Result, result_of
from landscape.version import __version__


def _links(path: Path, force: bool) -> int | None:
    """How many names the regular file at ``path`` has; None for a symbolic link that ``force`` may replace.

    Raises:
        LandscapeError: ``path`` is a symbolic link (without ``force``: a result is never written through a
            link) or not a regular file (a folder, a FIFO, a device: never replaced); see
            :func:`landscape.store.files.check_replaceable`.
    """
    check_replaceable(path, force=True)  # a link is judged below; what is not a regular file is refused here
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        if not force:
            raise LandscapeError(
                f"{path} is a symbolic link, which is never followed when writing; remove it, give the file it "
                "points to as --out, or pass --force to replace the link itself"
            )
        return None
    return info.st_nlink


#: the first bytes of every HDF5 file landscape writes (the superblock at offset 0)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _hdf5_signature(path: Path) -> bool:
    """Whether the regular file ``path`` begins as an HDF5 file: only such a file can be a damaged result."""
    try:
        fd = open_regular(path, os.O_RDONLY, "the result file")
    except (OSError, LandscapeError):
        return False
    try:
        return os.pread(fd, len(HDF5_SIGNATURE), 0) == HDF5_SIGNATURE
    except OSError:
        return False
    finally:
        os.close(fd)


def _writable(path: Path) -> bool:
    """Whether ``path`` may be written: the OS allows it and its owner has not removed every write bit."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return os.access(path, os.W_OK) and bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _peek(path: Path) -> dict[str, Any] | None:
    """``kind``, ``identity``, ``complete``, ``has_results`` and ``foreign`` of a file; None if h5py cannot open it.

    ``foreign`` is why the file does not hold all of its own data (:func:`foreign_storage`; None when it does).
    """
    try:
        with h5py.File(path, "r", locking=False) as f:
            return {
                "kind": decode(f.attrs.get("kind")),
                "identity": as_str(f.attrs.get("identity", "{}")),
                "complete": bool(f.attrs.get("complete", False)),
                "has_results": bool(f.attrs.get("has_results", False)),
                "foreign": foreign_storage(f),
            }
    except PermissionError as exc:
        raise os_error(exc, path, "read") from exc
    except (OSError, RuntimeError):  # not HDF5, or damaged (h5py raises RuntimeError walking a broken file)
        return None


def result_kind(path: str | Path) -> str | None:
    """The ``kind`` attribute of the result file at ``path`` (read without following a link); None if none.

    Args:
        path: a file.

    Returns:
        The kind (``"surface"``, ``"sharpness_track"``, ...), or None when ``path`` is a link, not a regular file
        of one name, not HDF5, or has no kind.
    """
    path = Path(path)
    if not _hdf5_signature(path):
        return None
    info = _peek(path)
    return None if info is None or not info["kind"] else str(info["kind"])


class ResultFile:
    """One result file, open for a run: created or resumed by :meth:`open`, written only through its methods.

    Every write is followed by a flush where it finishes a unit of work (:meth:`mark_done`), so a run killed at
    any moment leaves a valid file; OS failures (full disk, size limit, permissions) become one-line
    :class:`~landscape.errors.LandscapeError`-s. While it is open for writing a :class:`~landscape.store.files.
    WriterLock` marks it as held by a live process. A complete file of the same run is opened read-only.

    Create one with :meth:`open` (or :func:`open_result`), not with the constructor.

    Args:
        path: the file.
        kind: the result kind, the ``kind`` attribute (see :mod:`landscape.analyses.registry`).
        handle: the open h5py file.
        lock: the writer lock held on ``path``, or ``None`` when the file is open read-only.
        resumed: whether an existing file of the same run was reopened.

    Attributes:
        path: the file.
        kind: the result kind.
        resumed: whether an existing file of the same run was reopened.
    """

    def __init__(
        self, path: Path, kind: str, handle: h5py.File, lock: WriterLock | None, resumed: bool, memory: bool = False
    ) -> None:
        self.path, self.kind, self.resumed = path, kind, resumed
        self._h5 = handle
        self._lock = lock
        self._memory = memory
        self._has_results = bool(handle.attrs.get("has_results", False))  # mirrors the attribute, set once
        self._failed: LandscapeError | None = None  # the first failed write; the file is not written again

    # ----------------------------------------------------------------------------------------- opening
    @classmethod
    def open(
        cls, path: str | Path, kind: str, attrs: Mapping[str, Any], *, force: bool = False, again: bool = False
    ) -> ResultFile:
        """Open ``path`` for a result of ``kind`` with root attributes ``attrs``: create, resume or refuse.

        - No file: a new one is created (under an exclusive temporary name, then moved into place).
        - A file of the same kind and identity (:func:`identity_of`): resumed; read-only when it is complete;
          started again with ``force`` and ``again`` (a file of this run that failed its checks on resume).
        - A file of other options: refused unless ``force``; replaced without ``force`` only when it holds no
          finished work (an empty file left by a run that failed early).
        - A file held by a live writer: always refused (also with ``force``).
        - A damaged HDF5 file or a non-HDF5 file: refused unless ``force``; a file damaged by a failed write
          of this same run (recorded in its lock sidecar) is started again without ``force``.
        - A read-only file is never written or replaced: resuming or forcing it is an error.
        - A file that does not hold all of its own data (:func:`foreign_storage`): refused unless ``force``.
        - A symbolic link is never written through: refused unless ``force``, which replaces the link itself.
          A file of several hard links is never resumed (that would write its other names): refused unless
          ``force``, which replaces this name. What is not a regular file (a folder, a FIFO, a device) is
          never replaced (:func:`landscape.store.files.check_replaceable`).

        Args:
            path: the result file.
            kind: the result kind, the ``kind`` attribute (see :mod:`landscape.analyses.registry`).
            attrs: the root attributes of the run (options and provenance; ``kind`` is added).
            force: replace a file of other options, a damaged/non-HDF5 file, a link or a file of several names.
            again: with ``force``, also replace a file of this same run instead of resuming it.

        Returns:
            The open :class:`ResultFile` (read-only when a complete file of the same run was found).

        Raises:
            ValueError: ``kind`` is not the ``kind`` attribute (see :mod:`landscape.analyses.registry`).
            LandscapeError: as above, with what to do; also any OS failure while creating or opening the file.
        """
        if not isinstance(kind, str) or not kind.isidentifier():
            raise ValueError(f"a result kind is a plain name, got {kind!r}")
        path = Path(path)
        full = {"kind": kind, **attrs}
        identity = identity_of(full)
        if not path.exists() and not path.is_symlink():
            ensure_folder(path.parent)
            lock = WriterLock(path, identity)
            if not path.exists() and not path.is_symlink():  # still none now that the lock is held
                return cls._create(path, kind, full, identity, lock)
            lock.release()  # another run made the file meanwhile (and has ended): judge it as any file
        check_no_writer(path)
        links = _links(path, force)  # a link, or no regular file: refused before anything reads it
        info = _peek(path) if links is not None else None
        writable = _writable(path)
        if info is not None and info["foreign"] is not None and not force:
            raise refuse_foreign(path, info["foreign"])
        same_run = info is not None and info["kind"] == kind and info["identity"] == identity
        if same_run and info["foreign"] is None and not (force and again):
            if info["complete"]:
                return cls(path, kind, open_h5(path), None, resumed=True)
            if not writable:
                raise LandscapeError(
                    f"{path} is an unfinished result but read-only; make it writable (chmod u+w) to "
                    "resume it, or write elsewhere with --out"
                )
            if links > 1 and not force:
                raise LandscapeError(
                    f"{path} has {links} hard links (other names of one file), so resuming it would write them "
                    "all; copy it to a file of its own (cp), or pass --force to start it again"
                )
            if links == 1:
                lock = WriterLock(path, identity)
                try:
                    handle = open_h5(path, "r+")
                except OSError as exc:
                    lock.release()
                    raise os_error(exc, path, "write") from exc
                except BaseException:
                    lock.release()
                    raise
                return cls(path, kind, handle, lock, resumed=True)
        replaceable = info is not None and not info["complete"] and not info["has_results"]
        damaged_by_us = (
            links is not None
            and info is None
            and _hdf5_signature(path)
            and last_writer(path).get("identity") == identity
        )
        if not (force or replaceable or damaged_by_us):
            if info is None:
                raise unreadable(path)
            theirs, ours = json.loads(info["identity"] or "{}"), json.loads(identity)
            differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
            detail = f" (differs in: {', '.join(differ[:6])})" if differ else ""
            raise LandscapeError(
                f"{path} holds a {info['kind'] or 'different'} result from other options{detail}; "
                "use --force to overwrite it or --out to write elsewhere"
            )
        if links is not None and not writable:
            raise LandscapeError(
                f"{path} is read-only; it is never replaced, not even with --force: make it "
                "writable (chmod u+w) or write elsewhere with --out"
            )
        return cls._create(path, kind, full, identity, WriterLock(path, identity))

    @classmethod
    def memory(cls, kind: str, attrs: Mapping[str, Any]) -> ResultFile:
        """A result file held in memory only (the Python API without ``out=``): written as any, never on disk.

        Args:
            kind: the result kind.
            attrs: the root attributes of the run.

        Returns:
            The open file, writable; :meth:`snapshot` reads it back.
        """
        full = {"kind": kind, **attrs}
        name = f"landscape-memory-{id(full):x}.h5"
        h5 = h5py.File(name, "w", driver="core", backing_store=False)
        for key, value in full.items():
            h5.attrs[key] = encode(value)
        h5.attrs["identity"] = identity_of(full)
        h5.attrs["created"] = now()
        h5.attrs["landscape_version"] = __version__
        h5.attrs["complete"] = False
        h5.attrs["has_results"] = False
        return cls(Path(MEMORY), kind, h5, None, resumed=False, memory=True)

    def snapshot(self) -> Result:
        """Every attribute and array written so far, read into memory.

        Returns:
            The :class:`~landscape.store.read.Result` (its ``path`` is this file's, or ``<memory>``).
        """
        return result_of(self._h5, self.path)

    @classmethod
    def _create(cls, path: Path, kind: str, full: Mapping[str, Any], identity: str, lock: WriterLock) -> ResultFile:
        """Write the attributes into an exclusive temporary, move it over ``path`` and reopen it (lock held)."""
        try:
            with atomic_write(path, force=True) as handle, h5py.File(handle, "w") as f:
                for key, value in full.items():
                    f.attrs[key] = encode(value)
                f.attrs["identity"] = identity
                f.attrs["created"] = now()
                f.attrs["landscape_version"] = __version__
                f.attrs["complete"] = False
                f.attrs["has_results"] = False
            h5 = open_h5(path, "r+")
        except BaseException:
            lock.release()
            raise
        return cls(path, kind, h5, lock, resumed=False)

    # ----------------------------------------------------------------------------------------- reading
    @property
    def complete(self) -> bool:
        """Whether the run finished (every section or point written)."""
        return bool(self._h5.attrs.get("complete", False))

    @property
    def writable(self) -> bool:
        """Whether the file is open for writing (a complete file of the same run is opened read-only)."""
        return self._lock is not None or self._memory

    def __contains__(self, name: str) -> bool:
        return name in self._h5

    def read(self, name: str) -> np.ndarray:
        """The whole array ``name``.

        Args:
            name: the array's path in the file, e.g. ``"loss"`` or ``"eigenvectors/fc.weight"``.

        Returns:
            Its values as a numpy array of the stored shape and dtype.
        """
        return np.asarray(self._h5[name][()])

    def attr(self, name: str, default: Any = None, *, at: str | None = None) -> Any:
        """Attribute ``name`` of the root (or of group/dataset ``at``), decoded; ``default`` when absent.

        Args:
            name: the attribute's name.
            default: what to return when the attribute is absent.
            at: the path of a group or dataset; ``None`` for the root.

        Returns:
            The value, with JSON strings decoded back to dicts/lists/None and numpy scalars made Python scalars.
        """
        node = self._h5 if at is None else self._h5[at]
        return decode(node.attrs[name]) if name in node.attrs else default

    def keys(self, group: str) -> list[str]:
        """The names in group ``group`` (empty when it does not exist).

        Args:
            group: the group's path in the file.

        Returns:
            The sorted names of its members; ``[]`` when there is no such group.
        """
        return sorted(self._h5[group].keys()) if group in self._h5 else []

    # ----------------------------------------------------------------------------------------- writing
    def _writing(self, what: str) -> h5py.File:
        if not self.writable:
            raise LandscapeError(f"{self.path} is a complete result opened read-only; cannot write {what}")
        return self._h5

    def _guard(self, action: Any) -> Any:
        """Run the h5py call ``action``; a failed write is recorded and becomes one line (:func:`write_failure`).

        h5py reports a failed data write as ``OSError``, a failed metadata write (on a flush or the close) as
        ``RuntimeError``, and a failure while it frees an object (HDF5 writes what it cached then) as an
        exception it cannot raise, which :func:`h5py_failures` catches: all three come from this file's
        writes, so all three are write failures. After the first one the file is not written again.
        """
        if self._failed is not None:
            raise self._failed
        try:
            with h5py_failures() as freed:
                value = action()
            if freed:
                raise freed[0]
            return value
        except (OSError, RuntimeError) as exc:
            if self._lock is not None:
                self._lock.failed = True
            self._failed = write_failure(exc, self.path)
            abandon(self._h5)
            raise self._failed from exc

    def allocate(
        self, name: str, shape: Sequence[int], dtype: Any, *, fill: Any = 0, axes: Sequence[str] | None = None
    ) -> None:
        """Create array ``name`` of ``shape`` filled with ``fill`` (and its ``axes``) unless it exists with that shape.

        Storage is allocated on disk only as values are written. Raises a LandscapeError when an existing array
        has another shape.

        Args:
            name: the array's path in the file.
            shape: its shape.
            dtype: its numpy dtype.
            fill: the value of entries not yet written (e.g. ``nan`` for pending points).
            axes: the names of its axes, stored as the ``axes`` attribute.

        Raises:
            LandscapeError: the array exists with another shape, the file is open read-only, or the write fails.
        """
        h5 = self._writing(name)
        if name in h5:
            if tuple(h5[name].shape) != tuple(shape):
                raise LandscapeError(
                    f"{self.path}: array {name} has shape {h5[name].shape}, expected {tuple(shape)}; use --force"
                )
            return

        def create() -> None:
            ds = h5.create_dataset(name, shape=tuple(shape), dtype=dtype, fillvalue=fill)
            if axes is not None:
                ds.attrs["axes"] = json.dumps(list(axes))
            h5.flush()

        self._guard(create)

    def write(self, name: str, data: Any, *, axes: Sequence[str] | None = None) -> None:
        """Write the whole array ``name`` (replacing an existing one), with its ``axes`` attribute.

        Args:
            name: the array's path in the file.
            data: the values (array-like; unicode strings are stored as HDF5 variable-length strings).
            axes: the names of its axes, stored as the ``axes`` attribute.

        Raises:
            LandscapeError: the file is open read-only, or the write fails (full disk, size limit, ...).
        """
        h5 = self._writing(name)

        def put() -> None:
            if name in h5:
                del h5[name]
            arr = np.asarray(data)
            if arr.dtype.kind == "U":
                ds = h5.create_dataset(name, data=arr.astype(object), dtype=h5py.string_dtype())
            else:
                ds = h5.create_dataset(name, data=arr)
            if axes is not None:
                ds.attrs["axes"] = json.dumps(list(axes))

        self._guard(put)

    def write_at(self, name: str, index: Any, value: Any) -> None:
        """Write ``value`` into the slice ``index`` of array ``name`` (see :meth:`mark_done` to make it count).

        Args:
            name: the path of an existing array (see :meth:`allocate`).
            index: the index or slice to write, as for ``array[index] = value``.
            value: the values to write there.

        Raises:
            LandscapeError: the file is open read-only, or the write fails.
        """
        h5 = self._writing(name)
        self._guard(lambda: h5[name].__setitem__(index, value))

    def set_attrs(self, values: Mapping[str, Any], *, at: str | None = None) -> None:
        """Set attributes of the root (or of group/dataset ``at``, created as a group if absent); JSON for dicts.

        Args:
            values: the attributes to set; ``None``, dicts, lists and tuples are stored as JSON.
            at: the path of a group or dataset; ``None`` for the root.

        Raises:
            LandscapeError: the file is open read-only, or the write fails.
        """
        h5 = self._writing("attributes")

        def put() -> None:
            node = h5 if at is None else (h5[at] if at in h5 else h5.create_group(at))
            for key, value in values.items():
                node.attrs[key] = encode(value)

        self._guard(put)

    def record_progress(self, values: dict[str, Any]) -> None:
        """Record the run's progress in the writer lock sidecar, for ``landscape info`` to read while it runs.

        Nothing is recorded for a file held in memory or open read-only (no writer lock); a failure is ignored.

        Args:
            values: e.g. what a :class:`landscape.runtime.progress.Progress` hands over (done, total, times).
        """
        if self._lock is not None:
            self._lock.record(values)

    def delete(self, name: str) -> None:
        """Remove array or group ``name`` if present.

        Args:
            name: the path of the array or group.

        Raises:
            LandscapeError: the file is open read-only, or the removal fails.
        """
        h5 = self._writing(name)
        if name in h5:
            self._guard(lambda: h5.__delitem__(name))

    def flush(self) -> None:
        """Push everything written so far to the file (nothing to do on a file open read-only).

        Raises:
            LandscapeError: the flush fails (full disk, size limit, ...).
        """
        if self.writable:
            self._guard(self._h5.flush)

    def mark_done(self, mask: str | None = None, index: Any = None) -> None:
        """Record finished work: flush the values written, then set ``mask[index] = True`` (when given), flush.

        Values are flushed before their ``done`` flag, so a kill in between leaves the unit not done. The file
        is recorded as holding results (a file without any is replaced by a rerun with other options).

        Args:
            mask: the path of a boolean ``done`` array; ``None`` to only flush and record results.
            index: the entry of ``mask`` to set.

        Raises:
            LandscapeError: the file is open read-only, or the write fails.
        """
        h5 = self._writing("results")

        def put() -> None:
            h5.flush()
            if mask is not None:
                h5[mask][index] = True
            if not self._has_results:  # an attribute write per point is not needed: once is enough
                h5.attrs["has_results"] = True
            h5.flush()
            self._has_results = True

        self._guard(put)

    def mark_complete(self) -> None:
        """Record that every unit of the run is done, and flush (nothing to do on a complete file).

        Raises:
            LandscapeError: the file is incomplete but open read-only, or the write fails.
        """
        if not self.writable and self.complete:
            return
        h5 = self._writing("the completion flag")

        def put() -> None:
            h5.attrs["complete"] = True
            h5.attrs["has_results"] = True
            h5.flush()

        self._guard(put)

    def close(self) -> None:
        """Close the file and release its writer lock.

        After a failed write (already raised as one line) the close is quiet: HDF5 cannot write its last
        metadata either, and the same command started again resumes or restarts the file.

        Raises:
            LandscapeError: the final flush on closing fails (the lock is released all the same).
        """
        try:
            if self._failed is None and self._h5.id.valid:
                self._guard(self._h5.close)
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def __enter__(self) -> ResultFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_result(
    path: str | Path, kind: str, attrs: Mapping[str, Any], *, force: bool = False, again: bool = False
) -> ResultFile:
    """Open ``path`` for a result of ``kind`` (see :meth:`ResultFile.open`).

    Args:
        path: the result file.
        kind: the result kind, the ``kind`` attribute (see :mod:`landscape.analyses.registry`).
        attrs: the root attributes of the run.
        force: replace a file of other options, or a damaged/non-HDF5 file.
        again: with ``force``, replace a file of this same run too instead of resuming it.

    Returns:
        The open :class:`ResultFile`.

    Raises:
        ValueError: ``kind`` is not the ``kind`` attribute (see :mod:`landscape.analyses.registry`).
        LandscapeError: the file cannot be created, resumed or replaced (see :meth:`ResultFile.open`).
    """
    return ResultFile.open(path, kind, attrs, force=force, again=again)
