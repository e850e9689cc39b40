"""A package built in the background while a surface's points go on eagerly, and its taking over.

Where a core is spare (:func:`spare_cores`), the set-up (:mod:`landscape.analyses.surface.setup`) may export the
loss and leave its build running in a child process (:func:`start_background`) instead of waiting for it. The
points go on the eager way; when the build ends, its package is checked at the next point and timed against
eager (:func:`take_over`), and evaluates the points from there when it agrees and is faster. A build the grid
outruns, or one whose run is interrupted, is stopped with its compilers (:func:`stop`).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from landscape.analyses.surface.evaluator import RATIO_PAIRS, PointEvaluator
from landscape.runtime import compile_cache, packages
from landscape.runtime.devices import measured
from landscape.runtime.workers import usable_cores


@dataclass
class Background:
    """A package build running in a child process while the points are evaluated the eager way.

    Attributes:
        job: the build.
        key: the package's and record's key.
        record: the compile record as the set-up left it.
        export_s: the seconds the export took (before the build started).
        speed: the eager way's work per point over the loop's (vmap's ratio when vmap was taken, else 1).
    """

    job: packages.BuildJob
    key: str
    record: compile_cache.CompileRecord
    export_s: float
    speed: float


def spare_cores(device: torch.device) -> int:
    """CPU cores this process may use beyond its own work: its cores less its torch threads (less one off a CPU).

    Args:
        device: where the points are evaluated.

    Returns:
        The cores a build may run on without slowing the points (0: none).
    """
    own = torch.get_num_threads() if device.type == "cpu" else 1
    return max(0, usable_cores() - own)


def export_loss(
    evaluator: PointEvaluator, program: Path, decision: dict[str, Any], steps: list[tuple[str, float]]
) -> float | None:
    """Export the evaluator's per-batch loss to ``program`` for a build, inductor's caches in the cache folder.

    Args:
        evaluator: the grid's evaluator.
        program: the file to write.
        decision: the set-up's decision (``graph_nodes`` and ``rows_narrowed``, or the ``reason`` it failed).
        steps: the set-up's steps (``export`` or ``export failed``, with its seconds).

    Returns:
        The seconds the export took, or None when ``torch.export`` could not trace the model.
    """
    compile_cache.use_inductor_cache()
    start = time.perf_counter()
    try:
        decision["graph_nodes"], decision["rows_narrowed"] = evaluator.export(program)
    except Exception as exc:  # a model torch.export cannot trace: eager
        steps.append(("export failed", time.perf_counter() - start))
        decision["reason"] = f"torch.export failed ({type(exc).__name__})"
        return None
    steps.append(("export", time.perf_counter() - start))
    return steps[-1][1]


def start_background(
    evaluator: PointEvaluator,
    record: compile_cache.CompileRecord,
    key: str,
    speed: float,
    decision: dict[str, Any],
    steps: list[tuple[str, float]],
) -> tuple[Background | None, compile_cache.CompileRecord]:
    """Export the loss and leave its build running, its compiler jobs limited to the spare cores.

    Args:
        evaluator: the grid's evaluator.
        record: the key's compile record.
        key: the package's key.
        speed: the eager way's work per point over the loop's.
        decision: the set-up's decision, updated (``graph_nodes``, ``rows_narrowed``, ``build``, ``reason``).
        steps: the set-up's steps, the export appended.

    Returns:
        The running build (None when the export failed: then the points stay eager) and the record.
    """
    with tempfile.TemporaryDirectory(dir=packages.packages_dir()) as tmp:
        program = Path(tmp) / "program.pt2"
        exported = export_loss(evaluator, program, decision, steps)
        if exported is None:
            return None, replace(record, failed=True)
        job = packages.BuildJob(
            program, key, threads=torch.get_num_threads(), compile_threads=spare_cores(evaluator.obj.device)
        )
    decision.update(build="running", reason="building in the background, the points eager until the package is ready")
    return Background(job, key, record, exported, speed), record


def take_over(evaluator: PointEvaluator, bg: Background, decision: dict[str, Any], at: tuple[float, float]) -> bool:
    """The build has ended: put its package in use from the next point ``at`` on, if it agrees and pays.

    The package is loaded, checked against eager at the point ``at`` (as
    :meth:`~landscape.analyses.surface.evaluator.PointEvaluator.use_package` checks) and its compiled/eager ratio
    measured (:data:`~landscape.analyses.surface.evaluator.RATIO_PAIRS` pairs of the first batch); it stays in use
    when it agrees and is faster than the eager way. The decision (``build``, ``compile_s``, ``load_s``,
    ``compiled_ratio``, ``switch_s``, ``reason``) and the record are updated either way.

    Args:
        evaluator: the grid's evaluator.
        bg: the build, ended (:meth:`~landscape.runtime.packages.BuildJob.poll` not None).
        decision: the set-up's decision.
        at: ``(a, b)``: the next point to evaluate.

    Returns:
        True when the package evaluates the points from here on (:attr:`PointEvaluator.compiled` set).
    """
    build = bg.job.poll()
    assert build is not None, "take_over needs an ended build"
    start = time.perf_counter()
    decision.update(build=build.outcome, compile_s=bg.export_s + build.seconds)
    if build.path is None:
        decision["reason"] = f"the background build failed: {build.detail or build.outcome}"
        compile_cache.write_record(bg.key, replace(bg.record, failed=build.outcome == "failed"))
        return False
    record = replace(bg.record, compile_s=bg.export_s + build.seconds, n_builds=bg.record.n_builds + 1)
    device = evaluator.obj.device
    seconds, _, runner = measured(lambda: packages.load_package(bg.key, build.path, device), device)
    decision["load_s"] = seconds
    if runner is None or not evaluator.use_package(runner, at=at):
        decision["reason"] = "the package built did not load" if runner is None else "the package disagreed with eager"
        packages.remove_package(bg.key)
        compile_cache.write_record(bg.key, replace(record, failed=True))
        return False
    ratio = evaluator.compiled_ratio(at=at, rounds=RATIO_PAIRS)
    decision.update(compiled_ratio=ratio, switch_s=time.perf_counter() - start)
    compile_cache.write_record(bg.key, replace(record, load_s=seconds, compiled_ratio=ratio, failed=False))
    if ratio >= bg.speed:
        evaluator.drop_compiled()
        decision["reason"] = "built in the background, but measured slower than eager"
        return False
    decision["reason"] = "pays back (built in the background)"
    return True


def stop(bg: Background, decision: dict[str, Any]) -> None:
    """Stop a build the points no longer need (the grid ended first, or the run was interrupted).

    The record keeps the seconds it ran (``stopped_s``, as a build stopped at its deadline), so that a later grid
    tries again only with twice the time; a build that ended after the last poll is kept for the next run.

    Args:
        bg: the build.
        decision: the set-up's decision (``build``, ``compile_s``, ``reason``).
    """
    build = bg.job.stop()
    spent = bg.export_s + build.seconds
    decision.update(build=build.outcome, compile_s=spent)
    if build.path is None:
        decision["reason"] = f"the background build did not end before the points ({build.outcome})"
        record = replace(bg.record, stopped_s=max(bg.record.stopped_s, spent))
    else:
        decision["reason"] = "built in the background after the last point: kept for the next run"
        record = replace(bg.record, compile_s=spent, n_builds=bg.record.n_builds + 1)
    compile_cache.write_record(bg.key, record)
