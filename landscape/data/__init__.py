"""Datasets: a spec string names the data, `load_dataset` turns it into an `ImageDataset`.

Specs (``name[:ARG]``; the name is case-insensitive):

- ``digits`` (the default; needs no files): scikit-learn's bundled ``load_digits()`` images, 8x8 with values
  0..16, scaled to [0, 1] and resized bilinearly (``torch.nn.functional.interpolate``, ``antialias=False``,
  ``align_corners=False``) to 32x32; 1 channel, 10 classes, 1797 images. The split is fixed:
  ``sklearn.model_selection.train_test_split(test_size=0.2, random_state=0, stratify=labels)`` gives 1437
  train and 360 test images, in the order that call returns them. ``digits:SIZE`` resizes to SIZE x SIZE
  instead (e.g. ``digits:16``). Normalisation uses the mean/std of the train split at that SIZE:
  `DIGITS_MEAN` / `DIGITS_STD` (measured once, checked by a test) for the default 32, computed on the fly
  for any other SIZE.
- ``cifar10:PATH`` / ``cifar100:PATH``: the python-pickle archives as extracted from
  https://www.cs.toronto.edu/~kriz/cifar.html; PATH contains ``cifar-10-batches-py/`` (files
  ``data_batch_1..5``, ``test_batch``, ``batches.meta``) or ``cifar-100-python/`` (``train``, ``test``,
  ``meta``), or is that folder itself (the layout torchvision's ``CIFAR10/100(root)`` reads). Each batch is
  a dict with ``data`` (uint8, N x 3072: the R plane, then G, then B, each 32x32 row-major) and ``labels``
  (CIFAR-100: ``fine_labels``). The files are read here, without torchvision's md5 check, through an
  unpickler that only accepts numpy arrays, lists, dicts and strings. Normalisation constants are those of
  Paper A's official configs (CIFAR-10 mean (0.4914, 0.4822, 0.4465), std (0.2023, 0.1994, 0.2010);
  CIFAR-100 mean (0.5071, 0.4867, 0.4408), std (0.2675, 0.2565, 0.2761)), so its checkpoints see the inputs
  they were trained on. The meta file only supplies class names and may be absent.
- ``imagefolder:PATH[:SIZE]``: torchvision's ImageFolder layout, ``PATH/<class>/**/<image>`` (e.g. ImageNet's
  ``val/`` with one sub-folder per class), listed by ``torchvision.datasets.ImageFolder``. If both
  ``PATH/train`` and ``PATH/test`` (or ``PATH/val``) are folders they serve the two splits, otherwise PATH
  serves every split. Classes are the sorted sub-folder names of the train folder (hidden folders, whose
  name starts with ".", are skipped) and keep their indices in the test folder, which may lack some of them
  but not add others. Files with the usual image suffixes (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp,
  any case) anywhere below a class folder count, in ImageFolder's order (class, then sorted folder, then
  sorted file name). Images are read when accessed (`ImageDataset.tensors` reads them all once) with
  ImageFolder's PIL loader, converted to RGB and cut to H x W (SIZE x SIZE, SIZE default 32) as timm
  evaluates: keeping its aspect ratio, the image is resized with a PIL filter (default bilinear) by the
  smallest factor that makes it cover floor(H / crop_pct) x floor(W / crop_pct) (square output: the shorter
  side becomes floor(SIZE / crop_pct), the longer one is rounded to the nearest pixel; an image already that
  size is not resampled), then its centre H x W is cropped (left/top offset: half the excess, rounded down).
  The floor forgives a rounding error below 1e-6, so crop_pct = 224 / 232 resizes to 232. crop_pct defaults
  to 1.0 (the shorter side resized to SIZE); mean = std = 0.5 per channel. A trailing ``:DIGITS`` is always
  taken as SIZE.
- ``synthetic[:N[:SIZE]]``: N (default 200) deterministic random RGB images per split, SIZE x SIZE (default
  32), 10 balanced classes; each image is a fixed per-class template plus per-image noise, so the labels are
  learnable. Meant for tests; mean = std = 0.5.

Splits are ``train`` and ``test`` (``val`` is accepted as another name for ``test``; `SPLIT_CHOICES` lists
all three).

Preprocessing: ``load_dataset(..., preprocess=Preprocess(...))`` and ``dataset_info(spec, preprocess)`` give
a pretrained model the inputs it expects (timm's ``pretrained_cfg``, torchvision's weight transforms). Each
field left None keeps the dataset's default:

- ``image_size`` (an int for a square, or (H, W)) takes precedence over the spec's SIZE, which takes
  precedence over the default 32. imagefolder resizes and crops to it as above. digits, cifar10/100 and
  synthetic are held in memory at a native size (digits: its SIZE, after the 8x8 -> SIZE resize above;
  CIFAR: 32; synthetic: its SIZE); an image_size that differs resizes the whole image, without cropping,
  when it is accessed: ``torch.nn.functional.interpolate`` with the interpolation as mode,
  ``align_corners=False`` and ``antialias=True`` when a side shrinks (mode "nearest" takes neither option),
  clamped to [0, 1].
- ``crop_pct`` in (0, 1], default 1.0: imagefolder only; the in-memory datasets ignore it.
- ``interpolation``: "bilinear" (default), "bicubic" or "nearest": PIL's filter for imagefolder, the
  interpolate mode for the others.
- ``mean`` / ``std``: one finite value per channel (std > 0), replacing the dataset's normalisation; a length
  other than the dataset's channel count is an error. Without them each dataset keeps its constants above
  (digits: those of its spec's SIZE, also after a preprocess resize).

`DatasetInfo` describes what is produced: the image size (``image_size``, ``hw``), ``mean``, ``std``, and the
``interpolation`` and ``crop_pct`` used.

``subset`` keeps a stratified, seeded part of a split: a float f in (0, 1] keeps ``max(1, round(f * N))``
images, an int keeps that many. The count is shared out over classes in proportion to their sizes by the
largest-remainder method (each class gets ``floor(n * N_c / N)``; the images left over go one each to the
classes with the largest remainders, ties to the lower class index); within a class the images are drawn by a
permutation seeded with ``seed``. The kept images stay in their original relative order.

Images are float32 CHW. A training ``transform`` sees the image in [0, 1], at the output size, before
normalisation with ``info.mean`` / ``info.std``; `ImageDataset.tensors` and `fixed_batches` never augment.
"""

