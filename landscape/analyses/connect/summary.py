"""The one-line summary of a connect file and its cells of the report's table (no torch)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from landscape.analyses.connect.barrier import Barrier, path_barrier
from landscape.analyses.numbers import MISSING, number
from landscape.store.read import Result

#: the paths of a connect file, with the name of each one's coordinate
PATHS = (("line", "α"), ("curve", "t"))
#: with ``--align``: the line to theta_B as given (``line`` is then the line to theta_B aligned to theta_A)
UNALIGNED = "unaligned_line"
#: every path a connect file may hold, in the order they are summarised and drawn
ALL_PATHS = (PATHS[0], (UNALIGNED, "α"), PATHS[1])
#: the values of a barrier, in the order of its table's columns
FIELDS = tuple(f.name for f in fields(Barrier))


def path_barriers(result: Result, group: str) -> dict[str, Barrier] | None:
    """The barriers of one path of a connect file on each split, or None while the path is not done.

    Args:
        result: a connect file.
        group: ``line``, ``unaligned_line`` or ``curve``.

    Returns:
        Split -> :class:`~landscape.analyses.connect.barrier.Barrier`, in the file's order; None when the path is
        absent or some of its points are not done.
    """
    if f"{group}/done" not in result or not np.asarray(result[f"{group}/done"], dtype=bool).all():
        return None
    coords, loss, acc = (np.asarray(result[f"{group}/{n}"], dtype=float) for n in ("coords", "loss", "accuracy"))
    splits = [str(s) for s in result["splits"]]
    return {s: path_barrier(coords, loss[k], acc[k]) for k, s in enumerate(splits)}


def connect_summary(result: Result) -> str:
    """``line (train): loss barrier 0.8 at α=0.5, error barrier 0.3 at α=0.5; curve (20 epochs): ...``.

    With alignment (``align``) the line is ``line (aligned by weights, train)`` and the line to theta_B as given
    follows as ``unaligned_line (train)``.

    Args:
        result: a connect file, finished or not.

    Returns:
        The barriers of the first split on each path done, or how many points are done.
    """
    if "line/done" not in result:
        return "connect, no point yet"
    parts = []
    for group, coord in ALL_PATHS:
        if f"{group}/done" not in result:
            continue
        done = np.asarray(result[f"{group}/done"], dtype=bool)
        barriers = path_barriers(result, group)
        if barriers is None:
            parts.append(f"{group}: {int(done.sum())} of {done.size} points done")
            continue
        split, b = next(iter(barriers.items()))
        epochs = result.attrs.get("bend_epochs_done")
        name = f"curve ({epochs} epochs, {split})" if group == "curve" and epochs is not None else f"{group} ({split})"
        if group == "line" and result.attrs.get("align"):
            name = f"line (aligned by {result.attrs['align']}, {split})"
        parts.append(
            f"{name}: loss barrier {b.loss:.4g} at {coord}={b.loss_at:.3g}, "
            f"error barrier {b.error:.4g} at {coord}={b.error_at:.3g}"
        )
    if "plane/done" in result:
        plane = np.asarray(result["plane/done"], dtype=bool)
        parts.append(
            f"plane {plane.shape[1]}x{plane.shape[0]}" + ("" if plane.all() else f" ({int(plane.sum())} done)")
        )
    return "; ".join(parts)


def _cell(barriers: dict[str, Barrier] | None, which: str, coord: str) -> str:
    if barriers is None:
        return MISSING
    cells = [
        f"{number(getattr(b, which))} at {coord}={number(getattr(b, f'{which}_at'), '.2g')}" for b in barriers.values()
    ]
    if len(cells) == 1:
        return cells[0]
    return ", ".join(f"{s} {c}" for s, c in zip(barriers, cells))


def connect_numbers(result: Result) -> dict[str, str]:
    """The report's cells of a connect file: the loss and error barriers of the line and of the curve.

    Args:
        result: a connect file.

    Returns:
        ``{"loss barrier (line)": "0.81 at α=0.5", "error barrier (line)": ..., "loss barrier (curve)": ...,
        "error barrier (curve)": ...}``; each split named when there are several.
    """
    out = {}
    for group, coord in PATHS:
        barriers = path_barriers(result, group)
        out[f"loss barrier ({group})"] = _cell(barriers, "loss", coord)
        out[f"error barrier ({group})"] = _cell(barriers, "error", coord)
    return out


def barrier_rows(result: Result) -> list[dict[str, object]]:
    """The barriers a connect file records (its ``barriers`` attribute) as flat rows, for its ``barriers`` table.

    Args:
        result: a connect file.

    Returns:
        One row per path and split: ``{"path", "split", "loss", "loss_at", "error", "error_at"}``, the line
        first and the splits in the file's order (the attribute's JSON sorts them); none before the run has
        written its barriers (at its end).
    """
    held = result.attrs.get("barriers")
    if not isinstance(held, dict):
        return []
    splits = [str(s) for s in result["splits"]] if "splits" in result else []
    known = [g for g, _ in ALL_PATHS]
    rows = []
    for path in sorted(held, key=lambda p: (known.index(p) if p in known else len(known), p)):
        values = held[path] if isinstance(held[path], dict) else {}
        for split in sorted(values, key=lambda s: (splits.index(s) if s in splits else len(splits), s)):
            if isinstance(values[split], dict):
                cells = {k: values[split][k] for k in FIELDS if k in values[split]}
                rows.append({"path": path, "split": split, **cells, **values[split]})
    return rows
