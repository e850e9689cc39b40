"""Paper A's augmented training data, drawn once and then held fixed (``--augment paper-a``).

Paper A measured its loss surfaces and Hessian spectra "on augmented training datasets". This module draws
those data with the training recipe of the released configuration (``configs/cifar100_vit.yaml`` with timm's
Mixup defaults), reusing the transforms of ``landscape train --recipe paper-a`` (:func:`randaugment`,
:func:`batch_mixer`):

- per image, on the [0, 1] image at the dataset's output size, before normalisation: a random crop of that size
  after zero padding by :data:`PADDING` pixels, a horizontal flip with probability :data:`HFLIP`, RandAugment
  (2 operations of magnitude 9), in this order;
- per batch: MixUp (alpha :data:`MIXUP_ALPHA`) or CutMix (alpha :data:`CUTMIX_ALPHA`), one of the two with equal
  probability (timm's ``switch_prob`` 0.5, which the configuration leaves at its default), applied to every
  batch (``prob`` 1.0): one mixing weight per batch, each image paired with its neighbour in the batch;
- label smoothing :data:`LABEL_SMOOTHING` of the mixed one-hot targets: ``t = (1 - eps) * t + eps / C`` over the
  model's ``C`` outputs (smoothing and mixing commute, so this is timm's ``mixup_target``).

The targets are label distributions, floating ``(b, C)``; the loss on them is
:func:`landscape.core.criteria.soft_cross_entropy`.

**Drawn once.** The released loop redraws the augmentation at every grid point, which adds sampling noise to a
surface. Here the samples are the first ``n`` of the permutation seeded by ``seed`` (as in
:func:`landscape.data.batches.fixed_batches`), ``copies`` augmented copies of each are drawn, copy by copy (copy 0 of
every sample, then copy 1, ...: neighbours in a batch are different images), cut into batches of ``batch_size``,
and every batch is mixed within itself; all of it from torch's CPU generator seeded with ``seed`` inside
:func:`torch.random.fork_rng`, so the caller's random state is untouched and one seed gives the same batches on
every run, rank and device. The batches are then held fixed for every grid point and every Hessian product.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import Tensor

from landscape.data.batches import sample_count, sample_indices
from landscape.data.dataset import ImageDataset
from landscape.data.labels import check_label_range
from landscape.options import checks
from landscape.runtime.devices import require_memory

#: zero padding of the random crop, in pixels
PADDING = 4
#: probability of the horizontal flip
HFLIP = 0.5
#: MixUp's Beta(alpha, alpha) parameter
MIXUP_ALPHA = 1.0
#: CutMix's Beta(alpha, alpha) parameter
CUTMIX_ALPHA = 0.8
#: label smoothing of the mixed targets
LABEL_SMOOTHING = 0.1

Batch = tuple[Tensor, Tensor]


def randaugment() -> Callable[[Tensor], Tensor]:
    """The recipe's per-image RandAugment (torchvision's ``v2.RandAugment``: 2 operations of magnitude 9).

    It takes a [0, 1] float CHW image of any channel count (1-channel digits included) and draws from torch's
    global generator.

    Returns:
        The transform.
    """
    from torchvision.transforms import v2  # torchvision's import costs seconds: only when augmenting

    return v2.RandAugment()


def batch_mixer(
    mixup: float, cutmix: float, num_classes: int
) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None:
    """The recipe's batch mixing: MixUp, CutMix, or one of the two chosen with equal probability per batch.

    ``mixer(x, y)`` returns the mixed images and the mixed one-hot targets, floating ``(B, num_classes)``
    (torchvision's ``v2.MixUp`` / ``v2.CutMix``: one mixing weight per batch, each image paired with its
    neighbour, CutMix's weight corrected to the pasted area); it draws from torch's global generator.

    Args:
        mixup: MixUp alpha (0: off).
        cutmix: CutMix alpha (0: off).
        num_classes: the width of the one-hot targets.

    Returns:
        The mixer, or None when both are off.
    """
    if mixup <= 0 and cutmix <= 0:
        return None
    from torchvision.transforms import v2

    choices = []
    if mixup > 0:
        choices.append(v2.MixUp(alpha=mixup, num_classes=num_classes))
    if cutmix > 0:
        choices.append(v2.CutMix(alpha=cutmix, num_classes=num_classes))
    return choices[0] if len(choices) == 1 else v2.RandomChoice(choices)


def image_transform(hw: tuple[int, int]) -> Callable[[Tensor], Tensor]:
    """The per-image training transform: pad-4 random crop, horizontal flip, RandAugment.

    Args:
        hw: the image size ``(H, W)`` the crop keeps.

    Returns:
        A transform of a [0, 1] float CHW image (any number of channels) to another of the same shape.
    """
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomCrop(list(hw), padding=PADDING), v2.RandomHorizontalFlip(p=HFLIP), randaugment()])


def smooth(targets: Tensor, eps: float = LABEL_SMOOTHING) -> Tensor:
    """Label smoothing of label distributions: ``(1 - eps) * t + eps / C``.

    Args:
        targets: floating ``(B, C)`` label distributions.
        eps: the smoothing.

    Returns:
        The smoothed distributions (rows still sum to 1).
    """
    return targets * (1.0 - eps) + eps / targets.shape[-1]


def augmented_batches(
    dataset: ImageDataset,
    batch_size: int,
    n_samples: int | None = None,
    *,
    seed: int = 0,
    copies: int = 1,
    num_classes: int | None = None,
    device: str | torch.device = "cpu",
    first_samples: bool = False,
) -> list[Batch]:
    """Paper A's augmented batches of ``dataset``, drawn once from ``seed`` (rules in the module docstring).

    Args:
        dataset: the split to draw from (its own ``transform`` is ignored).
        batch_size: images per batch; the last batch may be smaller.
        n_samples: number of distinct samples, in ``1..len(dataset)``; None takes all.
        seed: seeds the sample choice and every augmentation draw.
        copies: augmented copies of each sample (the batches hold ``copies * n_samples`` images).
        num_classes: the width ``C`` of the targets (the model's outputs); None: the dataset's classes.
        device: where the batches are put.
        first_samples: the samples are the first ``n_samples`` of the split in file order (the augmentation is
            still drawn from ``seed``).

    Returns:
        A list of ``(x, t)``: float32 ``(b, C_in, H, W)`` normalised, augmented and mixed images, and float32
        ``(b, C)`` label distributions (each row sums to 1).

    Raises:
        LandscapeError: a ``batch_size`` or ``copies`` that is not a whole number >= 1, ``n_samples`` out of
            range, fewer ``num_classes`` than the dataset's labels need, ``copies x n_samples`` images that need
            more than the memory of the CPU or ``device`` (checked before they are drawn), or an unreadable image
            file.
    """
    checks.positive_int(batch_size, "--batch-size")
    checks.positive_int(copies, "--augment-copies")
    n_all = len(dataset)
    n = sample_count(dataset, n_samples)
    classes = dataset.info.num_classes if num_classes is None else int(num_classes)
    check_label_range([dataset.targets], classes)
    idx = sample_indices(n_all, n, seed, first_samples=first_samples)
    h, w = dataset.info.hw
    what = (
        f"{int(copies) * n:,} augmented images ({int(copies)} copies of {n:,}) of {dataset.info.in_chans} x {h} x {w}"
    )
    for where in dict.fromkeys((torch.device("cpu"), torch.device(device))):
        require_memory(
            int(copies) * n, dataset.info.in_chans * h * w, torch.float32, where, what, "lower --augment-copies"
        )
    source = copy.copy(dataset)  # the same images, with the training transform
    source.transform = image_transform(dataset.info.hw)
    mixer = batch_mixer(MIXUP_ALPHA, CUTMIX_ALPHA, classes)
    assert mixer is not None
    batches: list[Batch] = []
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(int(seed))
        items = [source[int(i)] for _ in range(int(copies)) for i in idx]
        x_all = torch.stack([x for x, _ in items])
        y_all = torch.tensor([y for _, y in items], dtype=torch.int64)
        for s in range(0, len(items), int(batch_size)):
            x, t = mixer(x_all[s : s + batch_size], y_all[s : s + batch_size])
            batches.append((x.float().to(device), smooth(t.float()).to(device)))
    return batches
