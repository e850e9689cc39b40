"""How a surface's points are evaluated: the set-up before the grid, its cost bounded by the grid it serves.

The plain loop evaluates one point at a time, eagerly, with BatchNorm folded and the inputs' layout chosen
(:meth:`~landscape.core.forward.EvalForward.tune`, which every run does). Two other ways can be faster:
``torch.func.vmap`` over K stacked points (``batch_points``) and the per-batch loss compiled ahead of time into a
package kept in the cache folder (``compile``, :mod:`landscape.runtime.packages`). Finding out costs time; with
``auto`` that time is counted against the grid it serves (:func:`set_up`, on rank 0):

1. The first point left is evaluated by the plain loop and timed: ``t`` seconds. With ``n`` points left for
   this process (the first included), the plain loop would take ``n t``; the set-up may spend at most
   ``SETUP_SHARE * n t`` beyond it (the budget, :data:`~landscape.options.surface.SETUP_SHARE`).
2. vmap (``batch_points="auto"``): one call of K points on the first batch, if its predicted cost
   (``K`` times the first batch's share of ``t`` times
   :data:`~landscape.options.surface.VMAP_TRIAL_SLOWDOWN`) fits the budget left and no record of an earlier
   trial for this key says how it went; taken when under :data:`~landscape.options.surface.VMAP_GAIN` times the
   loop.
3. Compile (``compile="auto"``): with ``c`` the expected seconds to have the package (its load when it is in
   the cache, else its build: :func:`landscape.runtime.compile_cache.estimate`) and ``r`` the expected
   compiled/eager ratio, it is tried when ``c + t`` fits the budget left and saves time,
   ``c + t < n (t_e - r t)`` (``t_e`` the eager way's seconds per point). A build runs in a child process
   stopped at the end of the budget; or, with a core to spare and a grid it is expected to end well before, it is
   left running while the points go on eagerly (:attr:`SetUp.background`), and its package takes over from the
   point after it ends (:func:`switch_to_package`). The package is then checked against eager
   (:meth:`~landscape.analyses.surface.evaluator.PointEvaluator.use_package`), and the first point evaluated by
   it and timed; it is dropped again when it disagrees with the eager first point or is not faster.
4. The first point is kept when the plain loop stays; evaluated again by the package when compiled; and by
   vmap with the grid when vmap is taken: every point of a file is evaluated one way.

With ``compile="on"`` the package is used whatever it costs (eager when it cannot be built, loaded or
checked); ``off`` and a fixed ``batch_points`` try nothing. Every measurement updates the key's record, so the
next run of the same model and inputs knows the build time, the ratios and vmap's verdict without trying.
What was done and what it cost are recorded (:attr:`SetUp.decision`) and shown in the progress line
(:meth:`SetUp.summary`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from landscape.analyses.surface.background import Background, export_loss, start_background, stop, take_over
from landscape.analyses.surface.evaluator import RATIO_PAIRS, VMAP_POINTS, PointEvaluator
from landscape.options.surface import SETUP_SHARE, VMAP_GAIN, VMAP_TRIAL_SLOWDOWN
from landscape.runtime import compile_cache, packages
from landscape.runtime import distributed as D
from landscape.runtime.devices import close, measured
from landscape.runtime.progress import duration

#: ``(j, i, loss, data_loss, accuracy)`` of one point
PointResult = tuple[int, int, float, float, float]


@dataclass
class SetUp:
    """How the points are evaluated, and what choosing it did and cost.

    Attributes:
        batch_points: points per call (1: one at a time).
        compiled: whether the compiled package evaluates the points.
        first: points evaluated during the set-up, by the chosen way: to be written, not evaluated again.
        decision: the choices, their inputs and measurements (recorded as ``compile_decision``).
        steps: what the set-up did, in order, and the seconds each took.
        background: the package build left running while the points go on eagerly (:func:`switch_to_package`),
            or None.
    """

    batch_points: int = 1
    compiled: bool = False
    first: list[PointResult] = field(default_factory=list)
    decision: dict[str, Any] = field(default_factory=dict)
    steps: list[tuple[str, float]] = field(default_factory=list)
    background: Background | None = None

    @property
    def point_seconds(self) -> float | None:
        """The seconds per point of the way chosen, as measured while choosing (None: nothing was timed)."""
        d = self.decision
        if self.compiled:
            return d.get("compiled_point_s")
        t, ratio = d.get("eager_point_s"), d.get("vmap_ratio")
        if t is not None and self.batch_points > 1 and ratio is not None:
            return float(ratio) * float(t)
        return t

    @property
    def seconds(self) -> float:
        """The seconds of every step of the set-up."""
        return sum(s for _, s in self.steps)

    def summary(self) -> str:
        """The set-up in words, for the progress line: its time, its steps and the way chosen.

        Returns:
            E.g. ``set-up 0.91 s (fold 0.31 s, package loaded and checked 0.08 s, first point compiled 0.52 s):
            compiled``.
        """
        way = "compiled" if self.compiled else (f"vmap x{self.batch_points}" if self.batch_points > 1 else "eager")
        steps = ", ".join(f"{what} {_seconds(s)}" for what, s in self.steps)
        return f"set-up {_seconds(self.seconds)} ({steps}): {way}"


def _seconds(s: float) -> str:
    return duration(s) if s >= 1 else f"{s:.2f} s"


def set_up(
    evaluator: PointEvaluator,
    *,
    mode: str,
    batch_points: int | str,
    fixed_batch_points: int | None,
    first: tuple[int, int, float, float] | None,
    points_left: int,
    fold_bn: bool = True,
    note: Callable[[str], None] | None = None,
    recorded: dict[str, Any] | None = None,
    background: bool = False,
) -> SetUp:
    """Tune the evaluator and choose how the points are evaluated (rank 0 decides, every rank follows).

    Args:
        evaluator: the grid's evaluator (not yet tuned).
        mode: ``auto``, ``on`` or ``off`` (the compile option).
        batch_points: the option: ``auto`` or a count.
        fixed_batch_points: the points per call a resumed file recorded (kept), or None.
        first: ``(j, i, a, b)`` of the first point left, or None when none is left.
        points_left: the points this process has left (the first included).
        fold_bn: fold eval-mode BatchNorm where it can be proven.
        note: called with what the set-up is doing, and at the end with :meth:`SetUp.summary`.
        recorded: what a resumed file records of the run that began it: ``channels_last`` (the inputs' layout)
            and ``compiled`` (whether the package evaluated its points); each one given (not None) is taken
            instead of chosen again, so that the file's points are evaluated one way and agree bit for bit.
        background: with ``auto``, a build may be left running in a child process while the points go on eagerly
            (one process, with a core to spare: :func:`landscape.analyses.surface.background.spare_cores`), when
            the grid is long enough for it to pay.

    Returns:
        The :class:`SetUp`, the same on every rank.
    """
    say = note or (lambda text: None)
    plan = SetUp()
    if fold_bn:  # checked by a cached package's own check, else by check_fold
        say("set-up: folding BatchNorm")
        start = time.perf_counter()
        evaluator.enable_fold(check=False)
        plan.steps.append(("fold", time.perf_counter() - start))
    channels_last = False
    layout, compiled = ((recorded or {}).get(k) for k in ("channels_last", "compiled"))
    if D.is_main():
        way = mode if compiled is None else ("on" if compiled else "off")
        channels_last = _decide(
            evaluator,
            plan,
            way,
            batch_points,
            fixed_batch_points,
            first,
            points_left,
            say,
            layout=layout,
            background=background and compiled is None,
        )
        if compiled is not None:
            plan.decision.update(option=mode, reason="as recorded by the run that began the file")
    shared = (plan.batch_points, plan.compiled, plan.first, plan.decision, plan.steps, channels_last)
    plan.batch_points, plan.compiled, plan.first, plan.decision, plan.steps, channels_last = D.broadcast_object(shared)
    if not D.is_main():
        if plan.compiled:
            plan.compiled = _follow(evaluator, str(plan.decision.get("key", "")))
        if not plan.compiled:
            evaluator.check_fold()
        if channels_last:
            evaluator.use_channels_last()
    say(plan.summary())
    return plan


def _decide(
    evaluator: PointEvaluator,
    plan: SetUp,
    mode: str,
    batch_points: int | str,
    fixed: int | None,
    first: tuple[int, int, float, float] | None,
    n: int,
    say: Callable[[str], None],
    layout: bool | None = None,
    background: bool = False,
) -> bool:
    """Rank 0's choice (see the module docstring), written into ``plan``; returns whether inputs are channels-last.

    ``layout``: the inputs' layout a resumed file records (taken, not timed), or None. ``background``: a build may
    be left running while the points go on.
    """
    d = plan.decision
    d.update(option=mode, points_left=n)
    plan.batch_points = fixed or (1 if batch_points == "auto" else int(batch_points))
    want_vmap = batch_points == "auto" and fixed is None and mode != "on"
    key, record = "", compile_cache.CompileRecord()
    if first is not None and evaluator.bn == "eval" and (mode != "off" or want_vmap):
        key = evaluator.compile_key()
        record = compile_cache.read_record(key) or record
        d.update(key=key, cache=str(packages.packages_dir() or ""))
        warm = _warm(evaluator, plan, record, mode, n, first, say) if mode != "off" and not layout else None
        if warm is not None:
            compile_cache.write_record(key, warm)
            return False
    if evaluator.fold is not None:
        start = time.perf_counter()
        evaluator.check_fold()
        plan.steps.append(("fold checked", time.perf_counter() - start))
    if layout is None:
        say("set-up: choosing the inputs' layout")
        start = time.perf_counter()
        channels_last = evaluator.choose_memory_format()
        plan.steps.append(("layout", time.perf_counter() - start))
    else:
        channels_last = bool(layout)
        if channels_last:
            evaluator.use_channels_last()
    if not key:
        d["reason"] = "no points left" if first is None else ("--bn recompute" if evaluator.bn != "eval" else "off")
        return channels_last
    j, i, a, b = first
    say("set-up: timing the first point")
    t, w, eager_first = _measured(evaluator, lambda: evaluator.loop([(a, b)])[0])
    plan.steps.append(("first point", t))
    budget = SETUP_SHARE * n * t
    d.update(eager_point_s=t, budget_s=budget if mode != "on" else None)
    record = replace(record, eager_point_s=t, eager_work_s=w)
    spent, speed = 0.0, 1.0
    if want_vmap:
        spent, speed, record = _choose_vmap(evaluator, plan, record, t, w, budget, say)
    if mode != "off" and "reason" not in d:
        record = _choose_compile(
            evaluator, plan, record, mode, n, t, speed, first, eager_first, budget - spent, say, background
        )
    d.setdefault("reason", "off")
    compile_cache.write_record(key, record)
    if not plan.compiled and plan.batch_points == 1:
        plan.first = [(j, i, *eager_first)]
    return evaluator.channels_last


def _warm(
    evaluator: PointEvaluator,
    plan: SetUp,
    record: compile_cache.CompileRecord,
    mode: str,
    n: int,
    first: tuple[int, int, float, float],
    say: Callable[[str], None],
) -> compile_cache.CompileRecord | None:
    """Use the cached package without measuring eager first, when an earlier run measured that it pays.

    The record's eager seconds per point and compiled/eager ratio predict the grid (a ratio of work measured
    within one run holds under another load); with ``auto`` the load and the check (one eager and one compiled
    evaluation of the first batch) must fit the budget and save time. Nothing is spent on the inputs' layout or an
    eager first point then; a compiled first point that takes as long as an eager one did is measured again the
    usual way. Returns the updated record when the package is in use (the first point
    evaluated by it), else None: the choice is left to the measured path.
    """
    d = plan.decision
    r, t = record.compiled_ratio, record.eager_point_s
    path = packages.cached_package(str(d["key"]))
    if path is None or record.failed or not 0 < r < 1:
        return None
    cost = (record.load_s or compile_cache.DEFAULT_LOAD_SECONDS) + (1 + r) * evaluator.obj.weights[0] * t
    if mode == "auto" and not (cost <= SETUP_SHARE * n * t and cost < n * t * (1 - r)):
        return None
    say("set-up: loading the compiled package")
    seconds, runner = _timed(evaluator, lambda: packages.load_package(str(d["key"]), path, evaluator.obj.device))
    if runner is None:
        return None
    j, i, a, b = first
    start = time.perf_counter()
    agrees = evaluator.use_package(runner, at=(a, b), unfolded=True)
    plan.steps.append(("package loaded and checked", seconds + time.perf_counter() - start))
    if not agrees:
        packages.remove_package(str(d["key"]))
        return None
    t_c, w_c, values = _measured(evaluator, lambda: evaluator.loop([(a, b)])[0])
    plan.steps.append(("first point compiled", t_c))
    if mode == "auto" and w_c >= (record.eager_work_s or t):  # as slow as eager was: measure both now
        evaluator.drop_compiled()
        return None
    plan.compiled, plan.batch_points, plan.first = True, 1, [(j, i, *values)]
    d.update(
        estimate_source="package (recorded ratio)",
        compiled_ratio_estimate=r,
        eager_point_s_recorded=t,
        compiled_point_s=t_c,
        load_s=seconds,
        reason="pays back (recorded)" if mode == "auto" else "on",
    )
    return replace(record, load_s=seconds)


def _timed(evaluator: PointEvaluator, fn: Callable[[], Any]) -> tuple[float, Any]:
    wall, _, value = measured(fn, evaluator.obj.device)
    return wall, value


def _measured(evaluator: PointEvaluator, fn: Callable[[], Any]) -> tuple[float, float, Any]:
    return measured(fn, evaluator.obj.device)


def _choose_vmap(
    evaluator: PointEvaluator,
    plan: SetUp,
    record: compile_cache.CompileRecord,
    t: float,
    w: float,
    budget: float,
    say: Callable[[str], None],
) -> tuple[float, float, compile_cache.CompileRecord]:
    """Decide on vmap from the record or one trial in the budget.

    Returns:
        (seconds spent, the eager way's work per point over the loop's, the record).
    """
    d, k = plan.decision, VMAP_POINTS
    first_share = evaluator.obj.weights[0]
    spent, ratio = 0.0, float("inf")
    if record.vmap_points == k:
        ratio, d["vmap_source"] = record.vmap_ratio, "record"
    elif not evaluator.vmap_fits(k):
        d["vmap_source"] = "too large to stack" if evaluator.bn == "eval" else "--bn recompute"
    elif k * first_share * t * VMAP_TRIAL_SLOWDOWN > budget:
        d["vmap_source"] = "trial skipped: it would cost more than the budget"
    else:
        say(f"set-up: timing vmap over {k} points")
        spent, work, per_point = _measured(evaluator, lambda: evaluator.time_vmap(k))
        plan.steps.append(("vmap trial", spent))
        ratio = float("inf") if per_point is None else work / k / (first_share * w)
        d["vmap_source"] = "trial"
        record = replace(record, vmap_points=k, vmap_ratio=min(ratio, 1e9))
    d["vmap_ratio"] = ratio if ratio < float("inf") else None
    if ratio < VMAP_GAIN:
        plan.batch_points = k
        return spent, ratio, record
    return spent, 1.0, record


def _choose_compile(
    evaluator: PointEvaluator,
    plan: SetUp,
    record: compile_cache.CompileRecord,
    mode: str,
    n: int,
    t: float,
    speed: float,
    first: tuple[int, int, float, float],
    eager_first: tuple[float, float, float],
    budget: float,
    say: Callable[[str], None],
    background: bool = False,
) -> compile_cache.CompileRecord:
    """Compile when it pays within the budget (``auto``) or always (``on``); returns the updated record.

    With ``background`` and no package cached, ``auto`` may leave the build running while the points go on
    eagerly (:func:`landscape.analyses.surface.background.start_background`): when it is expected to end before
    the eager grid would, ``c < n t s``, and the points left then save more than checking the package costs,
    ``(n - c / (t s)) t (s - r) > u``, with ``u`` as below (the checks alone must fit the budget).

    ``speed``: the eager way's work per point over the loop's (vmap's ratio when vmap was taken, else 1). The
    package's ratio to eager is measured with care (:data:`RATIO_PAIRS` pairs) and recorded when no run has measured
    it yet, or when this run's first point finds the package no faster than eager; otherwise the recorded one stands.
    """
    d = plan.decision
    key = str(d["key"])
    cached = packages.cached_package(key)
    est = compile_cache.estimate(record, cached is not None)
    d.update(
        estimate_source=est["source"],
        compile_s_estimate=est["compile_s"],
        compiled_ratio_estimate=est["compiled_ratio"],
    )
    careful = cached is None or record.compiled_ratio <= 0
    if mode == "auto":
        # the package ready and checked (an eager and a compiled first batch), the eager first point evaluated
        # again by it, and the ratio measured when unknown (pairs of the same)
        checks = (1 + (RATIO_PAIRS if careful else 0)) * (1 + est["compiled_ratio"]) * evaluator.obj.weights[0]
        cost = est["compile_s"] + t * (1 + checks)
        c, r, u, te = est["compile_s"], est["compiled_ratio"], t * (1 + checks), t * speed
        if background and cached is None and u <= budget and c < n * te and (n - c / te) * t * (speed - r) > u:
            d["rule"] = "c < n * t * speed and (n - c / (t * speed)) * t * (speed - r) > t (1 + checks) <= budget"
            say("set-up: exporting the loss for compiling")
            plan.background, record = start_background(evaluator, record, key, speed, d, plan.steps)
            return record
        d["rule"] = "c + t (1 + checks) <= budget and c + t (1 + checks) < n * t * (speed - r)"
        if cost > budget:
            d["reason"] = "does not fit the set-up budget"
            return record
        if not cost < n * t * (speed - est["compiled_ratio"]):
            d["reason"] = "does not pay back"
            return record
    runner, record = _package(evaluator, plan, record, cached, key, budget if mode == "auto" else None, say)
    if runner is None:
        return record
    j, i, a, b = first
    if not evaluator.use_package(runner, at=(a, b)):
        d["reason"] = "the package disagreed with eager"
        packages.remove_package(key)
        return replace(record, failed=True)
    t_c, w_c, compiled_first = _measured(evaluator, lambda: evaluator.loop([(a, b)])[0])
    plan.steps.append(("first point compiled", t_c))
    ratio = w_c / max(record.eager_work_s, 1e-12)  # this run's first point, eager and compiled
    if careful or (mode == "auto" and ratio >= speed):  # unknown, or the recorded ratio in doubt: measure it
        start = time.perf_counter()
        ratio = evaluator.compiled_ratio(at=(a, b), rounds=RATIO_PAIRS)
        plan.steps.append(("compiled against eager", time.perf_counter() - start))
        record = replace(record, compiled_ratio=ratio)
    d.update(compiled_point_s=t_c, compiled_ratio=ratio)
    record = replace(record, compiled_point_s=t_c, failed=False)
    if _finite(eager_first[1]) and not close(compiled_first[1], eager_first[1], 1e-4):
        evaluator.drop_compiled()
        packages.remove_package(key)
        d["reason"] = "the package disagreed with eager at the first point"
        return replace(record, failed=True)
    if mode == "auto" and ratio >= speed:
        evaluator.drop_compiled()
        d["reason"] = "compiled, but measured slower than eager"
        return record
    plan.compiled, plan.batch_points = True, 1
    plan.first = [(j, i, *compiled_first)]
    d.setdefault("reason", "pays back" if mode == "auto" else "on")
    return record


def switch_to_package(evaluator: PointEvaluator, plan: SetUp, at: tuple[float, float]) -> bool:
    """When the background build has ended: go on compiled from the next point ``at``, if its package pays.

    :func:`landscape.analyses.surface.background.take_over` on :attr:`SetUp.background` (left alone while the
    build runs); the plan then evaluates one point per call by the package.

    Args:
        evaluator: the grid's evaluator.
        plan: the set-up.
        at: ``(a, b)``: the next point to evaluate.

    Returns:
        True when the points go on compiled.
    """
    bg = plan.background
    if bg is None or bg.job.poll() is None:
        return False
    plan.background = None
    if take_over(evaluator, bg, plan.decision, at):
        plan.compiled, plan.batch_points = True, 1
    return plan.compiled


def stop_background(plan: SetUp) -> None:
    """Stop the background build the points no longer need (:func:`landscape.analyses.surface.background.stop`).

    Args:
        plan: the set-up.
    """
    if plan.background is not None:
        stop(plan.background, plan.decision)
        plan.background = None


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def _package(
    evaluator: PointEvaluator,
    plan: SetUp,
    record: compile_cache.CompileRecord,
    cached: Path | None,
    key: str,
    budget: float | None,
    say: Callable[[str], None],
) -> tuple[Any, compile_cache.CompileRecord]:
    """The loaded package: from the cache, else exported and built (stopped at ``budget`` seconds when given)."""
    d = plan.decision
    device = evaluator.obj.device
    if cached is not None:
        say("set-up: loading the compiled package")
        seconds, runner = _timed(evaluator, lambda: packages.load_package(key, cached, device))
        plan.steps.append(("package loaded", seconds))
        d["load_s"] = seconds
        if runner is not None:
            return runner, replace(record, load_s=seconds)
    say("set-up: exporting the loss for compiling")
    with tempfile.TemporaryDirectory(dir=packages.packages_dir()) as tmp:
        program = Path(tmp) / "program.pt2"
        exported = export_loss(evaluator, program, d, plan.steps)
        if exported is None:
            return None, replace(record, failed=True)
        left = None if budget is None else budget - exported
        say(
            "set-up: compiling the loss"
            + ("" if left is None else f" (stopped after {duration(max(left, 0.0))} unless done)")
        )
        build = packages.build_package(program, key, threads=torch.get_num_threads(), deadline_s=left)
    plan.steps.append((f"build {build.outcome}", build.seconds))
    d.update(build=build.outcome, compile_s=exported + build.seconds)
    if build.outcome == "deadline":
        d["reason"] = "the build did not finish within the set-up budget"
        return None, replace(record, stopped_s=max(record.stopped_s, exported + build.seconds))
    if build.path is None:
        d["reason"] = f"the build failed: {build.detail or build.outcome}"
        return None, replace(record, failed=build.outcome == "failed")
    record = replace(record, compile_s=exported + build.seconds, n_builds=record.n_builds + 1)
    seconds, runner = _timed(evaluator, lambda: packages.load_package(key, build.path, device))
    plan.steps.append(("package loaded", seconds))
    d["load_s"] = seconds
    if runner is None:
        d["reason"] = "the package built did not load"
        return None, replace(record, failed=True)
    return runner, replace(record, load_s=seconds)


def _follow(evaluator: PointEvaluator, key: str) -> bool:
    """Another rank: use rank 0's package (from the cache; built here when this rank's cache lacks it)."""
    path = packages.cached_package(key)
    if path is None:
        with tempfile.TemporaryDirectory(dir=packages.packages_dir()) as tmp:
            program = Path(tmp) / "program.pt2"
            evaluator.export(program)
            path = packages.build_package(program, key, threads=torch.get_num_threads()).path
    runner = None if path is None else packages.load_package(key, path, evaluator.obj.device)
    return runner is not None and evaluator.use_package(runner, unfolded=True)
