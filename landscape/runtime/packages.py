"""Compiled forwards kept across runs: ahead-of-time compiled packages in the cache folder, built under a deadline.

A package is a function exported with ``torch.export`` and compiled by AOTInductor
(``torch._inductor.aoti_compile_and_package``) into one ``.pt2`` file of native code; loading it takes a fraction
of a second, where ``torch.compile`` traces the function again in every process. Packages live in
``<cache>/packages`` (:func:`landscape.runtime.compile_cache.usable_cache_dir`: the user's own folder, mode 0700,
never a symlink, another user's or one others can write), one per key
(:func:`landscape.runtime.compile_cache.record_key` of the compiled function's model fingerprint, input shapes and
dtypes, device, threads and torch version).

- :func:`build_package` compiles an exported program in a child process (``python -m
  landscape.runtime.package_build``) and gives up at a deadline: the child and everything it started are killed
  and nothing is kept, so what a build may cost is known before it starts. :class:`BuildJob` is the same build
  left running while its caller goes on (polled, waited for or stopped), and ends with its caller however the caller
  ends. A finished package is moved into place whole, then its SHA-256 is written beside it (``<key>.pt2.json``),
  the mark that it is complete.
- :func:`cached_package` returns a package only when its digest matches; an entry without a digest, with another
  digest, a link or anything but a regular file is removed (then built again by whoever needs it).
- :func:`load_package` loads one (in milliseconds); a package that fails to load is removed too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from landscape.errors import LandscapeError
from landscape.runtime import compile_cache, package_build
from landscape.store import files

PACKAGE_SUFFIX = package_build.PACKAGE_SUFFIX
#: the last characters of a failed build's error output kept for the record
_ERROR_TAIL = 400


def packages_dir() -> Path | None:
    """The packages folder, ``<cache>/packages``, created if needed; None when the cache folder is unusable.

    Returns:
        The folder, or None.
    """
    folder, _ = compile_cache.usable_cache_dir()
    if folder is None:
        return None
    target = folder / "packages"
    try:
        target.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    if target.is_symlink() or not target.is_dir():
        return None
    return target


def package_path(key: str) -> Path | None:
    """Where the package of ``key`` is kept (it may not exist), or None when the cache folder is unusable.

    Args:
        key: from :func:`landscape.runtime.compile_cache.record_key`.

    Returns:
        ``<cache>/packages/<key>.pt2``, or None.
    """
    folder = packages_dir()
    return None if folder is None else folder / f"{key}{PACKAGE_SUFFIX}"


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def remove_package(key: str) -> None:
    """Remove the package of ``key`` and its digest (a corrupt, failing or disagreeing entry).

    Args:
        key: the package's key.
    """
    path = package_path(key)
    if path is not None:
        files.remove_quietly(_digest_path(path))
        files.remove_quietly(path)


def cached_package(key: str) -> Path | None:
    """The package of ``key`` when it is complete and intact; otherwise None, and a damaged entry is removed.

    Intact: the package and its digest file are regular files (never followed through a link) and the
    package's SHA-256 is the one recorded when it was written.

    Args:
        key: the package's key.

    Returns:
        The package's path, or None (no entry, or one removed as damaged).
    """
    path = package_path(key)
    if path is None or not (path.exists() or path.is_symlink()):
        return None
    try:
        recorded = json.loads(files.read_regular(_digest_path(path), "the package digest").decode())
        data = files.read_regular(path, "the compiled package")
        intact = isinstance(recorded, dict) and recorded.get("sha256") == _sha256(data)
    except (LandscapeError, ValueError, UnicodeDecodeError):
        intact = False
    if not intact:
        remove_package(key)
        return None
    return path


@dataclass
class Build:
    """The outcome of one :func:`build_package`.

    Attributes:
        path: the package, when built.
        seconds: the wall seconds the build took (until the deadline when stopped there).
        outcome: ``built``, ``deadline`` (stopped there, nothing kept), ``failed`` or ``no cache`` (no usable
            cache folder to build into).
        detail: the end of the child's error output when it failed.
    """

    path: Path | None
    seconds: float
    outcome: str
    detail: str = ""


def build_package(program: Path, key: str, *, threads: int, deadline_s: float | None = None) -> Build:
    """Compile the exported program at ``program`` into the package of ``key``, in a child process, and wait.

    A :class:`BuildJob` started and waited for: the child (``python -m landscape.runtime.package_build``) loads the
    program, sets ``threads`` torch threads (the compiled kernels are specialised to them) and writes the package
    to a temporary file in the packages folder, which is moved into place when it is complete, its digest written
    after it. At ``deadline_s`` the child and every process it started are killed and the temporary removed.

    Args:
        program: a file written by ``torch.export.save``.
        key: the package's key.
        threads: the torch threads the package will run with.
        deadline_s: the most wall seconds the build may take; None: no limit.

    Returns:
        The :class:`Build`.
    """
    job = BuildJob(program, key, threads=threads)
    try:
        return job.wait(deadline_s)
    except BaseException:  # an interrupt: leave no compiler running
        job.stop()
        raise


class BuildJob:
    """A package build running in a child process while its caller goes on: poll it, wait for it or stop it.

    The program is copied into the build's own folder beside the package, so the caller may remove its copy at
    once. The child runs in its own process group: stopping it kills every compiler it started. A caller that ends
    without stopping it (``kill -9``) takes the build with it: the child removes its folder and ends with its
    compilers within a second (:func:`landscape.runtime.workers.end_with_parent`). With ``compile_threads`` the
    child's compiler runs at most that many jobs at once (``TORCHINDUCTOR_COMPILE_THREADS``).

    Args:
        program: a file written by ``torch.export.save``.
        key: the package's key.
        threads: the torch threads the package will run with.
        compile_threads: the compiler jobs the child may run at once; None: inductor's default.

    Attributes:
        result: the :class:`Build` once the child has ended or was stopped; None while it runs.
    """

    def __init__(self, program: Path, key: str, *, threads: int, compile_threads: int | None = None) -> None:
        self.result: Build | None = None
        self.start = time.perf_counter()
        self._child: subprocess.Popen | None = None
        self._err: Any = None
        self._work: Path | None = None
        self._group = hasattr(os, "killpg")
        self.path = package_path(key)
        if self.path is None:
            self.result = Build(None, 0.0, "no cache")
            return
        try:
            self._work = Path(tempfile.mkdtemp(dir=self.path.parent, prefix=f".{key}.build."))
            shutil.copyfile(program, self._work / package_build.PROGRAM)
            command = [
                sys.executable,
                "-m",
                "landscape.runtime.package_build",
                str(self._work),
                str(int(threads)),
                str(os.getpid()),
            ]
            env = dict(os.environ)
            if compile_threads is not None:
                env["TORCHINDUCTOR_COMPILE_THREADS"] = str(max(1, int(compile_threads)))
            self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed when the build ends)
            self._child = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=self._err, start_new_session=self._group, env=env
            )
        except OSError as exc:
            self._finish(Build(None, time.perf_counter() - self.start, "failed", type(exc).__name__))

    @property
    def seconds(self) -> float:
        """Wall seconds since the build started (its length once it has ended)."""
        return self.result.seconds if self.result is not None else time.perf_counter() - self.start

    def poll(self) -> Build | None:
        """The :class:`Build` when the child has ended (the package moved into place when built), else None."""
        if self.result is None and self._child is not None and self._child.poll() is not None:
            self._ended(self._child.returncode)
        return self.result

    def wait(self, deadline_s: float | None = None) -> Build:
        """Wait for the child; stop it when the build has run ``deadline_s`` seconds in all (outcome ``deadline``).

        Args:
            deadline_s: the most wall seconds the build may take since it started; None: no limit.

        Returns:
            The :class:`Build`.
        """
        if self.result is None and self._child is not None:
            left = None if deadline_s is None else max(deadline_s - (time.perf_counter() - self.start), 0.0)
            try:
                code = self._child.wait(timeout=left)
            except subprocess.TimeoutExpired:
                return self.stop("deadline")
            self._ended(code)
        assert self.result is not None
        return self.result

    def stop(self, outcome: str = "stopped") -> Build:
        """Kill the child and everything it started and keep nothing; a build already ended keeps its outcome.

        Args:
            outcome: the outcome to record: ``deadline``, or ``stopped`` when its caller no longer needs it.

        Returns:
            The :class:`Build`.
        """
        if self.poll() is None and self._child is not None:
            _kill(self._child, self._group)
            self._finish(Build(None, time.perf_counter() - self.start, outcome))
        assert self.result is not None
        return self.result

    def _ended(self, code: int) -> None:
        """The child ended with ``code``: keep the package when it was built."""
        seconds = time.perf_counter() - self.start
        if code != 0:
            self._err.seek(0)
            tail = self._err.read().decode(errors="replace").strip()[-_ERROR_TAIL:]
            self._finish(Build(None, seconds, "failed", tail))
            return
        assert self.path is not None and self._work is not None
        try:
            data = (self._work / package_build.PACKAGE).read_bytes()
            os.replace(self._work / package_build.PACKAGE, self.path)
            digest = json.dumps({"sha256": _sha256(data), "bytes": len(data)})
            files.write_text(_digest_path(self.path), digest, force=True)
        except (OSError, LandscapeError) as exc:
            self._finish(Build(None, seconds, "failed", type(exc).__name__))
            return
        self._finish(Build(self.path, seconds, "built"))

    def _finish(self, build: Build) -> None:
        """Record the outcome and remove the build's folder (its program, and a package not moved into place)."""
        self.result = build
        if self._err is not None:
            self._err.close()
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)


