"""The checks of labels: their form (class indices or label distributions) and that a model can output them."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from landscape.errors import LandscapeError

#: how far the sum of one label distribution may be from 1 (mixing and smoothing in float32 round to ~1e-7)
DISTRIBUTION_SUM_TOL = 1e-3

#: the forms labels may take, for the messages
FORMS = "class indices (integers, shape (b,)) or label distributions (float, shape (b, classes))"


def checked_labels(y: Tensor, where: str) -> Tensor:
    """Labels as every analysis takes them: class indices as int64, or label distributions checked row by row.

    Class indices of any integer dtype (int32, uint8, ...) become int64, the dtype the losses take. A label
    distribution ``t`` (one row per sample) must be a distribution: every entry finite and ``>= 0``, every row
    summing to 1 within :data:`DISTRIBUTION_SUM_TOL`; anything else gives a loss that is not a cross-entropy
    (negative "losses" for entries below 0, NaN for NaN) without a word.

    Args:
        y: the labels of one batch.
        where: what they are, for the message (e.g. ``"batch 3"``).

    Returns:
        ``y`` (int64 class indices, or the distributions unchanged).

    Raises:
        LandscapeError: labels of another form (boolean, complex, floating of another shape than ``(b, classes)``,
            integer of another shape than ``(b,)``), or distributions that are not finite, have a negative entry
            or a row whose sum is not 1 (naming the first such row).
    """
    if y.is_floating_point():
        if y.ndim != 2:
            raise LandscapeError(f"{where} has floating labels of shape {tuple(y.shape)}: give {FORMS}")
        finite = torch.isfinite(y).all(dim=1)
        row_sums = y.double().sum(dim=1)
        problems = (
            (~finite, "holds values that are not finite"),
            ((y < 0).any(dim=1), "has a negative entry"),
            ((row_sums - 1).abs() > DISTRIBUTION_SUM_TOL, "does not sum to 1"),
        )
        for bad, what in problems:
            if bool(bad.any()):
                row = int(bad.nonzero()[0])
                total = f" (it sums to {float(row_sums[row]):.6g})" if what == "does not sum to 1" else ""
                raise LandscapeError(
                    f"{where} has label distributions that are not distributions: row {row} {what}{total}; every "
                    "row must be finite, non-negative and sum to 1 (normalise them, e.g. with softmax, or give "
                    "class indices)"
                )
        return y
    if y.is_complex() or y.dtype == torch.bool or y.ndim != 1:
        raise LandscapeError(
            f"{where} has {y.dtype} labels of shape {tuple(y.shape)}: give {FORMS} (y.argmax(1) of one-hot labels)"
        )
    return y if y.dtype == torch.int64 else y.long()


def label_range(targets: Iterable[Tensor]) -> tuple[int, int] | None:
    """The smallest and largest integer label among ``targets`` (soft, floating targets are skipped).

    Args:
        targets: label tensors, e.g. the ``y`` of each ``(x, y)`` batch.

    Returns:
        ``(low, high)``, or None when there is no integer label.
    """
    labels = [y for y in targets if not (y.is_floating_point() or y.is_complex()) and y.numel()]
    if not labels:
        return None
    return min(int(y.min()) for y in labels), max(int(y.max()) for y in labels)


#: what to do about labels a model cannot output, in the command line's words
LABEL_RANGE_REMEDY = (
    "analyse it on data with at most that many classes (--data), or build the model with more outputs (--num-classes)"
)


def check_label_range(targets: Iterable[Tensor], n_outputs: int, remedy: str = LABEL_RANGE_REMEDY) -> None:
    """Refuse labels a model of ``n_outputs`` classes cannot output: every integer label must lie in ``0..n-1``.

    Args:
        targets: label tensors (floating soft targets are not checked).
        n_outputs: the number of the model's outputs.
        remedy: what to do, in the caller's words.

    Raises:
        LandscapeError: an integer label is negative or ``>= n_outputs``, naming the labels' range and the
            model's outputs.
    """
    span = label_range(targets)
    if span is None:
        return
    low, high = span
    if low < 0 or high >= n_outputs:
        raise LandscapeError(
            f"the data has labels {low}..{high} but the model outputs {n_outputs} classes (0..{n_outputs - 1}): "
            + remedy
        )
