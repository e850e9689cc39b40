"""Timing work on a device: wait for it to finish, and keep the fastest of a few runs."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def synchronize(device: torch.device) -> None:
    """Wait until the work queued on ``device`` has finished (nothing to wait for on a CPU).

    Args:
        device: the device.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