from __future__ import annotations

import functools
import math
import numbers
import pickle
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from landscape.errors import LandscapeError

DATASETS = ("digits", "cifar10", "cifar100", "imagefolder", "synthetic")
SPLITS = ("train", "test")
_SPLIT_ALIASES = {"val": "test"}
SPLIT_CHOICES = SPLITS + tuple(_SPLIT_ALIASES)
"""Every accepted split name (for a CLI choice): the splits and their aliases."""
_SPEC_HELP = "digits[:SIZE], cifar10:PATH, cifar100:PATH, imagefolder:PATH[:SIZE], synthetic[:N[:SIZE]]"

DIGITS_MEAN = (0.3053834,)
"""Pixel mean of the digits train split at 32x32 (recomputed by tests/test_data.py)."""
DIGITS_STD = (0.3236516,)
"""Pixel standard deviation (population) of the digits train split at 32x32."""
DIGITS_SIZE = 32

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
"""Accepted `Preprocess.interpolation` values."""


@dataclass(frozen=True)
class _Cifar:
    folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    meta_file: str
    label_key: str
    names_key: str
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    files_text: str
    archive: str


_CIFAR = {
    "cifar10": _Cifar(
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        "batches.meta",
        "labels",
        "label_names",
        10,
        (0.4914, 0.4822, 0.4465),
        (0.2023, 0.1994, 0.2010),
        "data_batch_1..5 and test_batch",
        "cifar-10-python.tar.gz",
    ),
    "cifar100": _Cifar(
        "cifar-100-python",
        ("train",),
        ("test",),
        "meta",
        "fine_labels",
        "fine_label_names",
        100,
        (0.5071, 0.4867, 0.4408),
        (0.2675, 0.2565, 0.2761),
        "train and test",
        "cifar-100-python.tar.gz",
    ),
}


# ------------------------------------------------------------------------------------- preprocessing


