import os
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import one_line_error

from landscape.data import (
    DIGITS_MEAN,
    DIGITS_STD,
    DatasetInfo,
    dataset_info,
    fixed_batches,
    load_dataset,
    make_loader,
    parse_spec,
    subset_indices,
)


def raw(ds, x):
    """Undo the normalisation of an image of ``ds``."""
    mean = torch.tensor(ds.info.mean).view(-1, 1, 1)
    std = torch.tensor(ds.info.std).view(-1, 1, 1)
    return x * std + mean


# ------------------------------------------------------------------------------------ CIFAR fixtures

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _batch(rng, labels, label_key):
    data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
    return {b"batch_label": b"fixture", label_key: list(labels), b"data": data,
            b"filenames": [f"img{i}.png".encode() for i in range(len(labels))]}


def _dump(obj, path, py2_numpy_names=False):
    blob = pickle.dumps(obj, protocol=2)
    if py2_numpy_names:  # the original archives reference numpy.core, as numpy 1.x wrote them
        blob = blob.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    path.write_bytes(blob)


def write_cifar10(root, per_class=2):
    """A tiny CIFAR-10 in the on-disk format: 5 train batches (per_class*10 images), 1 test batch."""
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), per_class)
    rng.shuffle(labels)
    batches = []
    for i, part in enumerate(np.array_split(labels, 5), start=1):
        b = _batch(rng, part, b"labels")
        batches.append(b)
        _dump(b, d / f"data_batch_{i}", py2_numpy_names=(i == 1))
    test = _batch(rng, np.arange(10), b"labels")
    _dump(test, d / "test_batch")
    _dump({b"label_names": [n.encode() for n in CIFAR10_NAMES], b"num_cases_per_batch": 10000,
           b"num_vis": 3072}, d / "batches.meta")
    return d, batches, test


def write_cifar100(root, per_class=1):
    d = root / "cifar-100-python"
    d.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for split in ("train", "test"):
        fine = np.repeat(np.arange(100), per_class)
        b = _batch(rng, fine, b"fine_labels")
        b[b"coarse_labels"] = list(fine // 5)
        _dump(b, d / split)
    _dump({b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
           b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)]}, d / "meta")
    return d


def test_cifar10_reads_the_pickle_layout(tmp_path):
    d, batches, test = write_cifar10(tmp_path)
    # one known pixel: image 1 of data_batch_2, channel G (1), row 5, column 7
    batches[1][b"data"][1, 1 * 1024 + 5 * 32 + 7] = 200
    _dump(batches[1], d / "data_batch_2")

    ds = load_dataset(f"cifar10:{tmp_path}", "train")
    assert len(ds) == 20 and ds.info == DatasetInfo("cifar10", 10, 3, 32, ds.info.mean, ds.info.std)
    assert ds.classes == CIFAR10_NAMES
    offset = len(batches[0][b"labels"])
    x, y = ds[offset + 1]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32
    assert y == batches[1][b"labels"][1]
    assert raw(ds, x)[1, 5, 7].item() == pytest.approx(200 / 255, abs=1e-6)
    # the whole image follows the layout R plane, G plane, B plane, each row-major
    expected = torch.from_numpy(batches[1][b"data"][1].reshape(3, 32, 32).astype(np.float32) / 255)
    torch.testing.assert_close(raw(ds, x), expected, atol=1e-6, rtol=0)
    all_labels = [label for b in batches for label in b[b"labels"]]
    assert ds.targets.tolist() == all_labels

    te = load_dataset(f"cifar10:{d}", "test")  # the folder itself works too
    assert len(te) == 10 and te.targets.tolist() == list(range(10))
    torch.testing.assert_close(raw(te, te.tensors()[0][3]),
                               torch.from_numpy(test[b"data"][3].reshape(3, 32, 32) / 255).float(),
                               atol=1e-6, rtol=0)


def test_cifar100_reads_fine_labels(tmp_path):
    write_cifar100(tmp_path)
    ds = load_dataset(f"cifar100:{tmp_path}", "test")
    assert len(ds) == 100 and ds.info.num_classes == 100
    assert sorted(ds.targets.tolist()) == list(range(100))
    assert ds.classes[7] == "fine7"
    assert dataset_info("cifar100") == ds.info


