"""The one-line summaries and report cells of sharpness files and of training's sharpness-tracking files."""

from __future__ import annotations

import numpy as np

from landscape.analyses.numbers import MISSING, finite, number
from landscape.options.sharpness import MIN_INTERVAL_BATCHES
from landscape.store.read import Result


def interval_note(confidence: float, batches: int, given: bool | None = None) -> str:
    """What a sharpness file's interval is: ``95% bootstrap interval over 8 mini-batches``, or why there is none.

    Args:
        confidence: the interval's level.
        batches: the mini-batches the values come from.
        given: whether there is an interval (None: when ``batches >= MIN_INTERVAL_BATCHES``).

    Returns:
        The interval's name, or ``no interval: 2 mini-batches, fewer than the 5 an interval needs``.
    """
    if not (batches >= MIN_INTERVAL_BATCHES if given is None else given):
        return f"no interval: {batches} mini-batches, fewer than the {MIN_INTERVAL_BATCHES} an interval needs"
    return f"{100 * confidence:g}% bootstrap interval over {batches} mini-batches"


def measure_name(attrs: dict) -> str:
    """How a sharpness file's measure is named: ``worst-case adaptive l2``, ``average-case plain``, ...

    Args:
        attrs: the file's root attributes.

    Returns:
        The measure, its scale and (worst case) its norm.
    """
    measure = attrs.get("measure", "?")
    scale = "adaptive" if attrs.get("adaptive", True) else "plain"
    norm = f" l{attrs.get('p', '?')}" if measure == "worst" else ""
    return f"{measure}-case {scale}{norm}"


def _done(result: Result) -> np.ndarray:
    values = np.asarray(result["values"], dtype=float)
    if "done" in result:
        return np.asarray(result["done"], dtype=bool)
    return np.isfinite(values).all(axis=1)


def result_interval_note(result: Result) -> str:
    """:func:`interval_note` of a sharpness file: its ``interval`` attribute, else made from its arrays.

    Args:
        result: a sharpness file (one without the attribute, of an older version, has an interval when its
            ``low`` and ``high`` are finite).

    Returns:
        The interval's name, or why there is none.
    """
    if "interval" in result.attrs:
        return str(result.attrs["interval"])
    given = "low" in result and "high" in result and bool(np.isfinite([result["low"], result["high"]]).all())
    return interval_note(float(result.attrs.get("confidence", 0.95)), int(np.shape(result["values"])[0]), given)


def _ascent(result: Result, done: np.ndarray) -> str:
    """``; a lower bound of the maximum, the best point of 8 ascents (found at iteration <= 37 of 80)``.

    For a worst-case file that records its ascents: every value is the loss of a point found, never more than the
    maximum and possibly less (docs/analyses.md measures by how much).
    """
    if "best_iteration" not in result or not done.any():
        return ""
    latest = int(np.max(np.asarray(result["best_iteration"])[done]))
    restarts = int(result.attrs.get("restarts", 1))
    total = int(result.attrs.get("steps", 0)) * restarts
    found = f"found at iteration <= {latest} of {total}"
    return f"; a lower bound of the maximum, the best point of {restarts} ascents ({found})"


def _interval(result: Result, r: int) -> str:
    """``" [low, high]"`` of radius ``r`` when the file holds the bootstrap interval, else nothing."""
    if "low" not in result or "high" not in result:
        return ""
    low, high = float(result["low"][r]), float(result["high"][r])
    return f" [{number(low)}, {number(high)}]" if np.isfinite(low) and np.isfinite(high) else ""


def sharpness_summary(result: Result) -> str:
    """``worst-case adaptive l2 sharpness of 8 batches of 128: rho 0.05: 0.0123 [0.0101, 0.015]; ...``.

    The mean over the finished batches at each radius, with the bootstrap interval once every batch is done (or
    why there is none), and for the worst case that it is a lower bound, and the latest iteration at which an
    ascent found its best value.

    Args:
        result: a sharpness file, finished or not.

    Returns:
        The measure, the batches, and the mean (and interval) at each radius.
    """
    if "values" not in result or "rho" not in result:
        return "sharpness, no batch yet"
    values = np.asarray(result["values"], dtype=float)
    done = _done(result)
    head = (
        f"{measure_name(result.attrs)} sharpness of {values.shape[0]} batches of {result.attrs.get('batch_size', '?')}"
    )
    if not done.any():
        return f"{head}, no batch done yet"
    means = values[done].mean(axis=0)
    parts = [
        f"rho {float(rho):g}: {number(float(m))}{_interval(result, r)}"
        for r, (rho, m) in enumerate(zip(result["rho"], means))
    ]
    left = "" if done.all() else f" ({int(done.sum())} of {done.size} batches done)"
    if done.all() and "mean" in result and not any(_interval(result, r) for r in range(len(parts))):
        left = f" ({result_interval_note(result)})"
    return f"{head}: " + "; ".join(parts) + left + _ascent(result, done)


def sharpness_numbers(result: Result) -> dict[str, str]:
    """The report's cell of a sharpness file: the mean at its largest radius, with its interval and measure.

    Args:
        result: a sharpness file.

    Returns:
        ``{"sharpness": "0.0123 [0.0101, 0.015] (worst, rho 0.1)"}``.
    """
    if "values" not in result or "rho" not in result:
        return {"sharpness": MISSING}
    values = np.asarray(result["values"], dtype=float)
    done = _done(result)
    if not done.any():
        return {"sharpness": MISSING}
    r = int(np.argmax(np.asarray(result["rho"], dtype=float)))
    mean = float(values[done, r].mean())
    rho = float(result["rho"][r])
    return {"sharpness": f"{number(mean)}{_interval(result, r)} ({result.attrs.get('measure', '?')}, rho {rho:g})"}


def track_summary(result: Result) -> str:
    """``12 of 12 records every 10 steps: sharpness 3.2..45.1, at most 0.83 of the threshold (SGD)``.

    Args:
        result: a sharpness-tracking file (``landscape train --track-sharpness``), finished or not.

    Returns:
        The records written, the range of the sharpness and its largest ratio to the threshold.
    """
    if "sharpness" not in result:
        return "sharpness tracking, no record yet"
    done = np.asarray(result["done"], dtype=bool) if "done" in result else np.isfinite(result["sharpness"])
    every = result.attrs.get("every", "?")
    head = f"{int(done.sum())} of {done.size} records every {every} steps"
    if not done.any():
        return f"{head}, none written yet"
    sharp = np.asarray(result["sharpness"], dtype=float)[done]
    ratio = sharp / np.asarray(result["threshold"], dtype=float)[done]
    kind = "Adam's preconditioned sharpness" if result.attrs.get("preconditioned") else "sharpness"
    return (
        f"{head}: {kind} {number(float(sharp.min()))}..{number(float(sharp.max()))}, at most "
        f"{number(float(np.nanmax(ratio)), '.3g')} of the stability threshold"
    )


def track_numbers(result: Result) -> dict[str, str]:
    """The report's cell of a sharpness-tracking file: the largest ratio of sharpness to its threshold.

    Args:
        result: a sharpness-tracking file.

    Returns:
        ``{"sharpness / threshold (max)": "0.83"}``.
    """
    if "sharpness" not in result or "threshold" not in result:
        return {"sharpness / threshold (max)": MISSING}
    done = np.asarray(result["done"], dtype=bool) if "done" in result else np.isfinite(result["sharpness"])
    ratio = finite(np.asarray(result["sharpness"], dtype=float)[done] / np.asarray(result["threshold"])[done])
    return {"sharpness / threshold (max)": number(float(ratio.max()), ".3g") if ratio.size else MISSING}