def _hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """(height, width) of an image size given as an int (square) or a pair."""
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def _image_size(value: object) -> int | tuple[int, int]:
    def positive(v: object) -> bool:
        return isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 1

    if isinstance(value, numbers.Integral) and positive(value):
        return int(value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(positive(v) for v in value):
        return int(value[0]), int(value[1])
    raise LandscapeError(
        f"preprocess: image_size must be a positive integer or (height, width) of positive integers, got {value!r}"
    )


def _crop_pct(value: object) -> float:
    if (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
        and 0 < float(value) <= 1
    ):
        return float(value)
    raise LandscapeError(f"preprocess: crop_pct must be a finite number in (0, 1], e.g. 0.875, got {value!r}")


def _interpolation(value: object) -> str:
    if isinstance(value, str) and value.lower() in INTERPOLATIONS:
        return value.lower()
    raise LandscapeError(f"preprocess: interpolation must be one of {', '.join(INTERPOLATIONS)}, got {value!r}")


def _channel_values(what: str, value: object, *, positive: bool) -> tuple[float, ...]:
    items = tuple(value) if isinstance(value, Iterable) and not isinstance(value, (str, bytes)) else None
    rule = "finite and > 0" if positive else "finite"
    if not items or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in items):
        raise LandscapeError(f"preprocess: {what} must be a sequence of numbers, one per channel, got {value!r}")
    floats = tuple(float(v) for v in items)
    if not all(math.isfinite(v) and (v > 0 or not positive) for v in floats):
        raise LandscapeError(f"preprocess: every {what} value must be {rule}, got {floats}")
    return floats


