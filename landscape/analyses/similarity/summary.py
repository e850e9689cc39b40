"""The one-line summary of a similarity (CKA) file."""

from __future__ import annotations

import numpy as np

from landscape.store.read import Result


def similarity_summary(result: Result) -> str:
    """``CKA of 14 x 14 blocks over 512 samples (8 minibatches); off-diagonal values 0.21 .. 0.97``.

    Args:
        result: a similarity file, finished or not.

    Returns:
        The size of the CKA matrix, the samples and minibatches, and the range of its (off-diagonal) values.
    """
    if "cka" not in result:
        return "CKA, not written yet"
    cka = np.asarray(result["cka"], dtype=float)
    within = result.attrs.get("comparison") == "within"
    off = cka[~np.eye(*cka.shape, dtype=bool)] if within else cka.ravel()
    off = off[np.isfinite(off)]
    spread = f"{off.min():.3f} .. {off.max():.3f}" if off.size else "n/a"
    batches = int(result["n_batches"]) if "n_batches" in result else "?"
    return (
        f"CKA of {cka.shape[0]} x {cka.shape[1]} blocks over {result.attrs.get('n_samples', '?')} samples "
        f"({batches} minibatches); {'off-diagonal ' if within else ''}values {spread}"
    )
