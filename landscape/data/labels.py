"""The one check that a model can output every label of the data."""

from __future__ import annotations

from collections.abc import Iterable

from torch import Tensor

from landscape.errors import LandscapeError


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


def check_label_range(targets: Iterable[Tensor], n_outputs: int) -> None:
    """Refuse labels a model of ``n_outputs`` classes cannot output: every integer label must lie in ``0..n-1``.

    Args:
        targets: label tensors (floating soft targets are not checked).
        n_outputs: the number of the model's outputs.

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
            "analyse it on data with at most that many classes (--data), or build the model with more outputs "
            "(--num-classes)"
        )
