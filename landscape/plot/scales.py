"""How a loss surface is scaled for the eye.

When to use a log scale, contour levels, robust clipping and readable ticks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib import colors
from matplotlib.ticker import MaxNLocator

#: ``auto`` spacing: the surface is skewed when half its points lie within this share of the loss range
SKEWED = 0.05


#: decades that a log colour scale needs: the loss must span more (max / min > 10**LOG_DECADES)
LOG_DECADES = 2.0


#: ``above-min`` levels: the share of levels above the robust maximum, up the wall (the rest ring the basin)
WALL_SHARE = 0.2


#: the robust top of the 3D view: ``min + ROBUST_FACTOR * (75th percentile - min)`` (when below the maximum)
ROBUST_FACTOR = 4.0


#: the fewest and the most labelled ticks of a colour bar
MIN_TICKS = 3


MAX_TICKS = 8


#: multiples of a power of ten that log ticks try in turn: decades, then 1-2-5, then every digit
LOG_SUBS = ((1,), (1, 2, 5), tuple(range(1, 10)))


def _finite(loss: np.ma.MaskedArray) -> np.ndarray:
    values = np.ma.filled(loss.astype(float), np.nan)
    return values[np.isfinite(values)]


def is_skewed(loss: np.ma.MaskedArray) -> bool:
    """Whether evenly spaced levels would leave the basin empty: half the points lie in the lowest 5% of the range.

    Args:
        loss: the surface's loss (masked where not done).

    Returns:
        ``median(loss) - min < SKEWED * (max - min)``.
    """
    v = _finite(loss)
    lo, hi = float(v.min()), float(v.max())
    return hi > lo and float(np.median(v)) - lo < SKEWED * (hi - lo)


def spans_decades(loss: np.ma.MaskedArray) -> bool:
    """Whether the loss is positive and spans more than :data:`LOG_DECADES` decades (a log colour scale fits).

    Args:
        loss: the surface's loss (masked where not done).

    Returns:
        ``min > 0`` and ``max / min > 10**LOG_DECADES``.
    """
    v = _finite(loss)
    return float(v.min()) > 0 and float(v.max()) / float(v.min()) > 10**LOG_DECADES


def robust_max(loss: np.ma.MaskedArray) -> float | None:
    """The top of a 3D view that a corner spike does not dominate, or ``None`` when nothing needs clipping.

    Args:
        loss: the surface's loss (masked where not done).

    Returns:
        ``min + ROBUST_FACTOR * (q75 - min)`` (``q75``: the 75th percentile of the loss) when that is below the
        highest loss, else ``None``.
    """
    v = _finite(loss)
    lo = float(v.min())
    top = lo + ROBUST_FACTOR * (float(np.quantile(v, 0.75)) - lo)
    return top if lo < top < float(v.max()) else None


def _basin_step(loss: np.ma.MaskedArray) -> float:
    """Half the smallest rise from the lowest point to one of its (up to 8) done neighbours; 0 when flat."""
    filled = np.ma.filled(loss.astype(float), np.nan)
    j, i = np.unravel_index(np.nanargmin(filled), filled.shape)
    around = filled[max(j - 1, 0) : j + 2, max(i - 1, 0) : i + 2] - filled[j, i]
    rises = around[np.isfinite(around) & (around > 0)]
    return float(rises.min()) / 2 if rises.size else 0.0


#: what each level spacing draws, in a caption's words
SPACING_WORDS = {
    "linear": "evenly spaced from the lowest to the highest value",
    "log": "spaced geometrically in the values",
    "above-min": "spaced geometrically above the minimum (dense in the basin)",
}


def resolved_spacing(loss: np.ma.MaskedArray, log: bool, spacing: str = "auto") -> str:
    """The level spacing :func:`_levels` draws for ``spacing``: ``linear``, ``log`` or ``above-min``.

    ``auto`` is ``log`` with ``log=True``, else ``above-min`` on a skewed surface (:func:`is_skewed`), else
    ``linear``; ``log`` of a loss that is not positive everywhere is ``linear``.

    Args:
        loss: the surface's loss (masked where not done).
        log: the ``--log`` flag.
        spacing: one of :data:`landscape.plot.LEVEL_SPACINGS`.

    Returns:
        The spacing drawn.
    """
    if spacing == "auto":
        spacing = "log" if log else "above-min" if is_skewed(loss) else "linear"
    if spacing == "log" and not float(loss.min()) > 0:
        return "linear"
    return spacing


def _levels(loss: np.ma.MaskedArray, n: int, log: bool, zmax: float | None, spacing: str = "auto") -> np.ndarray:
    """The contour levels of ``loss``: ``n`` values from its minimum to its maximum (or ``zmax``).

    The spacing is :func:`resolved_spacing`'s. ``linear``: evenly spaced. ``log``: geometric in the loss.
    ``above-min``: ``min + geomspace(step, top - min, n)``, where ``step`` is half the
    smallest rise from the lowest grid point to a neighbour (at least ``1e-6`` of the range), so that the
    levels are dense where the loss changes near the minimum and sparse up the walls; when a spike rises above
    the robust maximum (:func:`robust_max`), 80% of the levels go up to that maximum and the other 20% (at least
    one) up the wall, geometrically again. The colour scale follows the levels (:func:`_norm`).

    Args:
        loss: the surface's loss (masked where not done).
        n: the number of levels.
        log: the ``--log`` flag (geometric levels under ``auto``).
        zmax: the highest level; ``None``: the highest loss.
        spacing: one of :data:`LEVEL_SPACINGS`.

    Returns:
        ``n`` increasing levels.
    """
    lo = float(loss.min())
    hi = float(loss.max()) if zmax is None else min(float(zmax), float(loss.max()))
    if hi <= lo:
        hi = lo + 1e-12 + abs(lo) * 1e-6
    spacing = resolved_spacing(loss, log, spacing)
    if spacing == "log":
        return np.geomspace(lo, hi, n)
    if spacing == "above-min":
        span = hi - lo
        step = min(max(_basin_step(loss), span * 1e-6), span / 2)
        top = robust_max(loss)
        wall = max(1, round(n * WALL_SHARE)) if top is not None and step < top - lo < span and n >= 4 else 0
        if not wall:
            return lo + np.geomspace(step, span, n)
        basin = np.geomspace(step, top - lo, n - wall)
        return lo + np.concatenate([basin, np.geomspace(top - lo, span, wall + 1)[1:]])
    return np.linspace(lo, hi, n)


def _is_even(levels: np.ndarray) -> bool:
    return len(levels) < 3 or bool(np.allclose(np.diff(levels), levels[1] - levels[0]))


def _is_geometric(levels: np.ndarray) -> bool:
    return bool(levels[0] > 0) and bool(np.allclose(levels[1:] / levels[:-1], levels[1] / levels[0]))


def _norm(loss: np.ma.MaskedArray, levels: np.ndarray | None = None) -> Any:
    """The colour scale, by one rule: it follows the levels where there are levels, else the loss's range.

    With levels: geometric levels get a log scale, other uneven levels one colour step per level
    (``BoundaryNorm``), evenly spaced levels a linear scale (None). Without (a heatmap): a log scale when the
    loss spans decades (:func:`spans_decades`), else linear.
    """
    if levels is None:
        if spans_decades(loss):
            return colors.LogNorm(float(loss.min()), float(loss.max()))
        return None
    if _is_even(levels):
        return None
    if _is_geometric(levels):
        return colors.LogNorm(float(levels[0]), float(levels[-1]))
    return colors.BoundaryNorm(levels, 256)


def scale_words(norm: Any) -> str:
    """How a colour scale maps the loss, in words for a caption.

    Args:
        norm: a norm of :func:`_norm`.

    Returns:
        ``log colour scale``, ``one colour per level`` or ``linear colour scale``.
    """
    if isinstance(norm, colors.LogNorm):
        return "log colour scale"
    if isinstance(norm, colors.BoundaryNorm):
        return "one colour per level"
    return "linear colour scale"


def log_ticks(lo: float, hi: float) -> np.ndarray:
    """Readable ticks of a log scale over ``[lo, hi]``: decades, else 1-2-5 or every digit times a power of ten.

    The first of :data:`LOG_SUBS` that gives at least :data:`MIN_TICKS` ticks in the range is taken, thinned to
    at most :data:`MAX_TICKS` (every k-th); a range too narrow for any gets :func:`linear_ticks`.

    Args:
        lo: the lowest value (> 0).
        hi: the highest value (> ``lo``).

    Returns:
        The ticks, increasing, within ``[lo, hi]``.
    """
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for subs in LOG_SUBS:
        ticks = np.array([m * 10.0**e for e in range(first, last + 1) for m in subs])
        ticks = ticks[(ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))]
        if len(ticks) >= MIN_TICKS:
            return ticks[:: math.ceil(len(ticks) / MAX_TICKS)]
    return linear_ticks(lo, hi)


def linear_ticks(lo: float, hi: float) -> np.ndarray:
    """Round ticks over ``[lo, hi]`` (steps of 1, 2, 2.5 or 5 times a power of ten), at least :data:`MIN_TICKS`.

    Args:
        lo: the lowest value.
        hi: the highest value (> ``lo``).

    Returns:
        The ticks, increasing, within ``[lo, hi]``.
    """
    span = hi - lo
    for bins in range(MAX_TICKS - 2, 4 * MAX_TICKS):
        ticks = MaxNLocator(bins, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
        ticks = ticks[(ticks >= lo - 1e-9 * span) & (ticks <= hi + 1e-9 * span)]
        if len(ticks) >= MIN_TICKS:
            return ticks
    return np.linspace(lo, hi, MIN_TICKS)


def short(value: float) -> str:
    """A tick label: ``value`` in at most 3 significant digits (``0.01``, ``2.5``, ``1e+04``)."""
    return f"{float(value):.3g}"


def distinct_labels(values: np.ndarray) -> list[str]:
    """Tick labels of ``values`` with the fewest significant digits (3 at least) that keep distinct values apart.

    Args:
        values: the ticks.

    Returns:
        One label per value; two labels are equal only when their values are.
    """
    for digits in range(3, 17):
        labels = [f"{float(v):.{digits}g}" for v in values]
        if len(set(labels)) == len(set(float(v) for v in values)):
            return labels
    return [repr(float(v)) for v in values]


def colorbar_ticks(cbar: Any, levels: np.ndarray | None, norm: Any) -> None:
    """Label the colour bar with readable values.

    A log colour scale (geometric levels) gets :func:`log_ticks`, evenly spaced levels (or none)
    :func:`linear_ticks`, other uneven levels (``above-min``, drawn one colour step each) at most
    :data:`MAX_TICKS` of the levels themselves; the labels are distinct (:func:`distinct_labels`).
    """
    lo, hi = (levels[0], levels[-1]) if levels is not None else (cbar.norm.vmin, cbar.norm.vmax)
    lo, hi = float(lo), float(hi)
    if hi <= lo:
        return
    if isinstance(norm, colors.LogNorm):
        ticks = log_ticks(lo, hi)
    elif levels is None or _is_even(levels):
        ticks = linear_ticks(lo, hi)
    else:
        ticks = levels[np.unique(np.linspace(0, len(levels) - 1, min(len(levels), MAX_TICKS)).round().astype(int))]
    cbar.minorticks_off()
    cbar.set_ticks(ticks, labels=distinct_labels(ticks))