@dataclass(frozen=True)
class Preprocess:
    """How to turn a dataset's images into a model's inputs; every field left None keeps the dataset's default.

    The precedence and per-dataset meaning of each field are in the module docstring. Values are checked
    (one-line `LandscapeError`) and normalised on construction: lists become tuples, numbers floats or ints,
    the interpolation lower case.

    Attributes:
        image_size: Output height and width: an int for a square, or (H, W).
        crop_pct: imagefolder only: the shorter side is resized to floor(size / crop_pct), then the centre
            ``size`` is cropped (timm's convention; torchvision's resize 256 / crop 224 is 0.875). In (0, 1].
        interpolation: Resampling filter: "bilinear", "bicubic" or "nearest".
        mean: Per-channel mean subtracted from the [0, 1] image.
        std: Per-channel standard deviation (finite, > 0) the image is divided by after that.

    Raises:
        LandscapeError: On construction, if a field holds an invalid value (image_size not a positive int or
            pair, crop_pct outside (0, 1], unknown interpolation, non-finite mean or std, std <= 0) or mean
            and std differ in length.
    """

    image_size: int | tuple[int, int] | None = None
    crop_pct: float | None = None
    interpolation: str | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        checks: dict[str, Callable[[object], object]] = {
            "image_size": _image_size,
            "crop_pct": _crop_pct,
            "interpolation": _interpolation,
            "mean": functools.partial(_channel_values, "mean", positive=False),
            "std": functools.partial(_channel_values, "std", positive=True),
        }
        for name, check in checks.items():
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, check(value))
        if self.mean is not None and self.std is not None and len(self.mean) != len(self.std):
            raise LandscapeError(
                f"preprocess: mean has {len(self.mean)} values but std has {len(self.std)}; "
                "give one of each per channel"
            )

    def merged(self, other: Preprocess) -> Preprocess:
        """A Preprocess with this one's fields where they are set and ``other``'s elsewhere.

        Args:
            other: The fallback, e.g. a model's defaults under a user's overrides.

        Returns:
            The combined Preprocess (a new object; neither input changes).

        Raises:
            LandscapeError: If ``other`` is not a Preprocess, or the combined fields are inconsistent (mean and
                std of different lengths).
        """
        if not isinstance(other, Preprocess):
            raise LandscapeError(f"preprocess: can only merge with another Preprocess, got {type(other).__name__}")
        return Preprocess(
            **{
                f.name: getattr(other, f.name) if getattr(self, f.name) is None else getattr(self, f.name)
                for f in fields(self)
            }
        )

    def as_dict(self) -> dict[str, Any]:
        """Every field by name, JSON-ready (tuples as lists, None kept), for provenance and checkpoints.

        Returns:
            A dict ``{field name: value}`` with tuples turned into lists.
        """
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: list(v) if isinstance(v, tuple) else v for name, v in values.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Preprocess:
        """Rebuild a Preprocess from `as_dict` output (missing keys stay None).

        Args:
            data: A mapping of field names to values; lists are accepted for sequences.

        Returns:
            The checked Preprocess.

        Raises:
            LandscapeError: ``data`` is not a mapping, has unknown keys, or holds invalid values.
        """
        if not isinstance(data, Mapping):
            raise LandscapeError(f"preprocess: expected a mapping of field names to values, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in data if k not in names)
        if unknown:
            raise LandscapeError(f"preprocess: unknown field(s) {', '.join(unknown)}; use {', '.join(names)}")
        return cls(**data)


def _as_preprocess(preprocess: Preprocess | None) -> Preprocess:
    if preprocess is None:
        return Preprocess()
    if not isinstance(preprocess, Preprocess):
        raise LandscapeError(
            f"preprocess must be a Preprocess or None (Preprocess.from_dict reads a dict), "
            f"got {type(preprocess).__name__}"
        )
    return preprocess


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know about a dataset as loaded: classes, channels, image size and preprocessing.

    Attributes:
        name: The dataset's name (``digits``, ``cifar10``, ...).
        num_classes: Number of classes.
        in_chans: Channels per image.
        image_size: Side of the (square) images produced; (H, W) when they are not square. A square (H, H)
            given here is stored as H.
        mean: Per-channel mean subtracted from the [0, 1] images.
        std: Per-channel standard deviation they are then divided by.
        interpolation: The resampling filter used: always set for imagefolder; for the in-memory datasets the
            interpolate mode of a preprocess resize, None when the native size is kept.
        crop_pct: imagefolder's crop fraction (1.0: the shorter side is resized to the output size); None
            for the in-memory datasets, which never crop.
    """

    name: str
    num_classes: int
    in_chans: int
    image_size: int | tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str | None = None
    crop_pct: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.image_size, (tuple, list)):
            h, w = (int(v) for v in self.image_size)
            object.__setattr__(self, "image_size", h if h == w else (h, w))

    @property
    def hw(self) -> tuple[int, int]:
        """The output ``(height, width)`` in pixels, square or not."""
        return _hw(self.image_size)

    @property
    def preprocess(self) -> Preprocess:
        """The effective preprocessing as a `Preprocess` (``.as_dict()`` for provenance)."""
        return Preprocess(self.image_size, self.crop_pct, self.interpolation, self.mean, self.std)


# ----------------------------------------------------------------------------------------------- specs


def parse_spec(spec: str) -> tuple[str, str | None]:
    """Split a dataset spec into its lower-case name and argument: ``"cifar10:/d" -> ("cifar10", "/d")``.

    Args:
        spec: A dataset spec ``name[:ARG]`` (see the module docstring); the name is case-insensitive.

    Returns:
        ``(name, arg)``: the name, one of :data:`DATASETS`, and everything after the first ``:`` (None if empty).

    Raises:
        LandscapeError: If ``spec`` is not a string, is empty, or names an unknown dataset.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise LandscapeError(f"empty dataset spec {spec!r}: use one of {_SPEC_HELP}")
    name, _, arg = spec.strip().partition(":")
    name = name.strip().lower()
    if name not in DATASETS:
        raise LandscapeError(f"unknown dataset {name!r}: use one of {_SPEC_HELP}")
    return name, (arg or None)


def _positive_int(text: str, what: str, example: str) -> int:
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise LandscapeError(f"{what} must be a positive integer, e.g. {example} (got {text!r})")
    return int(text)


def _digits_size(arg: str | None) -> int:
    return DIGITS_SIZE if arg is None else _positive_int(arg, "digits: the image size", "digits:16")


def _synthetic_args(arg: str | None) -> tuple[int, int]:
    parts = [] if arg is None else arg.split(":")
    if len(parts) > 2:
        raise LandscapeError(f"synthetic spec takes at most N and SIZE, e.g. synthetic:64:16 (got {arg!r})")
    n = _positive_int(parts[0], "synthetic: N", "synthetic:64") if parts else 200
    size = _positive_int(parts[1], "synthetic: SIZE", "synthetic:64:16") if len(parts) > 1 else 32
    return n, size


def _imagefolder_args(arg: str | None) -> tuple[Path, int]:
    if arg is None:
        raise LandscapeError("imagefolder needs a path: use imagefolder:PATH or imagefolder:PATH:SIZE")
    m = re.fullmatch(r"(.+):(\d+)", arg)
    path, size = (m.group(1), int(m.group(2))) if m else (arg, 32)
    if size < 1:
        raise LandscapeError(f"imagefolder: SIZE must be a positive integer (got {size} in {arg!r})")
    return Path(path).expanduser(), size


def _cifar_path(name: str, arg: str | None) -> Path:
    if arg is None:
        folder = _CIFAR[name].folder
        raise LandscapeError(f"{name} needs a path: use {name}:PATH where PATH contains {folder}/")
    return Path(arg).expanduser()


def _check_split(split: str) -> str:
    s = _SPLIT_ALIASES.get(str(split).lower(), str(split).lower())
    if s not in SPLITS:
        raise LandscapeError(f"unknown split {split!r}: use 'train' or 'test' ('val' is another name for 'test')")
    return s


def _native(name: str, arg: str | None) -> DatasetInfo:
    """The in-memory dataset ``name`` at its native size with its own normalisation."""
    if name == "digits":
        size = _digits_size(arg)
        mean, std = (DIGITS_MEAN, DIGITS_STD) if size == DIGITS_SIZE else _digits_stats(size)
        return DatasetInfo("digits", 10, 1, size, mean, std)
    if name in _CIFAR:
        c = _CIFAR[name]
        return DatasetInfo(name, c.num_classes, 3, 32, c.mean, c.std)
    _, size = _synthetic_args(arg)
    return DatasetInfo("synthetic", 10, 3, size, (0.5,) * 3, (0.5,) * 3)


def _normalisation(base: DatasetInfo, pre: Preprocess) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The preprocess mean/std where given, else the dataset's; checked against the channel count."""
    for what, values in (("mean", pre.mean), ("std", pre.std)):
        if values is not None and len(values) != base.in_chans:
            raise LandscapeError(
                f"preprocess: {what} has {len(values)} value(s) but {base.name} images have "
                f"{base.in_chans} channel(s); give one per channel"
            )
    return (base.mean if pre.mean is None else pre.mean), (base.std if pre.std is None else pre.std)


def _apply_preprocess(base: DatasetInfo, pre: Preprocess, *, files: bool) -> DatasetInfo:
    """The info of ``base`` (default geometry and normalisation) once ``pre`` overrides it.

    ``files``: images decoded from files (imagefolder) resize and crop; in-memory ones only resize.
    """
    size = base.image_size if pre.image_size is None else pre.image_size
    mean, std = _normalisation(base, pre)
    if files:
        interpolation, crop_pct = pre.interpolation or "bilinear", 1.0 if pre.crop_pct is None else pre.crop_pct
    else:
        resized = _hw(size) != base.hw
        interpolation, crop_pct = (pre.interpolation or "bilinear") if resized else None, None
    return DatasetInfo(base.name, base.num_classes, base.in_chans, size, mean, std, interpolation, crop_pct)


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
    pre = _as_preprocess(preprocess)
    if name == "imagefolder":
        path, size = _imagefolder_args(arg)
        classes = _folder_classes(_folder_roots(path)["train"])
        return _imagefolder_info(len(classes), size, pre)
    return _apply_preprocess(_native(name, arg), pre, files=False)


# --------------------------------------------------------------------------------------------- dataset


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

    def _raw(self, idx: Tensor) -> Tensor:
        """Images ``idx`` as float32 (n, C, H, W) in [0, 1], a fresh tensor."""
        if self._images is None:
            assert self._paths is not None
            return torch.stack([_read_image(self._paths[int(i)], self.info) for i in idx])
        raw = self._images[idx]
        raw = raw.float().div_(255) if raw.dtype == torch.uint8 else raw.float()  # idx copies
        return _resize(raw, self.info.hw, self.info.interpolation)

    def _normalise(self, x: Tensor) -> Tensor:
        return x.sub_(self._mean).div_(self._std)

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
            self._cache = self._normalise(self._raw(torch.arange(len(self))))
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
    split = _check_split(split)
    spec = spec.strip()
    pre = _as_preprocess(preprocess)
    if name == "imagefolder":
        ds = _load_imagefolder(spec, arg, split, pre)
    else:
        info = dataset_info(spec, pre)
        if name == "digits":
            ds = _load_digits(spec, arg, split, info)
        elif name in _CIFAR:
            ds = _load_cifar(spec, name, arg, split, info)
        else:
            ds = _load_synthetic(spec, arg, split, info)
    if subset is not None:
        ds = ds._select(subset_indices(ds.targets, subset, seed=seed, num_classes=ds.info.num_classes))
    ds.transform = transform
    return ds


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


# ------------------------------------------------------------------------------------------ batching


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


def fixed_batches(
    dataset: ImageDataset,
    batch_size: int,
    n_samples: int | None = None,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    first_samples: bool = False,
) -> list[tuple[Tensor, Tensor]]:
    """The first ``n_samples`` images of a ``seed``-ed permutation (all if None) as fixed batches on ``device``.

    No augmentation; the order is fixed by ``seed``; the last batch may be smaller. With ``first_samples`` the
    images are the first ``n_samples`` of the split in file order (no permutation; ``seed`` is unused), as
    Paper A's released code takes its first, unshuffled test batch.

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
        LandscapeError: If ``batch_size`` is not a positive integer, ``n_samples`` is out of range, or an
            image file cannot be read.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise LandscapeError(f"batch size must be a positive integer, got {batch_size!r}")
    n = sample_count(dataset, n_samples)
    idx = sample_indices(len(dataset), n, seed, first_samples=first_samples)
    x, y = dataset.images(idx), dataset.targets[idx]
    return [
        (x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)) for i in range(0, int(n), int(batch_size))
    ]


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


# ------------------------------------------------------------------------------------------- digits


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """All 1797 digits as (N, 1, 8, 8) float32 in [0, 1], labels, and the fixed split's indices."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    labels = np.asarray(d.target, dtype=np.int64)
    train, test = train_test_split(np.arange(len(labels)), test_size=0.2, random_state=0, stratify=labels)
    images = torch.tensor(d.images, dtype=torch.float32).div_(16).unsqueeze(1)
    split = {"train": torch.from_numpy(train), "test": torch.from_numpy(test)}
    return images, torch.from_numpy(labels), split


def _digits_split(split: str, size: int) -> tuple[Tensor, Tensor]:
    images, labels, idx = _digits_arrays()
    x = images[idx[split]]
    if size != x.shape[-1]:
        x = torch.nn.functional.interpolate(
            x, size=(size, size), mode="bilinear", align_corners=False, antialias=False
        ).clamp_(0, 1)
    return x, labels[idx[split]]


@functools.lru_cache(maxsize=8)
def _digits_stats(size: int) -> tuple[tuple[float], tuple[float]]:
    """Mean and population std of the digits train split at ``size`` (computed in float64)."""
    x = _digits_split("train", size)[0].double()
    return (round(x.mean().item(), 7),), (round(x.std(unbiased=False).item(), 7),)


def _load_digits(spec: str, arg: str | None, split: str, info: DatasetInfo) -> ImageDataset:
    x, y = _digits_split(split, _digits_size(arg))
    return ImageDataset(info, spec, split, y, images=x)


# -------------------------------------------------------------------------------------------- cifar


class _SafeUnpickler(pickle.Unpickler):
    """Unpickler for the CIFAR batches: numpy arrays and plain containers only, never other code."""

    _ALLOWED = {
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> object:
        """The global ``module.name`` if it is allowed (``numpy.core`` read as ``numpy._core`` and back).

        Args:
            module: the module named by the pickle.
            name: the global's name in ``module``.

        Returns:
            The allowed object (a numpy reconstructor, ``ndarray``, ``dtype`` or ``_codecs.encode``).

        Raises:
            pickle.UnpicklingError: ``module.name`` is not one of the allowed objects.
        """
        if module.startswith("numpy.core"):
            module = "numpy._core" + module[len("numpy.core") :]
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"forbidden object {module}.{name}")
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):  # numpy < 2 has no numpy._core
            return super().find_class(module.replace("numpy._core", "numpy.core"), name)


