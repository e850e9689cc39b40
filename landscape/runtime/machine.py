"""What a run computed on: the PyTorch version, the CPU's vector kernels, the threads and the device.

The same code gives the same bits on one machine; another machine's kernels (ATen's CPU capability, which
``ATEN_CPU_CAPABILITY`` can lower, oneDNN's instruction set) or thread count change the last bits of a sum, and
training amplifies them. So every output records these four facts (:func:`machine`): each result file's root
attributes (:meth:`landscape.core.source.ModelSource.provenance`), each checkpoint's metadata, the demo's
``summary.md``, ``report.html`` and ``timings.json``.
"""

from __future__ import annotations

from typing import Any

#: the attributes :func:`machine` gives, in order
MACHINE_KEYS = ("torch_version", "cpu_capability", "torch_threads", "device")


def machine(device: Any = "cpu") -> dict[str, Any]:
    """This process's PyTorch version, CPU capability, intra-op thread count, and ``device``.

    Args:
        device: the device the work runs on (a ``torch.device`` or its name).

    Returns:
        ``{"torch_version": "2.x", "cpu_capability": "AVX512" | "AVX2" | "DEFAULT" | ... (what
        ``torch.backends.cpu.get_cpu_capability()`` says: the vector kernels ATen dispatches to),
        "torch_threads": torch.get_num_threads(), "device": str(device)}``.
    """
    import torch

    return {
        "torch_version": str(torch.__version__),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "torch_threads": int(torch.get_num_threads()),
        "device": str(device),
    }


def machine_line(facts: dict[str, Any]) -> str:
    """One line of :func:`machine`'s facts: ``torch 2.x, CPU capability AVX512, 1 torch thread, device cpu``.

    Args:
        facts: a dict with the keys of :data:`MACHINE_KEYS` (a missing one is shown as ``?``).

    Returns:
        The line.
    """
    threads = facts.get("torch_threads", "?")
    return (
        f"torch {facts.get('torch_version', '?')}, CPU capability {facts.get('cpu_capability', '?')}, "
        f"{threads} torch thread{'' if threads == 1 else 's'}, device {facts.get('device', '?')}"
    )
