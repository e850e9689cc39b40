"""The one-line summary of a surface file (``landscape surface``, ``landscape info``, the report)."""

from __future__ import annotations

import numpy as np

from landscape.analyses.numbers import MISSING, finite, number
from landscape.store.read import Result


def surface_summary(result: Result) -> str:
    """``2D surface 21x21, loss 0.0123..4.56`` (with the points done when the file is unfinished).

    Args:
        result: a surface file, finished or not.

    Returns:
        The grid's dimension and size and the range of the finite losses.
    """
    if "loss" not in result:
        return "surface, no grid yet"
    loss = np.asarray(result["loss"], dtype=float)
    ny, nx = loss.shape
    two = ny > 1 or result.attrs.get("surface_ndim") == 2
    finite = loss[np.isfinite(loss)]
    span = f"loss {finite.min():.4g}..{finite.max():.4g}" if finite.size else "no finite loss yet"
    done = np.asarray(result["done"], dtype=bool) if "done" in result else np.isfinite(loss)
    left = "" if done.all() else f" ({int(done.sum())} of {done.size} points done)"
    return f"{'2D' if two else '1D'} surface {nx}x{ny}, {span}{left}"


def surface_numbers(result: Result) -> dict[str, str]:
    """The report's cell of a surface file: the range of its finite losses.

    Args:
        result: a surface file.

    Returns:
        ``{"loss range": "0.0123 – 4.56"}``.
    """
    loss = finite(result["loss"]) if "loss" in result else np.zeros(0)
    return {"loss range": f"{number(loss.min())} – {number(loss.max())}" if loss.size else MISSING}
