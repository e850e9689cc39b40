"""The one-line summary of a Fourier file."""

from __future__ import annotations

import numpy as np

from landscape.analyses.numbers import MISSING, number
from landscape.options.fourier import CONV_KINDS, MSA_KINDS
from landscape.store.read import Result


def fourier_summary(result: Result) -> str:
    """``14 layers, 256 samples, high-frequency Delta log amplitude -0.1 (first) .. -2.0 (last)`` and noise.

    Args:
        result: a fourier file, finished or not.

    Returns:
        The layers, the samples, the high-frequency values at both ends, and the accuracy drop per noise band
        when the file has them.
    """
    if "high_frequency" not in result:
        return "Fourier profile, not written yet"
    hf = np.asarray(result["high_frequency"], dtype=float)
    text = (
        f"{len(hf)} layers, {result.attrs.get('n_samples', '?')} samples, high-frequency Delta log amplitude "
        f"{hf[0]:.3f} (first) .. {hf[-1]:.3f} (last)"
        if len(hf)
        else "no layers"
    )
    if "noise/accuracy_drop" in result and "noise/frequencies" in result:
        drops = ", ".join(
            f"{f:.1f}pi {d:+.3f}" for f, d in zip(result["noise/frequencies"], result["noise/accuracy_drop"])
        )
        text += f"; accuracy drop per band: {drops}"
    return text


def fourier_numbers(result: Result) -> dict[str, str]:
    """The report's cells of a fourier file: the mean high-frequency value of its MSA and of its Conv/MLP blocks.

    Args:
        result: a fourier file.

    Returns:
        ``{"high-freq Delta log amp, MSA": ..., "high-freq Delta log amp, Conv/MLP": ...}``.
    """
    msa = conv = MISSING
    if "high_frequency" in result and "layer_kinds" in result:
        kinds = np.asarray(result["layer_kinds"]).astype(str)
        hf = np.asarray(result["high_frequency"], dtype=float)
        if kinds.shape == hf.shape:
            groups = [hf[np.isin(kinds, group)] for group in (MSA_KINDS, CONV_KINDS)]
            msa, conv = (number(float(np.nanmean(g)), ".3f") if np.isfinite(g).any() else MISSING for g in groups)
    return {"high-freq Delta log amp, MSA": msa, "high-freq Delta log amp, Conv/MLP": conv}
