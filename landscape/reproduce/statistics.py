"""The statistics of the findings: resampling, percentile bootstrap intervals, two-sample differences.

Two kinds of resampling. :func:`bootstrap` and :func:`two_sample` resample units (mini-batches, test images,
batches of images) of one model. :func:`hierarchical_bootstrap` and :func:`hierarchical_two_sample` resample
trainings first and units second (:func:`hierarchical_counts`): the units come in groups, one group per seed's
trained model, so the interval covers the randomness of training as well as that of the units. Every draw comes
from the ``numpy.random.Generator`` passed in; numpy's and torch's global random states are never used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from landscape.errors import LandscapeError


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


# ------------------------------------------------------------------------------------------ seeds, then units
def _check_sizes(sizes: Sequence[int]) -> np.ndarray:
    """The group sizes as an int array; one-line LandscapeError unless each is a positive whole number."""
    n = np.asarray(sizes)
    if n.ndim != 1 or not len(n) or n.dtype.kind not in "iu" or (n < 1).any():
        raise LandscapeError(f"group sizes must be one or more positive integers, got {list(np.ravel(n))}")
    return n.astype(np.int64)


def hierarchical_counts(sizes: Sequence[int], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """How often each unit is drawn in each two-stage (seeds, then units) bootstrap resample.

    The units come in ``G = len(sizes)`` groups (one per seed's model), group ``g`` holding ``sizes[g]`` units;
    the columns of the result are the units of group 0, then of group 1, and so on. Each resample:

    1. draws ``G`` groups with replacement: group ``g`` is drawn ``m_g`` times, ``(m_0, ..., m_{G-1}) ~
       Multinomial(G, 1/G each)``;
    2. for each of the ``m_g`` draws of group ``g``, draws ``sizes[g]`` of its units with replacement, each draw
       independent of the others. The counts of one group's draws add up, so group ``g``'s unit counts are
       ``Multinomial(m_g * sizes[g], 1/sizes[g] each)`` (a group drawn twice contributes two resamples of its
       units; a group not drawn contributes nothing).

    A statistic of the units weighted by one row is the statistic of the pooled resample.

    Args:
        sizes: units per group (each positive).
        resamples: the number of resamples.
        rng: the generator drawing them.

    Returns:
        An int array ``(resamples, sum(sizes))``; in every row, group ``g``'s counts sum to a multiple of
        ``sizes[g]``, and these multiples sum to ``G``.

    Raises:
        LandscapeError: a size that is not a positive integer, or no group.
    """
    n = _check_sizes(sizes)
    drawn = resample_counts(len(n), resamples, rng)  # (r, G): how often each group is drawn
    blocks = [rng.multinomial(drawn[:, g] * n[g], np.full(n[g], 1.0 / n[g])) for g in range(len(n))]
    return np.concatenate(blocks, axis=1)


def hierarchical_bootstrap(
    sizes: Sequence[int],
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    resamples: int,
    rng: np.random.Generator,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """A statistic of grouped units and its percentile interval over seeds, then units (:func:`hierarchical_counts`).

    Args:
        sizes: units per group, i.e. per seed's model (the units' order: group 0's, then group 1's, ...).
        statistic: maps unit weights ``(r, sum(sizes))`` to ``r`` values; all ones is the statistic on all the
            units of all the groups (the value reported).
        resamples: the number of resamples.
        rng: the generator drawing them.
        level: the interval's coverage.

    Returns:
        ``(value, low, high)``: ``value = statistic(ones)``; ``(low, high)`` the ``(1 - level) / 2`` and
        ``(1 + level) / 2`` percentiles of the statistic over the resamples. The interval is NaN with fewer than
        two groups: one training says nothing of how the statistic varies across trainings.

    Raises:
        LandscapeError: a size that is not a positive integer, or no group.
    """
    n = _check_sizes(sizes)
    value = float(np.asarray(statistic(np.ones((1, int(n.sum())))))[0])
    if len(n) < 2:
        return value, math.nan, math.nan
    low, high = percentile_interval(statistic(hierarchical_counts(n, resamples, rng)), level)
    return value, low, high


def hierarchical_two_sample(
    a: np.ndarray,
    a_sizes: Sequence[int],
    b: np.ndarray,
    b_sizes: Sequence[int],
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    resamples: int,
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    """``combine(statistic(a), statistic(b))`` and its interval, resampling seeds then units of each side apart.

    Args:
        a: the first model's units of all its seeds (rows, grouped by seed as ``a_sizes`` says).
        a_sizes: units per seed of ``a``.
        b: the second model's units.
        b_sizes: units per seed of ``b``.
        statistic: maps ``(units, weights (r, n))`` to ``r`` values.
        combine: e.g. ``np.subtract`` or ``np.divide``.
        resamples: the number of resamples.
        rng: the generator drawing them.

    Returns:
        ``(value, low, high)``: the value on all units of all seeds; the 95% percentile interval of
        ``combine`` over pairs of independent two-stage resamples (:func:`hierarchical_counts`) of ``a`` and
        ``b``; NaN when either side has fewer than two seeds.

    Raises:
        LandscapeError: sizes that are not positive integers or do not add up to the rows of their side.
    """
    na, nb = _check_sizes(a_sizes), _check_sizes(b_sizes)
    if na.sum() != len(a) or nb.sum() != len(b):
        raise LandscapeError(f"group sizes add up to {na.sum()} and {nb.sum()}, not the {len(a)} and {len(b)} rows")
    value = float(combine(statistic(a, np.ones((1, len(a)))), statistic(b, np.ones((1, len(b)))))[0])
    if len(na) < 2 or len(nb) < 2:
        return value, math.nan, math.nan
    wa, wb = hierarchical_counts(na, resamples, rng), hierarchical_counts(nb, resamples, rng)
    low, high = percentile_interval(combine(statistic(a, wa), statistic(b, wb)))
    return value, low, high
