"""Datasets: a spec string names the data, `load_dataset` turns it into an `ImageDataset`.

Specs (``name[:ARG]``; the name is case-insensitive):

- ``digits`` (the default; needs no files): scikit-learn's bundled ``load_digits()`` images, 8x8 with values
  0..16, scaled to [0, 1] and resized bilinearly (``torch.nn.functional.interpolate``, ``antialias=False``,
  ``align_corners=False``) to 32x32; 1 channel, 10 classes, 1797 images. The split is fixed:
  ``sklearn.model_selection.train_test_split(test_size=0.2, random_state=0, stratify=labels)`` gives 1437
  train and 360 test images, in the order that call returns them. ``digits:SIZE`` resizes to SIZE x SIZE
  instead (e.g. ``digits:16``). Normalisation uses the mean/std of the train split at that SIZE:
  `DIGITS_MEAN` / `DIGITS_STD` (measured once, checked by a test) for the default 32, computed on the fly
  for any other SIZE.
- ``cifar10:PATH`` / ``cifar100:PATH``: the python-pickle archives as extracted from
  https://www.cs.toronto.edu/~kriz/cifar.html; PATH contains ``cifar-10-batches-py/`` (files
  ``data_batch_1..5``, ``test_batch``, ``batches.meta``) or ``cifar-100-python/`` (``train``, ``test``,
  ``meta``), or is that folder itself (the layout torchvision's ``CIFAR10/100(root)`` reads). Each batch is
  a dict with ``data`` (uint8, N x 3072: the R plane, then G, then B, each 32x32 row-major) and ``labels``
  (CIFAR-100: ``fine_labels``). The files are read here, without torchvision's md5 check, through an
  unpickler that only accepts numpy arrays, lists, dicts and strings. Normalisation constants are those of
  Paper A's official configs (CIFAR-10 mean (0.4914, 0.4822, 0.4465), std (0.2023, 0.1994, 0.2010);
  CIFAR-100 mean (0.5071, 0.4867, 0.4408), std (0.2675, 0.2565, 0.2761)), so its checkpoints see the inputs
  they were trained on. The meta file only supplies class names and may be absent.
- ``imagefolder:PATH[:SIZE]``: torchvision's ImageFolder layout, ``PATH/<class>/**/<image>`` (e.g. ImageNet's
  ``val/`` with one sub-folder per class), listed by ``torchvision.datasets.ImageFolder``. If both
  ``PATH/train`` and ``PATH/test`` (or ``PATH/val``) are folders they serve the two splits, otherwise PATH
  serves every split. Classes are the sorted sub-folder names of the train folder (hidden folders, whose
  name starts with ".", are skipped) and keep their indices in the test folder, which may lack some of them
  but not add others. Files with the usual image suffixes (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp,
  any case) anywhere below a class folder count, in ImageFolder's order (class, then sorted folder, then
  sorted file name). Images are read when accessed (`ImageDataset.tensors` reads them all once) with
  ImageFolder's PIL loader, converted to RGB and cut to H x W (SIZE x SIZE, SIZE default 32) as timm
  evaluates: keeping its aspect ratio, the image is resized with a PIL filter (default bilinear) by the
  smallest factor that makes it cover floor(H / crop_pct) x floor(W / crop_pct) (square output: the shorter
  side becomes floor(SIZE / crop_pct), the longer one is rounded to the nearest pixel; an image already that
  size is not resampled), then its centre H x W is cropped (left/top offset: half the excess, rounded down).
  The floor forgives a rounding error below 1e-6, so crop_pct = 224 / 232 resizes to 232. crop_pct defaults
  to 1.0 (the shorter side resized to SIZE); mean = std = 0.5 per channel. A trailing ``:DIGITS`` is always
  taken as SIZE.
- ``synthetic[:N[:SIZE]]``: N (default 200) deterministic random RGB images per split, SIZE x SIZE (default
  32), 10 balanced classes; each image is a fixed per-class template plus per-image noise, so the labels are
  learnable. Meant for tests; mean = std = 0.5.

Splits are ``train`` and ``test`` (``val`` is accepted as another name for ``test``; `SPLIT_CHOICES` lists
all three).

Preprocessing: ``load_dataset(..., preprocess=Preprocess(...))`` and ``dataset_info(spec, preprocess)`` give
a pretrained model the inputs it expects (timm's ``pretrained_cfg``, torchvision's weight transforms). Each
field left None keeps the dataset's default:

- ``image_size`` (an int for a square, or (H, W)) takes precedence over the spec's SIZE, which takes
  precedence over the default 32. imagefolder resizes and crops to it as above. digits, cifar10/100 and
  synthetic are held in memory at a native size (digits: its SIZE, after the 8x8 -> SIZE resize above;
  CIFAR: 32; synthetic: its SIZE); an image_size that differs resizes the whole image, without cropping,
  when it is accessed: ``torch.nn.functional.interpolate`` with the interpolation as mode,
  ``align_corners=False`` and ``antialias=True`` when a side shrinks (mode "nearest" takes neither option),
  clamped to [0, 1].
- ``crop_pct`` in (0, 1], default 1.0: imagefolder only; the in-memory datasets ignore it.
- ``interpolation``: "bilinear" (default), "bicubic" or "nearest": PIL's filter for imagefolder, the
  interpolate mode for the others.
- ``mean`` / ``std``: one finite value per channel (std > 0), replacing the dataset's normalisation; a length
  other than the dataset's channel count is an error. Without them each dataset keeps its constants above
  (digits: those of its spec's SIZE, also after a preprocess resize).

`DatasetInfo` describes what is produced: the image size (``image_size``, ``hw``), ``mean``, ``std``, and the
``interpolation`` and ``crop_pct`` used.

``subset`` keeps a stratified, seeded part of a split: a float f in (0, 1] keeps ``max(1, round(f * N))``
images, an int keeps that many. The count is shared out over classes in proportion to their sizes by the
largest-remainder method (each class gets ``floor(n * N_c / N)``; the images left over go one each to the
classes with the largest remainders, ties to the lower class index); within a class the images are drawn by a
permutation seeded with ``seed``. The kept images stay in their original relative order.

Images are float32 CHW. A training ``transform`` sees the image in [0, 1], at the output size, before
normalisation with ``info.mean`` / ``info.std``; `ImageDataset.tensors` and `fixed_batches` never augment.
"""

from __future__ import annotations

from landscape.data.batches import fixed_batches, make_loader, sample_count, sample_indices
from landscape.data.cifar import CIFAR_URL
from landscape.data.dataset import ImageDataset, subset_indices
from landscape.data.digits import DIGITS_MEAN, DIGITS_SIZE, DIGITS_STD
from landscape.data.imagefolder import IMG_EXTENSIONS
from landscape.data.info import DatasetInfo
from landscape.data.loading import dataset_info, load_dataset
from landscape.data.preprocess import INTERPOLATIONS, Preprocess
from landscape.data.specs import DATASETS, parse_spec
from landscape.options.common import SPLIT_CHOICES, SPLITS

__all__ = [
    "CIFAR_URL",
    "DATASETS",
    "DIGITS_MEAN",
    "DIGITS_SIZE",
    "DIGITS_STD",
    "IMG_EXTENSIONS",
    "INTERPOLATIONS",
    "SPLITS",
    "SPLIT_CHOICES",
    "DatasetInfo",
    "ImageDataset",
    "Preprocess",
    "dataset_info",
    "fixed_batches",
    "load_dataset",
    "make_loader",
    "parse_spec",
    "sample_count",
    "sample_indices",
    "subset_indices",
]