def test_cifar_missing_files_are_named(tmp_path):
    msg = one_line_error(load_dataset, f"cifar10:{tmp_path}")
    assert f"{tmp_path}/cifar-10-batches-py/data_batch_1..5 and test_batch" in msg
    assert "none found" in msg
    msg = one_line_error(load_dataset, f"cifar100:{tmp_path / 'nope'}", "test")
    assert "cifar-100-python/train and test" in msg

    d, _, _ = write_cifar10(tmp_path)
    (d / "data_batch_3").unlink()
    msg = one_line_error(load_dataset, f"cifar10:{tmp_path}")
    assert "missing data_batch_3" in msg
    assert len(load_dataset(f"cifar10:{tmp_path}", "test")) == 10  # the test split is still complete
    one_line_error(load_dataset, "cifar10", match="needs a path")


def test_cifar_malformed_batch(tmp_path):
    d, batches, _ = write_cifar10(tmp_path)
    bad = dict(batches[0])
    bad[b"data"] = bad[b"data"][:, :100]
    _dump(bad, d / "data_batch_1")
    one_line_error(load_dataset, f"cifar10:{tmp_path}", match="data_batch_1")
    (d / "test_batch").write_bytes(b"garbage")
    one_line_error(load_dataset, f"cifar10:{tmp_path}", "test", match="cannot read")


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_cifar_pickle_cannot_run_code(tmp_path):
    d, batches, _ = write_cifar10(tmp_path)
    marker = tmp_path / "pwned"
    evil = dict(batches[0])
    evil[b"labels"] = _Evil(marker)
    (d / "data_batch_1").write_bytes(pickle.dumps(evil, protocol=2))
    one_line_error(load_dataset, f"cifar10:{tmp_path}", match="cannot read")
    assert not marker.exists()


# ------------------------------------------------------------------------------------- imagefolder


def _png(path, size, rgb):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, rgb).save(path)


def test_imagefolder_with_splits(tmp_path):
    colours = {"cat": (255, 0, 0), "dog": (0, 255, 0)}
    for split, n in (("train", 3), ("test", 2)):
        for cls, rgb in colours.items():
            for i in range(n):
                _png(tmp_path / split / cls / f"{i}.png", (40, 50), rgb)
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    (tmp_path / "train" / ".hidden").mkdir()

    info = dataset_info(f"imagefolder:{tmp_path}:16")
    assert info == DatasetInfo("imagefolder", 2, 3, 16, (0.5,) * 3, (0.5,) * 3)
    tr = load_dataset(f"imagefolder:{tmp_path}:16", "train")
    te = load_dataset(f"imagefolder:{tmp_path}:16", "val")
    assert te.split == "test"
    assert tr.classes == ["cat", "dog"]
    assert tr.targets.tolist() == [0, 0, 0, 1, 1, 1] and te.targets.tolist() == [0, 0, 1, 1]
    x, y = tr[4]
    assert x.shape == (3, 16, 16) and y == 1
    torch.testing.assert_close(x[1], torch.ones(16, 16))  # green = 1 -> (1 - 0.5) / 0.5
    torch.testing.assert_close(x[0], -torch.ones(16, 16))
    xs, ys = tr.tensors()
    assert xs.shape == (6, 3, 16, 16) and torch.equal(ys, tr.targets)


def test_imagefolder_flat_and_errors(tmp_path):
    _png(tmp_path / "flat" / "a" / "x.jpg", (8, 8), (0, 0, 255))
    _png(tmp_path / "flat" / "b" / "sub" / "y.png", (8, 8), (0, 0, 0))
    for split in ("train", "test"):
        ds = load_dataset(f"imagefolder:{tmp_path / 'flat'}", split)
        assert len(ds) == 2 and ds.info.image_size == 32 and ds.targets.tolist() == [0, 1]
    one_line_error(load_dataset, f"imagefolder:{tmp_path / 'missing'}", match="is not a folder")
    (tmp_path / "empty").mkdir()
    one_line_error(load_dataset, f"imagefolder:{tmp_path / 'empty'}", match="no class folders")
    (tmp_path / "noimg" / "a").mkdir(parents=True)
    one_line_error(load_dataset, f"imagefolder:{tmp_path / 'noimg'}", match="no images")
    one_line_error(load_dataset, "imagefolder", match="needs a path")


