"""The one-line summary of a Fourier file."""

from __future__ import annotations

import numpy as np

from landscape.analyses.numbers import MISSING, number
from landscape.options.fourier import CONV_KINDS, MIN_PROFILE_SIDE, MSA_KINDS
from landscape.store.read import Result


def fourier_summary(result: Result) -> str:
    """``14 layers, 256 samples, high-frequency Delta log amplitude -0.1 (first) .. -2.0 (last)`` and noise.

    Args:
        result: a fourier file, finished or not.

    Returns:
        The layers, the samples, the high-frequency values at both ends (of the layers that have a profile),
        the layers whose maps are too small for one, and the accuracy drop per noise band when the file has them.
    """
    if "high_frequency" not in result:
        return "Fourier profile, not written yet"
    hf = np.asarray(result["high_frequency"], dtype=float)
    shown = hf[np.isfinite(hf)]
    text = f"{len(hf)} layers, {result.attrs.get('n_samples', '?')} samples" if len(hf) else "no layers"
    if shown.size:
        first, last = ("first", "last") if shown.size == hf.size else ("first with a profile", "last with a profile")
        text += f", high-frequency Delta log amplitude {shown[0]:.3f} ({first}) .. {shown[-1]:.3f} ({last})"
    small = too_small(result)
    if small:
        text += (
            f"; {len(small)} of them with maps smaller than {MIN_PROFILE_SIDE} x {MIN_PROFILE_SIDE}, too small for a "
            f"profile: {', '.join(small[:6])}" + (f" and {len(small) - 6} more" if len(small) > 6 else "")
        )
    if "noise/accuracy_drop" in result and "noise/frequencies" in result:
        drops = ", ".join(
            f"{f:.1f}pi {d:+.3f}" for f, d in zip(result["noise/frequencies"], result["noise/accuracy_drop"])
        )
        text += f"; accuracy drop per band: {drops}"
    return text


def too_small(result: Result) -> list[str]:
    """The layers of a Fourier file whose maps are too small for a profile (``min(h, w) < MIN_PROFILE_SIDE``).

    Args:
        result: a fourier file (its ``layer_sizes`` and ``layer_names``).

    Returns:
        Their names, in forward order; none when the file does not record the sizes.
    """
    if "layer_sizes" not in result or "layer_names" not in result:
        return []
    sizes = np.asarray(result["layer_sizes"], dtype=float)
    names = [str(n) for n in result["layer_names"]]
    if sizes.ndim != 2 or len(sizes) != len(names):
        return []
    return [n for n, hw in zip(names, sizes) if np.min(hw) < MIN_PROFILE_SIDE]


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
