"""landscape.runtime.machine: what a run computed on, as torch reports it, in this process and under other kernels."""

import os
import subprocess
import sys

import torch

from landscape.runtime.machine import MACHINE_KEYS, machine, machine_line


def test_the_facts_are_torchs_own():
    facts = machine(torch.device("cpu"))
    assert tuple(facts) == MACHINE_KEYS
    assert facts["torch_version"] == torch.__version__ and facts["device"] == "cpu"
    assert facts["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert machine()["torch_threads"] == 2
    finally:
        torch.set_num_threads(before)
    line = machine_line({**facts, "torch_threads": 1})
    assert line == f"torch {torch.__version__}, CPU capability {facts['cpu_capability']}, 1 torch thread, device cpu"
    assert "2 torch threads" in machine_line({**facts, "torch_threads": 2}) and "torch ?" in machine_line({})


def test_a_process_with_lowered_kernels_says_so():
    # ATEN_CPU_CAPABILITY picks ATen's vector kernels at start: DEFAULT exists on every CPU
    code = "from landscape.runtime.machine import machine; print(machine()['cpu_capability'])"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "DEFAULT"
