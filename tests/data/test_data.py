import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import one_line_error

from landscape.data.batches import fixed_batches, make_loader
from landscape.data.dataset import subset_indices
from landscape.data.digits import DIGITS_MEAN, DIGITS_STD
from landscape.data.info import DatasetInfo
from landscape.data.loading import dataset_info, load_dataset
from landscape.data.preprocess import Preprocess
from landscape.data.specs import parse_spec
from landscape.options.common import SPLIT_CHOICES


def raw(ds, x):
    """Undo the normalisation of an image of ``ds``."""
    mean = torch.tensor(ds.info.mean).view(-1, 1, 1)
    std = torch.tensor(ds.info.std).view(-1, 1, 1)
    return x * std + mean


# ------------------------------------------------------------------------------------ CIFAR fixtures

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _batch(rng, labels, label_key):
    data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
    return {
        b"batch_label": b"fixture",
        label_key: list(labels),
        b"data": data,
        b"filenames": [f"img{i}.png".encode() for i in range(len(labels))],
    }


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
    _dump(
        {b"label_names": [n.encode() for n in CIFAR10_NAMES], b"num_cases_per_batch": 10000, b"num_vis": 3072},
        d / "batches.meta",
    )
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
    _dump(
        {
            b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
        },
        d / "meta",
    )
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
    torch.testing.assert_close(
        raw(te, te.tensors()[0][3]),
        torch.from_numpy(test[b"data"][3].reshape(3, 32, 32) / 255).float(),
        atol=1e-6,
        rtol=0,
    )


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
    assert info == DatasetInfo("imagefolder", 2, 3, 16, (0.5,) * 3, (0.5,) * 3, "bilinear", 1.0)
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


def test_digits_are_scikit_learns_images_labels_and_split_bit_for_bit():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from landscape.data.digits import _digits_arrays

    d = load_digits()
    train, test = train_test_split(np.arange(len(d.target)), test_size=0.2, random_state=0, stratify=d.target)
    images, labels, split = _digits_arrays()
    assert torch.equal(images, torch.tensor(d.images, dtype=torch.float32).div(16).unsqueeze(1))
    assert torch.equal(labels, torch.from_numpy(np.asarray(d.target, dtype=np.int64)))
    assert split["train"].tolist() == train.tolist() and split["test"].tolist() == test.tolist()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "cannot read the digits at"),  # no file
        (b"\x1f\x8b\x08\x00truncated", "cannot read the digits at"),  # a cut gzip stream
        (b"1,2,3\n4,5,6\n", "is not scikit-learn's digits"),  # the wrong width
        (b",".join([b"17"] * 64 + [b"3"]) + b"\n", "is not scikit-learn's digits"),  # a pixel over 16
        (b",".join([b"1"] * 64 + [b"3.5"]) + b"\n", "is not scikit-learn's digits"),  # a label that is no class
        (b",".join([b"1"] * 64 + [b"3"]) + b"\n", "does not divide the 1 digits"),  # not the kept split's rows
    ],
)
def test_a_broken_digits_file_is_one_line_naming_it(tmp_path, monkeypatch, content, words):
    import landscape.data.digits as digits

    path = tmp_path / ("digits.csv.gz" if content and content.startswith(b"\x1f") else "digits.csv")
    if content is not None:
        path.write_bytes(content)
    monkeypatch.setattr(digits, "digits_csv", lambda: path)
    digits._digits_arrays.cache_clear()
    try:
        msg = one_line_error(load_dataset, "digits", "train")
    finally:
        digits._digits_arrays.cache_clear()
    assert words in msg and (str(path) in msg) and "reinstall" in msg


