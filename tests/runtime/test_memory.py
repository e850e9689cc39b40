"""Freed memory kept in the process (glibc's malloc): the pages of a pass are reused, not faulted in again."""

import os
import platform
import subprocess
import sys
import textwrap

import pytest
import torch
from click.testing import CliRunner

from landscape.cli import cli
from landscape.runtime import memory, workers

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

#: one "pass": twelve 8 MiB tensors allocated, written and freed together; the minor page faults of the later passes
PASSES = textwrap.dedent(
    """
    import resource, sys, torch
    from landscape.runtime.memory import keep_freed_memory, kept
    if sys.argv[1] == "keep":
        assert keep_freed_memory() and keep_freed_memory() and kept()
    def one_pass():
        tensors = [torch.ones(2 * 1024 * 1024) for _ in range(12)]
        del tensors
    for _ in range(2):
        one_pass()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        one_pass()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
    """
)


def _faults_per_pass(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", PASSES, mode], check=True, capture_output=True, text=True)
    return float(out.stdout)


@glibc
def test_kept_memory_is_reused_where_glibc_returns_it_and_faults_it_in_again():
    # 96 MiB freed at the top of the heap is more than glibc's trim threshold: by default what lies beyond it goes
    # back to the kernel when nothing above it holds the top, and the next pass faults those pages in again
    # (409.6 to 24,134 faults per pass measured, with the heap's layout); kept, every pass reuses them
    default, kept = _faults_per_pass("default"), _faults_per_pass("keep")
    assert kept < 100 and default > kept


def test_another_c_library_is_left_as_it_is(monkeypatch):
    monkeypatch.setattr(memory, "_kept", False)
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
    assert memory.keep_freed_memory() is False and memory.kept() is False


def test_the_command_keeps_freed_memory_unless_switched_off(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append(1) or True)
    assert CliRunner().invoke(cli, ["models"]).exit_code == 0 and calls == [1]
    monkeypatch.setenv(memory.ENV_SWITCH, "0")
    assert CliRunner().invoke(cli, ["models"]).exit_code == 0 and calls == [1]
    assert memory.keep_for_command() is False


def test_a_worker_keeps_freed_memory_when_its_parent_does(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append(1) or True)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the worker's start sets them: restored after the test
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    threads = torch.get_num_threads()
    try:
        workers._one_torch_thread(keep_memory=False)
        assert calls == []
        workers._one_torch_thread(keep_memory=True)
        assert calls == [1]
    finally:
        torch.set_num_threads(threads)
