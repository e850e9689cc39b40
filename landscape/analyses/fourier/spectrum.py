"""Fourier spectra of feature maps: the sums that build Paper A's log-amplitude profiles.

Conventions (docs/analyses.md, Fourier). A map ``x`` of shape (..., h, w) has the 2D DFT
``F[ky, kx] = sum_{m, n} x[m, n] exp(-2 pi i (ky m / h + kx n / w))``; its log amplitude is
``log(|F| + 1e-6)``. Frequency ``k`` along an axis of length ``h`` is ``2 pi k / h``; frequencies are stored in
units of pi, so index ``k`` is ``2 k / h`` (``torch.fft.fftfreq(h) * 2``, in [-1, 1)).

- Diagonal profile (the paper's): the half diagonal of the centred (fftshift-ed) map from the centre towards
  the (pi, pi) corner, i.e. the entries ``F[k, k]`` for ``k = 0..ceil(h/2)-1``, at frequencies ``2 k / h``
  (per axis). Square maps only.
- Radial profile: the mean over the ring ``round(r / s) == k`` of the 2D map, where ``r`` is the Euclidean
  norm of (fy, fx) in units of pi and ``s = 2 / min(h, w)``; ``k = 0..ceil(min(h, w)/2)-1`` at frequencies
  ``k s``. Corners beyond the last ring are left out.

Everything here returns *sums* over the leading (sample, channel) axes, so that profiles accumulate over
batches exactly; divide by the number of (sample, channel) pairs for the mean.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from landscape.errors import LandscapeError

#: the constant added to the amplitude before the logarithm (the official code's)
EPS = 1e-6


def n_diagonal(h: int) -> int:
    """Number of points on the half diagonal of an ``h x h`` map: ``ceil(h / 2)``.

    Args:
        h: the side of the square map.

    Returns:
        ``ceil(h / 2)``.
    """
    return math.ceil(h / 2)


def diagonal_frequencies(h: int) -> np.ndarray:
    """Frequencies (units of pi) of the half-diagonal points: ``2 k / h`` for ``k = 0..ceil(h/2)-1``.

    Args:
        h: the side of the square map.

    Returns:
        A float array of shape ``(ceil(h/2),)``, in ``[0, 1)``.
    """
    return 2.0 * np.arange(n_diagonal(h)) / h


def radial_frequencies(h: int, w: int) -> np.ndarray:
    """Centre frequencies (units of pi) of the radial rings: ``k * 2 / min(h, w)``, ``k = 0..ceil(min/2)-1``.

    Args:
        h: the map's height.
        w: the map's width.

    Returns:
        A float array of shape ``(ceil(min(h, w)/2),)``.
    """
    n = min(h, w)
    return 2.0 * np.arange(n_diagonal(n)) / n


@lru_cache(maxsize=64)
def _diagonal_basis(h: int, dtype: torch.dtype, device: str) -> Tensor:
    """The (h*h, 2K) real matrix [cos | sin] of ``2 pi k (m + n) / h`` for the diagonal DFT entries."""
    k = torch.arange(n_diagonal(h), dtype=torch.int64)
    m = torch.arange(h, dtype=torch.int64)
    phase = ((m[:, None] + m[None, :]).reshape(-1, 1) * k[None, :]) % h  # exact integer phase index
    angle = phase.to(torch.float64) * (2 * math.pi / h)
    basis = torch.cat([torch.cos(angle), torch.sin(angle)], dim=1)
    return basis.to(dtype=dtype, device=device)


def diagonal_log_amplitude_sum(x: Tensor) -> Tensor:
    """Sum over all leading axes of ``log(|F[k, k]| + 1e-6)``, ``k = 0..ceil(h/2)-1``, for square maps.

    Computed as a direct DFT restricted to the diagonal (one matrix product with a cached cos/sin basis of
    ``2 pi k (m + n) / h``), which equals the diagonal of ``fft2`` to rounding and costs ``2 h^2 ceil(h/2)``
    multiply-adds per map instead of a full FFT and a logarithm of every entry.

    Args:
        x: feature maps of shape ``(..., h, h)`` (integer input is cast to float32).

    Returns:
        The sum over the leading axes, shape ``(ceil(h/2),)``, in ``x``'s floating dtype and device.

    Raises:
        LandscapeError: the maps are not square (``h != w``).
    """
    h, w = x.shape[-2:]
    if h != w:
        raise LandscapeError(f"the diagonal profile needs square feature maps, got {h}x{w}; use --profile radial")
    if not x.is_floating_point():
        x = x.float()
    basis = _diagonal_basis(h, x.dtype, str(x.device))
    k = basis.shape[1] // 2
    proj = x.reshape(-1, h * h) @ basis  # (B*C, 2K): real part, then minus the imaginary part
    amp = torch.hypot(proj[:, :k], proj[:, k:])
    return torch.log(amp + EPS).sum(dim=0)


def log_amplitude_map_sum(x: Tensor) -> Tensor:
    """Sum over all leading axes of ``log(|fft2(x)| + 1e-6)`` as an (h, w) map in FFT order (not shifted).

    Uses ``rfft2`` (real input: ``|F[-ky, -kx]| = |F[ky, kx]|``) and mirrors the missing half, so the
    logarithm is taken of about half the entries.

    Args:
        x: real feature maps of shape ``(..., h, w)`` (integer input is cast to float32).

    Returns:
        The sum over the leading axes, shape ``(h, w)``, in FFT order.
    """
    h, w = x.shape[-2:]
    if not x.is_floating_point():
        x = x.float()
    half = torch.fft.rfft2(x.reshape(-1, h, w))
    logs = torch.log(half.abs() + EPS).sum(dim=0)  # (h, w//2 + 1)
    if w // 2 + 1 == w:
        return logs
    kx = torch.arange(w // 2 + 1, w, device=x.device)
    ky = torch.arange(h, device=x.device)
    mirrored = logs[(-ky) % h][:, (-kx) % w]  # F[ky, kx] = conj F[-ky, -kx]
    return torch.cat([logs, mirrored], dim=1)


def diagonal_of_map(centred: np.ndarray) -> np.ndarray:
    """The half diagonal of a centred (fftshift-ed) square map: entries ``[c + k, c + k]``, ``c = h // 2``.

    Args:
        centred: a map (or maps) of shape ``(..., h, h)``, zero frequency at ``[h // 2, h // 2]``.

    Returns:
        Shape ``(..., ceil(h/2))``: the entries for ``k = 0..ceil(h/2)-1``.

    Raises:
        LandscapeError: the map is not square.
    """
    h, w = centred.shape[-2:]
    if h != w:
        raise LandscapeError(f"the diagonal profile needs square feature maps, got {h}x{w}; use --profile radial")
    c = h // 2
    idx = np.arange(n_diagonal(h))
    return centred[..., c + idx, c + idx]


def radial_bins(h: int, w: int) -> np.ndarray:
    """Ring index of every frequency of an (h, w) map in FFT order; -1 for corners beyond the last ring.

    Ring ``k = round(r / s)`` with ``r = ||(fy, fx)||`` in units of pi and ``s = 2 / min(h, w)``.

    Args:
        h: the map's height.
        w: the map's width.

    Returns:
        An int64 array of shape ``(h, w)`` with values in ``-1..ceil(min(h, w)/2)-1``.
    """
    fy = 2.0 * np.fft.fftfreq(h)[:, None]
    fx = 2.0 * np.fft.fftfreq(w)[None, :]
    step = 2.0 / min(h, w)
    k = np.rint(np.hypot(fy, fx) / step).astype(np.int64)
    k[k >= n_diagonal(min(h, w))] = -1
    return k


def radial_profile(fft_order_map: np.ndarray) -> np.ndarray:
    """Mean of an (h, w) map in FFT order over each radial ring (see :func:`radial_bins`).

    Args:
        fft_order_map: a 2D array of shape ``(h, w)`` in FFT order (not shifted).

    Returns:
        Shape ``(ceil(min(h, w)/2),)``: the mean of the entries in each ring; corners beyond the last ring are
        left out.
    """
    h, w = fft_order_map.shape
    bins = radial_bins(h, w)
    n = n_diagonal(min(h, w))
    keep = bins >= 0
    sums = np.bincount(bins[keep], weights=fft_order_map[keep], minlength=n)
    counts = np.bincount(bins[keep], minlength=n)
    return sums / counts


def spatial_variance_sum(x: Tensor) -> Tensor:
    """Sum over all leading axes of the unbiased variance over the last two (spatial) axes.

    ``var = sum_{m,n} (x[m,n] - mean)^2 / (h w - 1)``; NaN for 1x1 maps. Computed from moments of the map
    shifted by its first entry, ``d = x - x[0, 0]``: ``var = (sum d^2 - (sum d)^2 / (h w)) / (h w - 1)``
    (the shift keeps the cancellation small; about 20x faster than ``torch.var`` on CPU).

    Args:
        x: feature maps of shape ``(..., h, w)`` (integer input is cast to float32).

    Returns:
        A 0-dim tensor: the sum of the variances of all maps (NaN when ``h w < 2``).
    """
    h, w = x.shape[-2:]
    flat = x.reshape(-1, h * w)
    if not flat.is_floating_point():
        flat = flat.float()
    n = h * w
    if n < 2:
        return torch.tensor(float("nan"), dtype=flat.dtype, device=flat.device)
    d = flat - flat[:, :1]
    s1 = d.sum(dim=1)
    s2 = torch.linalg.vector_norm(d, dim=1).square()
    return ((s2 - s1 * s1 / n) / (n - 1)).sum()


def reference_mean_log_map(x: np.ndarray) -> np.ndarray:
    """The slow, obviously correct reference (Paper A's code in numpy): the centred mean log-amplitude map.

    ``fftshift(log(|fft2(x)| + 1e-6)).mean(over samples and channels)`` for x of shape (B, C, h, w).

    Args:
        x: feature maps of shape ``(B, C, h, w)``.

    Returns:
        The centred mean map, shape ``(h, w)``.
    """
    logs = np.log(np.abs(np.fft.fft2(x)) + EPS)
    return np.fft.fftshift(logs, axes=(-2, -1)).mean(axis=(0, 1))


def reference_diagonal(x: np.ndarray) -> np.ndarray:
    """Reference half diagonal of :func:`reference_mean_log_map` for square maps (``diag[h // 2:]``).

    Args:
        x: square feature maps of shape ``(B, C, h, h)``.

    Returns:
        Shape ``(ceil(h/2),)``: the mean log amplitude at ``F[k, k]``, ``k = 0..ceil(h/2)-1``.
    """
    return np.diag(reference_mean_log_map(x))[x.shape[-1] // 2 :]
