"""landscape: loss surfaces, Hessian spectra and Fourier spectra of feature maps of vision networks."""

__version__ = "0.1.0"

from landscape.errors import LandscapeError

__all__ = ["LandscapeError", "__version__"]
