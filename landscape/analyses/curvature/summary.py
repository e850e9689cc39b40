"""The one-line summary and the report's numbers of a curvature file."""

from __future__ import annotations

import numpy as np

from landscape.analyses.numbers import MISSING, number
from landscape.store.read import Result


def _text(values: object) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values).reshape(-1)]


def _distances(result: Result) -> dict[str, tuple[float, float]]:
    """Each approximation done so far: ``(spectral, frobenius)`` relative distances from the Hessian."""
    if "distance/done" not in result:
        return {}
    done = np.asarray(result["distance/done"], dtype=bool)
    spectral = np.asarray(result["distance/spectral"], dtype=float)
    frob = np.asarray(result["distance/frobenius"], dtype=float)
    names = _text(result["approximations"])
    return {names[i]: (float(spectral[i]), float(frob[i])) for i in np.flatnonzero(done)}


def curvature_summary(result: Result) -> str:
    """``78218 parameters: ggn ||H - A||/||H|| 0.81 (2) 0.64 (F); ...; per block (12 of 12)``.

    Args:
        result: a curvature file, finished or not.

    Returns:
        The size, each approximation's distances from the Hessian written so far, and the blocks done.
    """
    head = f"{result.attrs.get('n_params', '?')} parameters, {result.attrs.get('n_samples', '?')} samples"
    distances = _distances(result)
    if not distances:
        return f"{head}: no distance yet"
    parts = [f"{name} {number(s)} (2), {number(f)} (F)" for name, (s, f) in distances.items()]
    text = f"{head}; ||H - A|| / ||H||: " + "; ".join(parts)
    if "blocks/done" in result:
        done = np.asarray(result["blocks/done"], dtype=bool)
        text += f"; per block ({int(done.sum())} of {done.size})"
    return text


def curvature_numbers(result: Result) -> dict[str, str]:
    """The report's cell of a curvature file: the Gauss-Newton's spectral distance from the Hessian.

    Args:
        result: a curvature file.

    Returns:
        ``{"||H - G|| / ||H||": "0.81"}`` (a dash without the Gauss-Newton).
    """
    ggn = _distances(result).get("ggn")
    return {"||H - G|| / ||H||": number(ggn[0]) if ggn else MISSING}
