"""Writer locks: which live process is writing a result file, and how far it has come.

:class:`WriterLock` is an advisory ``flock`` on a sidecar file ``.NAME.lock`` beside a result file. The kernel
releases it when its process ends, however it ends, so a held lock always means a live writer. The sidecar
records the writer's pid, the identity of its run and, as the run goes on, its progress
(:meth:`WriterLock.record`), which :func:`live_record` reads without disturbing the writer. The sidecar is opened
as every file beside an output is (:func:`landscape.store.files.open_regular`: no link followed, one regular
file), and its records are validated field by field (:func:`sidecar_record`).
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

from landscape.errors import LandscapeError
from landscape.store.files import open_regular, os_error, remove_quietly


def _open_sidecar(file: Path, flags: int) -> int:
    """Open the lock sidecar ``file`` as :func:`open_regular` does (no link followed, one regular file)."""
    return open_regular(file, flags, "the lock file")


def lock_path(path: str | Path) -> Path:
    """The sidecar lock file of result file ``path``: ``.NAME.lock`` in the same folder.

    Args:
        path: the result file.

    Returns:
        The path of its lock file (nothing is created).
    """
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


class WriterLock:
    """An exclusive advisory lock that marks a result file as being written by a live process.

    Args:
        path: the result file the lock belongs to (the lock itself is :func:`lock_path`).
        identity: the identity of the run (recorded in the sidecar, read back by :func:`last_writer`).

    Raises:
        LandscapeError: another live process holds the lock, or the folder cannot be written.
    """

    def __init__(self, path: str | Path, identity: str) -> None:
        self.path = Path(path)
        self.file = lock_path(path)
        self.failed = False
        self.fd = -1
        try:
            try:
                self.fd = _open_sidecar(self.file, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            except FileExistsError:  # judged before anything is written to it: only a sidecar is ever touched
                self.fd = _open_sidecar(self.file, os.O_RDWR)
                if os.fstat(self.fd).st_size and _read_record(self.fd) is None:
                    os.close(self.fd)
                    self.fd = -1
                    raise LandscapeError(
                        f"the lock file {self.file} holds something else than a landscape lock record, so it is "
                        "never touched; move it away"
                    ) from None
        except LandscapeError as exc:
            raise LandscapeError(f"cannot write {self.path}: {exc}") from None
        except OSError as exc:
            raise os_error(exc, self.path, "write") from exc
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = (_read_record(self.fd) or {}).get("pid", "unknown")
            os.close(self.fd)
            raise LandscapeError(
                f"{self.path} is being written by a running analysis (pid {pid}); wait for that "
                "run to end, or write elsewhere with --out"
            ) from None
        self._record: dict[str, Any] = {"pid": os.getpid(), "identity": identity}
        self._written = 0
        try:
            os.ftruncate(self.fd, 0)
            self._write()
        except OSError as exc:
            self.release()
            raise os_error(exc, self.path, "write") from exc

    def _write(self) -> None:
        """Write the record over the sidecar's start with one ``pwrite``, padded never to shrink.

        The JSON ends at its closing brace; the spaces after it cover a longer record written before.
        """
        data = json.dumps(self._record).encode()
        data = data.ljust(self._written)
        os.pwrite(self.fd, data, 0)
        self._written = len(data)

    def record(self, values: dict[str, Any]) -> None:
        """Add ``values`` (the writer's progress: done, total, started, updated, ...) to the sidecar's record.

        One ``pwrite`` of a few hundred bytes, cheap enough for every unit of work. A failure is ignored: the
        record only informs ``landscape info``, and the result file's own writes report a full disk.

        Args:
            values: JSON-ready entries; they replace entries of the same names.
        """
        if self.fd < 0:
            return
        self._record.update(values)
        with suppress(OSError):
            self._write()

    def release(self) -> None:
        """Release the lock; the sidecar is removed unless a write failed (it then tells a rerun what it was)."""
        if self.fd < 0:
            return
        if not self.failed:
            with suppress(OSError):  # only the sidecar this lock opened: never a file put at its name meanwhile
                mine, there = os.fstat(self.fd), os.lstat(self.file)
                if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                    remove_quietly(self.file)
        os.close(self.fd)  # closing the descriptor releases the flock
        self.fd = -1


#: the largest sidecar record read
_MAX_RECORD_BYTES = 1 << 20
#: the entries of a sidecar record and the types each must have (anything else in a sidecar is dropped)
_RECORD_TEXT = ("identity", "desc", "unit")
_RECORD_COUNTS = ("done", "initial", "total")
_RECORD_TIMES = ("started", "updated")


def _read_record(fd: int, attempts: int = 3) -> dict[str, Any] | None:
    """The sidecar's record, validated (:func:`sidecar_record`); None when it is not a sidecar's record.

    A read that met a write (a half-written record) is retried.
    """
    for _ in range(attempts):
        try:
            data = os.pread(fd, _MAX_RECORD_BYTES, 0)
        except OSError:
            return None
        record = sidecar_record(data)
        if record is not None:
            return record
    return None


def _json_object(text: str) -> bool:
    """Whether ``text`` is a JSON object (nested too deeply to read back, it is not)."""
    try:
        return isinstance(json.loads(text, parse_constant=lambda _: None), dict)
    except (ValueError, RecursionError):
        return False


def sidecar_record(data: bytes) -> dict[str, Any] | None:
    """The record a lock sidecar holds, with every entry checked; None when ``data`` is not such a record.

    The one reader of sidecars: a record is a JSON object (padded with spaces) with a positive integer
    ``pid`` and a text ``identity`` that is itself a JSON object (the run's attributes, nested no deeper than
    Python reads back); the progress entries are kept when they have their types (texts ``desc``/``unit``,
    finite non-negative counts ``done``/``initial``/``total``, finite times ``started``/``updated``, a boolean
    ``failed``) and dropped otherwise, so a crafted sidecar can neither raise nor reach a terminal with values
    of other types.

    Args:
        data: the sidecar's bytes.

    Returns:
        The checked record, or None.
    """
    text = data.decode("utf-8", errors="replace").strip()
    if not text.startswith("{") or not text.endswith("}"):
        return None
    try:
        record = json.loads(text, parse_constant=lambda _: None)  # NaN, Infinity: not numbers of a record
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    pid, identity = record.get("pid"), record.get("identity")
    if type(pid) is not int or pid <= 0 or not isinstance(identity, str) or not _json_object(identity):
        return None
    checked: dict[str, Any] = {"pid": pid}
    for key in _RECORD_TEXT:
        if isinstance(record.get(key), str):
            checked[key] = record[key]
    for key in _RECORD_COUNTS:
        value = record.get(key)
        if type(value) is int and 0 <= value < 1 << 62:
            checked[key] = value
    for key in _RECORD_TIMES:
        value = record.get(key)
        if type(value) in (int, float) and abs(value) < 1e12:
            checked[key] = float(value)
    if type(record.get("failed")) is bool:
        checked["failed"] = record["failed"]
    return checked


def live_writer(path: str | Path) -> int | None:
    """The pid of the live process writing result file ``path``, or None when no process holds its lock.

    Args:
        path: the result file.

    Returns:
        The pid recorded in the sidecar (``-1`` if the lock is held but no pid is recorded), or ``None`` when
        there is no sidecar or its lock is free (:func:`live_record`).
    """
    record = live_record(path)
    return None if record is None else int(record.get("pid", -1))


def live_record(path: str | Path) -> dict[str, Any] | None:
    """What the live writer of result file ``path`` records in its sidecar, or None when no process writes it.

    The sidecar is only read (a shared lock is tried and at once released when it is free), so the writer is
    never disturbed.

    Args:
        path: the result file.

    Returns:
        The record (``pid``, ``identity`` and, once the run has started its work, its progress: ``desc``,
        ``unit``, ``done``, ``total``, ``initial``, ``started``, ``updated``); None when there is no sidecar or
        its lock is free.
    """
    try:
        fd = _open_sidecar(lock_path(path), os.O_RDONLY)
    except (OSError, LandscapeError):
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_record(fd) or {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def last_writer(path: str | Path) -> dict[str, Any]:
    """What the sidecar of ``path`` says about the last run that wrote it (``{}`` when there is none).

    Args:
        path: the result file.

    Returns:
        The sidecar's record, e.g. ``{"pid": 1234, "identity": "..."}``; ``{}`` when there is no sidecar or it
        cannot be read.
    """
    try:
        fd = _open_sidecar(lock_path(path), os.O_RDONLY)
    except (OSError, LandscapeError):
        return {}
    try:
        return _read_record(fd) or {}
    finally:
        os.close(fd)
