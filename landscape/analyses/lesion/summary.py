"""The one-line summary of a lesion file."""

from __future__ import annotations

import numpy as np

from landscape.store.read import Result


def lesion_summary(result: Result) -> str:
    """``12 blocks, 360 samples; intact accuracy 0.9722, NLL 0.1034; largest drop stage3.1 (+0.2139)``.

    Args:
        result: a lesion file, finished or not.

    Returns:
        The blocks, the samples, the intact scores and the block whose removal costs the most accuracy.
    """
    a = result.attrs
    if "block_names" not in result:
        return "lesion study, no block yet"
    names = [str(n) for n in result["block_names"]]
    text = f"{len(names)} blocks, {a.get('n_samples', '?')} samples"
    if "intact_accuracy" in a:
        text += f"; intact accuracy {float(a['intact_accuracy']):.4f}, NLL {float(a.get('intact_nll', np.nan)):.4f}"
    if "accuracy_drop" in result:
        drops = np.asarray(result["accuracy_drop"], dtype=float)
        if np.isfinite(drops).any():
            i = int(np.nanargmax(drops))
            text += f"; largest drop {names[i]} ({drops[i]:+.4f})"
    return text
