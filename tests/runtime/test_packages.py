"""Compiled packages in the cache folder: kept only when intact, built in a child stopped at its deadline."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from landscape.runtime import packages as P


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def plant(key: str, data: bytes, digest: bytes | None = None):
    """A package entry as build_package leaves it: the package, then its digest file."""
    path = P.package_path(key)
    path.write_bytes(data)
    if digest is None:
        import hashlib

        digest = json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}).encode()
    path.with_name(path.name + ".json").write_bytes(digest)
    return path


def test_an_intact_package_is_found_and_a_damaged_one_removed(cache, tmp_path):
    key = "a" * 32
    assert P.cached_package(key) is None
    path = plant(key, b"package bytes")
    assert P.cached_package(key) == path
    assert (os.stat(cache / "packages").st_mode & 0o777) == 0o700
    path.write_bytes(b"package bytes, cut sh")  # changed after its digest was written
    assert P.cached_package(key) is None and not path.exists() and not path.with_name(path.name + ".json").exists()
    path = plant(key, b"package bytes")
    path.with_name(path.name + ".json").unlink()  # a build killed between the package and its digest
    assert P.cached_package(key) is None and not path.exists()
    plant(key, b"package bytes", digest=b"{not json")
    assert P.cached_package(key) is None and not path.exists()


def test_a_planted_link_is_never_followed_nor_kept(tmp_path):
    key = "b" * 32
    victim = tmp_path / "victim.so"
    victim.write_bytes(b"elsewhere")
    path = P.package_path(key)
    path.symlink_to(victim)
    plant_digest = json.dumps({"sha256": __import__("hashlib").sha256(b"elsewhere").hexdigest()})
    path.with_name(path.name + ".json").write_text(plant_digest)
    assert P.cached_package(key) is None
    assert not path.is_symlink() and victim.read_bytes() == b"elsewhere"


def test_no_usable_cache_folder_means_no_packages(cache):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)  # writable by others: not used
    assert P.package_path("c" * 32) is None and P.cached_package("c" * 32) is None
    assert P.build_package(cache / "x.pt2", "c" * 32, threads=1).outcome == "no cache"
    os.chmod(cache, 0o700)


def test_a_build_that_fails_keeps_nothing_and_says_why(tmp_path):
    bogus = tmp_path / "program.pt2"
    bogus.write_bytes(b"not an exported program")
    build = P.build_package(bogus, "d" * 32, threads=1)
    assert build.outcome == "failed" and build.path is None and build.detail
    assert not list(P.packages_dir().iterdir())  # no temporary, no package


def test_a_build_is_stopped_at_its_deadline_with_everything_it_started(tmp_path, monkeypatch):
    monkeypatch.setattr(P.sys, "executable", str(_sleeper(tmp_path)))  # a child that starts a grandchild and waits
    (tmp_path / "program.pt2").write_bytes(b"program")
    start = time.perf_counter()
    build = P.build_package(tmp_path / "program.pt2", "e" * 32, threads=1, deadline_s=1.0)
    assert build.outcome == "deadline" and build.path is None and 1.0 <= build.seconds < 20.0
    assert time.perf_counter() - start < 20.0
    assert not list(P.packages_dir().iterdir())
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    for _ in range(50):  # killed with its group: gone (reaped by init) within moments
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_a_build_left_running_is_polled_and_stopped_with_everything_it_started(tmp_path, monkeypatch):
    monkeypatch.setattr(P.sys, "executable", str(_sleeper(tmp_path)))
    program = tmp_path / "program.pt2"
    program.write_bytes(b"program")
    job = P.BuildJob(program, "e" * 32, threads=1, compile_threads=1)
    program.unlink()  # the job has its own copy
    (work,) = list(P.packages_dir().iterdir())
    assert (work / "program.pt2").read_bytes() == b"program"
    for _ in range(50):
        if (tmp_path / "grandchild.pid").exists():
            break
        time.sleep(0.1)
    assert job.poll() is None and job.result is None and job.seconds > 0
    build = job.stop()
    assert build.outcome == "stopped" and build.path is None and job.poll() is build
    assert not list(P.packages_dir().iterdir())
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_a_build_left_running_reports_its_failure_when_polled(tmp_path):
    bogus = tmp_path / "program.pt2"
    bogus.write_bytes(b"not an exported program")
    job = P.BuildJob(bogus, "d" * 32, threads=1)
    for _ in range(600):
        if job.poll() is not None:
            break
        time.sleep(0.1)
    assert job.result.outcome == "failed" and job.result.detail and job.result.path is None
    assert job.stop() is job.result  # an ended build keeps its outcome
    assert not list(P.packages_dir().iterdir())


CALLER = """
import sys, time
from pathlib import Path
import torch
from landscape.runtime import packages as P
program = Path(sys.argv[1])
torch.export.save(torch.export.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),)), program)
job = P.BuildJob(program, "f" * 32, threads=1, compile_threads=1)
print(job._child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads the process tree from /proc")
def test_a_build_whose_caller_is_killed_ends_with_its_compilers_and_leaves_no_folder(tmp_path):
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(tmp_path / "program.pt2")], stdout=subprocess.PIPE)
    child = None
    try:
        child = int(caller.stdout.readline())
        assert any(P.packages_dir().iterdir())  # the build's folder
        time.sleep(1.5)  # the build under way: torch imported or compiling, the watch set before either
        assert _alive(child)
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait()
        deadline = time.monotonic() + 15
        while (_alive(child) or _group(child)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child) and not _group(child)  # the build and every compiler it started
        assert not list(P.packages_dir().iterdir())
    finally:
        caller.kill()
        caller.wait()
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child, signal.SIGKILL)


def _group(pgid: int) -> list[int]:
    """The live processes of the process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def _sleeper(tmp_path):
    script = tmp_path / "sleeper.sh"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {tmp_path}/grandchild.pid\nwait\n")
    script.chmod(0o700)
    return script


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_package_that_does_not_load_is_removed():
    key = "f" * 32
    path = plant(key, b"not a zip file")
    assert P.load_package(key, path, torch.device("cpu")) is None
    assert not path.exists() and P.cached_package(key) is None
