"""The statistics of the findings: resampling, percentile bootstrap intervals, two-sample differences."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


def resample_counts(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """How often each of ``n`` units is drawn in each of ``resamples`` bootstrap resamples (with replacement).

    Args:
        n: the number of units (positive).
        resamples: the number of resamples.
        rng: the generator drawing them.

    Returns:
        An int array ``(resamples, n)``; every row sums to ``n``.
    """
    idx = rng.integers(0, n, size=(resamples, n))
    flat = (idx + n * np.arange(resamples)[:, None]).ravel()
    return np.bincount(flat, minlength=resamples * n).reshape(resamples, n)


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of bootstrap ``values`` (non-finite values left out; NaN when none is finite)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return math.nan, math.nan
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(v, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap(
    n: int, statistic: Callable[[np.ndarray], np.ndarray], *, resamples: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """A statistic of ``n`` units and its 95% percentile bootstrap interval.

    Args:
        n: the number of units.
        statistic: maps unit weights ``(r, n)`` (how often each unit is drawn) to ``r`` values; all ones is the
            statistic of the units themselves.
        resamples: the number of bootstrap resamples.
        rng: the generator drawing them.

    Returns:
        ``(value, low, high)``; the interval is NaN for fewer than two units.
    """
    if n < 1:
        return math.nan, math.nan, math.nan
    value = float(np.asarray(statistic(np.ones((1, n))))[0])
    if n < 2:
        return value, math.nan, math.nan
    low, high = percentile_interval(statistic(resample_counts(n, resamples, rng)))
    return value, low, high


def bootstrap_mean(x: Sequence[float], *, resamples: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """The mean of ``x`` and its 95% percentile bootstrap interval (resampling the entries of ``x``).

    Args:
        x: the sample.
        resamples: the number of bootstrap resamples.
        seed: seeds ``numpy.random.default_rng``.

    Returns:
        ``(mean, low, high)``.
    """
    v = np.asarray(x, dtype=float)
    return bootstrap(len(v), lambda w: (w @ v) / w.sum(1), resamples=resamples, rng=np.random.default_rng(seed))


def two_sample(
    a: np.ndarray,
    b: np.ndarray,
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    resamples: int,
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    """``combine(statistic(a), statistic(b))`` and its interval, resampling the units of ``a`` and ``b`` independently.

    Args:
        a: the first model's units (rows).
        b: the second model's units (rows).
        statistic: maps ``(units, weights (r, n))`` to ``r`` values (e.g. :func:`negative_share`).
        combine: e.g. ``np.subtract`` or ``np.divide``.
        resamples: the number of bootstrap resamples.
        rng: the generator drawing them.

    Returns:
        ``(value, low, high)``; the interval is NaN when either side has fewer than two units.
    """
    na, nb = len(a), len(b)
    value = float(combine(statistic(a, np.ones((1, na))), statistic(b, np.ones((1, nb))))[0])
    if na < 2 or nb < 2:
        return value, math.nan, math.nan
    wa, wb = resample_counts(na, resamples, rng), resample_counts(nb, resamples, rng)
    low, high = percentile_interval(combine(statistic(a, wa), statistic(b, wb)))
    return value, low, high