def _read_pickle(path: Path, name: str) -> dict[str, object]:
    try:
        with open(path, "rb") as f:
            obj = _SafeUnpickler(f, encoding="latin1").load()
    except Exception as e:  # any failure means a damaged or foreign file
        raise LandscapeError(
            f"{name}: cannot read {path} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            f"re-extract the python version from {CIFAR_URL}"
        ) from None
    if not isinstance(obj, dict):
        raise LandscapeError(f"{name}: {path} is not a CIFAR python batch (not a dict); re-extract it")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def _cifar_dir(name: str, root: Path, files: tuple[str, ...]) -> Path:
    c = _CIFAR[name]
    candidates = [root] if root.name == c.folder else [root / c.folder, root]
    for d in candidates:
        if all((d / f).is_file() for f in files):
            return d
    shown = candidates[0]
    present = [f for f in files if (shown / f).is_file()]
    status = (
        f"missing {', '.join(f for f in files if f not in present)} in {shown}"
        if present
        else f"none found under {root}"
    )
    raise LandscapeError(
        f"{name}: expected {shown}/{c.files_text} (the python version, {c.archive} from "
        f"{CIFAR_URL}, extracted); {status}"
    )


def _load_cifar(spec: str, name: str, arg: str | None, split: str, info: DatasetInfo) -> ImageDataset:
    c = _CIFAR[name]
    files = c.train_files if split == "train" else c.test_files
    folder = _cifar_dir(name, _cifar_path(name, arg), files)
    data, labels = [], []
    for f in files:
        batch = _read_pickle(folder / f, name)
        x, y = batch.get("data"), batch.get(c.label_key)
        if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072:
            raise LandscapeError(
                f"{name}: {folder / f} has no uint8 'data' array of shape (N, 3072); "
                f"re-extract the python version from {CIFAR_URL}"
            )
        y = np.asarray(y if y is not None else [], dtype=np.int64).reshape(-1)
        if len(y) != len(x) or (len(y) and (y.min() < 0 or y.max() >= c.num_classes)):
            raise LandscapeError(
                f"{name}: {folder / f} needs '{c.label_key}' with one label in "
                f"0..{c.num_classes - 1} per image; re-extract it from {CIFAR_URL}"
            )
        data.append(x)
        labels.append(y)
    images = torch.from_numpy(np.concatenate(data).reshape(-1, 3, 32, 32).copy())
    classes = None
    if (folder / c.meta_file).is_file():
        names = _read_pickle(folder / c.meta_file, name).get(c.names_key)
        if isinstance(names, list) and len(names) == c.num_classes:
            classes = [n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names]
    return ImageDataset(info, spec, split, torch.from_numpy(np.concatenate(labels)), images=images, classes=classes)


