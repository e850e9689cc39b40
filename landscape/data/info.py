"""What a dataset spec produces: :class:`DatasetInfo` (classes, channels, size, normalisation)."""

from __future__ import annotations

from dataclasses import dataclass

from landscape.data.preprocess import Preprocess, hw_of
from landscape.errors import LandscapeError


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
        return hw_of(self.image_size)

    @property
    def preprocess(self) -> Preprocess:
        """The effective preprocessing as a `Preprocess` (``.as_dict()`` for provenance)."""
        return Preprocess(self.image_size, self.crop_pct, self.interpolation, self.mean, self.std)


def _normalisation(base: DatasetInfo, pre: Preprocess) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The preprocess mean/std where given, else the dataset's; checked against the channel count."""
    for what, values in (("mean", pre.mean), ("std", pre.std)):
        if values is not None and len(values) != base.in_chans:
            raise LandscapeError(
                f"preprocess: {what} has {len(values)} value(s) but {base.name} images have "
                f"{base.in_chans} channel(s); give one per channel"
            )
    return (base.mean if pre.mean is None else pre.mean), (base.std if pre.std is None else pre.std)


def apply_preprocess(base: DatasetInfo, pre: Preprocess, *, files: bool) -> DatasetInfo:
    """The info of ``base`` (default geometry and normalisation) once ``pre`` overrides it.

    ``files``: images decoded from files (imagefolder) resize and crop; in-memory ones only resize.
    """
    size = base.image_size if pre.image_size is None else pre.image_size
    mean, std = _normalisation(base, pre)
    if files:
        interpolation, crop_pct = pre.interpolation or "bilinear", 1.0 if pre.crop_pct is None else pre.crop_pct
    else:
        resized = hw_of(size) != base.hw
        interpolation, crop_pct = (pre.interpolation or "bilinear") if resized else None, None
    return DatasetInfo(base.name, base.num_classes, base.in_chans, size, mean, std, interpolation, crop_pct)
