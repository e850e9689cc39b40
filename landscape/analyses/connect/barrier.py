"""The barrier of a path (Frankle et al. 2020; Entezari et al. 2022), in numpy alone (no torch).

For values ``v`` at the coordinates ``a`` of a path from ``a = 0`` to ``a = 1``,

    B = max_a [ v(a) - ((1 - a) v(0) + a v(1)) ]

over the evaluated coordinates (which include both ends, so ``B >= 0``): how far the path rises above the chord
between its end values. It is taken of the loss and of the error ``1 - accuracy``, with the coordinate where each
peaks (the first, on a tie). The run, the summary and the figures all compute it here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from landscape.errors import LandscapeError


@dataclass(frozen=True)
class Barrier:
    """The barriers of a path: ``max_a [v(a) - ((1 - a) v(0) + a v(1))]`` for the loss and the error.

    Attributes:
        loss: the loss barrier (NaN when a loss on the path is NaN).
        loss_at: the coordinate where it peaks.
        error: the error (``1 - accuracy``) barrier.
        error_at: the coordinate where it peaks.
    """

    loss: float
    loss_at: float
    error: float
    error_at: float

    def as_dict(self) -> dict[str, float]:
        """The four numbers by name (``loss``, ``loss_at``, ``error``, ``error_at``), as a file records them.

        Returns:
            The dict.
        """
        return {"loss": self.loss, "loss_at": self.loss_at, "error": self.error, "error_at": self.error_at}


def barrier(coords: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """``max_a [v(a) - ((1 - a) v(0) + a v(1))]`` over the given points, and the ``a`` where it peaks.

    Args:
        coords: the coordinates ``a`` of the points; 0 and 1 must be among them.
        values: ``v(a)`` at each coordinate.

    Returns:
        ``(barrier, a)``: the largest excess over the line between the end values, and the first coordinate
        where it is reached; ``(nan, a)`` with the first NaN's coordinate when a value is NaN.

    Raises:
        LandscapeError: ``coords`` and ``values`` differ in length, or 0 or 1 is not among the coordinates.
    """
    a = np.asarray(coords, dtype=np.float64).reshape(-1)
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if a.shape != v.shape:
        raise LandscapeError(f"{a.size} coordinates but {v.size} values; give one value per point")
    if not (np.any(a == 0.0) and np.any(a == 1.0)):
        raise LandscapeError("the coordinates must include both ends of the path (0 and 1)")
    v0, v1 = v[np.flatnonzero(a == 0.0)[0]], v[np.flatnonzero(a == 1.0)[0]]
    excess = v - ((1.0 - a) * v0 + a * v1)
    i = int(np.argmax(excess))  # the first maximum; the first NaN when there is one
    return float(excess[i]), float(a[i])


def path_barrier(
    coords: Sequence[float] | np.ndarray, loss: Sequence[float] | np.ndarray, accuracy: Sequence[float] | np.ndarray
) -> Barrier:
    """The loss and error barriers of a path from its coordinates, losses and accuracies.

    Args:
        coords: the coordinates of the points; 0 and 1 must be among them.
        loss: the loss at each point.
        accuracy: the accuracy at each point (the error is ``1 - accuracy``).

    Returns:
        The :class:`Barrier`.

    Raises:
        LandscapeError: the arrays differ in length, or 0 or 1 is not among the coordinates.
    """
    loss_b, loss_at = barrier(coords, loss)
    error_b, error_at = barrier(coords, 1.0 - np.asarray(accuracy, dtype=np.float64))
    return Barrier(loss_b, loss_at, error_b, error_at)
