"""Independent units of work on a pool of worker processes of one torch thread each, and what each stage cost.

The demo (and any analysis with independent units: models, seeds, grid points) hands :func:`run_units` a list of
:class:`Unit`: a module-level function with its arguments and the keys of the units it must wait for. With
``jobs = 1`` they run here, in order, at one torch thread; with ``jobs = N > 1`` on ``N`` worker processes (forked
where the platform can and CUDA is not yet initialised here, so that a script or notebook is not imported again;
else started with ``spawn``), each of one torch thread, so that the threads sum to the cores given and every unit
computes exactly what a one-thread serial run computes (no OpenMP oversubscription, no thread count in any sum).
Each unit writes its own files; the caller combines what the units return.

:class:`Stopwatch` times named stages (wall clock and the CPU time of the process that ran them), so that a unit
can say what each of its stages cost wherever it ran; :func:`stage_table` adds them up by stage.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from landscape.errors import LandscapeError
from landscape.runtime import memory


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Unit:
    """One independent piece of work.

    Attributes:
        key: its name, unique among the units of one call (e.g. ``"resnet_mini/seed1"``).
        call: a module-level function (worker processes import it by name).
        args: its positional arguments (picklable).
        kwargs: its keyword arguments (picklable).
        after: the keys of the units that must finish first (their files are its inputs).
    """

    key: str
    call: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class StageTime:
    """What one stage of one unit cost.

    Attributes:
        stage: the stage's name, e.g. ``"train"``.
        wall: seconds of wall-clock time.
        cpu: seconds of CPU time of the process that ran it (all its threads).
    """

    stage: str
    wall: float
    cpu: float


class Stopwatch:
    """Times named stages: ``with watch("train"): ...``; the records are in :attr:`records`, in order."""

    def __init__(self) -> None:
        self.records: list[StageTime] = []

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        """Time the block as ``stage`` (recorded also when it raises)."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.records.append(StageTime(stage, time.perf_counter() - wall, time.process_time() - cpu))


def stage_table(records: Sequence[StageTime], order: Sequence[str] = ()) -> list[tuple[str, int, float, float]]:
    """The records added up by stage: ``(stage, units, wall seconds, CPU seconds)``, stages of ``order`` first.

    Args:
        records: every unit's stage times.
        order: the stages' order in the table; stages not named follow in the order first seen.

    Returns:
        One row per stage that has records.
    """
    sums: dict[str, list[float]] = {}
    for r in records:
        row = sums.setdefault(r.stage, [0, 0.0, 0.0])
        row[0] += 1
        row[1] += r.wall
        row[2] += r.cpu
    names = [s for s in order if s in sums] + [s for s in sums if s not in order]
    return [(s, int(sums[s][0]), sums[s][1], sums[s][2]) for s in names]


PARENT_POLL_SECONDS = 1.0
"""How often a worker looks whether the process that started it is still there."""

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def end_with_parent(parent: int, *, group: bool = False, clean_up: Callable[[], None] | None = None) -> None:
    """Make this process end when ``parent`` (the process that started it) ends, however it ends.

    A parent killed with ``kill -9`` runs no clean-up, and a worker waiting for its next unit would wait on the
    pipe for ever. On Linux the kernel sends the process SIGKILL when its parent dies (``PR_SET_PDEATHSIG``);
    everywhere a daemon thread looks every :data:`PARENT_POLL_SECONDS` whether the process has been handed to
    another parent (``os.getppid()`` changed) and ends it if so. A parent already gone before either was set is
    seen at once.

    Args:
        parent: the process id of the parent.
        group: end this process's whole process group when it leads one of its own, so that what it started
            ends with it: a build's compilers.
        clean_up: called before the end (the files this process was writing for its parent removed).

    With ``group`` or ``clean_up`` only the watch ends the process, within :data:`PARENT_POLL_SECONDS`: the
    kernel's signal would end it before either.
    """

    def end() -> None:
        if clean_up is not None:
            with suppress(Exception):
                clean_up()
        if group and hasattr(os, "killpg") and os.getpgrp() == os.getpid():
            with suppress(OSError):
                os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(1)

    if sys.platform.startswith("linux") and not group and clean_up is None:
        import ctypes

        with suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        end()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        end()

    threading.Thread(target=watch, name="landscape-parent-watch", daemon=True).start()


