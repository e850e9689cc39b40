"""The in-memory or on-disk :class:`ImageDataset`, stratified subsets, resizing."""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.data import Dataset

from landscape.data.images import read_image, resize
from landscape.data.info import DatasetInfo
from landscape.errors import LandscapeError


class ImageDataset(Dataset):
    """A classification split: items are ``(x, y)``, x float32 CHW normalised with ``info.mean/std``.

    Images come from an in-memory tensor (uint8 in 0..255 or float in [0, 1], at the dataset's native size,
    resized to ``info.hw`` on access) or from image files read, resized and cropped on access.
    ``transform`` (augmentation) maps a [0, 1] CHW image to another before normalisation.
    Build one with `load_dataset`.

    Args:
        info: What the dataset produces (size, normalisation, interpolation, crop).
        spec: The dataset spec it was loaded from.
        split: ``"train"`` or ``"test"``.
        targets: Labels, shape ``(N,)`` (stored as int64).
        images: In-memory images ``(N, C, h, w)``, uint8 in 0..255 or float in [0, 1]; exclusive with ``paths``.
        paths: Image file paths, one per label; exclusive with ``images``.
        classes: Class names; None means ``"0" .. str(num_classes - 1)``.
        transform: Augmentation applied to each [0, 1] CHW image before normalisation, or None.

    Attributes:
        info: The :class:`DatasetInfo`.
        spec: The dataset spec.
        split: The split name.
        targets: Int64 labels ``(N,)``.
        classes: Class names, indexed by label.
        transform: The augmentation, or None.

    Raises:
        ValueError: If not exactly one of ``images`` and ``paths`` is given.
    """

    def __init__(
        self,
        info: DatasetInfo,
        spec: str,
        split: str,
        targets: Tensor,
        *,
        images: Tensor | None = None,
        paths: list[str] | None = None,
        classes: list[str] | None = None,
        transform: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        if (images is None) == (paths is None):
            raise ValueError("ImageDataset needs exactly one of images or paths")
        self.info = info
        self.spec = spec
        self.split = split
        self.targets = targets.long()
        self.classes = list(classes) if classes is not None else [str(i) for i in range(info.num_classes)]
        self.transform = transform
        self._images = images
        self._paths = paths
        self._mean = torch.tensor(info.mean, dtype=torch.float32).view(-1, 1, 1)
        self._std = torch.tensor(info.std, dtype=torch.float32).view(-1, 1, 1)
        self._cache: Tensor | None = None

    def __len__(self) -> int:
        return len(self.targets)

    @property
    def in_memory(self) -> bool:
        """Whether the images are held in memory (stored or cached), not read from files on access."""
        return self._images is not None or self._cache is not None

    def _raw(self, idx: Tensor) -> Tensor:
        """Images ``idx`` as float32 (n, C, H, W) in [0, 1], a fresh tensor."""
        if self._images is None:
            assert self._paths is not None
            return torch.stack([read_image(self._paths[int(i)], self.info) for i in idx])
        raw = self._images[idx]
        raw = raw.float() / 255 if raw.dtype == torch.uint8 else raw.float()
        return resize(raw, self.info.hw, self.info.interpolation)

    def _normalise(self, x: Tensor, *, in_place: bool = False) -> Tensor:
        """``(x - mean) / std``, in place only for a tensor of our own outside any trace.

        A batch read inside a traced function (``torch.func.linearize``'s) must not write into what the trace
        keeps as a constant.
        """
        return x.sub_(self._mean).div_(self._std) if in_place else (x - self._mean) / self._std

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        """Return image ``i`` (augmented by ``transform`` if set, then normalised) and its label.

        Args:
            i: Index of the image.

        Returns:
            ``(x, y)``: float32 ``(C, H, W)`` image ``(transform(raw) - mean) / std`` and its int label.

        Raises:
            LandscapeError: If the image file cannot be read (file-backed datasets).
        """
        i = int(i)
        if self.transform is None and self._cache is not None:
            return self._cache[i].clone(), int(self.targets[i])
        x = self._raw(torch.tensor([i]))[0]
        if self.transform is not None:
            x = self.transform(x)
        return (x.float() - self._mean) / self._std, int(self.targets[i])

    def images(self, idx: Tensor) -> Tensor:
        """Normalised, untransformed images ``idx`` (float32 (n, C, H, W)); uses the cache when present.

        Args:
            idx: 1-D long tensor of ``n`` image indices.

        Returns:
            Float32 tensor of shape ``(n, C, H, W)``, ``(raw - mean) / std``.

        Raises:
            LandscapeError: If an image file cannot be read (file-backed datasets).
        """
        if self._cache is not None:
            return self._cache[idx]
        return self._normalise(self._raw(idx))

    def tensors(self) -> tuple[Tensor, Tensor]:
        """All images, normalised and never augmented, (N, C, H, W) float32, and labels; computed once.

        The returned tensors are shared with the dataset's cache: do not modify them in place.

        Returns:
            ``(x, y)``: float32 images ``(N, C, H, W)`` and int64 labels ``(N,)``.

        Raises:
            LandscapeError: If an image file cannot be read (file-backed datasets).
        """
        if self._cache is None:
            self._cache = self._normalise(self._raw(torch.arange(len(self))), in_place=True)
        return self._cache, self.targets

    def _select(self, idx: Tensor) -> ImageDataset:
        images = self._images[idx] if self._images is not None else None
        paths = [self._paths[int(i)] for i in idx] if self._paths is not None else None
        return ImageDataset(
            self.info,
            self.spec,
            self.split,
            self.targets[idx],
            images=images,
            paths=paths,
            classes=self.classes,
            transform=self.transform,
        )

    def __repr__(self) -> str:
        return f"ImageDataset({self.spec!r}, split={self.split!r}, n={len(self)}, info={self.info})"


def subset_indices(targets: Tensor, subset: float | int, *, seed: int = 0, num_classes: int | None = None) -> Tensor:
    """Sorted indices of a stratified, seeded subset of ``targets`` (rules in the module docstring).

    Args:
        targets: Int labels, shape ``(N,)``.
        subset: A fraction in (0, 1] (keeps ``max(1, round(f * N))``) or a count in ``1..N`` of images to keep.
        seed: Seeds the per-class draw.
        num_classes: Number of classes (the ``minlength`` of the class counts); None counts up to the largest label.

    Returns:
        Sorted int64 indices of the kept images, shape ``(n,)`` (``arange(N)`` when all are kept).

    Raises:
        LandscapeError: If ``subset`` is not a number, a count outside ``1..N``, or a fraction outside (0, 1].
    """
    n_all = len(targets)
    if isinstance(subset, bool) or not isinstance(subset, numbers.Real):
        raise LandscapeError(f"subset must be a fraction in (0, 1] or a count of images, got {subset!r}")
    if isinstance(subset, numbers.Integral):
        if not 1 <= int(subset) <= n_all:
            raise LandscapeError(f"subset count {subset} is out of range: use 1..{n_all} (the split's size)")
        n = int(subset)
    else:
        if not 0 < float(subset) <= 1:
            raise LandscapeError(f"subset fraction {subset} is out of range: use a value in (0, 1]")
        n = max(1, round(float(subset) * n_all))
    if n == n_all:
        return torch.arange(n_all)
    counts = torch.bincount(targets, minlength=num_classes or 0).tolist()
    quota = [c * n // n_all for c in counts]
    by_remainder = sorted(range(len(counts)), key=lambda c: (-(counts[c] * n % n_all), c))
    for c in by_remainder[: n - sum(quota)]:
        quota[c] += 1
    g = torch.Generator().manual_seed(seed)
    chosen = []
    for c, k in enumerate(quota):
        members = torch.nonzero(targets == c).flatten()
        chosen.append(members[torch.randperm(len(members), generator=g)[:k]])
    return torch.sort(torch.cat(chosen)).values