# -------------------------------------------------------------------------------------- imagefolder


def _folder_roots(path: Path) -> dict[str, Path]:
    if not path.is_dir():
        raise LandscapeError(
            f"imagefolder: {path} is not a folder; expected {path}/<class>/<image> "
            "(torchvision ImageFolder layout), optionally inside train/ and test/ subfolders"
        )
    test = next((path / s for s in ("test", "val") if (path / s).is_dir()), None)
    if (path / "train").is_dir() and test is not None:
        return {"train": path / "train", "test": test}
    return {"train": path, "test": path}


def _folder_classes(root: Path) -> list[str]:
    """ImageFolder's class discovery (sorted sub-folder names) without hidden folders."""
    from torchvision.datasets.folder import find_classes

    try:
        found, _ = find_classes(root)
    except FileNotFoundError:  # ImageFolder's way of saying: no sub-folder at all
        found = []
    except OSError as e:
        raise LandscapeError(
            f"imagefolder: cannot list {root} ({type(e).__name__}); check that it is readable"
        ) from None
    classes = [c for c in found if not c.startswith(".")]
    if not classes:
        raise LandscapeError(
            f"imagefolder: no class folders in {root}; expected {root}/<class>/<image>.png (one sub-folder per class)"
        )
    return classes


@functools.lru_cache(maxsize=1)
def _image_folder_type() -> type:
    """The ImageFolder subclass that takes its class list instead of discovering it (imports torchvision once)."""
    from torchvision.datasets import ImageFolder

    class GivenClassesImageFolder(ImageFolder):
        """ImageFolder whose classes (and their indices) are the train folder's, for both splits."""

        def __init__(self, root: Path, classes: list[str]) -> None:
            self.given_classes = list(classes)
            super().__init__(str(root), allow_empty=True)

        def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
            """The given classes and their indices, whatever ``directory`` holds.

            Args:
                directory: the split's folder (ignored).

            Returns:
                The class names in order, and name -> index.
            """
            return list(self.given_classes), {c: i for i, c in enumerate(self.given_classes)}

    return GivenClassesImageFolder


