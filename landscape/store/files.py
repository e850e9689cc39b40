"""Writing files safely: atomic replacement through an exclusive temporary file, folders, OS errors.

- :func:`atomic_write` writes a file through a temporary created with a random name and exclusive creation
  (``tempfile.mkstemp``) in the target folder, then ``os.replace``-s it into place, so a planted symlink is
  never followed and a failed write never leaves a half-written file under the final name (the writer locks
  beside result files are in :mod:`landscape.store.locks`).
- :func:`~landscape.store.oserrors.os_error` (:mod:`landscape.store.oserrors`, imported here for every writer)
  turns an ``OSError`` into a one-line :class:`~landscape.errors.LandscapeError` chosen by the exception's type
  and ``errno`` (never by the words of its message).
- :func:`check_replaceable` is the one rule for replacing what is at a path: nothing that is not a regular
  file, ever; a symbolic link (the link itself, never followed) or a file landscape did not write
  (:func:`written_by_landscape`) only with ``--force``.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from landscape.errors import LandscapeError
from landscape.store.oserrors import os_error

#: open flags that never follow a symlink, never block on a FIFO and are never inherited by child processes
_SAFE_OPEN = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


#: the phrase that marks a file as written by landscape (a PNG text chunk, SVG / PDF metadata, an HTML ``meta``
#: tag, an XML or Markdown comment, an entry of a checkpoint's dict); see :func:`written_by_landscape`
WRITTEN_BY = "written by landscape"
#: how much of a file's start and of its end :func:`written_by_landscape` reads for the mark
MARK_SPAN = 1 << 16
#: how a report page or a demo summary of an earlier release (written without the mark) begins: its opening,
#: then a phrase within its first :data:`MARK_SPAN` bytes
LEGACY_OPENINGS = (
    (b"<!DOCTYPE html>", b"<title>landscape report: "),
    (b"# landscape demo", b"Digits data (scikit-learn"),
)


def written_by_landscape(path: str | Path) -> bool:
    """Whether the regular file ``path`` carries the mark of a file landscape wrote (:data:`WRITTEN_BY`).

    The mark is looked for in the first and the last :data:`MARK_SPAN` bytes; a report page or demo summary
    of an earlier release is recognised by its opening. A link is never followed.

    Args:
        path: the file.

    Returns:
        True when the file is a regular file with the mark; False otherwise (also when it cannot be read).
    """
    try:
        fd = os.open(path, os.O_RDONLY | _SAFE_OPEN)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return False
        head = os.pread(fd, MARK_SPAN, 0)
        tail = os.pread(fd, MARK_SPAN, max(0, info.st_size - MARK_SPAN))
    except OSError:
        return False
    finally:
        os.close(fd)
    mark = WRITTEN_BY.encode()
    legacy = any(head.startswith(opening) and phrase in head for opening, phrase in LEGACY_OPENINGS)
    return mark in head or mark in tail or legacy


#: the kinds of file landscape writes, each told by how it begins (:func:`landscape_kind`)
FILE_KINDS = ("result", "checkpoint", "figure", "report", "summary", "surface mesh", "record")
_KIND_OPENINGS = (
    (b"\x89HDF\r\n\x1a\n", "result"),
    (b"PK\x03\x04", "checkpoint"),  # torch.save's zip format
    (b"\x89PNG\r\n\x1a\n", "figure"),
    (b"%PDF", "figure"),
    (b"<!DOCTYPE html>", "report"),
    (b"# landscape demo", "summary"),
    (b"{", "record"),  # a JSON record (Paper B's run, a compile cache entry)
)


def landscape_kind(path: str | Path) -> str | None:
    """Which kind of file landscape wrote at ``path`` (one of :data:`FILE_KINDS`); None when landscape did not.

    A file carries landscape's mark (:func:`written_by_landscape`), or is an HDF5 result naming its kind; its kind
    is told by how it begins: an HDF5 result, a checkpoint (``torch.save``'s zip), a figure (PNG, PDF or SVG), a
    report page, a demo summary, a surface mesh (VTK XML) or a JSON record. A link is never followed.

    Args:
        path: the file.

    Returns:
        The kind, or None (no regular file, no mark, or an opening landscape never writes).
    """
    if not written_by_landscape(path):
        return "result" if is_result_file(path) else None
    try:
        fd = os.open(path, os.O_RDONLY | _SAFE_OPEN)
    except OSError:
        return None
    try:
        head = os.pread(fd, MARK_SPAN, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    for opening, kind in _KIND_OPENINGS:
        if head.startswith(opening):
            return kind
    if head.startswith(b"<?xml") or head.startswith(b"<svg"):
        return "surface mesh" if b"<VTKFile" in head else "figure" if b"<svg" in head else None
    return None


def is_result_file(path: str | Path) -> bool:
    """Whether ``path`` is a regular HDF5 file (not a link) whose root names its ``kind``: a landscape result.

    Result files carry no mark of their own (:func:`landscape.store.files.written_by_landscape`): this is how
    the one replacement rule tells them apart from files landscape did not write. Never raises.

    Args:
        path: the file.

    Returns:
        True for a result file, False for anything else or what cannot be read.
    """
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        import h5py  # here: the replacement rule is used where no result is read

        with h5py.File(path, "r", locking=False) as f:
            return isinstance(f.attrs.get("kind"), (str, bytes))
    except Exception:  # noqa: BLE001 - not HDF5, damaged, unreadable: not a result
        return False


def check_replaceable(path: str | Path, *, force: bool = False, kind: str | None = None) -> None:
    """Refuse to write ``path`` unless what is there may be replaced: the one rule for every output.

    - Nothing there: fine.
    - Not a regular file (a folder, a FIFO, a device, a socket): never replaced, not even with ``force``.
    - A symbolic link: never followed; the link itself is replaced only with ``force``.
    - A regular file: replaced when landscape wrote a file of the writer's own ``kind`` there
      (:func:`landscape_kind`: a report replaces a report, a figure a figure, never a checkpoint or a result),
      or with ``force``.

    Args:
        path: the output about to be written.
        force: the user's ``--force``.
        kind: the kind of file about to be written (one of :data:`FILE_KINDS`); None: any file landscape wrote.

    Raises:
        LandscapeError: what is at ``path`` may not be replaced, with what to do.
    """
    if kind is not None and kind not in FILE_KINDS:
        raise ValueError(f"unknown file kind {kind!r}; one of {', '.join(FILE_KINDS)}")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise os_error(exc, path, "write") from exc
    if stat.S_ISLNK(info.st_mode):
        if not force:
            raise LandscapeError(
                f"{path} is a symbolic link, which is never followed; remove it, choose another --out, or pass "
                "--force to replace the link itself"
            )
        return
    if not stat.S_ISREG(info.st_mode):
        raise LandscapeError(
            f"{path} is {file_type(info.st_mode)}, not a regular file; it is never replaced, not even with "
            "--force: choose another --out"
        )
    if force:
        return
    there = landscape_kind(path) or ("any" if kind is None and written_by_landscape(path) else None)
    if there is None:
        raise LandscapeError(
            f"{path} exists and landscape did not write it (it lacks landscape's mark); pass --force to replace it, "
            "or choose another --out"
        )
    if kind is not None and there != kind:
        raise LandscapeError(
            f"{path} is a {there} that landscape wrote, not a {kind}: a {kind} replaces only a {kind}; choose "
            "another --out, or pass --force to replace it"
        )


def check_companion(path: str | Path, what: str, *, ours: Callable[[Path], bool], force: bool = False) -> bool:
    """Whether the file at ``path``, beside an output, may be written; refuse what may never be replaced there.

    A companion (a bend, a training snapshot, a tracking record) is a file the user did not name: ``--force``,
    given for the output, replaces a companion only when it is of the companion's own kind. So a companion's
    name holding a symbolic link, something other than a regular file, a file of several names, or a file that
    ``ours`` does not recognise is never replaced, not even with ``force``.

    Args:
        path: the companion's path.
        what: what it is, in words (``"the bend"``, ``"the snapshot"``, ...).
        ours: whether the regular file there is of the companion's own kind (it may be of another run).
        force: the user's ``--force``.

    Returns:
        True when nothing is there (or ``force`` may replace what is); False when a file of its own kind is
        there and ``force`` was not given (the caller decides: resume it, or refuse).

    Raises:
        LandscapeError: what is there may never be replaced, with what to do.
    """
    path = Path(path)
    try:
        fd = open_regular(path, os.O_RDONLY, what)
    except FileNotFoundError:
        return True
    except LandscapeError as exc:
        raise LandscapeError(f"{exc} (landscape writes {what} there)") from None
    except OSError as exc:
        raise os_error(exc, path, "read") from exc
    os.close(fd)
    if not ours(path):
        raise LandscapeError(
            f"{path} is where landscape writes {what}, but it holds another file; it is never replaced, not even "
            "with --force: move it away, or choose another --out"
        )
    return force


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether paths ``a`` and ``b`` name one file (the same inode, or the same path once links are resolved).

    Args:
        a: a path.
        b: another path.

    Returns:
        True when writing one would write (or replace) the other.
    """
    try:
        if os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def refuse_input_as_output(output: str | Path, inputs: Iterable[str | Path | None], what: str = "--out") -> None:
    """Refuse to write ``output`` when it is one of the run's ``inputs``: an input is never an output.

    Args:
        output: a file the run is about to write (its output or a companion of it).
        inputs: the files the run reads (None entries are skipped).
        what: how the output is named in the message.

    Raises:
        LandscapeError: ``output`` names one of the inputs (also through a link), even with ``--force``.
    """
    for source in inputs:
        if isinstance(source, (str, os.PathLike)) and same_file(output, source):
            raise LandscapeError(
                f"{what} {output} is the input {source}: an input is never overwritten, not even with --force; "
                "choose another --out"
            )


def refuse_overlapping_outputs(outputs: Sequence[tuple[str, str | Path | None]]) -> None:
    """Refuse a run whose outputs collide, before any work: two that are one path, or one inside another.

    A run that wrote one output over another (``--tensorboard x.pt --out x.pt``: the folder made first, the
    checkpoint then not writable) would lose its work at the end; so the outputs must be distinct paths, none a
    folder on the way to another (also through links).

    Args:
        outputs: each output as ``(how it is named in the message, its path)``; None paths are skipped.

    Raises:
        LandscapeError: two outputs are one path, or one lies inside the other; the message names both.
    """
    named = [(what, Path(path)) for what, path in outputs if path is not None]
    for i, (what, path) in enumerate(named):
        for other_what, other in named[i + 1 :]:
            if same_file(path, other):
                raise LandscapeError(
                    f"{what} {path} and {other_what} {other} are one path, so the run would write one over the "
                    "other; give them different paths"
                )
            pairs = (((what, path), (other_what, other)), ((other_what, other), (what, path)))
            for (inner_what, inner), (outer_what, outer) in pairs:
                if _inside(inner, outer):
                    raise LandscapeError(
                        f"{inner_what} {inner} lies inside {outer_what} {outer}, so one cannot be written where "
                        "the other is; give them paths apart"
                    )


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies below ``folder`` (links resolved)."""
    inner, outer = os.path.realpath(path), os.path.realpath(folder)
    return inner.startswith(outer.rstrip(os.sep) + os.sep)


def ensure_folder(path: str | Path, option: str = "--out") -> Path:
    """Create folder ``path`` (and its parents) if needed; any OS failure is a one-line error naming ``option``.

    Args:
        path: the folder to create (an existing folder is fine).
        option: the option that chose it (:func:`os_error`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        LandscapeError: a file of that name exists, or the folder cannot be created (permissions, read-only
            file system, ...; see :func:`os_error`).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise LandscapeError(
            f"cannot create folder {path}: a file of that name exists; choose another {option}"
        ) from None
    except OSError as exc:
        raise os_error(exc, path, "create folder", option) from exc
    return path


def leads_outside(path: str | Path, folder: str | Path) -> bool:
    """Whether ``path`` is a symbolic link (or passes through one) to something outside ``folder``.

    Args:
        path: a path inside ``folder``.
        folder: the folder that must contain what ``path`` names.

    Returns:
        True when the fully resolved ``path`` does not lie inside the fully resolved ``folder``.
    """
    real, base = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([real, base]) != base


def ensure_subfolder(base: str | Path, *parts: str) -> Path:
    """Create folder ``base/parts...`` without following a link below ``base``: writing stays inside ``base``.

    Args:
        base: an existing folder (or one :func:`ensure_folder` creates), e.g. the folder a report is made of.
        *parts: the names of the folders below it, e.g. ``"report_figures", "model-resnet"``.

    Returns:
        The path of the innermost folder.

    Raises:
        LandscapeError: a part is a symbolic link (never followed: it could lead out of ``base``) or something
            other than a folder, or a folder cannot be created.
    """
    folder = ensure_folder(base)
    for part in parts:
        folder = folder / part
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            try:
                folder.mkdir()
            except FileExistsError:  # made meanwhile: judged as any existing path
                info = os.lstat(folder)
            except OSError as exc:
                raise os_error(exc, folder, "create folder") from exc
            else:
                continue
        if stat.S_ISLNK(info.st_mode):
            raise LandscapeError(
                f"{folder} is a symbolic link, which is never followed: files are written only inside {base}; "
                "remove the link"
            )
        if not stat.S_ISDIR(info.st_mode):
            raise LandscapeError(
                f"cannot create folder {folder}: {file_type(info.st_mode)} of that name exists; remove it or move it"
            )
    return folder


@contextmanager
def atomic_write(
    path: str | Path, mode: str = "wb", *, force: bool = False, kind: str | None = None
) -> Iterator[IO[Any]]:
    """Write ``path`` all at once: yield a file object on an exclusive temporary, move it into place on success.

    What is at ``path`` is first judged by :func:`check_replaceable` (before anything is written). The
    temporary ``.NAME.XXXXXXXX.tmp`` is created in ``path``'s folder with a random name and ``O_EXCL``
    (never through a symlink); on any error it is removed and ``path`` is left as it was.

    Args:
        path: the final file.
        mode: ``"wb"`` (binary) or ``"w"`` (text, UTF-8).
        force: replace a symbolic link or a file landscape did not write (see :func:`check_replaceable`).
        kind: the kind of file written (:data:`FILE_KINDS`): a file landscape wrote is replaced without
            ``force`` only when it is of this kind; None: any file landscape wrote.

    Yields:
        The open file object on the temporary; it is flushed, fsynced and moved onto ``path`` when the block
        ends without an error.

    Raises:
        LandscapeError: what is at ``path`` may not be replaced, the folder cannot be created or written, the
            disk is full, ...
    """
    path = Path(path)
    check_replaceable(path, force=force, kind=kind)
    fd, tmp = _exclusive_temporary(path)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp creates 0600; a result gets the permissions of any new file
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        remove_quietly(tmp)
        raise os_error(exc, path, "write") from exc
    except BaseException:
        remove_quietly(tmp)
        raise


def write_text(path: str | Path, text: str, *, force: bool = False, kind: str | None = None) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`).

    Args:
        path: the final file.
        text: the contents, written as UTF-8 (a non-UTF-8 byte of a file name in it as an escape,
            :func:`landscape.store.attrs.storable_text`).
        force: replace a symbolic link or a file landscape did not write (see :func:`check_replaceable`).
        kind: the kind of file written (:data:`FILE_KINDS`; see :func:`atomic_write`).

    Raises:
        LandscapeError: what is at ``path`` may not be replaced, the folder cannot be created or written, the
            disk is full, ...
    """
    from landscape.store.attrs import storable_text

    with atomic_write(path, "w", force=force, kind=kind) as handle:
        handle.write(storable_text(text))


def temporary_path(path: str | Path, option: str = "--out") -> Path:
    """Create an empty exclusive temporary file beside ``path`` (random name, ``O_EXCL``) and return its path.

    For writers that need a file name, not a file object; the caller moves it into place or removes it.

    Args:
        path: the final file; the temporary ``.NAME.XXXXXXXX.tmp`` is created in its folder.
        option: the option that chose ``path`` (:func:`os_error`).

    Returns:
        The path of the new, empty temporary file.

    Raises:
        LandscapeError: the folder cannot be created, or the temporary cannot be created in it.
    """
    fd, tmp = _exclusive_temporary(Path(path), option)
    os.close(fd)
    return Path(tmp)


def _exclusive_temporary(path: Path, option: str = "--out") -> tuple[int, str]:
    """``mkstemp`` in ``path``'s folder (created if needed): a random ``.NAME.XXXXXXXX.tmp``, ``O_EXCL``."""
    try:
        return tempfile.mkstemp(dir=ensure_folder(path.parent, option), prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise os_error(exc, path, "write", option) from exc


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def remove_quietly(path: str | Path) -> None:
    """Remove ``path`` if it is there; an error removing it is ignored (cleaning up after a failure)."""
    with suppress(FileNotFoundError):
        os.unlink(path)


_FILE_TYPES = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_type(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words: ``"a regular file"``, ``"a named pipe (FIFO)"``, ...

    Args:
        mode: the ``st_mode`` of an ``os.stat`` / ``os.lstat`` result.

    Returns:
        The file type with its article, e.g. ``"a character device"``.
    """
    return next((name for test, name in _FILE_TYPES if test(mode)), "a regular file")


def open_regular(path: str | Path, flags: int, what: str) -> int:
    """Open ``path`` without following a link, and only when it is a regular file with one name.

    The one way a file beside an output (a lock sidecar, a bend, a snapshot, a report's figure) is opened: a
    symbolic link there could lead anywhere on the machine, a FIFO would block, and a file with other hard
    links would be another file under a second name.

    Args:
        path: the file.
        flags: ``os.open`` flags (``O_NOFOLLOW``, ``O_NONBLOCK`` and ``O_CLOEXEC`` are added).
        what: what the file is, in words, for the messages (e.g. ``"the lock file"``, ``"the bend"``).

    Returns:
        The open descriptor (the caller closes it).

    Raises:
        OSError: it cannot be opened (``ENOENT`` when absent, permissions, ...).
        LandscapeError: it is a symbolic link (never followed), not a regular file (a FIFO, a device, a
            folder, ...), or has other hard links.
    """
    try:
        fd = os.open(path, flags | _SAFE_OPEN, 0o644)
    except IsADirectoryError:
        raise LandscapeError(f"{what} {path} is a folder, not a regular file; remove it") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise LandscapeError(f"{what} {path} is a symbolic link, which is never followed; remove it") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LandscapeError(f"{what} {path} is {file_type(info.st_mode)}, not a regular file; remove it")
        if info.st_nlink != 1:
            raise LandscapeError(
                f"{what} {path} has {info.st_nlink} hard links (other names of one file), so it could be another "
                "file's; remove it"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | Path, what: str) -> bytes:
    """The bytes of the file ``path`` beside an output, read without following a link (:func:`open_regular`).

    Args:
        path: the file.
        what: what it is, in words, for the messages.

    Returns:
        Its whole contents, read from the one descriptor that was checked.

    Raises:
        LandscapeError: it is a link, not a regular file, has other hard links, or cannot be read.
    """
    try:
        fd = open_regular(path, os.O_RDONLY, what)
    except OSError as exc:
        raise os_error(exc, path, "read") from exc
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 24):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise os_error(exc, path, "read") from exc
    finally:
        os.close(fd)
