"""The statistics of the findings: an interval over training seeds, and the verdict it gives a claim.

Training randomness enters every finding once per seed: with ``S`` trained models (seeds) the seed-level sample
size is ``S``, however many units (mini-batches, images) each model gives. So the interval of a finding is taken
over seeds, not units: :func:`seed_jackknife` is the delete-one-seed (cluster) jackknife with a t quantile of
``S - 1`` degrees of freedom (Tukey 1958; the cluster jackknife "CV3" with ``t(G - 1)`` critical values of
MacKinnon, Nielsen & Webb 2023, "Cluster-robust inference: a guide to empirical practice", J. Econometrics 232).
For a statistic that is the mean of the seeds' values it is exactly the t interval over seed means; for a pooled
statistic (a ratio of means, a share) it is its linearisation. A percentile bootstrap over three seeds draws from
at most ten distinct seed multisets and its interval undercovers; this one has its stated coverage when the
seeds' values are normal, and close to it otherwise (``benchmarks/coverage.py`` measures both by simulation).

Nothing here draws random numbers: every number is a deterministic function of the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from landscape.errors import LandscapeError

#: the interval's coverage
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A statistic, its interval over seeds and what the interval rests on.

    Attributes:
        value: the statistic on all the units of all the seeds.
        low: the interval's lower end (NaN when there is none: fewer than two seeds, or a value not finite).
        high: the interval's upper end.
        se: the jackknife standard error over seeds, on the scale of the interval (of ``log(value)`` when
            ``log``).
        df: the degrees of freedom of the t quantile, ``S - 1``.
        log: whether the interval was taken for ``log(value)`` (a ratio) and mapped back.
    """

    value: float
    low: float
    high: float
    se: float
    df: int
    log: bool = False


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom (4.303 for 2 at 95%).

    Args:
        df: degrees of freedom (positive).
        level: the two-sided coverage.

    Returns:
        ``t`` with ``P(|T| <= t) = level``.
    """
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, df))


def seed_weights(keep: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Seed weights ``(r, S)`` repeated for every unit of each seed: unit weights ``(r, sum(sizes))``.

    Args:
        keep: one row per evaluation, one column per seed (1: the seed is in, 0: left out).
        sizes: units per seed, in the columns' order (the units are stacked seed by seed).

    Returns:
        The weight of every unit in every row.
    """
    return np.repeat(np.asarray(keep, dtype=float), np.asarray(sizes, dtype=int), axis=1)


def leave_one_out(n_seeds: int) -> np.ndarray:
    """The seed weights of the statistic on all the seeds, then without each seed in turn: ``(1 + S, S)``."""
    return np.vstack([np.ones((1, n_seeds)), 1.0 - np.eye(n_seeds)])


def seed_jackknife(
    n_seeds: int,
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    log: bool = False,
    level: float = LEVEL,
) -> Interval:
    """A statistic over ``S`` seeds and its delete-one-seed jackknife t interval.

    With ``theta`` the statistic on all seeds and ``theta_(i)`` the statistic without seed ``i``:
    ``se^2 = (S - 1) / S * sum_i (theta_(i) - mean_j theta_(j))^2`` and the interval is
    ``theta -/+ t_{S-1} se``. With ``log`` the same is done for ``log(theta)`` and the ends are exponentiated (a
    ratio: the interval stays positive and a ratio and its inverse get mirror intervals).

    Args:
        n_seeds: ``S``, the number of independently trained models (clusters).
        statistic: maps seed weights ``(r, S)`` (1: the seed's units count, 0: left out) to ``r`` values; a
            statistic of units weights them by :func:`seed_weights`.
        log: take the interval for ``log(statistic)``.
        level: the interval's coverage.

    Returns:
        The :class:`Interval`; its ends are NaN with fewer than two seeds or when a leave-one-out value is not
        finite (e.g. a seed without which a side has no unit).

    Raises:
        LandscapeError: no seed.
    """
    if n_seeds < 1:
        raise LandscapeError("a statistic over seeds needs at least one seed")
    rows = leave_one_out(n_seeds) if n_seeds > 1 else np.ones((1, 1))
    with np.errstate(invalid="ignore", divide="ignore"):  # a statistic left without units is NaN
        values = np.asarray(statistic(rows), dtype=float)
    value = float(values[0])
    df = n_seeds - 1
    scaled = np.log(np.where(values > 0, values, np.nan)) if log else values
    if n_seeds < 2 or not np.isfinite(scaled).all():
        return Interval(value, math.nan, math.nan, math.nan, df, log)
    rest = scaled[1:]
    se = math.sqrt((n_seeds - 1) / n_seeds * float(((rest - rest.mean()) ** 2).sum()))
    half = t_quantile(df, level) * se
    low, high = scaled[0] - half, scaled[0] + half
    if log:
        low, high = math.exp(low), math.exp(high)
    return Interval(value, float(low), float(high), se, df, log)


def seed_mean(values: Sequence[float], *, log: bool = False, level: float = LEVEL) -> Interval:
    """The mean of one value per seed and its t interval over the seeds (:func:`seed_jackknife` of the mean).

    Args:
        values: one value per seed.
        log: the interval for the log of the mean.
        level: the interval's coverage.

    Returns:
        The :class:`Interval` (equal to ``mean -/+ t_{S-1} sd / sqrt(S)`` without ``log``).
    """
    v = np.asarray(values, dtype=float)
    return seed_jackknife(len(v), lambda keep: (keep @ v) / keep.sum(1), log=log, level=level)


def verdict(low: float, high: float, *, side: str, threshold: float = 0.0) -> str:
    """The verdict of a claim that a number lies on ``side`` of ``threshold``, from its interval.

    Args:
        low: the interval's lower end.
        high: the interval's upper end.
        side: ``"greater"`` (the claim: number > threshold) or ``"less"`` (number < threshold).
        threshold: the claimed threshold.

    Returns:
        ``reproduced`` when the whole interval lies on the claimed side, ``contradicted`` when it lies wholly on
        the other side, ``inconclusive`` when it contains the threshold or is not finite.

    Raises:
        LandscapeError: an unknown ``side``.
    """
    if side not in ("greater", "less"):
        raise LandscapeError(f"side must be 'greater' or 'less', got {side!r}")
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    above, below = low > threshold, high < threshold
    if side == "greater":
        return "reproduced" if above else "contradicted" if below else "inconclusive"
    return "reproduced" if below else "contradicted" if above else "inconclusive"
