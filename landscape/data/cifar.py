"""CIFAR-10 / CIFAR-100 from the python-pickle archives, read by an unpickler that accepts plain data only."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from landscape.data.dataset import ImageDataset
from landscape.data.info import DatasetInfo
from landscape.errors import LandscapeError

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


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


CIFAR_FILES = {
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
    c = CIFAR_FILES[name]
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


def load_cifar(spec: str, name: str, arg: str | None, split: str, info: DatasetInfo) -> ImageDataset:
    """CIFAR-10/100's ``split`` from the python-pickle archives at the spec's PATH (see :mod:`landscape.data`).

    Args:
        spec: the spec as given (recorded in the dataset).
        name: ``cifar10`` or ``cifar100``.
        arg: the spec's PATH.
        split: ``train`` or ``test``.
        info: what the dataset produces.

    Returns:
        The in-memory dataset.

    Raises:
        LandscapeError: the archives are missing or not CIFAR's.
    """
    c = CIFAR_FILES[name]
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


def _cifar_path(name: str, arg: str | None) -> Path:
    if arg is None:
        folder = CIFAR_FILES[name].folder
        raise LandscapeError(f"{name} needs a path: use {name}:PATH where PATH contains {folder}/")
    return Path(arg).expanduser()
