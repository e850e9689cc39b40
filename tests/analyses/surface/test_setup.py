"""The set-up of a surface: what auto tries is bounded by the grid it serves, remembered, and checked.

The compiler is replaced here by stand-ins (a build that stops at its deadline, a package that is the eager loss
itself, one that disagrees, one that is slow); a real package is built in test_run.py (slow).
"""

import time
from dataclasses import replace

import pytest
import torch
from helpers import conv_bn_model

from landscape.analyses.surface import setup as S
from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.evaluator import VMAP_POINTS, PointEvaluator
from landscape.core.objective import Objective
from landscape.options.surface import SETUP_SHARE
from landscape.runtime import compile_cache, packages

FIRST = (0, 0, -1.0, 0.5)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path / "cache"))


def evaluator() -> PointEvaluator:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(13, 1, 6, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (13,), generator=g)
    obj = Objective(conv_bn_model(), [(x[:8], y[:8]), (x[8:], y[8:])])
    d = random_directions(obj.params, ndim=2, seed=3)
    return PointEvaluator(obj, d.x, d.y)


def plan(ev, n, *, mode="auto", batch_points="auto", fixed=None):
    return S.set_up(ev, mode=mode, batch_points=batch_points, fixed_batch_points=fixed, first=FIRST, points_left=n)


def never(*args, **kwargs):
    raise AssertionError("not to be tried")


def eager_values(a=FIRST[2], b=FIRST[3]):
    """The plain loop's values at a point (BatchNorm folded, as every run evaluates)."""
    ev = evaluator()
    ev.tune()
    return ev.loop([(a, b)])[0]


def test_a_small_grid_tries_nothing_and_keeps_its_timed_first_point(monkeypatch):
    ev = evaluator()
    monkeypatch.setattr(ev, "time_vmap", never)
    monkeypatch.setattr(packages, "build_package", never)
    p = plan(ev, 4)
    assert (p.batch_points, p.compiled) == (1, False)
    assert p.first == [(0, 0, *eager_values())]
    assert [s for s, _ in p.steps] == ["fold", "fold checked", "layout", "first point"]
    d = p.decision
    assert d["vmap_source"].startswith("trial skipped") and d["reason"] == "does not fit the set-up budget"
    assert d["budget_s"] == pytest.approx(SETUP_SHARE * 4 * d["eager_point_s"])
    assert "set-up" in p.summary() and p.summary().endswith(": eager")


def test_off_and_fixed_batch_points_try_nothing(monkeypatch):
    ev = evaluator()
    monkeypatch.setattr(ev, "time_vmap", never)
    monkeypatch.setattr(packages, "build_package", never)
    p = plan(ev, 10**6, mode="off", batch_points=3)
    assert (p.batch_points, p.compiled, p.first) == (3, False, [])
    assert p.decision["reason"] == "off" and [s for s, _ in p.steps] == ["fold", "fold checked", "layout"]
    p = plan(ev, 10**6, mode="off", batch_points="auto", fixed=5)  # a resumed file's choice is kept
    assert (p.batch_points, p.first) == (5, [])


def test_vmap_is_tried_when_it_fits_the_budget_and_its_verdict_remembered(monkeypatch):
    ev = evaluator()
    calls = []
    monkeypatch.setattr(ev, "time_vmap", lambda k: calls.append(k) or 0.0)  # vmap costs nothing: taken
    p = plan(ev, 10**6, mode="off")
    assert calls == [VMAP_POINTS] and p.batch_points == VMAP_POINTS and p.first == []  # evaluated by vmap later
    assert p.decision["vmap_source"] == "trial" and p.decision["vmap_ratio"] < 0.1
    ev = evaluator()
    monkeypatch.setattr(ev, "time_vmap", never)
    again = plan(ev, 10**6, mode="off")
    assert again.batch_points == VMAP_POINTS and again.decision["vmap_source"] == "record"


