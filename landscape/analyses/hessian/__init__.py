"""Hessian spectra: the HVP operator, Lanczos top/bottom-k, SLQ density, trace estimators, Paper A's spectra.

- :class:`HessianOperator` (``operator.py``): the weighted, regularised Hessian of an ``Objective``.
- :func:`lanczos` (``lanczos.py``): thick-restart Lanczos with full reorthogonalisation (scipy's names).
- :func:`spectral_density` (``density.py``): stochastic Lanczos quadrature with a documented broadening.
- :func:`trace` (``trace.py``): Hutchinson and Hutch++ with a standard error.
- :func:`max_eigenvalue_spectrum` (``spectrum.py``): per-mini-batch top-k, Paper A's protocol.
- :func:`run_hessian`, :func:`run_spectrum` (``run.py``): checkpoint in, HDF5 result out, their options
  :class:`HessianOptions`, :class:`SpectrumOptions` (``landscape/options/hessian.py``).
"""

from landscape.analyses.hessian.density import SpectralDensity, spectral_density
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.linalg import DenseOperator, EigenResult
from landscape.analyses.hessian.operator import HessianOperator, select_names
from landscape.analyses.hessian.run import run_hessian, run_spectrum
from landscape.analyses.hessian.spectrum import (
    MaxEigenvalueSpectrum,
    max_eigenvalue_spectrum,
    pyhessian_top_eigenvalues,
)
from landscape.analyses.hessian.trace import TraceEstimate, trace
from landscape.options.hessian import HessianOptions, SpectrumOptions

__all__ = [
    "DenseOperator",
    "EigenResult",
    "HessianOperator",
    "HessianOptions",
    "MaxEigenvalueSpectrum",
    "SpectralDensity",
    "SpectrumOptions",
    "TraceEstimate",
    "lanczos",
    "max_eigenvalue_spectrum",
    "pyhessian_top_eigenvalues",
    "run_hessian",
    "run_spectrum",
    "select_names",
    "spectral_density",
    "trace",
]
