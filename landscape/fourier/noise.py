"""Robustness to band-limited noise (Paper A, Fig 2b): accuracy drop per frequency band of additive noise.

Band. Frequencies are in units of pi: along an axis of length ``n`` the DFT index ``k`` has frequency
``2 * fftfreq(n)[k]`` in [-1, 1). The band of centre ``f`` and width ``b`` is the *square annulus*
``f - b/2 <= max(|fy|, |fx|) < f + b/2`` (half-open; a 1e-9 tolerance makes grid points that sit exactly on a
bound fall as exact arithmetic says). The default bands are centres 0.1, 0.2, ..., 0.9 with width 0.1.

Noise. For every image and channel independently, random signs ``s`` in {-1, +1}^(h x w) are band-passed:
``n = Re(ifft2(fft2(s) * mask))`` (the mask is symmetric under ``f -> -f``, so the imaginary part is rounding
only), then each image's noise (all channels) is scaled to root-mean-square ``strength``, in the units of the
model's (normalised) input. The accuracy drop of a band is ``accuracy(clean) - accuracy(x + n)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from landscape.errors import LandscapeError
from landscape.fourier.features import eval_model

#: default band centres (units of pi) and width
BANDS = tuple(round(0.1 * i, 1) for i in range(1, 10))
WIDTH = 0.1
#: default noise root-mean-square per image, in normalised input units
STRENGTH = 0.5
_TOL = 1e-9


def band_mask(h: int, w: int, centre: float, width: float = WIDTH) -> np.ndarray:
    """Boolean (h, w) mask in FFT order of the square annulus ``centre -+ width/2`` (see the module doc)."""
    fy = np.abs(2.0 * np.fft.fftfreq(h))[:, None]
    fx = np.abs(2.0 * np.fft.fftfreq(w))[None, :]
    rho = np.maximum(fy, fx)
    return (rho >= centre - width / 2 - _TOL) & (rho < centre + width / 2 - _TOL)


def band_noise(
    shape: Sequence[int], centre: float, width: float = WIDTH, strength: float = STRENGTH,
    generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Random sign noise of ``shape`` (B, C, H, W) band-passed to the square annulus, RMS ``strength`` per image."""
    b, c, h, w = shape
    mask = band_mask(h, w, centre, width)
    if not mask.any():
        raise LandscapeError(f"no frequency of a {h}x{w} image lies in the band {centre}pi +- {width / 2}pi; "
                             "choose wider or other bands")
    signs = torch.randint(0, 2, (b, c, h, w), generator=generator).to(torch.float64) * 2 - 1
    spec = torch.fft.fft2(signs) * torch.from_numpy(mask)
    noise = torch.fft.ifft2(spec).real
    rms = noise.pow(2).mean(dim=(1, 2, 3), keepdim=True).sqrt()
    return (noise * (strength / rms)).to(dtype)


def accuracy(model: nn.Module, batches: Iterable[Sequence[Tensor]], noise: dict | None = None,
             output: str | int | None = None) -> float:
    """Top-1 accuracy of ``model`` over ``(x, y)`` batches, with band noise added when ``noise`` is given.

    ``noise`` holds ``centre``, ``width``, ``strength`` and ``seed``; batch ``j`` gets noise from a generator
    seeded with ``seed + j``, so results do not depend on anything but these options. ``output`` selects the
    logits of a model returning a tuple or dict (:func:`~landscape.objective.select_logits`).
    """
    from landscape.objective import select_logits

    correct, total = 0, 0
    with torch.no_grad():
        for j, (x, y) in enumerate(batches):
            if noise is not None:
                gen = torch.Generator().manual_seed(int(noise["seed"]) + j)
                n = band_noise(x.shape, noise["centre"], noise["width"], noise["strength"], gen, x.dtype)
                x = x + n.to(x.device)
            pred = select_logits(model(x), output).argmax(dim=-1)
            correct += int((pred == y).sum())
            total += int(y.numel())
    if total == 0:
        raise LandscapeError("no labelled samples to measure accuracy on")
    return correct / total


@dataclass
class NoiseRobustness:
    """Accuracy under band noise: band centres (units of pi), accuracies, the clean accuracy and drops."""

    frequencies: np.ndarray
    accuracy: np.ndarray
    clean_accuracy: float
    width: float
    strength: float

    @property
    def drop(self) -> np.ndarray:
        """``clean_accuracy - accuracy`` per band."""
        return self.clean_accuracy - self.accuracy


def noise_robustness(
    model: nn.Module, batches: Sequence[Sequence[Tensor]], *, bands: Sequence[float] = BANDS,
    width: float = WIDTH, strength: float = STRENGTH, seed: int = 0,
) -> NoiseRobustness:
    """Accuracy of ``model`` on ``batches`` clean and with noise of every band (see the module doc).

    The model is used in eval mode (an eval deep copy if any module is training; never changed).
    """
    net = eval_model(model)
    clean = accuracy(net, batches)
    accs = [accuracy(net, batches, {"centre": f, "width": width, "strength": strength, "seed": seed}) for f in bands]
    return NoiseRobustness(np.asarray(bands, dtype=float), np.asarray(accs), clean, width, strength)
