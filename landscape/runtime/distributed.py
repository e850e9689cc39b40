"""One way to run an analysis in one process or under ``torchrun`` (RANK / WORLD_SIZE / LOCAL_RANK set).

Every analysis does the same four things through this module:

1. :func:`start` chooses the device (under torchrun: the GPU of ``LOCAL_RANK``), makes it current and starts
   the process group (nccl on CUDA, gloo on CPU) *before* anything is placed on a device;
2. :func:`on_main` runs the file work on rank 0 alone; its return value reaches every rank, and so does a
   :class:`~landscape.errors.LandscapeError` it raises, so every rank stops with the same one-line message;
3. :func:`shard` splits a list of work items (rank r takes items r, r+W, r+2W, ...), and :func:`sum_tensor`
   / :func:`all_gather_objects` combine what the ranks computed;
4. :func:`barrier` waits for every rank before the result file is read back.

Without torchrun all of these are no-ops on one process. Every collective runs inside :func:`collective`: when
one fails (a rank was killed, so its peers lose their connection to it), the surviving ranks end with one line
that names the ranks lost and says that the same command resumes, not with the backend's traceback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from landscape.errors import LandscapeError

T = TypeVar("T")

#: how long a rank whose collective failed waits for the others to say they are alive, in seconds
LOST_RANK_WAIT_S = 3.0


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
        with collective("all_reduce"):
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
    with collective("all_gather_object"):
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
    with collective("broadcast_object_list"):
        dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if active():
        with collective("barrier"):
            dist.barrier()


@contextmanager
def collective(name: str) -> Iterator[None]:
    """Run one ``torch.distributed`` collective: its failure ends this rank with one line naming the lost ranks.

    A collective fails when a peer is gone (killed, out of memory, ...): gloo and nccl then raise a
    ``RuntimeError`` (``DistBackendError`` is one) on the ranks left. Whatever that error says, it is this
    call that failed; the ranks lost are those that do not answer within :data:`LOST_RANK_WAIT_S`
    (:func:`lost_ranks`). A file of an analysis holds every finished piece, so the same command resumes it.

    Args:
        name: the collective, for the message (``"all_reduce"``, ``"barrier"``, ...).

    Yields:
        Nothing; the collective runs inside the ``with`` block.

    Raises:
        LandscapeError: the collective raised a ``RuntimeError`` (the original is the ``__cause__``).
    """
    try:
        yield
    except RuntimeError as exc:
        lost = lost_ranks()
        who = f"rank {', '.join(map(str, lost))}" if lost else "another rank"
        raise LandscapeError(
            f"{who} of {world_size()} stopped during the run (rank {rank()}'s {name} lost its connection to it); "
            "run the same command again: it resumes from what its file holds"
        ) from exc


def lost_ranks(wait_s: float = LOST_RANK_WAIT_S) -> list[int]:
    """The ranks that do not answer after a collective failed: each rank left writes its name in the store.

    Args:
        wait_s: how long to wait for the others, in seconds.

    Returns:
        The ranks that wrote nothing within ``wait_s``; empty when the store itself cannot be reached (then
        who was lost cannot be told).
    """
    me, keys = rank(), [f"landscape/alive-after-failure/{r}" for r in range(world_size())]
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set(keys[me], "1")
        deadline = time.monotonic() + wait_s
        while True:
            missing = [r for r, key in enumerate(keys) if r != me and not store.check([key])]
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.1)
    except Exception:  # the store was held by the lost rank, or is gone: nobody can be named
        return []
