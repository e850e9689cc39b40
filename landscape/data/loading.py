""":func:`load_dataset`: a spec and a split to an :class:`~landscape.data.dataset.ImageDataset`."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from landscape.data.cifar import CIFAR_FILES, load_cifar
from landscape.data.dataset import ImageDataset, subset_indices
from landscape.data.digits import DIGITS_MEAN, DIGITS_SIZE, DIGITS_STD, digits_size, digits_stats, load_digits
from landscape.data.imagefolder import (
    folder_classes,
    folder_roots,
    imagefolder_args,
    imagefolder_info,
    load_imagefolder,
)
from landscape.data.info import DatasetInfo, apply_preprocess
from landscape.data.preprocess import Preprocess, as_preprocess
from landscape.data.specs import parse_spec
from landscape.data.synthetic import load_synthetic, synthetic_args
from landscape.options.common import canonical_split


def load_dataset(
    spec: str = "digits",
    split: str = "train",
    *,
    subset: float | int | None = None,
    seed: int = 0,
    transform: Callable[[Tensor], Tensor] | None = None,
    preprocess: Preprocess | None = None,
) -> ImageDataset:
    """Load one split of the dataset named by ``spec`` (the module docstring has the rules).

    Args:
        spec: A dataset spec, e.g. ``digits``, ``cifar10:PATH``, ``imagefolder:PATH:224``.
        split: ``train`` or ``test`` (``val`` is another name for ``test``), any case.
        subset: A fraction in (0, 1] or a count of images to keep, stratified; None keeps all.
        seed: Seeds the subset's draw.
        transform: Augmentation applied to each [0, 1] image (at the output size) before normalisation.
        preprocess: Overrides of the image size, crop, interpolation and normalisation; None keeps the
            dataset's defaults.

    Returns:
        The split; ``ds.info`` describes the images it produces.

    Raises:
        LandscapeError: A bad spec, split, subset or preprocess, or missing or malformed data files.
    """
    name, arg = parse_spec(spec)
    split = canonical_split(split)
    spec = spec.strip()
    pre = as_preprocess(preprocess)
    if name == "imagefolder":
        ds = load_imagefolder(spec, arg, split, pre)
    else:
        info = dataset_info(spec, pre)
        if name == "digits":
            ds = load_digits(spec, arg, split, info)
        elif name in CIFAR_FILES:
            ds = load_cifar(spec, name, arg, split, info)
        else:
            ds = load_synthetic(spec, arg, split, info)
    if subset is not None:
        ds = ds._select(subset_indices(ds.targets, subset, seed=seed, num_classes=ds.info.num_classes))
    ds.transform = transform
    return ds


def _native(name: str, arg: str | None) -> DatasetInfo:
    """The in-memory dataset ``name`` at its native size with its own normalisation."""
    if name == "digits":
        size = digits_size(arg)
        mean, std = (DIGITS_MEAN, DIGITS_STD) if size == DIGITS_SIZE else digits_stats(size)
        return DatasetInfo("digits", 10, 1, size, mean, std)
    if name in CIFAR_FILES:
        c = CIFAR_FILES[name]
        return DatasetInfo(name, c.num_classes, 3, 32, c.mean, c.std)
    _, size = synthetic_args(arg)
    return DatasetInfo("synthetic", 10, 3, size, (0.5,) * 3, (0.5,) * 3)


def dataset_info(spec: str, preprocess: Preprocess | None = None) -> DatasetInfo:
    """Describe the dataset of a spec as `load_dataset` would produce it; reads no image.

    Args:
        spec: A dataset spec (see the module docstring).
        preprocess: Overrides of the dataset's geometry and normalisation; None keeps its defaults.

    Returns:
        The classes, channels, output image size, normalisation, interpolation and crop fraction.

    Raises:
        LandscapeError: A bad spec or preprocess, or (imagefolder) a missing folder or no class folders.
    """
    name, arg = parse_spec(spec)
    pre = as_preprocess(preprocess)
    if name == "imagefolder":
        path, size = imagefolder_args(arg)
        classes = folder_classes(folder_roots(path)["train"])
        return imagefolder_info(len(classes), size, pre)
    return apply_preprocess(_native(name, arg), pre, files=False)
