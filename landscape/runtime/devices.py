"""Work on a device: its memory (refuse what does not fit before allocating it), waiting for it, timing it."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import TypeVar

import torch

from landscape.errors import LandscapeError

T = TypeVar("T")


def synchronize(device: torch.device) -> None:
    """Wait until the work queued on ``device`` has finished (nothing to wait for on a CPU).

    Args:
        device: the device.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measured(fn: Callable[[], T], device: torch.device) -> tuple[float, float, T]:
    """``(wall seconds, work seconds, value)`` of one call of ``fn``; work is this process's CPU time on a CPU.

    Two ways of doing the same work compare by their work: on a machine shared with other jobs the wall time also
    measures the others' load, the CPU time only this work. On a GPU the work is the wall time (the device is
    synchronised before and after).

    Args:
        fn: the work.
        device: where it runs.

    Returns:
        The wall and work seconds and what ``fn`` returned.
    """
    synchronize(device)
    t0, c0 = time.perf_counter(), time.process_time()
    value = fn()
    synchronize(device)
    wall = time.perf_counter() - t0
    return wall, (time.process_time() - c0 if device.type == "cpu" else wall), value


def fastest(fn: Callable[[], T], device: torch.device, repeats: int = 2, *, warm_up: bool = False) -> tuple[float, T]:
    """The least wall time of ``repeats`` calls of ``fn`` (load spikes only add), and the last call's value.

    The device is synchronised before and after each call, so queued work is timed where it runs.

    Args:
        fn: the work.
        device: where it runs.
        repeats: the timed calls (at least 1).
        warm_up: make one untimed call first (compilation, caches).

    Returns:
        ``(seconds, value)``.
    """
    if warm_up:
        fn()
    best, value = math.inf, None
    for _ in range(max(1, repeats)):
        synchronize(device)
        start = time.perf_counter()
        value = fn()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best, value  # type: ignore[return-value]


def close(got: float, want: float, rtol: float) -> bool:
    """Whether ``got`` agrees with ``want`` to a relative ``rtol``, measured against ``max(1, |want|)``.

    Args:
        got: the value to check.
        want: the reference.
        rtol: the tolerance.

    Returns:
        ``|got - want| <= rtol * max(1, |want|)`` (False for NaN).
    """
    return abs(float(got) - float(want)) <= rtol * max(1.0, abs(float(want)))


def device_memory(device: torch.device) -> int:
    """Bytes of memory of ``device``: the GPU's total, or the machine's physical memory for the CPU.

    Args:
        device: the device.

    Returns:
        The number of bytes (0 when it cannot be found out).
    """
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[1])
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # a platform without these names
        return 0


def require_memory(vectors: int, n: int, dtype: torch.dtype, device: torch.device, what: str, fix: str) -> None:
    """Refuse, before allocating, ``vectors`` vectors of length ``n`` that need more than the device has.

    Args:
        vectors: how many vectors of ``n`` entries are kept.
        n: their length.
        dtype: their dtype.
        device: where they are kept.
        what: what they are, for the message.
        fix: what to lower, for the message.

    Raises:
        LandscapeError: ``vectors * n * itemsize`` exceeds the device's memory.
    """
    need = vectors * n * torch.empty(0, dtype=dtype).element_size()
    have = device_memory(torch.device(device))
    if have and need > have:
        raise LandscapeError(
            f"{what} needs {need / 1e9:.1f} GB ({vectors} vectors of {n:,} entries), more than the "
            f"{have / 1e9:.1f} GB of memory of {device}; {fix}"
        )