# ------------------------------------------------------------------------------------------ digits


def test_digits_shapes_ranges_and_split():
    tr, te = load_dataset(), load_dataset("digits", "test")
    assert tr.info == DatasetInfo("digits", 10, 1, 32, DIGITS_MEAN, DIGITS_STD)
    assert len(tr) == 1437 and len(te) == 360
    x, y = tr.tensors()
    assert x.shape == (1437, 1, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.long
    r = raw(tr, x)
    assert r.min().item() >= -1e-6 and r.max().item() <= 1 + 1e-6
    assert isinstance(tr[0][1], int) and tr[0][0].shape == (1, 32, 32)
    counts = torch.bincount(te.targets, minlength=10)
    assert counts.min().item() >= 35 and counts.max().item() <= 37  # stratified
    torch.testing.assert_close(load_dataset("digits").tensors()[0], x)  # deterministic


def _digits_reference(size):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    tr, _ = train_test_split(np.arange(len(d.target)), test_size=0.2, random_state=0, stratify=d.target)
    x = torch.tensor(d.images[tr], dtype=torch.float64)[:, None] / 16
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=False)


def test_digits_constants_match_the_train_split():
    ref = _digits_reference(32)
    assert DIGITS_MEAN[0] == pytest.approx(ref.mean().item(), abs=1e-6)
    assert DIGITS_STD[0] == pytest.approx(ref.std(unbiased=False).item(), abs=1e-6)
    torch.testing.assert_close(raw(load_dataset(), load_dataset().tensors()[0]), ref.float(), atol=1e-5, rtol=0)


def test_digits_size_suffix():
    ds = load_dataset("digits:16", "test")
    assert ds.tensors()[0].shape == (360, 1, 16, 16) and ds.info.image_size == 16
    ref = _digits_reference(16)
    assert ds.info.std[0] == pytest.approx(ref.std(unbiased=False).item(), abs=1e-6)
    one_line_error(load_dataset, "digits:abc", match="positive integer")
    one_line_error(load_dataset, "digits:0", match="positive integer")


# ------------------------------------------------------------------------------ specs and splits


def test_parse_spec_and_errors():
    assert parse_spec("cifar10:/data/c10") == ("cifar10", "/data/c10")
    assert parse_spec("digits") == ("digits", None)
    assert parse_spec("ImageFolder:/a:b:64") == ("imagefolder", "/a:b:64")
    msg = one_line_error(parse_spec, "mnist")
    for name in ("digits", "cifar10", "cifar100", "imagefolder", "synthetic"):
        assert name in msg
    one_line_error(parse_spec, "")
    one_line_error(load_dataset, "digits", "validation", match="unknown split")
    one_line_error(dataset_info, "nope:1")


def test_synthetic():
    a = load_dataset("synthetic:30:8")
    b = load_dataset("synthetic:30:8")
    te = load_dataset("synthetic:30:8", "test")
    assert a.tensors()[0].shape == (30, 3, 8, 8) and a.info.num_classes == 10
    assert torch.equal(a.tensors()[0], b.tensors()[0]) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.tensors()[0], te.tensors()[0])
    assert torch.bincount(a.targets).tolist() == [3] * 10
    assert dataset_info("synthetic").image_size == 32
    one_line_error(load_dataset, "synthetic:x")


# ----------------------------------------------------------------------------------------- subsets


