"""Data as the caller holds it: Dataset, DataLoader or batches, the first samples, one batch at a time."""

import pytest
import torch
from helpers import one_line_error
from torch.utils.data import DataLoader, TensorDataset

import landscape.runtime.devices
from landscape.data.given import GivenData, describe, given_batches
from landscape.errors import ForeignError


def images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 4, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_a_dataset_is_batched_in_order_and_samples_takes_the_first():
    x, y = images(10)
    held = given_batches(TensorDataset(x, y), samples=7, batch_size=3)
    assert [int(b[1].shape[0]) for b in held] == [3, 3, 1]
    assert torch.equal(torch.cat([b[0] for b in held]), x[:7]) and torch.equal(torch.cat([b[1] for b in held]), y[:7])
    assert len(given_batches(TensorDataset(x, y), batch_size=4)) == 3  # None: all, in batches of 4


def test_a_loader_is_read_only_as_far_as_samples_and_batch_picks_the_pair():
    x, y = images(12)
    read = []

    def batches():
        for i in range(0, 12, 4):
            read.append(i)
            yield {"img": x[i : i + 4], "target": y[i : i + 4], "id": i}

    held = given_batches(GivenData(batches(), batch=lambda b: (b["img"], b["target"])), samples=6)
    assert read == [0, 4] and [int(b[0].shape[0]) for b in held] == [4, 2]
    assert torch.equal(held[1][1], y[4:6])


def test_more_samples_than_the_data_holds():
    x, y = images(5)
    loader = DataLoader(TensorDataset(x, y), batch_size=2)
    assert sum(int(b[1].shape[0]) for b in given_batches(loader, samples=100)) == 5  # not asked for: all
    one_line_error(given_batches, GivenData(loader, exact=True), samples=6, match=r"--samples 6 asks for more images")


def test_the_memory_is_checked_before_the_data_is_read(monkeypatch):
    x, y = images(8)
    monkeypatch.setattr(landscape.runtime.devices, "device_memory", lambda device: 8 * 17 * 4 - 1)
    one_line_error(
        given_batches, TensorDataset(x, y), batch_size=2, match=r"the data \(8 images\) needs .* lower --samples"
    )
    assert len(given_batches(TensorDataset(x, y), samples=7, batch_size=2)) == 4  # 7 x 17 floats fit


def test_bad_batches_are_named():
    x, y = images(4)
    one_line_error(given_batches, [], match="no batches in the data")
    one_line_error(given_batches, [x], match=r"^batch 0 is Tensor, not \(x, y\) tensors; give batch=")
    one_line_error(given_batches, [(x, y[:3])], match=r"batch 0 has 4 images but labels of shape \(3,\)")
    one_line_error(given_batches, [(x, y.float())], match=r"floating labels of shape \(4,\)")
    one_line_error(given_batches, [(x, y), (x[:0], y[:0])], match=r"^batch 1 is empty")
    one_line_error(given_batches, [(x * float("nan"), y)], match="not finite")
    with pytest.raises(ForeignError, match=r"your batch= function on batch 0 raised KeyError"):
        given_batches(GivenData([{"a": x}], batch=lambda b: (b["image"], b["label"])))


def test_data_is_described_without_addresses():
    x, y = images(4)
    assert describe(DataLoader(TensorDataset(x, y), batch_size=3)) == "<DataLoader of 2 batches>"
    assert describe(TensorDataset(x, y)) == "<TensorDataset of 4 samples>"
    assert describe([(x, y)]) == "<1 batch>"


def test_one_pair_is_one_batch():
    x, y = images(4)
    (held,) = given_batches((x, y), samples=3)
    assert torch.equal(held[0], x[:3]) and torch.equal(held[1], y[:3])


# -------------------------------------------------------------------------------------- labels and lengths
def distributions(n, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(n, classes, generator=g), dim=1)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_class_indices_of_any_integer_dtype_are_held_as_int64(dtype):
    x, y = images(4)
    (held,) = given_batches([(x, y.to(dtype))])
    assert held[1].dtype == torch.int64 and torch.equal(held[1], y)


@pytest.mark.parametrize(
    "bend, words",
    [
        (lambda t: t.index_fill(0, torch.tensor([2]), float("nan")), "row 2 holds values that are not finite"),
        (lambda t: torch.cat([t[:, :1] - 1, t[:, 1:2] + 1, t[:, 2:]], 1), "row 0 has a negative entry"),
        (lambda t: t * 2, r"row 0 does not sum to 1 \(it sums to 2\)"),
        (lambda t: t.index_fill(0, torch.tensor([3]), float("inf")), "row 3 holds values that are not finite"),
    ],
)
def test_label_distributions_must_be_distributions(bend, words):
    x, _ = images(4)
    t = distributions(4)
    (held,) = given_batches([(x, t)])  # a sound distribution passes unchanged
    assert torch.equal(held[1], t)
    msg = one_line_error(given_batches, [(x, t), (x, bend(t))], match=words)
    assert msg.startswith("batch 1 has label distributions that are not distributions")


def test_every_batch_has_the_first_batchs_image_dtype_and_label_form():
    x, y = images(4)
    one_line_error(given_batches, [(x, y), (x.double(), y)], match=r"^batch 1 has torch.float64 images but batch 0")
    one_line_error(given_batches, [(x, y), (x, distributions(4))], match="batch 1 has labels of distributions over 3")
    one_line_error(given_batches, [(x, distributions(4)), (x, distributions(4, 5))], match="over 5 classes but batch")
    assert len(given_batches([(x, y), (x, y.int())])) == 2  # one form: class indices, whatever their dtype


class Sized(torch.utils.data.Dataset):
    def __init__(self, length):
        self.length = length

    def __len__(self):
        if isinstance(self.length, Exception):
            raise self.length
        return self.length

    def __getitem__(self, i):
        return torch.zeros(1, 4, 4), 0


class Unsized(torch.utils.data.Dataset):
    def __getitem__(self, i):  # never raises IndexError: iterating it would not end
        return torch.zeros(1, 4, 4), 0


@pytest.mark.parametrize(
    "length, words",
    [
        (-1, r"len\(\) of your data \(Sized\) raised ValueError: __len__\(\) should return >= 0"),
        (2.5, r"len\(\) of your data \(Sized\) raised TypeError"),
        (RuntimeError("no count"), r"len\(\) of your data \(Sized\) raised RuntimeError: no count"),
    ],
)
def test_a_dataset_whose_length_is_no_count_is_one_line(length, words):
    with pytest.raises(ForeignError, match=words):
        given_batches(Sized(length), batch_size=2)
    with pytest.raises(ForeignError, match=words):
        given_batches(DataLoader(Sized(length), batch_size=2))
    assert describe(Sized(length)) == "<Sized>"  # a description never fails


def test_a_map_style_dataset_without_a_length_is_refused_not_iterated_for_ever():
    one_line_error(given_batches, Unsized(), batch_size=2, match="Unsized without __len__")
