"""Fourier analysis of feature maps (docs/analyses.md): Delta log amplitude, high frequency, variance, band noise.

- :mod:`landscape.analyses.fourier.spectrum`: FFT sums of one batch of maps (diagonal, 2D map, radial, variance).
- :mod:`landscape.analyses.fourier.features`: accumulation over batches of every block's map -> :class:`FourierProfile`.
- :mod:`landscape.analyses.fourier.noise`: band-limited noise and the accuracy drop per band.
- :mod:`landscape.analyses.fourier.run`: :func:`run_fourier`, checkpoint -> HDF5 result file, its options a
  :class:`~landscape.options.fourier.FourierOptions` (re-exported here).
"""

from landscape.analyses.fourier.features import FourierProfile, LayerSpectrum, as_grid, fourier_profile
from landscape.analyses.fourier.noise import NoiseRobustness, band_mask, band_noise, noise_robustness
from landscape.analyses.fourier.run import run_fourier
from landscape.options.fourier import FourierOptions

__all__ = [
    "FourierOptions",
    "FourierProfile",
    "LayerSpectrum",
    "NoiseRobustness",
    "as_grid",
    "band_mask",
    "band_noise",
    "fourier_profile",
    "noise_robustness",
    "run_fourier",
]
