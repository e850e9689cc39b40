"""What makes ``torch.compile`` pay across runs: a persistent compiler cache, compile records and the pay-back rule.

- :func:`cache_dir` is landscape's cache folder: ``$LANDSCAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/landscape``,
  else ``~/.cache/landscape``; created with mode 0700 and used only when it is a real folder (not a symlink)
  owned by this user and writable by no one else.
- :func:`use_inductor_cache` points inductor's on-disk caches (FX graph cache, AOTAutograd cache, the compiled
  C++/Triton kernels) at ``<cache>/inductor`` by setting ``TORCHINDUCTOR_CACHE_DIR`` (a value set by the user
  wins; torch writes its own default there on first use, which does not count),
  so that a rerun, a resume or the next surface of the same architecture does not compile from scratch. On CPU
  the compiled kernels are what takes the time, and ``torch.compiler.save_cache_artifacts`` does not hold them,
  so the folder itself is kept.
- :class:`CompileRecord`: a small JSON record per architecture / input shapes / device / threads
  (:func:`record_key`) of the last compile: its seconds (first and latest), and the per-point seconds compiled and
  eager measured in the same run. Written atomically (:func:`landscape.store.files.write_text`), read without
  following a symlink.
- :func:`quiet_cuda_home_probe` keeps the warning torch's extension builder logs when it is imported on a machine
  with a CUDA toolkit but no CUDA runtime ("No CUDA runtime is found, using CUDA_HOME=...", inductor imports it)
  from reaching the user: it says nothing about the run.
- :func:`pays_back` is the rule ``compile_s + n * t_compiled < n * t_eager``; :func:`estimate` supplies its
  inputs from a record or from the conservative defaults below.
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

#: without a record: seconds a first compile is assumed to take (measured 17-35 s on 2 CPU cores for a 90k-parameter
#: ResNet; larger models take longer)
DEFAULT_COMPILE_SECONDS = 60.0
#: without a record: the compiled per-point time as a fraction of the eager one (measured 0.5-0.7 on CPU)
DEFAULT_COMPILED_RATIO = 0.8
#: with a record of one cold compile only: the next (warm-cache) compile as a fraction of it (measured about 0.2)
DEFAULT_WARM_FRACTION = 0.5
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
    """What the last compile of one key measured.

    Attributes:
        first_compile_s: seconds of the first compile recorded (a cold cache).
        last_compile_s: seconds of the latest compile.
        n_compiles: compiles recorded.
        compiled_point_s: seconds per point compiled, measured with the latest compile.
        eager_point_s: seconds per point eager, measured in the same run.
        inductor_dir: the inductor cache folder the compile wrote to.
        failed: the latest compile failed or disagreed with eager.
    """

    first_compile_s: float
    last_compile_s: float
    n_compiles: int
    compiled_point_s: float
    eager_point_s: float
    inductor_dir: str = ""
    failed: bool = False


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
            first_compile_s=float(raw["first_compile_s"]),
            last_compile_s=float(raw["last_compile_s"]),
            n_compiles=int(raw["n_compiles"]),
            compiled_point_s=float(raw["compiled_point_s"]),
            eager_point_s=float(raw["eager_point_s"]),
            inductor_dir=str(raw.get("inductor_dir", "")),
            failed=bool(raw.get("failed", False)),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    values = (rec.first_compile_s, rec.last_compile_s, rec.compiled_point_s, rec.eager_point_s)
    if not all(v >= 0 and v < float("inf") for v in values):
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


def updated_record(
    old: CompileRecord | None,
    compile_s: float,
    compiled_point_s: float,
    eager_point_s: float,
    inductor_dir: str,
    failed: bool = False,
) -> CompileRecord:
    """The record after one more compile (the first compile's time is kept; a changed inductor folder restarts it).

    Args:
        old: the record before, or None.
        compile_s: seconds the compile took now.
        compiled_point_s: seconds per point compiled, measured now (``inf`` when it failed).
        eager_point_s: seconds per point eager, measured now.
        inductor_dir: the inductor cache folder in force.
        failed: the compile failed or disagreed with eager.

    Returns:
        The new record.
    """
    if old is None or old.inductor_dir != inductor_dir:
        return CompileRecord(compile_s, compile_s, 1, compiled_point_s, eager_point_s, inductor_dir, failed)
    return CompileRecord(
        old.first_compile_s, compile_s, old.n_compiles + 1, compiled_point_s, eager_point_s, inductor_dir, failed
    )


def estimate(record: CompileRecord | None, eager_point_s: float, inductor_dir: str) -> dict[str, Any]:
    """The expected compile seconds and compiled per-point seconds of the next compile, and where they come from.

    With a record for the current inductor folder: the latest compile's seconds once it has been warm
    (``n_compiles >= 2``), else the first compile's times :data:`DEFAULT_WARM_FRACTION` (the cache now holds it);
    the compiled per-point time is the recorded compiled/eager ratio times ``eager_point_s`` (a ratio measured
    within one run, robust to the machine's load). Without one: :data:`DEFAULT_COMPILE_SECONDS` and
    :data:`DEFAULT_COMPILED_RATIO`.

    Args:
        record: the record of this key, or None.
        eager_point_s: the eager seconds per point measured now.
        inductor_dir: the inductor cache folder in force.

    Returns:
        ``{"compile_s", "compiled_point_s", "source"}``; ``source`` is ``record-warm``, ``record-cold``,
        ``record-failed``, ``record-other-cache`` or ``defaults``.
    """
    if record is not None and record.failed:
        return {"compile_s": float("inf"), "compiled_point_s": float("inf"), "source": "record-failed"}
    if record is None or record.eager_point_s <= 0:
        return {
            "compile_s": DEFAULT_COMPILE_SECONDS,
            "compiled_point_s": DEFAULT_COMPILED_RATIO * eager_point_s,
            "source": "defaults",
        }
    ratio = record.compiled_point_s / record.eager_point_s
    if record.inductor_dir != inductor_dir or not inductor_dir or not Path(inductor_dir).is_dir():
        compile_s, source = max(record.first_compile_s, record.last_compile_s), "record-other-cache"
    elif record.n_compiles >= 2:
        compile_s, source = record.last_compile_s, "record-warm"
    else:
        compile_s, source = DEFAULT_WARM_FRACTION * record.first_compile_s, "record-cold"
    return {"compile_s": compile_s, "compiled_point_s": ratio * eager_point_s, "source": source}


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
