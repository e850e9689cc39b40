"""The one-line summaries of Hessian and per-mini-batch spectrum files."""

from __future__ import annotations

import numpy as np

from landscape.analyses.numbers import MISSING, finite, number
from landscape.store.read import Result


def operator_label(result: Result) -> str:
    """What a hessian or spectrum file's operator is, for a summary: ``""`` for the Hessian, else e.g. ``"ggn: "``.

    K-FAC's label counts the parameters it does not cover (``hvp_choice``'s ``uncovered``), when recorded.

    Args:
        result: a hessian or spectrum file.

    Returns:
        The label, with a trailing ``": "`` unless empty.
    """
    operator = str(result.attrs.get("operator", "hessian"))
    if operator == "hessian":
        return ""
    choice = result.attrs.get("hvp_choice")
    uncovered = choice.get("uncovered") if isinstance(choice, dict) else None
    detail = f" ({len(uncovered)} parameter tensors not covered)" if isinstance(uncovered, list) else ""
    return f"{operator}{detail}: "


def hessian_summary(result: Result) -> str:
    """``78218 parameters, 256 samples; eigenvalues (LA): ...; trace: ... +- ...; density: 8 probes``.

    An operator other than the Hessian comes first (:func:`operator_label`).

    Args:
        result: a hessian file, finished or not.

    Returns:
        The size of the problem and each section written so far.
    """
    size = f"{result.attrs.get('n_params', '?')} parameters, {result.attrs.get('n_samples', '?')} samples"
    parts = [operator_label(result) + size]
    if "eigenvalues" in result:
        values = ", ".join(f"{v:.6g}" for v in np.asarray(result["eigenvalues"], dtype=float))
        converged = "converged" not in result or bool(np.asarray(result["converged"]).all())
        flag = "" if converged else " (not all converged: raise --maxiter or --tol)"
        parts.append(f"eigenvalues ({result.attrs.get('which', '?')}): {values}{flag}")
    if "trace/samples" in result:
        s = np.asarray(result["trace/samples"], dtype=float)
        error = s.std(ddof=1) / len(s) ** 0.5 if len(s) > 1 else float("nan")
        parts.append(f"trace: {s.mean():.6g} +- {error:.2g}")
    if "density/values" in result:
        parts.append(f"density: {result['density/nodes'].shape[0]} probes, grid of {len(result['density/grid'])}")
    if "blocks/done" in result:
        parts.append(block_summary(result))
    return "; ".join(parts)


def block_summary(result: Result) -> str:
    """``per block (12 of 12): top eigenvalue 0.31..45.2 (max at layer3.0), trace 1.2..310``.

    Args:
        result: a hessian file with a ``blocks/`` section, finished or not.

    Returns:
        The blocks done and the range of their top eigenvalues and traces.
    """
    done = np.asarray(result["blocks/done"], dtype=bool)
    head = f"per block ({int(done.sum())} of {done.size})"
    if not done.any():
        return f"{head}: no block done yet"
    top = np.asarray(result["blocks/top_eigenvalue"], dtype=float)
    tr = np.asarray(result["blocks/trace"], dtype=float)[done]
    names = [str(n) for n in result["blocks/names"]]
    peak = int(np.flatnonzero(done)[np.argmax(top[done])])
    return (
        f"{head}: top eigenvalue {number(float(top[done].min()))}..{number(float(top[done].max()))} "
        f"(max at {names[peak]}), trace {number(float(tr.min()))}..{number(float(tr.max()))}"
    )


def spectrum_summary(result: Result) -> str:
    """``90 batches x top-5, eigenvalues from -1.2 to 345 (3 negative)`` (batches done so far when unfinished).

    Args:
        result: a spectrum file, finished or not.

    Returns:
        The number of batches and eigenvalues per batch, their range and how many are negative.
    """
    if "eigenvalues" not in result:
        return operator_label(result) + "spectrum, no batch yet"
    eig = np.asarray(result["eigenvalues"], dtype=float)
    done = np.asarray(result["done"], dtype=bool) if "done" in result else np.isfinite(eig).all(axis=-1)
    values = eig[done] if done.shape == eig.shape[:1] else eig
    finite = values[np.isfinite(values)]
    if not finite.size:
        return f"{eig.shape[0]} batches x top-{eig.shape[1]}, no batch done yet"
    left = "" if done.all() else f" ({int(done.sum())} of {done.size} batches done)"
    return operator_label(result) + (
        f"{eig.shape[0]} batches x top-{eig.shape[1]}, eigenvalues from {finite.min():.6g} to {finite.max():.6g} "
        f"({int((finite < 0).sum())} negative){left}"
    )


def top_eigenvalue(result: Result) -> dict[str, str]:
    """The report's cell of a hessian or spectrum file: its largest eigenvalue.

    Args:
        result: a hessian or spectrum file.

    Returns:
        ``{"top Hessian eigenvalue": "252.6"}``.
    """
    eig = finite(result["eigenvalues"]) if "eigenvalues" in result else np.zeros(0)
    return {"top Hessian eigenvalue": number(eig.max()) if eig.size else MISSING}


def hessian_numbers(result: Result) -> dict[str, str]:
    """The report's cells of a hessian file: its largest eigenvalue and, with ``--per-block``, the sharpest block.

    Args:
        result: a hessian file.

    Returns:
        ``{"top Hessian eigenvalue": "252.6", "sharpest block": "54.19 (blocks.0.mlp)"}``.
    """
    cell = MISSING
    if "blocks/done" in result and np.asarray(result["blocks/done"], dtype=bool).any():
        done = np.flatnonzero(np.asarray(result["blocks/done"], dtype=bool))
        top = np.asarray(result["blocks/top_eigenvalue"], dtype=float)
        peak = int(done[np.argmax(top[done])])
        cell = f"{number(float(top[peak]))} ({result['blocks/names'][peak]})"
    return {**top_eigenvalue(result), "sharpest block": cell}
