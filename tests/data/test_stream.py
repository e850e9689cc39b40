import weakref

import pytest
import torch

from data.test_data import write_cifar10
from landscape.data.batches import fixed_batches, sample_indices, stream_batches
from landscape.data.given import given_batches
from landscape.data.loading import load_dataset
from landscape.data.preprocess import Preprocess
from landscape.data.stream import DatasetBatches, HeldBatches, as_source


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    write_cifar10(root, per_class=7)  # 70 training images
    return f"cifar10:{root}"


def reference(dataset, batch_size, n, seed):
    """The fixed batches by their definition: all chosen images normalised at once, then cut in order."""
    idx = sample_indices(len(dataset), n, seed)
    raw = dataset._images[idx].double().div(255)
    if tuple(raw.shape[-2:]) != dataset.info.hw:  # resized as one tensor, as before batches streamed
        raw = torch.nn.functional.interpolate(
            raw.float(), size=dataset.info.hw, mode="bilinear", align_corners=False, antialias=False
        ).clamp_(0, 1)
    x = (raw.float() - dataset._mean) / dataset._std
    y = dataset.targets[idx]
    return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, n, batch_size)]


def test_streamed_batches_equal_the_whole_split_normalised_then_cut(cifar):
    ds = load_dataset(cifar, "train")
    source = stream_batches(ds, 16, 50, seed=3)
    want = reference(ds, 16, 50, 3)
    assert isinstance(source, DatasetBatches) and len(source) == 4 and source.sizes == [16, 16, 16, 2]
    for (x, y), (wx, wy) in zip(source, want, strict=True):
        assert x.dtype == torch.float32 and torch.equal(x, wx) and torch.equal(y, wy)
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(fixed_batches(ds, 16, 50, seed=3), want))
    assert torch.equal(source[1][0], source[1][0])  # read twice: the same values
    assert ds._cache is None and ds._images.dtype == torch.uint8  # no float32 copy of the images is held


def test_resized_batches_read_one_by_one_equal_the_images_resized_together(cifar):
    ds = load_dataset(cifar, "train", preprocess=Preprocess(image_size=40))  # bilinear upsampling, no antialias
    whole = ds.images(sample_indices(len(ds), 45, 1))
    source = stream_batches(ds, 8, 45, seed=1)
    assert tuple(source[0][0].shape) == (8, 3, 40, 40) == source.shape(0)
    assert torch.equal(torch.cat([x for x, _ in source]), whole)
    assert torch.equal(torch.cat([x for x, _ in source]), torch.cat([x for x, _ in reference(ds, 8, 45, 1)]))


def test_views_place_cast_and_select_without_reading(cifar):
    ds = load_dataset(cifar, "train")
    source = stream_batches(ds, 10, 40, seed=0)
    doubled = source.placed(dtype=torch.float64, memory_format=torch.channels_last)
    x, y = doubled[2]
    assert x.dtype == torch.float64 and x.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(x, source[2][0].double()) and torch.equal(y, source[2][1]) and y.dtype == torch.int64
    picked = source.select([3, 1])
    assert len(picked) == 2 and torch.equal(picked[0][0], source[3][0]) and torch.equal(picked[-1][1], source[1][1])
    assert [torch.equal(a[0], b[0]) for a, b in zip(source[1:3], [source[1], source[2]])] == [True, True]
    assert picked.sizes == [10, 10] and source[::2].select([1])[0][1].tolist() == source[2][1].tolist()
    with pytest.raises(IndexError):
        source[4]
    reads = []
    ds.images = lambda idx: reads.append(idx) or torch.zeros(len(idx), 3, 32, 32)  # count image reads
    assert torch.equal(source.labels(3), ds.targets[source.indices[30:40]]) and source.sizes == [10] * 4
    assert reads == []  # labels and sizes never read an image


def test_held_batches_stay_where_they_are_and_are_placed_when_read():
    batches = [(torch.randn(3, 2), torch.tensor([0, 1, 0])), (torch.randn(1, 2), torch.tensor([1]))]
    held = as_source(batches)
    assert isinstance(held, HeldBatches) and held[0][0] is batches[0][0]  # on the CPU: no copy
    assert held.nbytes == sum(x.nbytes + y.nbytes for x, y in batches)
    meta = held.placed("meta")
    x, y = meta[1]
    assert x.device.type == "meta" and y.device.type == "meta" and held._held[1][0].device.type == "cpu"
    assert as_source(meta) is meta


def test_given_data_are_held_on_the_host_and_placed_on_read():
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(4, 1, 3, 3, generator=g), torch.tensor([0, 1, 2, 1])) for _ in range(3)]
    source = given_batches(data, "meta", samples=10)
    assert source.sizes == [4, 4, 2] and all(x.device.type == "cpu" for x, _ in source._held)
    assert source[2][0].device.type == "meta" and tuple(source[2][0].shape) == (2, 1, 3, 3)


def test_reading_every_batch_leaves_at_most_the_last_one_alive(cifar):
    ds = load_dataset(cifar, "train")
    source = stream_batches(ds, 8, 64, seed=0)
    alive: list[weakref.ref] = []
    most = 0
    for x, _ in source:
        alive.append(weakref.ref(x))
        most = max(most, sum(r() is not None for r in alive))
    assert len(alive) == 8 and most <= 2