def _kill(child: subprocess.Popen, new_group: bool) -> None:
    """Kill the child and the processes it started (its own process group), then reap it."""
    try:
        if new_group:
            os.killpg(child.pid, signal.SIGKILL)
        else:
            child.kill()
    except OSError:
        pass
    child.wait()


def load_package(key: str, path: Path, device: Any) -> Callable[[list[Any]], list[Any]] | None:
    """Load the package at ``path``; one that fails to load is removed (and None returned).

    The package's runner is loaded by torch's C++ loader (``torch._C._aoti.AOTIModelPackageLoader``) and called
    with the exported function's inputs flattened: ``torch._inductor.aoti_load_package`` does the same after
    importing torch's compiler and probing the CPU (a second of CPU time) to warn of a package built for another
    machine, which the key (CPU capability, device, torch version) already rules out. It is the fallback where
    torch has no such loader.

    Args:
        key: its key (to remove it when it does not load).
        path: from :func:`cached_package` or :func:`build_package`.
        device: the ``torch.device`` it runs on.

    Returns:
        ``run(inputs) -> outputs``: the exported function on its inputs and outputs as flat lists of tensors; or
        None.
    """
    import torch

    index = device.index if device.type == "cuda" and device.index is not None else -1
    try:
        loader = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
        if loader is not None:
            return loader(str(path), "model", False, 1, index).run
        model = torch._inductor.aoti_load_package(str(path), device_index=index)
        return lambda inputs: list(model.loader.run(inputs))
    except Exception:  # a package of another build of torch, truncated, ...: rebuilt by whoever needs it
        remove_package(key)
        return None
