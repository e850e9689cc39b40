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

#: one "pass": six 8 MiB tensors allocated, written and freed together; the minor page faults per pass of 10
#: passes after 10
PASSES = textwrap.dedent(
    """
    import resource, sys, torch
    from landscape.runtime.memory import keep_freed_memory, kept
    if sys.argv[1] == "keep":
        assert keep_freed_memory() and keep_freed_memory() and kept()
    def one_pass():
        tensors = [torch.ones(2 * 1024 * 1024) for _ in range(6)]
        del tensors
    for _ in range(10):
        one_pass()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        one_pass()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
    """
)


#: where a 24 MiB tensor's memory lies: in the heap (True) or in a mapping of its own
IN_HEAP = textwrap.dedent(
    """
    import sys, torch
    from landscape.runtime.memory import keep_freed_memory
    if sys.argv[1] == "keep":
        keep_freed_memory()
    pointer = torch.empty(6 * 1024 * 1024).data_ptr()
    heap = [line.split()[0] for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]")]
    low, high = (int(x, 16) for x in heap[0].split("-")) if heap else (0, 0)
    print(low <= pointer < high)
    """
)


def _child(script: str, mode: str) -> str:
    return subprocess.run([sys.executable, "-c", script, mode], check=True, capture_output=True, text=True).stdout


@glibc
def test_kept_memory_serves_blocks_up_to_32_mib_from_the_heap():
    # by default a block this large is mapped from the kernel and unmapped when freed (glibc's threshold starts at
    # 128 KiB and rises only as such blocks are freed); kept, it comes from the heap, whose freed memory stays
    assert _child(IN_HEAP, "default").strip() == "False"
    assert _child(IN_HEAP, "keep").strip() == "True"


@glibc
def test_kept_memory_is_reused_pass_after_pass():
    # 48 MiB allocated and freed per pass: kept, the later passes take no page fault. By default the pages beyond
    # glibc's trim threshold go back to the kernel whenever nothing above them holds the top of the heap, and the
    # next pass faults them in again (0 or 8,160-12,257 faults per pass measured, with the heap's layout)
    assert float(_child(PASSES, "keep")) < 100


def test_another_c_library_is_left_as_it_is(monkeypatch):
    monkeypatch.setattr(memory, "_kept", False)
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
    assert memory.keep_freed_memory() is False and memory.kept() is False


def test_the_command_keeps_freed_memory_unless_switched_off(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append(1) or True)
    assert CliRunner().invoke(cli, ["models"]).exit_code == 0 and calls == [1]
    for off in ("0", "off", " False "):
        monkeypatch.setenv(memory.ENV_SWITCH, off)
        assert CliRunner().invoke(cli, ["models"]).exit_code == 0 and calls == [1]
        assert memory.keep_for_command() is False
    monkeypatch.setenv(memory.ENV_SWITCH, "1")
    assert memory.keep_for_command() is True and calls == [1, 1]


def test_a_worker_keeps_freed_memory_when_its_parent_does(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append(1) or True)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the worker's start sets them: restored after the test
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    threads = torch.get_num_threads()
    try:
        workers._set_torch_threads(keep_memory=False)
        assert calls == []
        workers._set_torch_threads(keep_memory=True)
        assert calls == [1]
    finally:
        torch.set_num_threads(threads)
