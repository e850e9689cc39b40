"""When the run a user asked for began: the command's start, or the call of an analysis function (no torch here).

The set-up of a run (imports, the model, the data, the centre's pass, the checks, the tuning) is part of its time
and of its estimate: :func:`start` marks the beginning (the command line's entry point, each Python analysis
function), :func:`take` hands it to the run's front half once (later runs in the same process start where they
are taken, so that one command running several analyses does not count one's work as the next one's set-up).
"""

from __future__ import annotations

import time

_pending: float | None = None


def start() -> None:
    """Mark now as the beginning of the run about to be prepared (``time.perf_counter()``)."""
    global _pending
    _pending = time.perf_counter()


def take() -> float:
    """The beginning :func:`start` marked, which it forgets; now when none is pending.

    Returns:
        A ``time.perf_counter()`` value.
    """
    global _pending
    began, _pending = _pending, None
    return time.perf_counter() if began is None else began
