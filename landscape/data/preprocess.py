"""Input preprocessing: :class:`Preprocess` (size, crop, interpolation, mean, std), the user's overrides."""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from landscape.errors import LandscapeError

INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
"""Accepted `Preprocess.interpolation` values."""


def hw_of(size: int | tuple[int, int]) -> tuple[int, int]:
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


def as_preprocess(preprocess: Preprocess | None) -> Preprocess:
    """``preprocess`` itself, or an empty :class:`Preprocess` for None.

    Args:
        preprocess: the overrides, or None.

    Returns:
        A :class:`Preprocess`.

    Raises:
        LandscapeError: ``preprocess`` is not a :class:`Preprocess`.
    """
    if preprocess is None:
        return Preprocess()
    if not isinstance(preprocess, Preprocess):
        raise LandscapeError(
            f"preprocess must be a Preprocess or None (Preprocess.from_dict reads a dict), "
            f"got {type(preprocess).__name__}"
        )
    return preprocess
