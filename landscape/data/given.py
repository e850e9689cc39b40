"""Data as a researcher holds it: a ``Dataset``, a ``DataLoader`` or a list of batches, as fixed batches.

The Python functions (``landscape.surface(model, data, ...)``) take the data in any of these forms; one batch of
the loader becomes ``(inputs, labels)`` as it is, or through the caller's ``batch=`` function (batches that are
dicts or longer tuples). The first ``samples`` images are taken and held on the host (the CPU) as read, after
the memory the whole data will take there has been checked; each batch is moved to the device only when an
analysis reads it (:class:`~landscape.data.stream.HeldBatches`).
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset

from landscape.data.labels import checked_labels
from landscape.data.stream import BatchSource, HeldBatches
from landscape.errors import LandscapeError, calling
from landscape.runtime.devices import require_memory

#: a function from one batch of the caller's loader to ``(inputs, labels)``
BatchFunction = Callable[[Any], Sequence[Tensor]]

#: what the data of a Python call may be, for the messages
ACCEPTED = (
    "a dataset spec ('digits', 'cifar10:PATH', ...), a torch Dataset, a DataLoader, a list of (x, y) batches, or None"
)


@dataclass(frozen=True)
class GivenData:
    """The data of a Python call as the caller gave it, with how to read it.

    Attributes:
        data: a ``Dataset`` (map-style), a ``DataLoader`` or any iterable of batches.
        batch: a function from one batch to ``(inputs, labels)``; None: a batch is ``(x, y, ...)`` itself.
        exact: the caller asked for ``samples`` images: fewer in the data is an error (else all are used).
        batch_size: the batch size the caller asked for (None: not asked): a ``Dataset`` is cut into batches of
            it; batches that come as they are (a loader's) must hold that many images, else it is an error (the
            option would have no effect).
    """

    data: Any
    batch: BatchFunction | None = None
    exact: bool = False
    batch_size: int | None = None


def is_data(value: Any) -> bool:
    """Whether ``value`` is data a Python call accepts as held data (not a spec, not None).

    Args:
        value: anything.

    Returns:
        True for a :class:`GivenData`, a ``Dataset``, a ``DataLoader``, or a list or tuple of batches.
    """
    return isinstance(value, (GivenData, Dataset, DataLoader, list, tuple))


def describe(value: Any) -> str:
    """A short description of held data without memory addresses: ``<DataLoader of 4 batches>``.

    Args:
        value: a ``DataLoader``, a ``Dataset``, a list of batches or a :class:`GivenData`.

    Returns:
        Its type and size, in angle brackets.
    """
    if isinstance(value, GivenData):
        value = value.data
    size = _length(value)
    if isinstance(value, DataLoader):
        return f"<DataLoader of {size} batch{'' if size == 1 else 'es'}>" if size is not None else "<DataLoader>"
    if isinstance(value, (list, tuple)):
        return f"<{len(value)} batch{'' if len(value) == 1 else 'es'}>"
    unit = "samples" if isinstance(value, Dataset) else "items"
    return f"<{type(value).__name__} of {size} {unit}>" if size is not None else f"<{type(value).__name__}>"


def _length(value: Any, *, strict: bool = False) -> int | None:
    """``len(value)``, or None when it has none (an iterable dataset, a generator).

    With ``strict``, a ``__len__`` that raises (or returns a negative or non-integer value) is the caller's error
    (a :class:`~landscape.errors.ForeignError`); otherwise it counts as no length (for messages).
    """
    if not hasattr(type(value), "__len__"):
        return None
    if not strict:
        try:
            return len(value)
        except Exception:  # noqa: BLE001 - a description never fails
            return None
    dataset = value.dataset if isinstance(value, DataLoader) else value
    if isinstance(dataset, IterableDataset) and not hasattr(type(dataset), "__len__"):
        return None
    with calling(f"len() of your data ({type(dataset).__name__})", "its __len__ must return the number of samples"):
        return len(value)


def as_loader(data: Any, batch_size: int) -> Iterable[Any]:
    """The batches of ``data``: a map-style ``Dataset`` in a ``DataLoader`` of ``batch_size``, in order.

    Args:
        data: a ``Dataset``, a ``DataLoader`` or an iterable of batches.
        batch_size: the batch size of a ``Dataset`` (a positive integer).

    Returns:
        What to iterate for the batches.

    Raises:
        LandscapeError: a map-style ``Dataset`` without ``__len__``.
        ForeignError: its ``__len__`` raised or returned no count.
    """
    if isinstance(data, Dataset) and not isinstance(data, IterableDataset):
        if _length(data, strict=True) is None:
            raise LandscapeError(
                f"data= is a {type(data).__name__} without __len__: a map-style Dataset needs one (the number of "
                "samples), or give an IterableDataset or a DataLoader"
            )
        return DataLoader(data, batch_size=int(batch_size), shuffle=False)
    return data


def _pair(item: Any, index: int, batch: BatchFunction | None) -> tuple[Tensor, Tensor]:
    """One batch as ``(x, y)`` tensors (through ``batch`` when given), or the error naming what it is."""
    if batch is not None:
        with calling(f"your batch= function on batch {index}", "it must return (inputs, labels)"):
            item = batch(item)
    if isinstance(item, Mapping):
        keys = ", ".join(repr(k) for k in list(item)[:6])
        raise LandscapeError(
            f"batch {index} is a dict (keys {keys}); say which are the images and labels with "
            "batch=lambda b: (b['image'], b['label'])"
        )
    if not isinstance(item, (tuple, list)) or len(item) < 2 or not all(isinstance(t, Tensor) for t in item[:2]):
        got = (
            type(item).__name__ if not isinstance(item, (tuple, list)) else f"a {len(item)}-item {type(item).__name__}"
        )
        fix = "return (inputs, labels) tensors from batch=" if batch is not None else "give batch= to pick them"
        raise LandscapeError(f"batch {index} is {got}, not (x, y) tensors; {fix}")
    return item[0], item[1]


def _checked(x: Tensor, y: Tensor, index: int, first: tuple[Tensor, Tensor] | None) -> Tensor:
    """One batch's images and labels checked (against the first batch's too); its labels as analyses take them.

    As many labels as images and at least one, finite images, labels of one of the two forms
    (:func:`~landscape.data.labels.checked_labels`: integer class indices become int64); after the first batch,
    images of its dtype and labels of its form (class indices, or distributions over as many classes).
    """
    where = f"batch {index}"
    if x.ndim == 0 or x.shape[0] == 0:
        raise LandscapeError(f"{where} is empty (no images); leave empty batches out of the data")
    if y.ndim == 0 or x.shape[0] != y.shape[0]:
        raise LandscapeError(
            f"{where} has {x.shape[0]} images but labels of shape {tuple(y.shape)}; give one label per image"
        )
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise LandscapeError(f"{where} has images that are not finite (NaN or Inf); check the data")
    y = checked_labels(y, where)
    if first is not None:
        x0, y0 = first
        if x.dtype != x0.dtype:
            raise LandscapeError(
                f"{where} has {x.dtype} images but batch 0 has {x0.dtype}: give every batch images of one dtype"
            )
        if y.is_floating_point() != y0.is_floating_point() or y.shape[1:] != y0.shape[1:]:
            raise LandscapeError(
                f"{where} has labels of {_form(y)} but batch 0 has {_form(y0)}: give every batch labels of one form"
            )
    return y


def _form(y: Tensor) -> str:
    """The form of checked labels, in words."""
    return f"distributions over {y.shape[1]} classes" if y.is_floating_point() else "class indices"


def given_batches(
    data: Any,
    device: torch.device | str = "cpu",
    *,
    samples: int | None = None,
    batch_size: int = 128,
) -> BatchSource:
    """The caller's data as fixed ``(x, y)`` batches read onto ``device``: the first ``samples`` images, in order.

    Every batch is checked as it is read (:func:`_checked`); integer class indices are held as int64.

    A ``Dataset`` is read in batches of ``batch_size``; a loader's batches are kept as they come (the last one
    cut at ``samples``), held on the CPU (tensors already there are not copied); after the first, the memory
    that ``samples`` (or the dataset's) images of its size take on the CPU is checked before the rest is read.
    ``device`` receives one batch at a time, when an analysis reads it.

    Args:
        data: a :class:`GivenData`, a ``Dataset``, a ``DataLoader``, an iterable of ``(x, y, ...)`` batches or one
            ``(x, y)`` tuple: float images ``(b, C, H, W)`` and integer labels ``(b,)`` (or floating label
            distributions ``(b, classes)``).
        device: where a batch is placed when it is read (the source's device).
        samples: the number of images to take (a positive integer); None takes all. More than the data holds is
            an error when the :class:`GivenData` is ``exact``, else all are taken.
        batch_size: the batch size of a ``Dataset``.

    Returns:
        The :class:`~landscape.data.stream.BatchSource` of the batches (held on the CPU, placed on ``device``).

    Raises:
        LandscapeError: no batch, a batch that is not ``(x, y)`` tensors (a dict without ``batch=``), an empty
            batch, labels of another count, shape or form, label distributions that are not distributions,
            images that are not finite, a batch whose images or labels differ in dtype or form from the first
            batch's, fewer images than an exact ``samples``, a ``Dataset`` without a length, or data that needs
            more memory than the CPU has.
        ForeignError: the caller's ``batch=`` function, the loader or the dataset's ``__len__`` raised.
    """
    given = data if isinstance(data, GivenData) else GivenData(data)
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, numbers.Integral) or samples < 1):
        raise LandscapeError(f"--samples must be a positive integer, got {samples!r}")
    pair = isinstance(given.data, tuple) and len(given.data) == 2 and all(isinstance(t, Tensor) for t in given.data)
    source = [given.data] if pair else as_loader(given.data, batch_size)  # one (x, y) pair: one batch
    cut_here = source is not given.data and not pair  # a map-style Dataset, cut into batches of batch_size here
    sizes = [n for n in (samples, _dataset_size(given.data)) if n is not None]
    wanted = min(sizes) if sizes else None  # unknown (a generator of batches): not checked ahead
    held: list[tuple[Tensor, Tensor]] = []
    taken, largest = 0, 0  # largest: the data's own batch size, before the cut at samples
    items = iter(source)
    while samples is None or taken < samples:
        with calling(f"iterating your data ({describe(given.data)})", "check the loader"):
            item = next(items, None)
        if item is None:
            break
        x, y = _pair(item, len(held), given.batch)
        y = _checked(x, y, len(held), held[0] if held else None)
        largest = max(largest, int(x.shape[0]))
        if samples is not None and taken + x.shape[0] > samples:
            x, y = x[: samples - taken], y[: samples - taken]
        if not held and wanted is not None:
            per_image = int(x[0].numel()) + int(y[0].numel())
            require_memory(
                int(wanted),
                per_image,
                x.dtype,
                torch.device("cpu"),
                f"the data ({wanted:,} images)",
                "lower --samples",
            )
        held.append((x.cpu(), y.cpu()))
        taken += int(x.shape[0])
    if not held:
        raise LandscapeError(f"no batches in the data ({describe(given.data)}); give {ACCEPTED}")
    if given.batch_size is not None and not cut_here and largest != given.batch_size:
        raise LandscapeError(
            f"--batch-size {given.batch_size} has no effect on data given as batches ({describe(given.data)}): "
            f"they are used as they come, of {largest} images; set the loader's batch size, or give its Dataset"
        )
    if samples is not None and taken < samples and given.exact:
        raise LandscapeError(
            f"--samples {samples} asks for more images than the data holds ({taken}); lower --samples or leave it out"
        )
    return HeldBatches(held).placed(device)


def _dataset_size(data: Any) -> int | None:
    """The number of images of a ``Dataset`` or a loader's dataset, when it says (else None)."""
    dataset = data.dataset if isinstance(data, DataLoader) else data
    return _length(dataset, strict=True) if isinstance(dataset, Dataset) else None


def batches_sha256(batches: Sequence[tuple[Tensor, Tensor]]) -> str:
    """Hex SHA-256 of batches' images and labels (dtype, shape and bytes of each, in order): their identity.

    Args:
        batches: the ``(x, y)`` batches.

    Returns:
        The hex digest.
    """
    digest = hashlib.sha256()
    for x, y in batches:
        for t in (x, y):
            t = t.detach().cpu().contiguous()
            digest.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
