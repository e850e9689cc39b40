"""What a run tells its user while it works: what will run, before the work, then progress at a steady pace.

- :func:`announce` prints the lines that say what will run (rank 0, unless quiet); :func:`estimate` words the
  time it will take from one measured unit.
- :class:`Progress` counts the units of one phase of a run (points, products, batches, blocks, steps): a tqdm
  bar when stderr is a terminal; otherwise (a log file, a batch job, a notebook) a line with the rate and the
  time left every :func:`interval` seconds (used as a context manager: also while one unit takes longer, the
  line then says how long ago the last unit ended) and one at the end; nothing when quiet. Only rank 0 shows it.
  Each change is also handed to ``record`` (a result file writes it into its writer lock sidecar, which
  ``landscape info`` reads while the run goes on).
- :func:`describe` words such a record: done of total, rate and time left; :func:`live_report` words what
  the live writer of a result file records in its lock sidecar (what ``landscape info`` prints on it).

``progress`` is the tri-state every analysis takes: ``False`` shows nothing (``--quiet``); ``None`` or
``True`` shows the bar on a terminal and the lines elsewhere.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from landscape.errors import one_line
from landscape.runtime import distributed

#: the environment variable that sets the seconds between two progress lines (when stderr is not a terminal)
INTERVAL_ENV = "LANDSCAPE_PROGRESS_SECONDS"
#: the seconds between two progress lines by default
DEFAULT_INTERVAL = 30.0
#: the longest interval: a larger value is clamped to it (a wait beyond the clock's range kills the thread)
MAX_INTERVAL = 86400.0
#: the shortest wait of the steady lines' clock (a tiny interval must not spin)
_MIN_TICK = 0.05
#: the words of the units whose plural is not the word and an ``s``
_PLURALS = {"batch": "batches"}

#: what a :class:`Progress` hands to its ``record``: its phase, unit, counts and times (seconds since the epoch)
Record = dict[str, Any]


def interval() -> float:
    """The seconds between two progress lines: ``$LANDSCAPE_PROGRESS_SECONDS`` when it is a positive number.

    Returns:
        The interval, at most :data:`MAX_INTERVAL` (a day; a larger value is clamped to it), and
        :data:`DEFAULT_INTERVAL` when the variable is unset or not a positive finite number.
    """
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return DEFAULT_INTERVAL
    return min(value, MAX_INTERVAL) if math.isfinite(value) and value > 0 else DEFAULT_INTERVAL


def display(progress: bool | None) -> str:
    """How this process shows progress: ``"off"``, ``"bar"`` (tqdm) or ``"lines"``.

    Args:
        progress: ``False`` for nothing (``--quiet``); ``None`` or ``True`` for the bar on a terminal, lines
            elsewhere.

    Returns:
        ``"off"`` with ``progress=False`` and on every rank but 0; else ``"bar"`` when stderr is a terminal,
        ``"lines"`` when it is not.
    """
    if progress is False or not distributed.is_main():
        return "off"
    return "bar" if _isatty() else "lines"


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def plural(unit: str, count: float) -> str:
    """``unit`` for ``count`` of them: ``point`` / ``points``, ``batch`` / ``batches``.

    Args:
        unit: the singular.
        count: how many.

    Returns:
        The word.
    """
    return unit if count == 1 else _PLURALS.get(unit, f"{unit}s")


def duration(seconds: float) -> str:
    """``seconds`` in words: ``0.41 s``, ``12 s``, ``3 min 2 s``, ``2 h 5 min``.

    Args:
        seconds: a duration (non-negative).

    Returns:
        The text.
    """
    if not math.isfinite(seconds):
        return "unknown"
    if seconds < 10:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def estimate(
    units: float, seconds_per_unit: float | None, unit: str, *, at_least: bool = False, setup: float = 0.0
) -> str:
    """The time of the whole run in words: the set-up already spent and ``units`` units at ``seconds_per_unit``.

    ``T = setup + units * seconds_per_unit``, said to be an estimate.

    Args:
        units: how many units the run will make.
        seconds_per_unit: the measured seconds of one, or None when none was measured.
        unit: the unit's name (singular).
        at_least: ``units`` is the fewest the run makes (a solver's restarts add more): say so.
        setup: the seconds the run has spent before its work (loading, checks, timing): counted in ``T``.

    Returns:
        E.g. ``estimated 3 min 2 s in all (41 s of set-up done, then 0.41 s per point)``; without set-up
        ``estimated 2 min 21 s (0.41 s per point)``; ``""`` without a measurement.
    """
    if seconds_per_unit is None or not math.isfinite(seconds_per_unit):
        return ""
    bound = "at least " if at_least else ""
    per = f"{duration(seconds_per_unit)} per {unit}"
    if setup <= 0:
        return f"estimated {bound}{duration(units * seconds_per_unit)} ({per})"
    total = setup + units * seconds_per_unit
    return f"estimated {bound}{duration(total)} in all ({duration(setup)} of set-up done, then {per})"


def announce(lines: Sequence[str], progress: bool | None) -> None:
    """Print what will run, before the work (rank 0 only; nothing with ``progress=False``).

    Args:
        lines: the lines, printed to stderr as they are.
        progress: the run's tri-state (see :func:`display`).
    """
    if display(progress) == "off":
        return
    for line in lines:
        print(line, file=sys.stderr, flush=True)


def describe(record: Mapping[str, Any], now: float | None = None) -> str:
    """A progress record in words: ``surface: 120/441 points (27%), 3.9 points/s, about 1 min 22 s left``.

    The rate is that of this phase, ``(done - initial) / (updated - started)``; the time left is
    ``(total - done) / rate``.

    Args:
        record: what a :class:`Progress` recorded (``desc``, ``unit``, ``done``, ``total``, ``initial``,
            ``started``, ``updated``; missing entries are left out of the text).
        now: the time to measure the record's age against (seconds since the epoch); None: no age.

    Returns:
        The text.
    """
    desc, unit = str(record.get("desc") or "work"), str(record.get("unit") or "unit")
    done, total = int(record.get("done") or 0), record.get("total")
    initial = int(record.get("initial") or 0)
    started, updated = record.get("started"), record.get("updated")
    count = f"{done}/{int(total)} {plural(unit, total)}" if total is not None else f"{done} {plural(unit, done)}"
    if total:
        count += f" ({100 * done / int(total):.0f}%)"
    parts = [f"{desc}: {count}"]
    if isinstance(started, (int, float)) and isinstance(updated, (int, float)) and updated > started:
        rate = (done - initial) / (updated - started)
        if rate > 0:
            parts.append(f"{rate:.3g} {plural(unit, 2)}/s")
            if total is not None and done < int(total):
                parts.append(f"about {duration((int(total) - done) / rate)} left")
    if now is not None and isinstance(updated, (int, float)):
        parts.append(f"last update {duration(max(now - updated, 0.0))} ago")
    return ", ".join(parts)


def live_report(path: str, record: Mapping[str, Any], now: float | None = None) -> str:
    """What the live writer of result file ``path`` records in its sidecar, in words (``landscape info``).

    Args:
        path: the result file, as the user named it.
        record: the sidecar's record (:func:`landscape.store.locks.live_record`): ``pid``, ``identity`` (the
            run's attributes as JSON: kind, options, provenance) and, once the work has started, the
            :class:`Progress` entries.
        now: the time to measure the last update's age against (seconds since the epoch); None: no age.

    Returns:
        Lines: the writer's pid, the kind, model and data of the run, and its progress.
    """
    lines = [f"{path}: being written by a running analysis (pid {int(record.get('pid') or -1)})"]
    try:
        identity = json.loads(str(record.get("identity") or "{}"))
    except (ValueError, RecursionError):
        identity = {}
    identity = identity if isinstance(identity, dict) else {}
    for key in ("kind", "model", "dataset", "split", "n_samples"):
        if identity.get(key) not in (None, ""):
            lines.append(f"  {key}: {identity[key]}")
    if "done" in record:
        lines.append(f"  progress: {describe(record, now)}")
    else:
        lines.append("  progress: not started yet (the run is preparing its work)")
    return "\n".join(one_line(line) for line in lines)  # values from the sidecar cannot start a line


class Progress:
    """The progress of one phase of a run, shown the one way (:func:`display`) and recorded.

    Use as a context manager (or call :meth:`close`): ``with Progress("surface", 441, unit="point") as bar:
    bar.update(n)``.

    Args:
        desc: what the phase is, e.g. ``"surface"`` or ``"noise bands"``.
        total: the units of the phase (None when unknown, e.g. the products of a Lanczos solve).
        unit: the unit's name, singular (``point``, ``product``, ``batch``, ...).
        done: units already done before this run (a resumed file).
        progress: the run's tri-state (see :func:`display`).
        record: called with the :data:`Record` at the start, at every change and at the end (e.g.
            :meth:`landscape.store.result.ResultFile.record_progress`); None for no record.
        last_line: print the line that ends the phase (units, time, rate) when stderr is not a terminal;
            False when the caller prints its own (``landscape train``'s line per epoch).
    """

    def __init__(
        self,
        desc: str,
        total: int | None,
        *,
        unit: str = "unit",
        done: int = 0,
        progress: bool | None = None,
        record: Callable[[Record], None] | None = None,
        last_line: bool = True,
    ) -> None:
        self.desc, self.total, self.unit = desc, None if total is None else int(total), unit
        self.done = self.initial = int(done)
        self.mode = display(progress)
        self.started = self.updated = time.time()
        self._clock = time.monotonic()
        self._last_line = self._clock
        self._interval = interval()
        self._record = record
        self._last_line_wanted = last_line
        self._note = ""
        self._bar: Any = None
        self._lines_lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.closed = False
        if self.mode == "bar":
            from tqdm import tqdm

            # the command line's stderr escapes carriage returns but on the stream it keeps for the bar
            stream = getattr(sys.stderr, "carriage_returns", sys.stderr)
            self._bar = tqdm(
                total=self.total, initial=self.done, desc=desc, unit=unit, dynamic_ncols=True, leave=False, file=stream
            )
        self._save()

    def state(self) -> Record:
        """What :meth:`describe` and the writer lock sidecar read: phase, unit, counts and times.

        Returns:
            ``desc``, ``unit``, ``done``, ``total``, ``initial``, ``started`` and ``updated`` (when the last
            unit ended; seconds since the epoch).
        """
        return {
            "desc": self.desc,
            "unit": self.unit,
            "done": self.done,
            "total": self.total,
            "initial": self.initial,
            "started": self.started,
            "updated": self.updated,
        }

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done.

        Args:
            n: the units just finished.
        """
        self.to(self.done + int(n))

    def to(self, done: int) -> None:
        """Set the units done to ``done`` (a solver's running count of products, for example).

        Args:
            done: the units done so far (this run's and those before it).
        """
        done = int(done)
        if done == self.done:
            return
        if self._bar is not None:
            self._bar.update(done - self.done)
        self.done, self.updated = done, time.time()
        self._save()
        if self.mode == "lines" and (self.total is None or done < self.total):  # the last line ends the phase
            self._line_if_due()

    def _line_if_due(self, now: float | None = None) -> None:
        """Print the progress line when :func:`interval` seconds have passed since the last one."""
        with self._lines_lock:
            clock = time.monotonic()
            if clock - self._last_line >= self._interval and not self.closed:
                self._last_line = clock
                self._line(describe(self.state(), now))

    def _tick(self) -> None:
        """The steady lines of a phase used as a context manager, also while one unit takes long."""
        while not self._stop.wait(max(self._interval, _MIN_TICK)):
            self._line_if_due(now=time.time())

    def note(self, text: str) -> None:
        """A short note shown after the counts (e.g. the running training loss).

        Args:
            text: the note, replacing the last one.
        """
        self._note = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        """End the phase: close the bar, or print the last line (units done, time taken, rate)."""
        if self.closed:
            return
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lines_lock:
            self.closed = True
        self._save()
        if self._bar is not None:
            self._bar.close()
        elif self.mode == "lines" and self._last_line_wanted:
            seconds = time.monotonic() - self._clock
            made = self.done - self.initial
            count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
            rate = f", {made / seconds:.3g} {plural(self.unit, 2)}/s" if seconds > 0 and made > 0 else ""
            self._line(f"{self.desc}: {count} {plural(self.unit, self.done)} done in {duration(seconds)}{rate}")

    def _line(self, text: str) -> None:
        print(text + (f", {self._note}" if self._note else ""), file=sys.stderr, flush=True)

    def _save(self) -> None:
        if self._record is not None:
            self._record(self.state())

    def __enter__(self) -> Progress:
        """Start the phase's steady lines (stderr not a terminal), until the ``with`` block ends.

        One line every :func:`interval` seconds, also while no unit ends.
        """
        if self.mode == "lines" and self._ticker is None and not self.closed:
            self._ticker = threading.Thread(target=self._tick, name="landscape-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
