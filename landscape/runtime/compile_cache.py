"""What makes compiling pay across runs: the cache folder, compile records and the pay-back rule.

- :func:`cache_dir` is landscape's cache folder: ``$LANDSCAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/landscape``,
  else ``~/.cache/landscape``; created with mode 0700 and used only when it is a real folder (not a symlink)
  owned by this user and writable by no one else. The compiled packages themselves are kept there by
  :mod:`landscape.runtime.packages`.
- :func:`use_inductor_cache` points inductor's on-disk caches (its FX graph cache and compiled C++/Triton kernels)
  at ``<cache>/inductor`` by setting ``TORCHINDUCTOR_CACHE_DIR`` (a value set by the user wins; torch writes its
  own default there on first use, which does not count), so that a package of a model whose kernels were
  compiled before builds faster.
- :class:`CompileRecord`: a small JSON record per key (:func:`record_key`: the compiled function's model
  fingerprint, input shapes, device, threads and torch version) of what earlier runs measured: how long the last
  build took or the deadline it was stopped at, how long a load took, the compiled and eager seconds per point
  of one run, and how vmap compared with the loop. Written atomically (:func:`landscape.store.files.write_text`),
  read without following a symlink; an unreadable record counts as none.
- :func:`quiet_cuda_home_probe` keeps the warning torch's extension builder logs when it is imported on a machine
  with a CUDA toolkit but no CUDA runtime ("No CUDA runtime is found, using CUDA_HOME=...", inductor imports it)
  from reaching the user: it says nothing about the run.
- :func:`pays_back` is the rule ``compile_s + n * t_compiled < n * t_eager``; :func:`estimate` supplies its
  inputs from a record or from the defaults below.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from landscape.errors import LandscapeError
from landscape.store import files

#: without a record: the wall seconds a first build of a package is assumed to take (exporting, compiling with
#: AOTInductor: measured 17-57 s on idle and 60-115 s on loaded CPU cores for 90k-255k-parameter ResNets and ViTs;
#: the deadline bounds what an underestimate costs)
DEFAULT_COMPILE_SECONDS = 60.0
#: without a record: the compiled seconds per point as a fraction of the eager ones (measured 0.36-0.56 on idle CPU
#: cores for the zoo's minis; 0.93 for a folded, channels-last ResNet on heavily loaded ones)
DEFAULT_COMPILED_RATIO = 0.6
#: without a record: the seconds a cached package takes to load and check (measured 0.02-0.05 s to load)
DEFAULT_LOAD_SECONDS = 0.5
#: the largest record file read
_MAX_RECORD_BYTES = 64 * 1024


def cache_dir() -> Path:
    """The cache folder: ``$LANDSCAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/landscape``, else ``~/.cache/landscape``.

    Returns:
        The folder's path (not created here).
    """
    env = os.environ.get("LANDSCAPE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "landscape"


def usable_cache_dir() -> tuple[Path | None, str]:
    """Create the cache folder (mode 0700) if needed and check that it is safe to use.

    Returns:
        ``(folder, "")`` when usable, else ``(None, why not)``: a symlink, not owned by this user, writable by
        others, or not creatable.
    """
    path = cache_dir()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        return None, f"cannot create {path}: {type(exc).__name__}"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return None, f"{path} is not a folder (a symlink is never followed)"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return None, f"{path} belongs to another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None, f"{path} is writable by other users"
    return path, ""


#: the logger of torch's C++/CUDA extension builder, and the function of it that probes for a CUDA toolkit
_EXTENSION_LOGGER = "torch.utils.cpp_extension"
_CUDA_HOME_PROBE = "_find_cuda_home"


class _CudaHomeProbeFilter(logging.Filter):
    """Drops the warnings of the CUDA toolkit probe that torch's extension builder runs when it is imported."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.funcName == _CUDA_HOME_PROBE and record.levelno == logging.WARNING)


def quiet_cuda_home_probe() -> None:
    """Silence the warning torch's extension builder logs on import without a CUDA runtime (a CPU-only run).

    ``torch.utils.cpp_extension`` looks for a CUDA toolkit when it is imported (inductor imports it on the first
    compile) and, finding one but no CUDA runtime, logs "No CUDA runtime is found, using CUDA_HOME=...". The record
    is recognised by its logger and the function that logs it (never by its words) and dropped; the logger's other
    records pass. Installing the filter twice is the same as once.
    """
    logger = logging.getLogger(_EXTENSION_LOGGER)
    if not any(isinstance(f, _CudaHomeProbeFilter) for f in logger.filters):
        logger.addFilter(_CudaHomeProbeFilter())


def use_inductor_cache() -> str:
    """Point inductor's caches at ``<cache>/inductor`` unless ``TORCHINDUCTOR_CACHE_DIR`` is set to another folder.

    Also silences torch's CUDA toolkit probe (:func:`quiet_cuda_home_probe`), which the compile that follows runs.

    Returns:
        The inductor cache folder in force ("" when neither is set and the cache folder is unusable: inductor
        then uses its own default).
    """
    quiet_cuda_home_probe()
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current and current != _inductor_default():  # torch sets its default itself on first use: not a choice
        return current
    folder, _ = usable_cache_dir()
    if folder is None:
        return ""
    target = folder / "inductor"
    try:
        target.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return ""
    if target.is_symlink() or not target.is_dir():
        return ""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(target)
    return str(target)


def _inductor_default() -> str:
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return os.path.abspath(default_cache_dir())
    except Exception:  # another torch version: take any value as the user's
        return ""


