"""One way to run an analysis in one process or under ``torchrun`` (RANK / WORLD_SIZE / LOCAL_RANK set).

Every analysis does the same four things through this module:

1. :func:`start` chooses the device (under torchrun: the GPU of ``LOCAL_RANK``), makes it current and starts
   the process group (nccl on CUDA, gloo on CPU) *before* anything is placed on a device;
2. :func:`on_main` runs the file work on rank 0 alone; its return value reaches every rank, and so does a
   :class:`~landscape.errors.LandscapeError` it raises, so every rank stops with the same one-line message;
3. :func:`shard` splits a list of work items (rank r takes items r, r+W, r+2W, ...), and :func:`sum_tensor`
   / :func:`all_gather_objects` combine what the ranks computed;
4. :func:`barrier` waits for every rank before the result file is read back.

Without torchrun all of these are no-ops on one process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from landscape.errors import LandscapeError

T = TypeVar("T")


def launched() -> bool:
    """Whether this process was started by torchrun with more than one process (``WORLD_SIZE`` > 1).

    Returns:
        ``True`` when the environment variable ``WORLD_SIZE`` is greater than 1.
    """
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """The device named by ``name``: ``auto`` is CUDA when present, else CPU.

    Under torchrun CUDA means this rank's GPU (``cuda:LOCAL_RANK``).

    Args:
        name: ``"auto"``, a device string such as ``"cpu"``, ``"cuda"`` or ``"cuda:1"``, or a ``torch.device``.

    Returns:
        The resolved device.

    Raises:
        LandscapeError: an unknown device name, or CUDA asked for without a GPU.
    """
    if isinstance(name, torch.device):
        device = name
    elif name == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            device = torch.device(name)
        except RuntimeError as exc:
            raise LandscapeError(f"unknown device {name!r}; use auto, cpu or cuda") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LandscapeError("--device cuda was asked for but no CUDA GPU is available; use --device cpu")
    if device.type == "cuda" and launched():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def start(device: str | torch.device = "auto") -> torch.device:
    """Start this process's share of a run and return its device.

    Resolves ``device`` (:func:`resolve_device`); under torchrun makes this rank's GPU the current device and
    initialises the default process group (nccl on CUDA, gloo on CPU) unless one is running. Call it before
    building a model, so that no rank places anything on another rank's GPU.

    Args:
        device: the device asked for (see :func:`resolve_device`).

    Returns:
        This process's device.

    Raises:
        LandscapeError: an unknown device name, or CUDA asked for without a GPU.
    """
    dev = resolve_device(device)
    if not launched() or (dist.is_available() and dist.is_initialized()):
        return dev
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    return dev


def active() -> bool:
    """Whether a process group with more than one rank is running.

    Returns:
        ``True`` when ``torch.distributed`` is initialised with a world size greater than 1.
    """
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 without torchrun).

    Returns:
        The process-group rank; ``RANK`` from the environment before the group is started; 0 in one process.
    """
    return dist.get_rank() if active() else int(os.environ.get("RANK", "0")) if launched() else 0


def world_size() -> int:
    """Number of processes (1 without torchrun).

    Returns:
        The process-group world size, or 1 when no group of more than one rank is running.
    """
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """Whether this is rank 0, the only rank that writes files and shows progress.

    Returns:
        ``rank() == 0``.
    """
    return rank() == 0


def on_main(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 only and return its value on every rank (broadcast; it must pickle).

    A :class:`LandscapeError` raised by ``fn`` is raised on every rank with the same message, so that no rank
    waits forever for a file that rank 0 refused to write.

    Args:
        fn: the work to do on rank 0, taking no arguments.

    Returns:
        ``fn()``'s value, on every rank.

    Raises:
        LandscapeError: on the other ranks, when ``fn`` raised on rank 0 (with that exception's message); rank
            0 re-raises ``fn``'s own exception, whatever its type.
    """
    value: Any = None
    error: str | None = None
    if is_main():
        try:
            value = fn()
        except Exception as exc:
            if active():  # the others learn that rank 0 failed; rank 0 keeps its own exception and traceback
                broadcast_object((None, str(exc) or type(exc).__name__))
            raise
    if active():
        value, error = broadcast_object((value, error))
    if error is not None:
        raise LandscapeError(error)
    return value


def shard(items: Sequence[T]) -> list[T]:
    """This rank's share of ``items``: every ``world_size``-th item starting at ``rank``.

    Args:
        items: the work items of the whole run.

    Returns:
        ``list(items[rank()::world_size()])``; all of ``items`` in one process.
    """
    return list(items[rank() :: world_size()])


def sum_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of ``tensor`` over all ranks, in place (``all_reduce``); ``tensor`` itself in one process.

    Args:
        tensor: this rank's part, on this rank's device; overwritten with the sum.

    Returns:
        ``tensor`` (the same object), now holding the sum over ranks.
    """
    if active():
        dist.all_reduce(tensor)
    return tensor


def all_gather_objects(obj: Any) -> list[Any]:
    """Gather one picklable object from every rank, in rank order, on every rank.

    Args:
        obj: this rank's object (must pickle).

    Returns:
        A list of ``world_size()`` objects, entry ``r`` from rank ``r``; ``[obj]`` in one process.
    """
    if not active():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Send ``obj`` from rank ``src`` to every rank and return it.

    Args:
        obj: the object to send (must pickle); ignored on ranks other than ``src``.
        src: the sending rank.

    Returns:
        Rank ``src``'s ``obj``, on every rank; ``obj`` itself in one process.
    """
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if active():
        dist.barrier()
