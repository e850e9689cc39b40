"""One-line errors for failed file operations, chosen by the exception's type and ``errno``, never its words.

:func:`os_error` names an ``OSError`` (and the option that chose the path, where another path is the remedy);
:func:`write_failure` names a failed write that a library reported without an ``errno`` by the state of the
machine (the file size limit reached, a full disk). :mod:`landscape.store.files` offers both to every writer.
"""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

from landscape.errors import LandscapeError

_ERRNO_CAUSES = {  # {option}: the option that chose the path
    errno.ENOSPC: "no space left on the device; free some space",
    errno.EFBIG: "the file size limit was reached (ulimit -f); raise the limit",
    errno.EROFS: "the file system is read-only; choose a writable {option}",
    errno.EDQUOT: "the disk quota is exceeded; free some space",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another {option}",
    errno.EISDIR: "it is a folder; give a file name",
    errno.ENAMETOOLONG: "the name is too long; choose a shorter {option}",
}


def os_error(exc: OSError, path: str | Path, action: str = "write", option: str = "--out") -> LandscapeError:
    """A one-line error for an ``OSError`` raised while doing ``action`` on ``path``, classified by type/errno.

    Args:
        exc: the error raised by the operating system (or by h5py, which keeps ``errno``).
        path: the file or folder concerned.
        action: what was being done, e.g. ``"write"``, ``"create"``, ``"read"``.
        option: the option that chose ``path``, named where another path is the remedy (``--tensorboard``).

    Returns:
        The :class:`LandscapeError` to raise (``raise os_error(exc, path) from exc``).
    """
    if isinstance(exc, PermissionError):
        cause = f"permission denied; choose a writable {option}" if action != "read" else "permission denied"
    elif isinstance(exc, FileNotFoundError) and action == "read":
        cause = "it does not exist"
    elif exc.errno in _ERRNO_CAUSES:
        cause = _ERRNO_CAUSES[exc.errno].format(option=option)
    else:
        detail = (exc.strerror or str(exc) or type(exc).__name__).strip().splitlines()[0]
        cause = f"{type(exc).__name__}: {detail}"
    return LandscapeError(f"cannot {action} {path}: {cause}")


#: free bytes under which a failed write is put down to a full disk (see :func:`write_failure`)
NEARLY_FULL = 1 << 20


def _failed_write_errno(path: Path) -> int | None:
    """The cause of a failed write that came without an ``errno``, read from the state of the machine.

    The file size limit (``RLIMIT_FSIZE``) reached by ``path``, or a file system with less than
    :data:`NEARLY_FULL` bytes free; None when neither holds.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    if soft != resource.RLIM_INFINITY and size >= soft - NEARLY_FULL:
        return errno.EFBIG
    try:
        fs = os.statvfs(path if os.path.exists(path) else os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None
    return errno.ENOSPC if fs.f_bavail * fs.f_frsize < NEARLY_FULL else None


def write_failure(exc: BaseException, path: str | Path) -> LandscapeError:
    """A one-line error for a write to ``path`` that a library reported as ``exc``, classified by its cause.

    An ``OSError`` with an ``errno`` is named by :func:`os_error`. A library that reports a failed write without
    one (h5py raises ``RuntimeError`` when HDF5 cannot write its metadata, e.g. on closing) is classified by the
    state of the machine: the file size limit reached, or a full disk; otherwise its type and first line are kept.

    Args:
        exc: the exception the write raised.
        path: the file being written.

    Returns:
        The :class:`LandscapeError` to raise (``raise write_failure(exc, path) from exc``).
    """
    code = getattr(exc, "errno", None) or _failed_write_errno(Path(path))
    if code is not None:
        return os_error(OSError(code, os.strerror(code)), path, "write")
    detail = (str(exc).strip().splitlines() or [""])[0]
    return LandscapeError(f"cannot write {path}: {type(exc).__name__}: {detail}".rstrip(": "))