def _folder_samples(root: Path, classes: list[str]) -> list[tuple[str, int]]:
    """(path, label) of every image under ``root``/<class>, as torchvision's ImageFolder lists them."""
    try:
        samples = _image_folder_type()(root, classes).samples
    except FileNotFoundError:  # make_dataset's "no valid file" (allow_empty makes it rare): no images
        samples = []
    except OSError as e:
        raise LandscapeError(
            f"imagefolder: cannot list {root} ({type(e).__name__}); check that it is readable"
        ) from None
    if not samples:
        raise LandscapeError(f"imagefolder: no images ({' '.join(IMG_EXTENSIONS)}) found in {root}/<class>/")
    return samples


def _imagefolder_info(num_classes: int, size: int, pre: Preprocess) -> DatasetInfo:
    base = DatasetInfo("imagefolder", num_classes, 3, size, (0.5,) * 3, (0.5,) * 3)
    return _apply_preprocess(base, pre, files=True)


def _load_imagefolder(spec: str, arg: str | None, split: str, pre: Preprocess) -> ImageDataset:
    path, size = _imagefolder_args(arg)
    roots = _folder_roots(path)
    classes = _folder_classes(roots["train"])
    info = _imagefolder_info(len(classes), size, pre)
    root = roots[split]
    extra = sorted(set(_folder_classes(root)) - set(classes)) if root != roots["train"] else []
    if extra:
        raise LandscapeError(
            f"imagefolder: {root} has classes missing from {roots['train']}: "
            f"{', '.join(extra[:5])}; every class needs a training folder"
        )
    samples = _folder_samples(root, classes)
    paths, labels = [p for p, _ in samples], [label for _, label in samples]
    return ImageDataset(info, spec, split, torch.tensor(labels), paths=paths, classes=classes)


