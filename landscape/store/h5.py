"""Opening HDF5 files safely: only self-contained files, and a clean release after a failed write."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import h5py

from landscape.errors import LandscapeError
from landscape.store.locks import live_writer


def unreadable(path: Path, *, reading: bool = False) -> LandscapeError:
    """The error for an existing file that h5py cannot open: a broken symlink, not HDF5 at all, or damaged.

    Args:
        path: the file.
        reading: the file is read (``info``, ``plot``, ``report``), not written: the advice is then what a
            reader can do, not ``--force`` or ``--out``, which readers do not have.

    Returns:
        The one-line error.
    """
    if path.is_symlink() and not path.exists():
        return LandscapeError(f"{path} is a symbolic link to a missing file (or a loop of links); remove it or fix it")
    if reading:
        damaged = "a damaged HDF5 file (truncated or half-written)" if h5py.is_hdf5(str(path)) else "not an HDF5 file"
        return LandscapeError(
            f"{path} is {damaged} and cannot be read; give a result file written by landscape, or run its "
            "analysis again"
        )
    if h5py.is_hdf5(str(path)):
        return LandscapeError(
            f"{path} is a damaged HDF5 file (truncated or half-written) and cannot be resumed or "
            "read; pass --force to start it again, or --out to write elsewhere"
        )
    return LandscapeError(
        f"{path} exists and is not an HDF5 file written by landscape; choose another --out, or "
        "pass --force to replace it"
    )


#: the filters HDF5 and h5py carry built in; any other filter would be loaded from a plugin library
BUILTIN_FILTERS = frozenset(
    {
        h5py.h5z.FILTER_DEFLATE,
        h5py.h5z.FILTER_SHUFFLE,
        h5py.h5z.FILTER_FLETCHER32,
        h5py.h5z.FILTER_SZIP,
        h5py.h5z.FILTER_NBIT,
        h5py.h5z.FILTER_SCALEOFFSET,
        h5py.h5z.FILTER_LZF,
    }
)


_LINK_NAMES = {h5py.SoftLink: "a soft link", h5py.ExternalLink: "an external link (to another file)"}


def foreign_storage(f: h5py.File) -> str | None:
    """Why an open HDF5 file does not hold all of its own data, or None when it does.

    A result file is input from a stranger: HDF5 lets a dataset keep its bytes in another file (external
    storage), be assembled from other files (a virtual dataset), be decoded by a filter loaded from a plugin
    library, or be a soft, external or user-defined link. Reading (or resuming) such a file would read (or
    write) other files on the machine, so every one of them is refused. Only links are inspected, never
    followed: the datasets are reached through hard links alone.

    Args:
        f: the open file.

    Returns:
        One clause naming the first object that is not self-contained, e.g. ``"dataset loss keeps its data in
        another file (external storage)"``; None when every object is a hard-linked group or dataset whose
        bytes are in this file.
    """
    links: list[str] = []

    def link(name: str, info: Any) -> Any:
        if not isinstance(info, h5py.HardLink):
            kind = _LINK_NAMES.get(type(info), "a user-defined link")
            links.append(f"{name} is {kind}")
            return True  # stop at the first one
        return None

    f.visititems_links(link)
    if links:
        return links[0]
    found: list[str] = []

    def dataset(name: str, obj: Any) -> Any:
        if not isinstance(obj, h5py.Dataset):
            return None
        plist = obj.id.get_create_plist()
        if plist.get_layout() == h5py.h5d.VIRTUAL:
            found.append(f"dataset {name} is a virtual dataset (assembled from other files)")
        elif plist.get_external_count() > 0:
            found.append(f"dataset {name} keeps its data in another file (external storage)")
        else:
            codes = {plist.get_filter(i)[0] for i in range(plist.get_nfilters())}
            if codes - BUILTIN_FILTERS:
                found.append(f"dataset {name} needs a filter plugin ({sorted(codes - BUILTIN_FILTERS)[0]})")
        return True if found else None

    f.visititems(dataset)
    return found[0] if found else None


def refuse_foreign(path: Path, why: str) -> LandscapeError:
    """The error for a file that does not hold all of its own data (see :func:`foreign_storage`)."""
    return LandscapeError(f"{path} is refused: {why}; a landscape result holds all of its own data")


def open_h5(path: Path, mode: str = "r") -> h5py.File:
    """Open ``path`` with h5py (no HDF5 file locking) and refuse it unless it holds all of its own data.

    Raises:
        LandscapeError: the file keeps data in other files or holds links (:func:`foreign_storage`), or its
            structure is damaged.
        OSError: h5py cannot open it (not HDF5, damaged, permissions): the caller names the cause.
    """
    if mode == "r":
        f = h5py.File(path, mode, locking=False)
    else:  # written without a sieve buffer: a failed data write fails in the write, never when h5py frees it
        access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        access.set_sieve_buf_size(0)
        access.set_file_locking(False, True)
        f = h5py.File(h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDWR, fapl=access))
    try:
        why = foreign_storage(f)
    except RuntimeError:  # h5py could not walk the file's own structure: it is damaged
        f.close()
        raise unreadable(path) from None
    except BaseException:
        f.close()
        raise
    if why is not None:
        f.close()
        raise refuse_foreign(path, why)
    return f


def _real(path: Path) -> Path:
    """``path`` with symlinks resolved (never raises): a file reached through a link has one writer lock."""
    return Path(os.path.realpath(path))


def check_no_writer(path: Path) -> None:
    """An error when a live process writes ``path`` or, if it is a symlink, the file it points to."""
    for file in dict.fromkeys((path, _real(path))):
        pid = live_writer(file)
        if pid is not None:
            raise LandscapeError(
                f"{path} is being written by a running analysis (pid {pid}); wait for that run to end, "
                "or write elsewhere with --out"
            )


@contextmanager
def h5py_failures() -> Iterator[list[BaseException]]:
    """Collect the exceptions h5py raises, but cannot propagate, while it frees objects inside the block.

    h5py frees an object in a Cython ``__dealloc__``; when HDF5 fails to write what it cached for the object
    then, the exception is printed through :data:`sys.excepthook` and again through :data:`sys.unraisablehook`
    (two tracebacks on stderr). Inside the block those that come from h5py (their traceback or object is
    h5py's) are collected instead, any other goes to the hooks as before, and both hooks are restored after it.

    Yields:
        The list the exceptions are appended to.
    """
    caught: list[BaseException] = []
    previous_unraisable, previous_except = sys.unraisablehook, sys.excepthook

    def from_h5py(where: Any, tb: Any) -> bool:
        origin = where if isinstance(where, str) else getattr(where, "__module__", "")
        frames = traceback.extract_tb(tb) if tb is not None else []
        return str(origin).startswith("h5py") or bool(frames) and all("h5py" in f.filename for f in frames)

    def unraisable(info: Any) -> None:
        if info.exc_value is not None and from_h5py(info.object, info.exc_traceback):
            caught.append(info.exc_value)
        else:
            previous_unraisable(info)

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if from_h5py(None, tb):
            caught.append(value)
        else:
            previous_except(kind, value, tb)

    sys.unraisablehook, sys.excepthook = unraisable, excepthook
    try:
        yield caught
    finally:
        sys.unraisablehook, sys.excepthook = previous_unraisable, previous_except


def abandon(h5: h5py.File) -> None:
    """Close a file whose writes failed, without HDF5 writing to it again.

    After a failed write HDF5 still caches data and metadata it cannot write; ``h5py.File.close`` then fails
    part-way and leaves datasets open, which HDF5 closes again when the process exits, on a file it has freed
    (a crash). So the file's descriptor is first pointed at ``/dev/null``: what HDF5 still writes goes nowhere,
    every object closes, and the file on disk stays as the failed write left it, as after a kill, for the same
    command to resume or start again.
    """
    with h5py_failures(), suppress(OSError, RuntimeError, ValueError):
        fd = h5.id.get_vfd_handle()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    with h5py_failures(), suppress(OSError, RuntimeError):
        h5.close()
