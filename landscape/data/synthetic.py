"""Deterministic synthetic images (a per-class template plus noise), for tests."""

from __future__ import annotations

import torch

from landscape.data.dataset import ImageDataset
from landscape.data.info import DatasetInfo
from landscape.data.specs import positive_int
from landscape.errors import LandscapeError
from landscape.options.common import SPLITS


def load_synthetic(spec: str, arg: str | None, split: str, info: DatasetInfo) -> ImageDataset:
    """N deterministic random images per split of SIZE x SIZE, 10 balanced classes (a class template plus noise).

    Args:
        spec: the spec as given.
        arg: the spec's ``N[:SIZE]``, or None for 200 images of 32 x 32.
        split: ``train`` or ``test``.
        info: what the dataset produces.

    Returns:
        The in-memory dataset.
    """
    n, size = synthetic_args(arg)
    templates = torch.rand(10, 3, size, size, generator=torch.Generator().manual_seed(1234))
    g = torch.Generator().manual_seed(SPLITS.index(split) + 1)
    labels = (torch.arange(n) % 10)[torch.randperm(n, generator=g)]
    noise = torch.rand(n, 3, size, size, generator=g)
    images = 0.6 * templates[labels] + 0.4 * noise
    return ImageDataset(info, spec, split, labels, images=images, classes=[f"class{i}" for i in range(10)])


def synthetic_args(arg: str | None) -> tuple[int, int]:
    """The N and SIZE of a ``synthetic[:N[:SIZE]]`` spec (defaults 200 and 32).

    Args:
        arg: the spec's argument, or None.

    Returns:
        ``(n, size)``.

    Raises:
        LandscapeError: more than two parts, or a part that is not a positive integer.
    """
    parts = [] if arg is None else arg.split(":")
    if len(parts) > 2:
        raise LandscapeError(f"synthetic spec takes at most N and SIZE, e.g. synthetic:64:16 (got {arg!r})")
    n = positive_int(parts[0], "synthetic: N", "synthetic:64") if parts else 200
    size = positive_int(parts[1], "synthetic: SIZE", "synthetic:64:16") if len(parts) > 1 else 32
    return n, size
