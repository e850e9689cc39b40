import math

import numpy as np
import pytest
import torch

from landscape.analyses.fourier import spectrum
from landscape.errors import LandscapeError


def numpy_mean_log_map(x: np.ndarray) -> np.ndarray:
    """Paper A's code written out: log(|fft2| + 1e-6), roll by h//2, w//2, mean over samples and channels."""
    h, w = x.shape[-2:]
    logs = np.log(np.abs(np.fft.fft2(x)) + 1e-6)
    return np.roll(logs, (h // 2, w // 2), axis=(-2, -1)).mean(axis=(0, 1))


def numpy_diagonal(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1]
    return np.diag(numpy_mean_log_map(x))[h // 2 :]


def test_reference_is_the_papers_code():
    x = np.random.default_rng(3).standard_normal((2, 3, 7, 7))
    np.testing.assert_allclose(spectrum.reference_mean_log_map(x), numpy_mean_log_map(x), atol=1e-12)
    np.testing.assert_allclose(spectrum.reference_diagonal(x), numpy_diagonal(x), atol=1e-12)


@pytest.mark.parametrize("h", [1, 2, 5, 7, 8, 16])
def test_diagonal_matches_numpy_fft(h):
    rng = np.random.default_rng(h)
    x = rng.standard_normal((3, 4, h, h))
    got = spectrum.diagonal_log_amplitude_sum(torch.from_numpy(x)).numpy() / 12
    want = numpy_diagonal(x)
    assert got.shape == (math.ceil(h / 2),)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("shape", [(6, 6), (7, 7), (5, 8), (8, 5), (1, 4)])
def test_map_matches_numpy_fft(shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((2, 3, *shape))
    got = np.fft.fftshift(spectrum.log_amplitude_map_sum(torch.from_numpy(x)).numpy() / 6)
    np.testing.assert_allclose(got, numpy_mean_log_map(x), rtol=0, atol=1e-10)


def test_diagonal_of_map_equals_direct_diagonal():
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64)
    full = np.fft.fftshift(spectrum.log_amplitude_map_sum(x).numpy())
    np.testing.assert_allclose(
        spectrum.diagonal_of_map(full), spectrum.diagonal_log_amplitude_sum(x).numpy(), atol=1e-10
    )


def test_float32_diagonal_close_to_fft():
    x = torch.randn(4, 8, 32, 32)
    direct = spectrum.diagonal_log_amplitude_sum(x) / 32
    ref = numpy_diagonal(x.double().numpy())
    np.testing.assert_allclose(direct.numpy(), ref, atol=1e-4)


def test_diagonal_frequencies():
    np.testing.assert_allclose(spectrum.diagonal_frequencies(8), [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(spectrum.diagonal_frequencies(7), [0, 2 / 7, 4 / 7, 6 / 7])


def test_diagonal_needs_square_maps():
    with pytest.raises(LandscapeError, match="radial"):
        spectrum.diagonal_log_amplitude_sum(torch.zeros(1, 1, 4, 6))


@pytest.mark.parametrize("k", [1, 3, 5])
def test_sinusoid_peaks_at_its_frequency(k):
    h = 16
    m = np.arange(h)
    x = np.cos(2 * np.pi * k * (m[:, None] + m[None, :]) / h)[None, None]  # on the diagonal at index k
    prof = spectrum.diagonal_log_amplitude_sum(torch.from_numpy(x)).numpy()
    assert int(np.argmax(prof)) == k
    assert spectrum.diagonal_frequencies(h)[k] == pytest.approx(2 * k / h)
    # amplitude of cos at (k, k) is h^2 / 2; everything else ~ 0
    assert prof[k] == pytest.approx(np.log(h * h / 2 + 1e-6))
    # radial profile: a cos along x only, frequency k/h*2pi -> ring k
    xr = np.cos(2 * np.pi * k * m[None, :] / h) * np.ones((h, 1))
    rad = spectrum.radial_profile(spectrum.log_amplitude_map_sum(torch.from_numpy(xr)[None, None]).numpy())
    assert int(np.argmax(rad)) == k
    assert spectrum.radial_frequencies(h, h)[k] == pytest.approx(2 * k / h)


def test_radial_profile_brute_force():
    rng = np.random.default_rng(0)
    h, w = 6, 8
    m = rng.standard_normal((h, w))
    got = spectrum.radial_profile(m)
    sums, counts = np.zeros(3), np.zeros(3)
    for ky in range(h):
        for kx in range(w):
            fy = 2 * (ky if ky < h / 2 else ky - h) / h
            fx = 2 * (kx if kx < w / 2 else kx - w) / w
            ring = round(math.hypot(fy, fx) / (2 / 6))
            if ring < 3:
                sums[ring] += m[ky, kx]
                counts[ring] += 1
    np.testing.assert_allclose(got, sums / counts)


def test_variance_direct():
    x = torch.randn(3, 4, 5, 6, dtype=torch.float64)
    direct = sum(np.var(x[b, c].numpy(), ddof=1) for b in range(3) for c in range(4))
    assert float(spectrum.spatial_variance_sum(x)) == pytest.approx(direct, rel=1e-12)


def test_variance_float32_with_a_large_offset():
    x = 1000.0 + torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    ref = np.var(x.double().numpy().reshape(12, 64), axis=1, ddof=1).sum()
    assert float(spectrum.spatial_variance_sum(x)) == pytest.approx(ref, rel=1e-4)
    assert np.isnan(float(spectrum.spatial_variance_sum(torch.ones(2, 1, 1, 1))))