def _start_worker(parent: int, keep_memory: bool = False, threads: int = 1) -> None:
    """A worker's start: it ends with ``parent`` (:func:`end_with_parent`) and runs at ``threads`` torch threads."""
    end_with_parent(parent)
    _set_torch_threads(keep_memory, threads)


def _set_torch_threads(keep_memory: bool = False, threads: int = 1) -> None:
    """``threads`` intra-op and one inter-op torch thread (set before torch is imported and after).

    With ``keep_memory`` (the parent keeps freed memory: :mod:`landscape.runtime.memory`) the worker does too.
    """
    if keep_memory:
        memory.keep_freed_memory()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    with suppress(RuntimeError):  # the inter-op pool of this process already started
        torch.set_num_interop_threads(1)


@contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads, the caller's setting restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_intra_op_thread() -> contextlib.AbstractContextManager[None]:
    """Run the block with torch's intra-op thread count at 1 (:func:`intra_op_threads`)."""
    return intra_op_threads(1)


def _start_method() -> Any:
    """How worker processes start: ``fork``, or ``spawn`` where fork is missing or CUDA is initialised here.

    A forked child could not use CUDA that its parent initialised; ``spawn`` imports the caller's main module
    again (a script then needs its ``if __name__ == "__main__"``).
    """
    import multiprocessing

    import torch

    forkable = "fork" in multiprocessing.get_all_start_methods() and not torch.cuda.is_initialized()
    return multiprocessing.get_context("fork" if forkable else "spawn")


def _order(units: Sequence[Unit]) -> None:
    """Refuse repeated keys, unknown dependencies and a unit listed before one it waits for."""
    seen: set[str] = set()
    keys = {u.key for u in units}
    if len(keys) != len(units):
        raise ValueError("two units share a key")
    for u in units:
        missing = [k for k in u.after if k not in keys]
        if missing:
            raise ValueError(f"unit {u.key} waits for {missing}, which are not units of this call")
        if any(k not in seen for k in u.after):
            raise ValueError(f"unit {u.key} is listed before a unit it waits for")
        seen.add(u.key)


def run_units(
    units: Sequence[Unit],
    jobs: int,
    *,
    on_done: Callable[[Unit, Any], None] | None = None,
    threads: int = 1,
) -> dict[str, Any]:
    """Run every unit, each once its ``after`` units are done: here (``jobs = 1``) or on ``jobs`` workers.

    Every unit runs at ``threads`` torch threads (default one), here or in a worker process, so the numbers do not
    depend on ``jobs``; with more threads a sum may be split differently and the last bits differ.
    At most ``jobs`` units run at once; when one finishes, the first ready unit in the list starts (list the
    longest first, and early a unit that others wait for). The first unit to raise stops the rest: the units not
    yet started are cancelled, the running ones finish, and its error is raised here. A worker whose parent dies
    (even by ``kill -9``) ends within about a second, busy or idle.

    Args:
        units: the work, each listed after the units it waits for.
        jobs: worker processes (1: none, the units run in this process in order).
        on_done: called here with each unit and its return value as it finishes.
        threads: torch intra-op threads of every unit (the demo's check of other thread counts; 1 by default).

    Returns:
        Each unit's return value by key.

    Raises:
        LandscapeError: ``jobs`` or ``threads`` below 1; or the error a unit raised.
        ValueError: repeated keys, or a unit listed before one it waits for.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise LandscapeError(f"--jobs must be a positive number of worker processes, got {jobs!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise LandscapeError(f"threads must be a positive number of torch threads per worker, got {threads!r}")
    _order(units)
    results: dict[str, Any] = {}
    if jobs == 1:
        with intra_op_threads(threads):
            for u in units:
                results[u.key] = u.call(*u.args, **u.kwargs)
                if on_done is not None:
                    on_done(u, results[u.key])
        return results
    pending = list(units)
    running: dict[Future[Any], Unit] = {}
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(units)) or 1,
        mp_context=_start_method(),
        initializer=_start_worker,
        initargs=(os.getpid(), memory.kept(), threads),
    ) as pool:
        try:
            while pending or running:
                for u in [u for u in pending if all(k in results for k in u.after)][: jobs - len(running)]:
                    pending.remove(u)
                    running[pool.submit(u.call, *u.args, **u.kwargs)] = u
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    u = running.pop(future)
                    results[u.key] = future.result()
                    if on_done is not None:
                        on_done(u, results[u.key])
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return results
