"""torch.distributed helpers: one process by default, several under ``torchrun`` (RANK/WORLD_SIZE set).

Work is split across ranks by :func:`shard` (rank r takes items r, r+W, r+2W, ...); results are
gathered to every rank with :func:`all_gather_objects`; only rank 0 writes files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def launched() -> bool:
    """Whether this process was started by torchrun (``WORLD_SIZE`` > 1 in the environment)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device: torch.device) -> None:
    """Initialise the default process group under torchrun (nccl on CUDA, gloo on CPU); no-op otherwise."""
    if not launched() or (dist.is_available() and dist.is_initialized()):
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)


def active() -> bool:
    """Whether a process group with more than one rank is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 without torchrun)."""
    return dist.get_rank() if active() else int(os.environ.get("RANK", "0")) if launched() else 0


def world_size() -> int:
    """Number of processes (1 without torchrun)."""
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """Whether this is rank 0, the only rank that writes files and shows progress."""
    return rank() == 0


def shard(items: Sequence[T]) -> list[T]:
    """This rank's share of ``items``: every ``world_size``-th item starting at ``rank``."""
    return list(items[rank() :: world_size()])


def all_gather_objects(obj: Any) -> list[Any]:
    """Gather one picklable object from every rank, in rank order, on every rank."""
    if not active():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Send ``obj`` from rank ``src`` to every rank and return it."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if active():
        dist.barrier()


def local_device(device: torch.device) -> torch.device:
    """The CUDA device of this rank's LOCAL_RANK under torchrun, else ``device`` unchanged."""
    if device.type == "cuda" and launched():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device
