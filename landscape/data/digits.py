"""scikit-learn's bundled digits: 8x8 images resized to SIZE x SIZE, a fixed stratified split, standardised."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from landscape.data.dataset import ImageDataset
from landscape.data.info import DatasetInfo
from landscape.data.specs import positive_int
from landscape.errors import LandscapeError

DIGITS_MEAN = (0.3053834,)
"""Pixel mean of the digits train split at 32x32 (recomputed by tests/data/test_data.py)."""


DIGITS_STD = (0.3236516,)
"""Pixel standard deviation (population) of the digits train split at 32x32."""


DIGITS_SIZE = 32


#: the fixed stratified split: ``train_test_split(range(1797), test_size=0.2, random_state=0, stratify=labels)`` of
#: scikit-learn, computed once and kept (tests/data/test_data.py checks it), so that reading digits imports no sklearn
SPLIT_FILE = Path(__file__).with_name("digits_split.npz")


def digits_csv() -> Path:
    """scikit-learn's bundled ``digits.csv.gz``, found without importing scikit-learn (which costs seconds).

    Returns:
        The file's path.

    Raises:
        LandscapeError: scikit-learn is not installed.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise LandscapeError("the digits dataset is scikit-learn's bundled digits.csv.gz: pip install scikit-learn")
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"


def _checked_digits(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The rows of ``path`` and the kept split, each checked before use.

    Each row must be 65 values (64 pixels in [0, 16] and an integer label in [0, 9]), and the split a partition of
    the rows into train and test.

    Raises:
        LandscapeError: either is unreadable or not the digits'.
    """
    fix = "reinstall scikit-learn (pip install --force-reinstall scikit-learn)"
    try:
        rows = np.loadtxt(path, delimiter=",", ndmin=2)
    except (OSError, EOFError, ValueError) as exc:
        raise LandscapeError(f"cannot read the digits at {path} ({type(exc).__name__}); {fix}") from None
    pixels, labels = (rows[:, :-1], rows[:, -1]) if rows.shape[1:] == (65,) else (rows[:, :0], rows[:, :0])
    if (
        rows.shape[1:] != (65,)
        or not np.isfinite(rows).all()
        or pixels.min(initial=0) < 0
        or pixels.max(initial=0) > 16
        or not np.array_equal(labels, np.clip(np.round(labels), 0, 9))
    ):
        raise LandscapeError(
            f"{path} is not scikit-learn's digits (rows of 64 pixels in 0-16 and a label 0-9, got shape "
            f"{rows.shape}); {fix}"
        )
    try:
        with np.load(SPLIT_FILE) as kept:
            split = {name: kept[name].astype(np.int64) for name in ("train", "test")}
    except (OSError, EOFError, ValueError, KeyError) as exc:
        raise LandscapeError(
            f"cannot read the kept digits split {SPLIT_FILE} ({type(exc).__name__}); reinstall landscape"
        ) from None
    if not np.array_equal(np.sort(np.concatenate(list(split.values()))), np.arange(len(rows))):
        raise LandscapeError(
            f"the kept digits split ({SPLIT_FILE}) does not divide the {len(rows)} digits of {path}; {fix}"
        )
    return rows, split


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """All 1797 digits as (N, 1, 8, 8) float32 in [0, 1], labels, and the fixed split's indices.

    The rows of ``digits.csv.gz`` are 64 pixel values (0-16) and the label, as scikit-learn's ``load_digits``
    reads them; they and the kept split are checked before use (:func:`_checked_digits`).

    Raises:
        LandscapeError: scikit-learn is missing, or its file or the kept split is unreadable or not the digits'.
    """
    rows, split = _checked_digits(digits_csv())
    labels = rows[:, -1].astype(np.int64)
    images = torch.tensor(rows[:, :-1].reshape(-1, 8, 8), dtype=torch.float32).div_(16).unsqueeze(1)
    return images, torch.from_numpy(labels), {name: torch.from_numpy(idx) for name, idx in split.items()}


def _digits_split(split: str, size: int) -> tuple[Tensor, Tensor]:
    images, labels, idx = _digits_arrays()
    x = images[idx[split]]
    if size != x.shape[-1]:
        x = torch.nn.functional.interpolate(
            x, size=(size, size), mode="bilinear", align_corners=False, antialias=False
        ).clamp_(0, 1)
    return x, labels[idx[split]]


@functools.lru_cache(maxsize=8)
def digits_stats(size: int) -> tuple[tuple[float], tuple[float]]:
    """Mean and population std of the digits train split at ``size`` (computed in float64)."""
    x = _digits_split("train", size)[0].double()
    return (round(x.mean().item(), 7),), (round(x.std(unbiased=False).item(), 7),)


def load_digits(spec: str, arg: str | None, split: str, info: DatasetInfo) -> ImageDataset:
    """scikit-learn's digits, ``split`` of the fixed stratified split, resized to the spec's SIZE.

    Args:
        spec: the spec as given.
        arg: the spec's SIZE, or None for 32.
        split: ``train`` or ``test``.
        info: what the dataset produces.

    Returns:
        The in-memory dataset.
    """
    x, y = _digits_split(split, digits_size(arg))
    return ImageDataset(info, spec, split, y, images=x)


def digits_size(arg: str | None) -> int:
    """The image size of a ``digits[:SIZE]`` spec (default 32).

    Args:
        arg: the spec's SIZE, or None.

    Returns:
        The side in pixels.

    Raises:
        LandscapeError: SIZE is not a positive integer.
    """
    return DIGITS_SIZE if arg is None else positive_int(arg, "digits: the image size", "digits:16")
