"""torchvision's ImageFolder layout, read with PIL and cut to size as timm evaluates."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import torch

from landscape.data.dataset import ImageDataset
from landscape.data.info import DatasetInfo, apply_preprocess
from landscape.data.preprocess import Preprocess
from landscape.errors import LandscapeError

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def folder_roots(path: Path) -> dict[str, Path]:
    """The folders of the two splits: ``PATH/train`` and ``PATH/test`` (or ``val``) when both exist, else PATH.

    Args:
        path: the spec's PATH.

    Returns:
        ``{"train": folder, "test": folder}``.

    Raises:
        LandscapeError: PATH is not a folder.
    """
    if not path.is_dir():
        raise LandscapeError(
            f"imagefolder: {path} is not a folder; expected {path}/<class>/<image> "
            "(torchvision ImageFolder layout), optionally inside train/ and test/ subfolders"
        )
    test = next((path / s for s in ("test", "val") if (path / s).is_dir()), None)
    if (path / "train").is_dir() and test is not None:
        return {"train": path / "train", "test": test}
    return {"train": path, "test": path}


def folder_classes(root: Path) -> list[str]:
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


def imagefolder_info(num_classes: int, size: int, pre: Preprocess) -> DatasetInfo:
    """What an image folder of ``num_classes`` classes produces at ``size`` (mean = std = 0.5), preprocessed.

    Args:
        num_classes: the number of class folders.
        size: the spec's SIZE.
        pre: the preprocessing overrides.

    Returns:
        The dataset's info.
    """
    base = DatasetInfo("imagefolder", num_classes, 3, size, (0.5,) * 3, (0.5,) * 3)
    return apply_preprocess(base, pre, files=True)


def load_imagefolder(spec: str, arg: str | None, split: str, pre: Preprocess) -> ImageDataset:
    """The ``split`` of an ImageFolder tree, its images read when accessed.

    Args:
        spec: the spec as given.
        arg: the spec's ``PATH[:SIZE]``.
        split: ``train`` or ``test``.
        pre: the preprocessing overrides.

    Returns:
        The dataset.

    Raises:
        LandscapeError: no folder, no class, no image, or test classes the train folder lacks.
    """
    path, size = imagefolder_args(arg)
    roots = folder_roots(path)
    classes = folder_classes(roots["train"])
    info = imagefolder_info(len(classes), size, pre)
    root = roots[split]
    extra = sorted(set(folder_classes(root)) - set(classes)) if root != roots["train"] else []
    if extra:
        raise LandscapeError(
            f"imagefolder: {root} has classes missing from {roots['train']}: "
            f"{', '.join(extra[:5])}; every class needs a training folder"
        )
    samples = _folder_samples(root, classes)
    paths, labels = [p for p, _ in samples], [label for _, label in samples]
    return ImageDataset(info, spec, split, torch.tensor(labels), paths=paths, classes=classes)


def imagefolder_args(arg: str | None) -> tuple[Path, int]:
    """The PATH and SIZE of an ``imagefolder:PATH[:SIZE]`` spec (a trailing ``:DIGITS`` is always SIZE).

    Args:
        arg: the spec's argument.

    Returns:
        ``(path, size)``.

    Raises:
        LandscapeError: no PATH.
    """
    if arg is None:
        raise LandscapeError("imagefolder needs a path: use imagefolder:PATH or imagefolder:PATH:SIZE")
    m = re.fullmatch(r"(.+):(\d+)", arg)
    path, size = (m.group(1), int(m.group(2))) if m else (arg, 32)
    if size < 1:
        raise LandscapeError(f"imagefolder: SIZE must be a positive integer (got {size} in {arg!r})")
    return Path(path).expanduser(), size