def _uncropped(side: int, crop_pct: float) -> int:
    """floor(side / crop_pct), forgiving the rounding error of a crop_pct given as crop / resize (224 / 232)."""
    return math.floor(side / crop_pct + 1e-6)


def _read_image(path: str, info: DatasetInfo) -> Tensor:
    """One image file as float32 (3, H, W) in [0, 1]: RGB, resized to cover H x W / crop_pct, centre crop."""
    from PIL import Image
    from torchvision.datasets.folder import pil_loader

    try:
        img = pil_loader(path)
    except Exception as e:  # any failure (OSError, PIL's own errors, ...) means an unreadable image
        raise LandscapeError(
            f"imagefolder: cannot read image {path} ({type(e).__name__}); remove or replace the file"
        ) from None
    (h, w), crop_pct = info.hw, info.crop_pct or 1.0
    cover_w, cover_h = _uncropped(w, crop_pct), _uncropped(h, crop_pct)
    iw, ih = img.size
    scale = max(cover_w / iw, cover_h / ih)
    nw, nh = max(cover_w, round(iw * scale)), max(cover_h, round(ih * scale))
    if (nw, nh) != (iw, ih):
        filters = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}
        img = img.resize((nw, nh), filters[info.interpolation or "bilinear"])
    if (nw, nh) != (w, h):
        left, top = (nw - w) // 2, (nh - h) // 2
        img = img.crop((left, top, left + w, top + h))
    return torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).float().div_(255)


# ------------------------------------------------------------------------------------------- resize


def _resize(x: Tensor, hw: tuple[int, int], interpolation: str | None) -> Tensor:
    """In-memory images (n, C, h, w) in [0, 1] resized to ``hw`` (the module docstring's rule); as is if equal."""
    if tuple(x.shape[-2:]) == hw:
        return x
    mode = interpolation or "bilinear"
    if mode == "nearest":
        out = torch.nn.functional.interpolate(x, size=hw, mode="nearest")
    else:
        shrink = hw[0] < x.shape[-2] or hw[1] < x.shape[-1]
        out = torch.nn.functional.interpolate(x, size=hw, mode=mode, align_corners=False, antialias=shrink)
    return out.clamp_(0, 1)


# ---------------------------------------------------------------------------------------- synthetic


def _load_synthetic(spec: str, arg: str | None, split: str, info: DatasetInfo) -> ImageDataset:
    n, size = _synthetic_args(arg)
    templates = torch.rand(10, 3, size, size, generator=torch.Generator().manual_seed(1234))
    g = torch.Generator().manual_seed(SPLITS.index(split) + 1)
    labels = (torch.arange(n) % 10)[torch.randperm(n, generator=g)]
    noise = torch.rand(n, 3, size, size, generator=g)
    images = 0.6 * templates[labels] + 0.4 * noise
    return ImageDataset(info, spec, split, labels, images=images, classes=[f"class{i}" for i in range(10)])