def test_reading_digits_imports_neither_scikit_learn_nor_torchvision():
    code = (
        "import sys; from landscape.data.loading import load_dataset; load_dataset('digits', 'train').tensors(); "
        "import landscape.analyses.hessian.run; print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'sklearn', 'torchvision'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


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


def test_fixed_batches_first_samples_are_the_first_images_in_file_order():
    ds = load_dataset("digits", "test")
    x_all, y_all = ds.tensors()
    for seed in (0, 3):  # the seed does not matter
        first = fixed_batches(ds, 64, 200, seed=seed, first_samples=True)
        assert [len(y) for _, y in first] == [64, 64, 64, 8]
        assert torch.equal(torch.cat([x for x, _ in first]), x_all[:200])
        assert torch.equal(torch.cat([y for _, y in first]), y_all[:200])
    whole = fixed_batches(ds, 100, first_samples=True)
    assert torch.equal(torch.cat([y for _, y in whole]), y_all)
    # without it the seeded choice is what it was
    seeded = fixed_batches(ds, 64, 200, seed=1, first_samples=False)
    perm = torch.randperm(360, generator=torch.Generator().manual_seed(1))[:200]
    assert torch.equal(torch.cat([y for _, y in seeded]), ds.targets[perm])
    assert not torch.equal(torch.cat([y for _, y in seeded]), y_all[:200])
    one_line_error(fixed_batches, ds, 64, 361, first_samples=True)


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


# ------------------------------------------------------------------------------------ preprocessing


def _noise_image(path, size, seed):
    """A random RGB image of PIL size (width, height) saved at ``path`` (format from the suffix)."""
    from PIL import Image

    arr = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def _write_noise_folder(root):
    """Two classes of non-square (and one square, one tiny) noise images, PNG and JPEG."""
    sizes = {
        "a/0.png": (40, 50),
        "a/1.jpg": (50, 37),
        "b/deep/2.png": (16, 16),
        "b/3.PNG": (7, 5),
        "b/4.jpeg": (33, 64),
    }
    for seed, (name, size) in enumerate(sizes.items()):
        _noise_image(root / name, size, seed)
    return [root / name for name in sizes]


def _old_read_image(path, size):
    """The reader the package had before Preprocess existed, verbatim: the default must not change."""
    from PIL import Image

    with Image.open(path) as im:
        img = im.convert("RGB")
    w, h = img.size
    if (w, h) != (size, size):
        scale = size / min(w, h)
        nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
        img = img.resize((nw, nh), Image.BILINEAR)
        left, top = (nw - size) // 2, (nh - size) // 2
        img = img.crop((left, top, left + size, top + size))
    return torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).float().div_(255)