def test_subset_fraction_is_stratified_and_seeded():
    full = load_dataset()
    sub = load_dataset(subset=0.1, seed=3)
    assert len(sub) == round(0.1 * 1437)
    counts = torch.bincount(full.targets, minlength=10)
    got = torch.bincount(sub.targets, minlength=10)
    share = counts.double() * len(sub) / len(full)
    assert torch.all(got >= share.floor()) and torch.all(got <= share.ceil())
    assert got.sum().item() == len(sub)
    idx = subset_indices(full.targets, 0.1, seed=3)
    torch.testing.assert_close(sub.tensors()[0], full.tensors()[0][idx])
    assert torch.equal(sub.targets, full.targets[idx])
    assert torch.equal(load_dataset(subset=0.1, seed=3).targets, sub.targets)
    assert not torch.equal(subset_indices(full.targets, 0.1, seed=4), idx)


def test_subset_counts_and_largest_remainder():
    targets = torch.tensor([0] * 5 + [1] * 3 + [2] * 2)
    idx = subset_indices(targets, 5)  # shares 2.5, 1.5, 1.0 -> 2, 1, 1 + one more to class 0 (tie, lower index)
    assert torch.bincount(targets[idx], minlength=3).tolist() == [3, 1, 1]
    assert torch.equal(idx, idx.sort().values)
    assert len(subset_indices(targets, 1.0)) == 10 and len(subset_indices(targets, 10)) == 10
    assert len(load_dataset("digits", "test", subset=40)) == 40


@pytest.mark.parametrize("bad", [0, -1, 361, 0.0, 1.5, -0.2, True, "half"])
def test_subset_errors(bad):
    one_line_error(load_dataset, "digits", "test", subset=bad, match="subset")


# ----------------------------------------------------------------------------- batches and loaders


def test_fixed_batches():
    ds = load_dataset("digits", "test")
    batches = fixed_batches(ds, 64, 200, seed=1)
    assert [len(y) for _, y in batches] == [64, 64, 64, 8]
    assert all(x.shape[1:] == (1, 32, 32) and x.device.type == "cpu" for x, _ in batches)
    again = fixed_batches(ds, 64, 200, seed=1)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, again))
    perm = torch.randperm(360, generator=torch.Generator().manual_seed(1))[:200]
    torch.testing.assert_close(torch.cat([x for x, _ in batches]), ds.tensors()[0][perm])
    assert torch.equal(torch.cat([y for _, y in batches]), ds.targets[perm])
    other = fixed_batches(ds, 64, 200, seed=2)
    assert not torch.equal(other[0][1], batches[0][1])
    assert sum(len(y) for _, y in fixed_batches(ds, 100)) == 360
    one_line_error(fixed_batches, ds, 64, 361)
    one_line_error(fixed_batches, ds, 0)


def test_transform_before_normalisation_and_not_in_tensors():
    seen = []

    def to_ones(x):
        seen.append((x.min().item(), x.max().item(), tuple(x.shape)))
        return torch.ones_like(x)

    plain = load_dataset("digits", "test")
    aug = load_dataset("digits", "test", transform=to_ones)
    x, y = aug[5]
    assert seen and seen[0][0] >= 0 and seen[0][1] <= 1 and seen[0][2] == (1, 32, 32)
    torch.testing.assert_close(x, torch.full((1, 32, 32), (1 - DIGITS_MEAN[0]) / DIGITS_STD[0]))
    assert y == plain[5][1]
    n_calls = len(seen)
    torch.testing.assert_close(aug.tensors()[0], plain.tensors()[0])
    torch.testing.assert_close(fixed_batches(aug, 50, 100)[0][0], fixed_batches(plain, 50, 100)[0][0])
    assert len(seen) == n_calls
    x2, _ = aug[5]  # still augmented once the cache exists
    torch.testing.assert_close(x2, x)


def test_make_loader_is_reproducible():
    ds = load_dataset("synthetic:40:8")
    order = [torch.cat([y for _, y in make_loader(ds, 16, shuffle=True, seed=s)]) for s in (0, 0, 1)]
    assert torch.equal(order[0], order[1]) and not torch.equal(order[0], order[2])
    xb, yb = next(iter(make_loader(ds, 16, shuffle=False)))
    assert xb.shape == (16, 3, 8, 8) and torch.equal(yb, ds.targets[:16])
    assert [len(y) for _, y in make_loader(ds, 16, shuffle=False)] == [16, 16, 8]
