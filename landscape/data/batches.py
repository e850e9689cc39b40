"""Fixed, seeded batches of a dataset (no augmentation) and training loaders."""

from __future__ import annotations

import numbers

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from landscape.data.dataset import ImageDataset
from landscape.data.stream import BatchSource, dataset_batches
from landscape.errors import LandscapeError


def sample_count(dataset: ImageDataset, n_samples: int | None) -> int:
    """The number of samples to take from ``dataset``: ``n_samples``, or all of it if None.

    Args:
        dataset: The split to draw from.
        n_samples: A whole number in ``1..len(dataset)``, or None.

    Returns:
        The count.

    Raises:
        LandscapeError: If ``n_samples`` is not a whole number in ``1..len(dataset)``.
    """
    n_all = len(dataset)
    n = n_all if n_samples is None else n_samples
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= n_all:
        raise LandscapeError(
            f"n_samples={n_samples!r} is out of range: use 1..{n_all} (the size of {dataset.spec} "
            f"{dataset.split}) or leave it unset for all"
        )
    return int(n)


def sample_indices(n_all: int, n_samples: int | None, seed: int, *, first_samples: bool = False) -> Tensor:
    """The samples of the fixed batches: the first ``n_samples`` of a permutation seeded by ``seed``.

    Args:
        n_all: the size of the split.
        n_samples: how many to take, in ``1..n_all``; None takes all.
        seed: seeds the permutation (a private generator).
        first_samples: take ``0..n_samples-1`` in file order instead (``seed`` unused).

    Returns:
        The int64 indices, in batch order.
    """
    n = n_all if n_samples is None else int(n_samples)
    if first_samples:
        return torch.arange(n)
    return torch.randperm(n_all, generator=torch.Generator().manual_seed(seed))[:n]


def stream_batches(
    dataset: ImageDataset,
    batch_size: int,
    n_samples: int | None = None,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    first_samples: bool = False,
) -> BatchSource:
    """The first ``n_samples`` images of a ``seed``-ed permutation (all if None) as fixed batches that stream.

    No augmentation; the order is fixed by ``seed``; the last batch may be smaller. With ``first_samples`` the
    images are the first ``n_samples`` of the split in file order (no permutation; ``seed`` is unused), as
    Paper A's released code takes its first, unshuffled test batch. Each batch is built and moved to
    ``device`` when it is read (:func:`landscape.data.stream.dataset_batches` says what is held on the host).

    Args:
        dataset: The split to draw from.
        batch_size: Images per batch (a positive integer).
        n_samples: Number of images to take, in ``1..len(dataset)``; None takes all.
        seed: Seeds the permutation.
        device: Device a batch is moved to when read.
        first_samples: Take images ``0..n_samples-1`` in order instead of a seeded choice.

    Returns:
        The :class:`~landscape.data.stream.BatchSource` of ``(x, y)`` batches: float32 ``(b, C, H, W)``
        normalised images and int64 ``(b,)`` labels, ``dataset.images(idx)`` cut in order.

    Raises:
        LandscapeError: If ``batch_size`` is not a positive integer, ``n_samples`` is out of range, or an
            image file cannot be read.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise LandscapeError(f"batch size must be a positive integer, got {batch_size!r}")
    n = sample_count(dataset, n_samples)
    idx = sample_indices(len(dataset), n, seed, first_samples=first_samples)
    return dataset_batches(dataset, idx, int(batch_size), device)


def fixed_batches(
    dataset: ImageDataset,
    batch_size: int,
    n_samples: int | None = None,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    first_samples: bool = False,
) -> list[tuple[Tensor, Tensor]]:
    """Every batch of :func:`stream_batches` read at once, as a list on ``device`` (for a few small batches).

    Args:
        dataset: The split to draw from.
        batch_size: Images per batch (a positive integer).
        n_samples: Number of images to take, in ``1..len(dataset)``; None takes all.
        seed: Seeds the permutation.
        device: Device the batches are moved to.
        first_samples: Take images ``0..n_samples-1`` in order instead of a seeded choice.

    Returns:
        A list of ``(x, y)`` batches: float32 ``(b, C, H, W)`` normalised images and int64 ``(b,)`` labels.

    Raises:
        LandscapeError: As :func:`stream_batches`.
    """
    return list(stream_batches(dataset, batch_size, n_samples, seed=seed, device=device, first_samples=first_samples))


def make_loader(
    dataset: ImageDataset, batch_size: int, *, shuffle: bool, seed: int = 0, num_workers: int = 0
) -> DataLoader:
    """A DataLoader whose order (and worker seeds) come from a generator seeded with ``seed``.

    Rebuilding it with the same seed replays the same sequence of epochs. Augmentations draw from torch's
    RNG: in worker processes it is seeded from ``seed``; with ``num_workers=0`` seed it with torch.manual_seed.

    Args:
        dataset: The split to load.
        batch_size: Images per batch (a positive integer); the last batch may be smaller.
        shuffle: Whether to reshuffle every epoch.
        seed: Seeds the loader's generator.
        num_workers: Number of worker processes (0: load in the main process).

    Returns:
        The ``torch.utils.data.DataLoader``.

    Raises:
        LandscapeError: If ``batch_size`` is not a positive integer.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise LandscapeError(f"batch size must be a positive integer, got {batch_size!r}")
    g = torch.Generator()
    g.manual_seed(seed)
    return DataLoader(
        dataset, batch_size=int(batch_size), shuffle=shuffle, generator=g, num_workers=num_workers, drop_last=False
    )