def _pil_reference(path, size, short, resample, mean, std):
    """timm-style eval transform written out: shorter side to ``short``, centre crop ``size``, normalise."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    w, h = img.size
    nw, nh = (short, round(h * short / w)) if w <= h else (round(w * short / h), short)
    img = img.resize((nw, nh), resample)
    left, top = (nw - size) // 2, (nh - size) // 2
    img = img.crop((left, top, left + size, top + size))
    x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255).permute(2, 0, 1)
    return (x - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize(
    "size, crop_pct, interpolation, short",
    [
        (8, 0.875, "bicubic", 9),  # floor(8 / 0.875) = 9
        (8, 0.55, "bilinear", 14),  # floor(14.55), not round
        (9, 9 / 14, "nearest", 14),  # crop / resize as torchvision's transforms give it: 9 / (9 / 14) < 14 in floats
    ],
)
def test_imagefolder_preprocess_matches_the_pil_reference(tmp_path, size, crop_pct, interpolation, short):
    from PIL import Image

    paths = _write_noise_folder(tmp_path)
    pre = Preprocess(
        image_size=size, crop_pct=crop_pct, interpolation=interpolation, mean=IMAGENET_MEAN, std=IMAGENET_STD
    )
    ds = load_dataset(f"imagefolder:{tmp_path}:32", "train", preprocess=pre)  # preprocess beats :32
    assert ds.info == DatasetInfo("imagefolder", 2, 3, size, IMAGENET_MEAN, IMAGENET_STD, interpolation, crop_pct)
    assert ds.info.preprocess == pre and dataset_info(f"imagefolder:{tmp_path}:32", pre) == ds.info
    assert ds.targets.tolist() == [0, 0, 1, 1, 1]
    resample = {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR, "nearest": Image.NEAREST}[interpolation]
    expected = torch.stack(
        [
            _pil_reference(p, size, short, resample, IMAGENET_MEAN, IMAGENET_STD)
            for p in [paths[0], paths[1], paths[3], paths[4], paths[2]]
        ]
    )  # ImageFolder order
    x, _ = ds.tensors()
    assert x.shape == (5, 3, size, size)
    torch.testing.assert_close(x, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(ds[1][0], expected[1], atol=1e-6, rtol=0)  # the lazy per-item path too


def test_imagefolder_default_is_unchanged(tmp_path):
    from PIL import Image

    paths = _write_noise_folder(tmp_path)
    order = [paths[0], paths[1], paths[3], paths[4], paths[2]]
    for spec, size in ((f"imagefolder:{tmp_path}:16", 16), (f"imagefolder:{tmp_path}", 32)):
        for pre in (None, Preprocess()):
            ds = load_dataset(spec, preprocess=pre)
            assert ds.info == DatasetInfo("imagefolder", 2, 3, size, (0.5,) * 3, (0.5,) * 3, "bilinear", 1.0)
            old = torch.stack([(_old_read_image(p, size) - 0.5) / 0.5 for p in order])
            assert torch.equal(ds.tensors()[0], old)
            reference = torch.stack(
                [_pil_reference(p, size, size, Image.BILINEAR, (0.5,) * 3, (0.5,) * 3) for p in order]
            )
            torch.testing.assert_close(ds.tensors()[0], reference, atol=1e-6, rtol=0)


def test_imagefolder_non_square_output(tmp_path):
    from PIL import Image

    _noise_image(tmp_path / "a" / "x.png", (40, 52), 0)
    ds = load_dataset(f"imagefolder:{tmp_path}", preprocess=Preprocess(image_size=(6, 10)))
    assert ds.info.image_size == (6, 10) and ds.info.hw == (6, 10)
    # covering 6x10 (H x W): the 40-wide image scales by 10/40 to 10 x 13, the centre 6 rows start at row 3
    img = Image.open(tmp_path / "a" / "x.png").convert("RGB").resize((10, 13), Image.BILINEAR).crop((0, 3, 10, 9))
    expected = (torch.from_numpy(np.asarray(img, dtype=np.float32) / 255).permute(2, 0, 1) - 0.5) / 0.5
    torch.testing.assert_close(ds[0][0], expected, atol=1e-6, rtol=0)
    assert dataset_info(f"imagefolder:{tmp_path}", Preprocess(image_size=[7, 7])).image_size == 7


def test_in_memory_resize_equals_interpolate(tmp_path):
    plain = load_dataset("digits", "test")
    base = raw(plain, plain.tensors()[0])
    small = load_dataset("digits", "test", preprocess=Preprocess(image_size=16))
    assert small.info == DatasetInfo("digits", 10, 1, 16, DIGITS_MEAN, DIGITS_STD, "bilinear", None)
    ref = F.interpolate(base, size=(16, 16), mode="bilinear", align_corners=False, antialias=True).clamp(0, 1)
    torch.testing.assert_close(raw(small, small.tensors()[0]), ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(small[3][0], small.tensors()[0][3])
    assert fixed_batches(small, 16, 32)[0][0].shape == (16, 1, 16, 16)

    _, batches, _ = write_cifar10(tmp_path)
    pre = Preprocess(image_size=40, interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD)
    big = load_dataset(f"cifar10:{tmp_path}", preprocess=pre)
    assert big.info == DatasetInfo("cifar10", 10, 3, 40, IMAGENET_MEAN, IMAGENET_STD, "bicubic", None)
    data = torch.from_numpy(np.concatenate([b[b"data"] for b in batches]).reshape(-1, 3, 32, 32)).float() / 255
    up = F.interpolate(data, size=(40, 40), mode="bicubic", align_corners=False, antialias=False).clamp(0, 1)
    expected = (up - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(IMAGENET_STD).view(3, 1, 1)
    torch.testing.assert_close(big.tensors()[0], expected, atol=1e-5, rtol=0)

    syn = load_dataset("synthetic:20:8")
    odd = load_dataset("synthetic:20:8", preprocess=Preprocess(image_size=(5, 12), interpolation="nearest"))
    assert odd.info.image_size == (5, 12) and odd.info.interpolation == "nearest" and odd.info.crop_pct is None
    ref = F.interpolate(raw(syn, syn.tensors()[0]), size=(5, 12), mode="nearest")
    torch.testing.assert_close(raw(odd, odd.tensors()[0]), ref, atol=1e-6, rtol=0)


def test_in_memory_defaults_and_ignored_fields():
    plain = load_dataset("digits", "test")
    for pre in (Preprocess(), Preprocess(image_size=32, interpolation="bicubic", crop_pct=0.5)):
        ds = load_dataset("digits", "test", preprocess=pre)
        assert ds.info == plain.info and torch.equal(ds.tensors()[0], plain.tensors()[0])
    assert plain.info.interpolation is None and plain.info.crop_pct is None
    syn = load_dataset("synthetic:20:8", preprocess=Preprocess(crop_pct=0.5))  # crop_pct: imagefolder only
    assert syn.info == dataset_info("synthetic:20:8")
    assert torch.equal(syn.tensors()[0], load_dataset("synthetic:20:8").tensors()[0])
    seen = []
    aug = load_dataset(
        "digits:16",
        "test",
        preprocess=Preprocess(image_size=(8, 12)),
        transform=lambda x: seen.append(tuple(x.shape)) or x,
    )
    assert aug[0][0].shape == (1, 8, 12) and seen == [(1, 8, 12)]  # the transform sees the output size


def test_mean_std_override_is_the_manual_normalisation(tmp_path):
    _, batches, _ = write_cifar10(tmp_path)
    pre = Preprocess(mean=IMAGENET_MEAN, std=IMAGENET_STD)
    ds = load_dataset(f"cifar10:{tmp_path}", preprocess=pre)
    assert ds.info == DatasetInfo("cifar10", 10, 3, 32, IMAGENET_MEAN, IMAGENET_STD)
    data = torch.from_numpy(batches[0][b"data"].reshape(-1, 3, 32, 32)).float() / 255
    expected = (data - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(IMAGENET_STD).view(3, 1, 1)
    torch.testing.assert_close(ds.tensors()[0][: len(data)], expected, atol=1e-6, rtol=0)

    half = load_dataset("digits", "test", preprocess=Preprocess(std=(0.25,)))  # std alone; mean stays
    assert half.info.mean == DIGITS_MEAN and half.info.std == (0.25,)
    plain = load_dataset("digits", "test")
    torch.testing.assert_close(half.tensors()[0], plain.tensors()[0] * DIGITS_STD[0] / 0.25, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"std": (0.5, float("nan"), 0.5)}, "std"),
        ({"std": (0.5, 0.0, 0.5)}, "std"),
        ({"std": (-0.2,)}, "std"),
        ({"mean": (float("inf"),)}, "mean"),
        ({"mean": "0.5"}, "mean"),
        ({"mean": ()}, "mean"),
        ({"mean": (0.5, True)}, "mean"),
        ({"crop_pct": 0}, "crop_pct"),
        ({"crop_pct": 1.5}, "crop_pct"),
        ({"crop_pct": float("nan")}, "crop_pct"),
        ({"crop_pct": "0.9"}, "crop_pct"),
        ({"interpolation": "lanczos"}, "interpolation"),
        ({"interpolation": 2}, "interpolation"),
        ({"image_size": 0}, "image_size"),
        ({"image_size": 8.0}, "image_size"),
        ({"image_size": True}, "image_size"),
        ({"image_size": (8,)}, "image_size"),
        ({"image_size": (8, -1)}, "image_size"),
        ({"mean": (0.5, 0.5), "std": (0.5,)}, "mean has 2 values but std has 1"),
    ],
)
def test_preprocess_rejects_bad_values(kwargs, match):
    one_line_error(Preprocess, match=match, **kwargs)


def test_preprocess_channel_count_must_match():
    msg = one_line_error(load_dataset, "digits", preprocess=Preprocess(mean=(0.5,) * 3))
    assert "mean has 3 value(s)" in msg and "digits images have 1 channel(s)" in msg
    msg = one_line_error(dataset_info, "synthetic", Preprocess(std=(0.5,)))
    assert "std has 1 value(s)" in msg and "synthetic images have 3 channel(s)" in msg
    one_line_error(load_dataset, "digits", preprocess={"image_size": 8}, match="Preprocess.from_dict")


def test_preprocess_merge_and_dict_round_trip():
    import json

    user = Preprocess(image_size=224, mean=[0.1, 0.2, 0.3])
    model = Preprocess(image_size=256, crop_pct=0.9, interpolation="BICUBIC", mean=(0.5,) * 3, std=(0.25,) * 3)
    merged = user.merged(model)
    assert merged == Preprocess(224, 0.9, "bicubic", (0.1, 0.2, 0.3), (0.25, 0.25, 0.25))
    assert model.merged(Preprocess()) == model and Preprocess().merged(model) == model
    d = merged.as_dict()
    assert d == {
        "image_size": 224,
        "crop_pct": 0.9,
        "interpolation": "bicubic",
        "mean": [0.1, 0.2, 0.3],
        "std": [0.25, 0.25, 0.25],
    }
    assert Preprocess.from_dict(json.loads(json.dumps(d))) == merged
    rect = Preprocess(image_size=(6, 10))
    assert Preprocess.from_dict(json.loads(json.dumps(rect.as_dict()))) == rect
    assert Preprocess.from_dict({}) == Preprocess() and Preprocess().as_dict()["std"] is None
    one_line_error(Preprocess.from_dict, {"size": 3, "mean": [0.5]}, match="unknown field")
    one_line_error(Preprocess.from_dict, [("image_size", 3)], match="mapping")
    one_line_error(Preprocess.from_dict, {"std": [0.0]}, match="std")
    one_line_error(user.merged, {"image_size": 3}, match="merge")


# ----------------------------------------------------------------------------- ImageNet-style folders


def _imagenet_val(root):
    names = [
        "n01440764/ILSVRC2012_val_00000293.JPEG",
        "n01440764/extra/ILSVRC2012_val_00002138.JPEG",
        "n01443537/ILSVRC2012_val_00000236.JPEG",
        "n01443537/ILSVRC2012_val_00000262.jpeg",
        "n01484850/a/b/ILSVRC2012_val_00000001.JPEG",
    ]
    for seed, name in enumerate(names):
        _noise_image(root / name, (24 + seed, 20), seed)
    (root / "n01484850" / "LOC_synset_mapping.txt").write_text("not an image")
    return names


def test_imagenet_val_layout_reads_through_imagefolder(tmp_path):
    from torchvision.datasets import ImageFolder

    _imagenet_val(tmp_path / "val")
    ds = load_dataset(f"imagefolder:{tmp_path / 'val'}:16", "val")
    assert ds.split == "test" and ds.classes == ["n01440764", "n01443537", "n01484850"]
    assert ds.targets.tolist() == [0, 0, 1, 1, 2]
    assert list(zip(ds._paths, ds.targets.tolist())) == ImageFolder(str(tmp_path / "val")).samples
    assert ds.tensors()[0].shape == (5, 3, 16, 16)


def test_train_and_val_folders(tmp_path):
    for cls in ("a", "b", "c"):
        _noise_image(tmp_path / "train" / cls / "0.png", (9, 9), 0)
    _noise_image(tmp_path / "val" / "c" / "0.png", (9, 9), 1)  # val may lack classes: indices stay
    (tmp_path / "val" / ".cache").mkdir()
    for split in ("val", "VAL", "test"):
        ds = load_dataset(f"imagefolder:{tmp_path}", split)
        assert ds.split == "test" and ds.classes == ["a", "b", "c"] and ds.targets.tolist() == [2]
    assert load_dataset(f"imagefolder:{tmp_path}", "train").targets.tolist() == [0, 1, 2]
    assert SPLIT_CHOICES == ("train", "test", "val")
    assert torch.equal(load_dataset("digits", "val").targets, load_dataset("digits", "test").targets)
    _noise_image(tmp_path / "val" / "d" / "0.png", (9, 9), 2)
    msg = one_line_error(load_dataset, f"imagefolder:{tmp_path}", "val")
    assert "classes missing from" in msg and ": d;" in msg


def test_imagefolder_unreadable_image_is_reported_on_access(tmp_path):
    _noise_image(tmp_path / "a" / "good.png", (9, 9), 0)
    (tmp_path / "a" / "broken.jpg").write_bytes(b"not a jpeg")
    ds = load_dataset(f"imagefolder:{tmp_path}")  # lazy: listing reads no image
    assert len(ds) == 2
    msg = one_line_error(ds.tensors, match="cannot read image")
    assert "broken.jpg" in msg and "UnidentifiedImageError" in msg
    assert ds[1][0].shape == (3, 32, 32)


def test_imagefolder_converts_to_rgb(tmp_path):
    from PIL import Image

    grey = np.arange(48, dtype=np.uint8).reshape(6, 8) * 5
    (tmp_path / "a").mkdir()
    Image.fromarray(grey, mode="L").save(tmp_path / "a" / "grey.png")
    Image.fromarray(np.dstack([grey] * 3 + [np.full_like(grey, 7)]), mode="RGBA").save(tmp_path / "a" / "rgba.png")
    ds = load_dataset(f"imagefolder:{tmp_path}", preprocess=Preprocess(image_size=(6, 8), mean=(0,) * 3, std=(1,) * 3))
    expected = torch.from_numpy(grey).float().div(255).expand(3, 6, 8)
    for i in range(2):
        torch.testing.assert_close(ds[i][0], expected, atol=1e-6, rtol=0)
