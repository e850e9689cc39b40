import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from landscape.errors import LandscapeError
from landscape.runtime.workers import StageTime, Stopwatch, Unit, run_units, stage_table


def _threads_and_pid(value):
    return value, torch.get_num_threads(), os.getpid()


def _product(a, b, *, scale=1):
    return a * b * scale


def _fails(message):
    raise LandscapeError(message)


def _reads(path):
    return path.read_text()


def _writes(path, text):
    time.sleep(0.2)
    path.write_text(text)
    return text


@pytest.mark.parametrize("jobs", [1, 2])
def test_every_unit_runs_once_at_one_torch_thread(jobs):
    units = [Unit(f"u{i}", _threads_and_pid, (i,)) for i in range(4)]
    done = run_units(units, jobs)
    assert [done[f"u{i}"][0] for i in range(4)] == [0, 1, 2, 3]
    assert all(threads == 1 for _, threads, _ in done.values())
    pids = {pid for _, _, pid in done.values()}
    assert (pids == {os.getpid()}) if jobs == 1 else (os.getpid() not in pids and 1 <= len(pids) <= 2)


@pytest.mark.parametrize("jobs", [1, 2])
def test_every_unit_runs_at_the_threads_asked_for(jobs):
    done = run_units([Unit(f"u{i}", _threads_and_pid, (i,)) for i in range(2)], jobs, threads=2)
    assert all(threads == 2 for _, threads, _ in done.values())
    for bad in (0, True, 1.5):
        with pytest.raises(LandscapeError, match="threads must be a positive number"):
            run_units([Unit("a", _product, (1, 1))], jobs, threads=bad)


def test_one_job_leaves_the_callers_thread_count():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run_units([Unit("a", _threads_and_pid, (1,))], 1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_unit_waits_for_the_units_it_names(tmp_path):
    path = tmp_path / "a.txt"
    units = [
        Unit("write", _writes, (path, "written")),
        Unit("other", _product, (2, 3), {"scale": 2}),
        Unit("read", _reads, (path,), after=("write",)),
    ]
    seen = []
    done = run_units(units, 2, on_done=lambda u, v: seen.append(u.key))
    assert done == {"write": "written", "other": 12, "read": "written"}
    assert seen.index("write") < seen.index("read")


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_error_of_a_unit_is_raised_here(jobs):
    with pytest.raises(LandscapeError, match="the unit's own words"):
        run_units([Unit("bad", _fails, ("the unit's own words",)), Unit("ok", _product, (1, 1))], jobs)


def test_bad_calls_are_refused():
    with pytest.raises(LandscapeError, match="--jobs must be a positive number"):
        run_units([], 0)
    with pytest.raises(ValueError, match="share a key"):
        run_units([Unit("a", _product, (1, 1)), Unit("a", _product, (1, 1))], 1)
    with pytest.raises(ValueError, match="listed before a unit it waits for"):
        run_units([Unit("b", _product, (1, 1), after=("a",)), Unit("a", _product, (1, 1))], 1)
    with pytest.raises(ValueError, match="not units of this call"):
        run_units([Unit("b", _product, (1, 1), after=("z",))], 1)


def test_stages_are_timed_and_added_up_by_stage():
    watch = Stopwatch()
    with watch("b"):
        sum(range(100_000))
    with watch("a"):
        time.sleep(0.05)
    with pytest.raises(RuntimeError), watch("a"):
        raise RuntimeError
    assert [r.stage for r in watch.records] == ["b", "a", "a"]
    assert watch.records[1].wall >= 0.05 and watch.records[1].cpu < watch.records[1].wall
    records = [StageTime("x", 1.0, 0.5), StageTime("y", 2.0, 1.0), StageTime("x", 3.0, 1.5)]
    assert stage_table(records, order=("y", "x")) == [("y", 1, 2.0, 1.0), ("x", 2, 4.0, 2.0)]
    assert stage_table(records) == [("x", 2, 4.0, 2.0), ("y", 1, 2.0, 1.0)]


PARENT = """
import sys, time
from landscape.runtime.workers import Unit, run_units
units = [Unit("idle", time.sleep, (0,)), Unit("busy", time.sleep, (600,))]
run_units(units, 2, on_done=lambda unit, _: print("started", flush=True))
"""


def _children(pid):
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found.update(int(c) for c in f.read().split())
    return found


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads the process tree from /proc")
def test_workers_end_when_their_parent_is_killed():
    """The parent killed with kill -9 while one worker waits for a unit and the other is inside one."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    workers = set()
    try:
        assert parent.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 30
        while len(workers := _children(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers) == 2  # one idle on the pipe, one inside a unit of ten minutes
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers)
    finally:
        parent.kill()
        parent.wait()
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w, signal.SIGKILL)


WATCHED = """
import os, sys, time
from landscape.runtime import workers
sys.platform = "elsewhere"  # no PR_SET_PDEATHSIG: only the portable watch
workers.end_with_parent(os.getppid())
print("watching", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads the process tree from /proc")
def test_the_portable_watch_alone_ends_a_worker_whose_parent_died():
    middle = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', {WATCHED!r}]); "
            "print(c.pid, flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(middle.stdout.readline())
    try:
        time.sleep(3)  # the child is watching (its imports done)
        assert _alive(child)
        os.kill(middle.pid, signal.SIGKILL)
        middle.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        middle.kill()
        middle.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_a_worker_started_after_its_parent_died_ends_at_once():
    code = "import os; from landscape.runtime import workers; workers.end_with_parent(-1); print('alive')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "alive" not in done.stdout
