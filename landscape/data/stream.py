"""Fixed batches that stream: held compactly on the host, each moved to the device only when it is read.

A :class:`BatchSource` is a sequence of ``(x, y)`` batches in a fixed order. Reading batch ``i``
(``source[i]``, or iterating) builds that batch from what the source holds on the host and places it on
:attr:`~BatchSource.device` (inputs cast to :attr:`~BatchSource.dtype` when floating, in
:attr:`~BatchSource.memory_format` when set); nothing is kept on the device between reads, so the device holds
one batch at a time (two while a caller keeps the previous one) whatever the number of samples.

What is held on the host:

- :class:`DatasetBatches`: the dataset's own stored images (uint8 0..255 or float [0, 1], at native size: the
  images a loaded in-memory dataset already holds), the int64 indices of the chosen samples and the labels;
  a batch is normalised (and resized) when read, so no float32 copy of the images is ever held.
- :class:`HeldBatches`: the given batches as they are (a caller's list, augmented batches, the images of a
  file-backed dataset read once): on the CPU they are read without a copy.

``source.placed(device, dtype, memory_format)`` is the same batches placed otherwise (the channels-last inputs
of a surface, an :class:`~landscape.core.objective.Objective` in float64); ``source[a:b]`` and
``source.select(indices)`` are views of some batches. A batch read twice is equal bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import overload

import torch
from torch import Tensor

from landscape.data.dataset import ImageDataset

#: one ``(inputs, targets)`` batch
Batch = tuple[Tensor, Tensor]


class BatchSource(Sequence[Batch]):
    """Fixed ``(x, y)`` batches read one at a time from host storage and placed on a device when read.

    Subclasses hold the storage and define :meth:`_read` (batch ``j`` of the storage, on the host) and
    :meth:`_count`; this class keeps the order (a view may pick some of the stored batches) and the placement.

    Attributes:
        device: where a batch read is placed (None: where it is held).
        dtype: the dtype floating inputs are cast to (None: as held).
        memory_format: the memory format of the inputs (None: as held, e.g. ``torch.channels_last``).
    """

    def __init__(self) -> None:
        self._order: list[int] | None = None  # stored batches of this view, in order; None: all of them
        self.device: torch.device | None = None
        self.dtype: torch.dtype | None = None
        self.memory_format: torch.memory_format | None = None

    # -- storage (subclasses) ----------------------------------------------------------------------
    def _count(self) -> int:
        raise NotImplementedError

    def _read(self, j: int) -> Batch:
        """Stored batch ``j`` on the host (a fresh tensor or the held one; callers never modify it)."""
        raise NotImplementedError

    def _labels(self, j: int) -> Tensor:
        """The targets of stored batch ``j`` on the host (subclasses may read them without the images)."""
        return self._read(j)[1]

    # -- the sequence ------------------------------------------------------------------------------
    def _stored(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"batch index {i} out of range for {n} batches")
        i %= n
        return i if self._order is None else self._order[i]

    def __len__(self) -> int:
        return self._count() if self._order is None else len(self._order)

    @overload
    def __getitem__(self, i: int) -> Batch: ...

    @overload
    def __getitem__(self, i: slice) -> BatchSource: ...

    def __getitem__(self, i: int | slice) -> Batch | BatchSource:
        """Batch ``i`` placed (see :meth:`place`), or for a slice a view of those batches (nothing read).

        Args:
            i: a batch index (negative counts from the end) or a slice.

        Returns:
            The placed ``(x, y)``, or a :class:`BatchSource` of the sliced batches.

        Raises:
            IndexError: ``i`` is out of range.
        """
        if isinstance(i, slice):
            return self.select(range(len(self))[i])
        return self.place(*self._read(self._stored(int(i))))

    def __iter__(self) -> Iterator[Batch]:
        for i in range(len(self)):
            yield self[i]

    def place(self, x: Tensor, y: Tensor) -> Batch:
        """``(x, y)`` on :attr:`device`, floating ``x`` cast to :attr:`dtype`, ``x`` in :attr:`memory_format`.

        Args:
            x: the inputs of one batch.
            y: its targets.

        Returns:
            The placed batch (the same tensors when nothing changes).
        """
        if self.device is not None:
            x, y = x.to(self.device), y.to(self.device)
        if self.dtype is not None and x.is_floating_point():
            x = x.to(self.dtype)
        if self.memory_format is not None:
            x = x.contiguous(memory_format=self.memory_format)
        return x, y

    # -- views -------------------------------------------------------------------------------------
    def select(self, indices: Sequence[int]) -> BatchSource:
        """The batches ``indices`` of this source (a view in that order, placed alike; nothing is read).

        Args:
            indices: positions in this source (repeats allowed).

        Returns:
            A source of ``len(indices)`` batches sharing this one's storage.

        Raises:
            IndexError: an index is out of range.
        """
        view = copy.copy(self)
        view._order = [self._stored(int(i)) for i in indices]
        return view

    def placed(
        self,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        memory_format: torch.memory_format | None = None,
    ) -> BatchSource:
        """The same batches placed on ``device``, cast to ``dtype``, in ``memory_format`` (None keeps this one's).

        Args:
            device: where batches read from the view go.
            dtype: the dtype of floating inputs.
            memory_format: the inputs' memory format (``torch.channels_last`` for 4D inputs).

        Returns:
            A view sharing this source's storage and order.
        """
        view = copy.copy(self)
        view.device = self.device if device is None else torch.device(device)
        view.dtype = self.dtype if dtype is None else dtype
        view.memory_format = self.memory_format if memory_format is None else memory_format
        return view

    # -- what is known without reading the images --------------------------------------------------
    def labels(self, i: int) -> Tensor:
        """The targets of batch ``i`` on :attr:`device` (the images are not read where the storage allows).

        Args:
            i: a batch index.

        Returns:
            The targets, as ``self[i][1]``.
        """
        y = self._labels(self._stored(int(i)))
        return y if self.device is None else y.to(self.device)

    @property
    def sizes(self) -> list[int]:
        """The number of samples of each batch, in order (``N_b``)."""
        return [int(self._labels(self._stored(i)).shape[0]) for i in range(len(self))]

    def shape(self, i: int) -> tuple[int, ...]:
        """The shape of batch ``i``'s inputs (as placed; the memory format does not change it).

        Args:
            i: a batch index.

        Returns:
            ``tuple(self[i][0].shape)``.
        """
        return tuple(self._read(self._stored(int(i)))[0].shape)

    def __repr__(self) -> str:
        where = "" if self.device is None else f" on {self.device}"
        return f"<{type(self).__name__}: {len(self)} batches of {sum(self.sizes)} samples{where}>"


class HeldBatches(BatchSource):
    """Batches held as given (e.g. on the host), placed on the source's device when read.

    Args:
        batches: the ``(x, y)`` pairs; the list is copied, the tensors are not.
    """

    def __init__(self, batches: Sequence[Batch]) -> None:
        super().__init__()
        self._held = [(x, y) for x, y in batches]

    def _count(self) -> int:
        return len(self._held)

    def _read(self, j: int) -> Batch:
        return self._held[j]

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors held (inputs and targets of every stored batch)."""
        return sum(x.nbytes + y.nbytes for x, y in self._held)


class DatasetBatches(BatchSource):
    """Batches of chosen samples of an in-memory dataset, normalised (and resized) when read.

    Batch ``b`` is ``dataset.images(indices[b*s : (b+1)*s])`` with its labels: the dataset's normalisation of
    its own stored images, element by element, so every batch equals the same slice of
    ``dataset.images(indices)`` bit for bit. Held: a reference to the dataset (its stored images, already in
    memory) and the indices.

    Args:
        dataset: the split; its images are read on every read of a batch (cheap for stored tensors).
        indices: the int64 indices of the samples, in batch order.
        batch_size: samples per batch; the last batch may be smaller.
    """

    def __init__(self, dataset: ImageDataset, indices: Tensor, batch_size: int) -> None:
        super().__init__()
        self.dataset = dataset
        self.indices = indices.to(torch.int64)
        self.batch_size = int(batch_size)
        self._trailing: tuple[int, ...] | None = None

    def _count(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def _slice(self, j: int) -> Tensor:
        return self.indices[j * self.batch_size : (j + 1) * self.batch_size]

    def _read(self, j: int) -> Batch:
        idx = self._slice(j)
        return self.dataset.images(idx), self.dataset.targets[idx]

    def _labels(self, j: int) -> Tensor:
        return self.dataset.targets[self._slice(j)]

    def shape(self, i: int) -> tuple[int, ...]:
        """The shape of batch ``i``'s inputs (the image shape read once, from one image).

        Args:
            i: a batch index.

        Returns:
            ``(N_b, C, H, W)``.
        """
        if self._trailing is None:
            self._trailing = tuple(self.dataset.images(self.indices[:1]).shape[1:])
        return (int(self._labels(self._stored(int(i))).shape[0]), *self._trailing)


def as_source(batches: Sequence[Batch] | BatchSource) -> BatchSource:
    """``batches`` as a :class:`BatchSource`: itself, or a list of pairs held where they are.

    Args:
        batches: a source or a sequence of ``(x, y)`` pairs.

    Returns:
        The source (a :class:`HeldBatches` for a sequence; its tensors are not copied).
    """
    return batches if isinstance(batches, BatchSource) else HeldBatches(batches)


def dataset_batches(
    dataset: ImageDataset, indices: Tensor, batch_size: int, device: torch.device | str = "cpu"
) -> BatchSource:
    """The samples ``indices`` of ``dataset`` in batches of ``batch_size``, each placed on ``device`` when read.

    An in-memory dataset keeps its stored images and normalises a batch when it is read
    (:class:`DatasetBatches`); the images of a file-backed one are read and normalised once, in batches, and
    held on the host as float32 (:class:`HeldBatches`: decoding files at every read would cost more than the
    model).

    Args:
        dataset: the split.
        indices: the int64 sample indices in batch order.
        batch_size: samples per batch (positive).
        device: where a batch read is placed.

    Returns:
        The source.

    Raises:
        LandscapeError: an image file cannot be read (file-backed datasets).
    """
    source = DatasetBatches(dataset, indices, batch_size)
    if not dataset.in_memory:
        source = HeldBatches([source[i] for i in range(len(source))])
    return source.placed(device)
