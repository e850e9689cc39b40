"""A result file as JSON for scripts (``landscape info --json``): kind, summary, provenance, attributes, arrays.

Every value is made valid JSON by :func:`json_ready`: NaN becomes ``null`` and an infinity the string ``"inf"``
or ``"-inf"`` (Python's ``float()`` reads both back), numpy scalars and arrays become numbers and lists, bytes
become text. An array is described by its dtype, shape and axes, by the count, minimum, maximum and mean of its
finite entries (numbers) or of its set entries (a bool mask), and by its values when it has at most
:data:`JSON_VALUES` entries; a group of many arrays (one per parameter) by one entry, as :func:`describe` does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from landscape.errors import CONTROLS
from landscape.store.attrs import PROVENANCE, decode
from landscape.store.read import Result, large_groups

#: an array of at most this many entries carries its values in the JSON view
JSON_VALUES = 64


def json_ready(value: Any) -> Any:
    """``value`` as plain JSON data: NaN as None, infinities as ``"inf"`` / ``"-inf"``, numpy as Python.

    Args:
        value: an attribute, an array or anything nested of dicts, lists, tuples, scalars and arrays.

    Returns:
        Data that ``json.dumps(..., allow_nan=False)`` writes (dict keys as text; anything else as its text).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.ndarray):
        return json_ready(value.tolist())
    if isinstance(value, np.generic):
        return json_ready(value.item())
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_ready(v) for v in value]
    return str(value)  # a Path, a complex number, ...


def _array(arr: np.ndarray, axes: list[str] | None) -> dict[str, Any]:
    """One array's entry: dtype, shape, axes, the statistics of its entries and, when it is small, its values."""
    entry: dict[str, Any] = {"dtype": str(arr.dtype), "shape": list(arr.shape)}
    if axes:
        entry["axes"] = axes
    if arr.dtype == bool:
        entry["set"] = int(arr.sum())
    elif arr.dtype.kind in "iuf":
        values = np.asarray(arr, dtype=float).ravel()
        finite = values[np.isfinite(values)]
        entry["finite"] = int(finite.size)
        with np.errstate(all="ignore"):  # the mean of huge values overflows to inf, which is said as "inf"
            stats = (finite.min(), finite.max(), finite.mean()) if finite.size else (None, None, None)
        entry.update(zip(("min", "max", "mean"), (json_ready(s) for s in stats)))
    if arr.size <= JSON_VALUES:
        entry["values"] = json_ready(arr)
    return entry


def result_json(result: Result, *, summary: str | None = None, numbers: Mapping[str, str] | None = None) -> dict:
    """A result file as JSON-ready data.

    Args:
        result: the file read into memory.
        summary: its one-line summary (:func:`landscape.analyses.registry.summarize`), or None.
        numbers: its key numbers as the report writes them (:func:`landscape.analyses.registry.numbers_of`).

    Returns:
        ``{"path", "kind", "complete", "summary", "numbers", "provenance", "attributes", "arrays", "groups"}``:
        ``provenance`` holds the root attributes of :data:`~landscape.store.attrs.PROVENANCE` the file has (and
        their ``other_`` forms), ``attributes`` every root attribute but ``identity``, ``arrays`` each array by
        its path (see the module's description), ``groups`` each group of many arrays (``arrays``, ``values``,
        ``dtypes``).
    """
    keys = [*PROVENANCE, *(f"other_{key}" for key in PROVENANCE)]
    groups = large_groups(result.arrays)
    grouped = {name for names in groups.values() for name in names}
    view = {
        "path": str(result.path),
        "kind": result.kind,
        "complete": bool(result.attrs.get("complete", False)),
        "summary": summary,
        "numbers": dict(numbers or {}),
        "provenance": {key: result.attrs[key] for key in keys if key in result.attrs},
        "attributes": {key: value for key, value in sorted(result.attrs.items()) if key != "identity"},
        "arrays": {
            name: _array(arr, result.axes.get(name))
            for name, arr in sorted(result.arrays.items())
            if name not in grouped
        },
        "groups": {
            group: {
                "arrays": len(names),
                "values": sum(int(result.arrays[n].size) for n in names),
                "dtypes": sorted({str(result.arrays[n].dtype) for n in names}),
            }
            for group, names in sorted(groups.items())
        },
    }
    return json_ready(view)


def live_json(path: str | Path, record: Mapping[str, Any]) -> dict:
    """A result file that a running analysis is writing, as JSON-ready data (from its writer's sidecar record).

    Args:
        path: the result file, as the user named it.
        record: the sidecar's record (:func:`landscape.store.locks.live_record`).

    Returns:
        ``{"path", "kind", "being_written": True, "pid", "attributes", "progress"}``: ``attributes`` are the run's
        (its identity: kind, options, provenance), ``progress`` the record's progress entries (None before the
        work has started).
    """
    try:
        identity = json.loads(str(record.get("identity") or "{}"))
    except (ValueError, RecursionError):
        identity = {}
    identity = {k: decode(v) for k, v in identity.items()} if isinstance(identity, dict) else {}
    progress = {k: v for k, v in record.items() if k not in ("pid", "identity")}
    view = {
        "path": str(path),
        "kind": identity.get("kind"),
        "being_written": True,
        "pid": int(record.get("pid") or -1),
        "attributes": identity,
        "progress": progress if "done" in record else None,
    }
    return json_ready(view)


def dumps(view: Any) -> str:
    r"""One line of strict JSON (no bare NaN or Infinity) of data from :func:`result_json` or :func:`live_json`.

    Every control character (C0, DEL, C1, line separators, bidirectional controls, the surrogates of a file name
    that is not UTF-8) is written as a ``\uXXXX`` escape, so that the line is strict JSON also after the
    terminal's escaping and splits nowhere else.

    Args:
        view: JSON-ready data.

    Returns:
        The JSON text, on one line.
    """
    text = json.dumps(json_ready(view), allow_nan=False, ensure_ascii=False)
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # only inside strings: JSON's syntax is ASCII


#: the characters a JSON line never holds as they are (a terminal's controls, U+0085 and U+2028 that split lines)
_CONTROL = re.compile(f"[{CONTROLS}]")