def record_key(**parts: Any) -> str:
    """A stable hash of what makes two compiles the same (architecture, shapes, dtypes, device, threads, torch).

    Args:
        parts: JSON-serialisable values naming the compiled function's inputs.

    Returns:
        A 32-character hexadecimal key.
    """
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class CompileRecord:
    """What earlier runs measured for one key: its package's build and load, compiled and eager points, vmap.

    A field that was never measured is 0.

    Attributes:
        compile_s: wall seconds of the last completed build of the package (exporting and compiling).
        stopped_s: the longest deadline a build was stopped at unfinished: the build takes longer than this.
        load_s: seconds the last load of the package took (with the check that follows it).
        eager_point_s: wall seconds of an eager point, measured in the last run that timed one.
        eager_work_s: its work: CPU seconds on a CPU device (wall seconds on others).
        compiled_point_s: wall seconds of a compiled point, measured in the last run that used the package.
        compiled_ratio: the compiled point's work over the eager point's, both measured in that run.
        vmap_points: the points per vectorised call timed against the loop.
        vmap_ratio: vmap's work per point over the loop's, on the first batch.
        n_builds: builds completed.
        failed: the last build failed, or its package disagreed with eager.
    """

    compile_s: float = 0.0
    stopped_s: float = 0.0
    load_s: float = 0.0
    eager_point_s: float = 0.0
    eager_work_s: float = 0.0
    compiled_point_s: float = 0.0
    compiled_ratio: float = 0.0
    vmap_points: int = 0
    vmap_ratio: float = 0.0
    n_builds: int = 0
    failed: bool = False


_FLOAT_FIELDS = (
    "compile_s",
    "stopped_s",
    "load_s",
    "eager_point_s",
    "eager_work_s",
    "compiled_point_s",
    "compiled_ratio",
    "vmap_ratio",
)


def _record_path(key: str) -> Path | None:
    folder, _ = usable_cache_dir()
    return None if folder is None else folder / "compile-records" / f"{key}.json"


def read_record(key: str) -> CompileRecord | None:
    """The record of ``key``, or None when there is none or it cannot be read safely (symlink, too large, bad JSON).

    Args:
        key: from :func:`record_key`.

    Returns:
        The record, or None.
    """
    path = _record_path(key)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        data = os.read(fd, _MAX_RECORD_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > _MAX_RECORD_BYTES:
        return None
    try:
        raw = json.loads(data.decode())
        rec = CompileRecord(
            **{f: float(raw[f]) for f in _FLOAT_FIELDS},
            vmap_points=int(raw["vmap_points"]),
            n_builds=int(raw["n_builds"]),
            failed=bool(raw["failed"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not all(0 <= getattr(rec, f) < float("inf") for f in _FLOAT_FIELDS) or rec.vmap_points < 0:
        return None
    return rec


def write_record(key: str, record: CompileRecord) -> bool:
    """Write the record of ``key`` atomically (a planted symlink is replaced, never followed).

    Args:
        key: from :func:`record_key`.
        record: what to store.

    Returns:
        True when written; False when the cache folder is unusable or the write failed (a cache is optional).
    """
    path = _record_path(key)
    if path is None:
        return False
    try:
        files.ensure_folder(path.parent)
        files.write_text(path, json.dumps(asdict(record), sort_keys=True), force=True)  # the cache is ours
    except LandscapeError:
        return False
    return True


def estimate(record: CompileRecord | None, package: bool) -> dict[str, Any]:
    """The expected seconds to have the compiled function ready, its compiled/eager ratio, and their source.

    With the package in the cache: the recorded load time (:data:`DEFAULT_LOAD_SECONDS` without one). Without:
    the last completed build's seconds, else :data:`DEFAULT_COMPILE_SECONDS`; a build stopped at a deadline
    before raises it to twice that deadline (so that it is tried again only with twice the time). The ratio is the
    recorded compiled/eager work per point (measured within one run: robust to the machine's load), else
    :data:`DEFAULT_COMPILED_RATIO`. A failed build is expected never to pay.

    Args:
        record: the record of this key, or None.
        package: whether the key's package is in the cache.

    Returns:
        ``{"compile_s", "compiled_ratio", "source"}``; ``source`` is ``package``, ``record``, ``defaults`` or
        ``record-failed``.
    """
    if record is not None and record.failed:
        return {"compile_s": float("inf"), "compiled_ratio": float("inf"), "source": "record-failed"}
    ratio = (record.compiled_ratio if record is not None else 0.0) or DEFAULT_COMPILED_RATIO
    if package:
        load = record.load_s if record is not None and record.load_s > 0 else DEFAULT_LOAD_SECONDS
        return {"compile_s": load, "compiled_ratio": ratio, "source": "package"}
    if record is not None and record.compile_s > 0:
        compile_s, source = record.compile_s, "record"
    else:
        compile_s, source = DEFAULT_COMPILE_SECONDS, "defaults"
    if record is not None and record.stopped_s > 0:
        compile_s = max(compile_s, 2.0 * record.stopped_s)
    return {"compile_s": compile_s, "compiled_ratio": ratio, "source": source}


def pays_back(compile_s: float, compiled_point_s: float, eager_point_s: float, points_left: int) -> bool:
    """Whether compiling now saves time: ``compile_s + points_left * compiled_point_s < points_left * eager_point_s``.

    Args:
        compile_s: expected seconds to compile.
        compiled_point_s: expected seconds per point compiled.
        eager_point_s: seconds per point eager.
        points_left: points this process still has to evaluate.

    Returns:
        True when the compiled run is expected to end sooner.
    """
    return compile_s + points_left * compiled_point_s < points_left * eager_point_s
