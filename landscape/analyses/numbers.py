"""How the analyses' key numbers are written in the report's summary table."""

from __future__ import annotations

import math

import numpy as np

#: the cell of a number that is missing or not finite
MISSING = "–"


def number(value: float | None, spec: str = ".4g") -> str:
    """``value`` formatted by ``spec``, or :data:`MISSING` when it is None or not finite.

    Args:
        value: the number.
        spec: a format spec, e.g. ``".4g"``.

    Returns:
        The text.
    """
    return MISSING if value is None or not math.isfinite(value) else format(value, spec)


def finite(values: object) -> np.ndarray:
    """The finite entries of ``values``, flattened, as floats.

    Args:
        values: an array-like of numbers.

    Returns:
        A 1-D float array.
    """
    arr = np.asarray(values, dtype=float).ravel()
    return arr[np.isfinite(arr)]