def burn(seconds: float) -> None:
    """Spend ``seconds`` of CPU time (the set-up compares work, which a sleep would not spend)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_slow_or_failing_vmap_keeps_the_loop(monkeypatch, tmp_path):
    for slow in (True, False):
        monkeypatch.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path / f"c{slow}"))
        ev = evaluator()
        monkeypatch.setattr(ev, "time_vmap", lambda k, slow=slow: burn(0.3) or 1.0 if slow else None)
        p = plan(ev, 10**6, mode="off")
        assert p.batch_points == 1 and p.first == [(0, 0, *eager_values())]
        assert p.decision["vmap_ratio"] > 1 if slow else p.decision["vmap_ratio"] is None


def test_a_build_gets_the_budget_left_as_its_deadline_and_is_remembered_when_stopped(monkeypatch):
    deadlines = []

    def stopped(program, key, *, threads, deadline_s=None):
        assert program.is_file()  # the exported program
        deadlines.append(deadline_s)
        return packages.Build(None, deadline_s, "deadline")

    monkeypatch.setattr(packages, "build_package", stopped)
    monkeypatch.setattr(compile_cache, "DEFAULT_COMPILE_SECONDS", 0.0)  # expected to be free: tried
    ev = evaluator()
    p = plan(ev, 10**6, batch_points=1)
    d = p.decision
    assert len(deadlines) == 1 and 0 < deadlines[0] <= d["budget_s"]
    assert not p.compiled and p.first == [(0, 0, *eager_values())]
    assert d["reason"] == "the build did not finish within the set-up budget" and d["build"] == "deadline"
    record = compile_cache.read_record(d["key"])
    assert record.stopped_s == pytest.approx(d["compile_s"]) and record.stopped_s >= deadlines[0]
    est = compile_cache.estimate(record, False)
    assert est["compile_s"] == pytest.approx(2 * record.stopped_s)  # next time only with twice the time


def test_no_build_when_the_record_says_compiled_is_slower(monkeypatch):
    monkeypatch.setattr(packages, "build_package", never)
    ev = evaluator()
    ev.tune()
    key = ev.compile_key()
    slower = compile_cache.CompileRecord(compile_s=1e-6, compiled_ratio=2.0, eager_point_s=1.0)
    compile_cache.write_record(key, slower)
    p = plan(evaluator(), 10**6, batch_points=1)
    assert p.decision["reason"] == "does not pay back" and not p.compiled


def eager_runner(ev):
    """A stand-in package: the eager per-batch loss itself, called as a package is (tensors by sorted name)."""
    names = sorted(ev._point_state(ev.theta))
    return lambda inputs: list(ev._batch_eval_state(dict(zip(names, inputs[:-2])), *inputs[-2:]))


def with_package(monkeypatch, make_runner):
    monkeypatch.setattr(packages, "cached_package", lambda key: packages.package_path(key))
    removed = []
    monkeypatch.setattr(packages, "remove_package", removed.append)
    monkeypatch.setattr(packages, "load_package", lambda key, path, device: make_runner())
    return removed


def test_a_package_that_agrees_is_used_and_the_first_point_evaluated_by_it(monkeypatch):
    ev = evaluator()
    with_package(monkeypatch, lambda: eager_runner(ev))
    p = plan(ev, 3, mode="on")
    assert p.compiled and ev.compiled is not None and p.batch_points == 1
    (j, i, *values), want = p.first[0], eager_values()
    assert (j, i) == (0, 0) and values == pytest.approx(want, rel=1e-12)
    steps = ["fold", "fold checked", "layout", "first point", "package loaded", "first point compiled"]
    steps.append("compiled against eager")
    assert [s for s, _ in p.steps] == steps
    assert 0 < p.decision["compiled_ratio"] < 10  # the stand-in is the eager loss: about 1
    assert ev.loop([(0.3, -0.2)])[0] == pytest.approx(eager_values(0.3, -0.2), rel=1e-12)
    assert p.summary().endswith(": compiled")


def test_a_package_that_disagrees_is_dropped_removed_and_recorded(monkeypatch):
    ev = evaluator()

    def wrong():
        good = eager_runner(ev)
        return lambda inputs: [good(inputs)[0] + 1e-2, good(inputs)[1]]

    removed = with_package(monkeypatch, wrong)
    p = plan(ev, 3, mode="on")
    assert not p.compiled and ev.compiled is None and p.first == [(0, 0, *eager_values())]
    assert p.decision["reason"] == "the package disagreed with eager" and removed
    assert compile_cache.read_record(p.decision["key"]).failed


def test_auto_drops_a_package_measured_slower_than_eager(monkeypatch):
    ev = evaluator()
    ev.tune()
    good = eager_runner(ev)

    def slow(inputs):  # 50 ms of work
        burn(0.05)
        return good(inputs)

    with_package(monkeypatch, lambda: slow)
    key = ev.compile_key()
    # recorded: eager took 1 us a point and the package a thousandth of it; the package now takes 50 ms
    fast = compile_cache.CompileRecord(compile_s=1.0, load_s=1e-6, compiled_ratio=1e-3, eager_point_s=1e-6)
    compile_cache.write_record(key, fast)
    p = plan(evaluator(), 10**6, batch_points=1)
    steps = [s for s, _ in p.steps]  # tried as recorded, found slower than eager was: both measured now
    assert steps[:3] == ["fold", "package loaded and checked", "first point compiled"] and "layout" in steps
    assert p.decision["estimate_source"] == "package"
    assert p.decision["reason"] == "compiled, but measured slower than eager" and not p.compiled
    assert p.first == [(0, 0, *eager_values())]  # the eager first point is kept
    after = compile_cache.read_record(key)  # measured, for the next decision
    assert after.compiled_point_s > 0.05 and after.compiled_ratio > 1


def test_a_cached_package_that_paid_before_is_used_without_timing_eager(monkeypatch):
    ev = evaluator()
    with_package(monkeypatch, lambda: eager_runner(ev))
    ev.enable_fold()
    key = ev.compile_key()
    # an earlier run: eager took a second a point (wall and work), the package half of it
    paid = compile_cache.CompileRecord(compile_s=30.0, load_s=0.01, compiled_ratio=0.5, eager_point_s=1.0)
    paid = replace(paid, eager_work_s=1.0)
    compile_cache.write_record(key, paid)
    small = plan(evaluator(), 2)  # load and check would cost more than a fifth of 2 points: measured as usual
    assert not small.compiled and "layout" in [s for s, _ in small.steps]
    compile_cache.write_record(key, paid)  # (the small run recorded its own eager point)
    monkeypatch.setattr(ev, "choose_memory_format", never)
    monkeypatch.setattr(ev, "time_vmap", never)
    p = plan(ev, 100)
    assert p.compiled and p.decision["reason"] == "pays back (recorded)"
    assert [s for s, _ in p.steps] == ["fold", "package loaded and checked", "first point compiled"]
    (j, i, *values), want = p.first[0], eager_values()
    assert (j, i) == (0, 0) and values == pytest.approx(want, rel=1e-12)
    assert compile_cache.read_record(key).compiled_ratio == paid.compiled_ratio  # the ratio stays as measured


class StandInJob:
    """A build left running that ends after ``polls`` polls with ``build`` (a package path, or a failure)."""

    made: list = []

    def __init__(self, program, key, *, threads, compile_threads=None, polls=2, build=None):
        assert program.is_file() and compile_threads >= 1  # the exported program; the spare cores
        self.key, self.polls, self.stopped = key, polls, False
        self.build = build or packages.Build(packages.package_path(key), 3.0, "built")
        StandInJob.made.append(self)

    def poll(self):
        self.polls -= 1
        return self.build if self.polls <= 0 else None

    def stop(self, outcome="stopped"):
        self.stopped = True
        return self.build if self.polls <= 0 else packages.Build(None, 5.0, outcome)


def background_plan(ev, n, monkeypatch, **job):
    StandInJob.made = []
    monkeypatch.setattr(packages, "BuildJob", lambda *a, **k: StandInJob(*a, **k, **job))
    return S.set_up(
        ev, mode="auto", batch_points=1, fixed_batch_points=None, first=FIRST, points_left=n, background=True
    )


def test_a_build_left_running_switches_the_points_to_its_package_when_it_ends(monkeypatch):
    ev = evaluator()
    removed = with_package(monkeypatch, lambda: eager_runner(ev))
    monkeypatch.setattr(packages, "cached_package", lambda key: None)  # nothing built yet
    monkeypatch.setattr(ev, "compiled_ratio", lambda at, rounds: 0.5)  # the stand-in is eager: taken to be faster
    p = background_plan(ev, 10**6, monkeypatch)
    (job,) = StandInJob.made
    assert p.background is not None and p.background.job is job and not p.compiled
    assert p.decision["reason"].startswith("building in the background") and p.decision["build"] == "running"
    assert [s for s, _ in p.steps] == ["fold", "fold checked", "layout", "first point", "export"]
    assert p.first == [(0, 0, *eager_values())]  # the first point eager, kept
    assert not S.switch_to_package(ev, p, (0.3, -0.2)) and p.background is not None  # still running
    assert S.switch_to_package(ev, p, (0.3, -0.2)) and p.compiled and p.background is None
    assert p.decision["reason"] == "pays back (built in the background)" and not removed
    assert p.decision["build"] == "built" and p.decision["compile_s"] >= 3.0 and p.decision["switch_s"] > 0
    record = compile_cache.read_record(p.decision["key"])
    assert record.n_builds == 1 and record.compile_s == p.decision["compile_s"] and record.compiled_ratio == 0.5
    assert ev.loop([(0.3, -0.2)])[0] == pytest.approx(eager_values(0.3, -0.2), rel=1e-12)


def test_a_background_build_that_fails_or_outlives_the_points_is_recorded(monkeypatch):
    ev = evaluator()
    with_package(monkeypatch, never)
    monkeypatch.setattr(packages, "cached_package", lambda key: None)
    p = background_plan(ev, 10**6, monkeypatch, polls=1, build=packages.Build(None, 2.0, "failed", "boom"))
    assert not S.switch_to_package(ev, p, (0.3, -0.2)) and not p.compiled and p.background is None
    assert p.decision["reason"] == "the background build failed: boom"
    assert compile_cache.read_record(p.decision["key"]).failed
    compile_cache.write_record(p.decision["key"], compile_cache.CompileRecord())
    p = background_plan(evaluator(), 10**6, monkeypatch, polls=10**9)
    S.stop_background(p)
    assert StandInJob.made[0].stopped and p.background is None and p.decision["build"] == "stopped"
    assert p.decision["reason"] == "the background build did not end before the points (stopped)"
    record = compile_cache.read_record(p.decision["key"])
    assert record.stopped_s >= 5.0 and compile_cache.estimate(record, False)["compile_s"] >= 10.0


def test_no_build_is_left_running_for_a_grid_it_would_outlast(monkeypatch):
    ev = evaluator()
    monkeypatch.setattr(packages, "build_package", never)
    p = background_plan(ev, 4, monkeypatch)  # 4 points end long before the 60 s a build is expected to take
    assert not StandInJob.made and p.background is None
    assert p.decision["reason"] == "does not fit the set-up budget"
