from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn

from landscape.errors import LandscapeError
from landscape.fourier import band_mask, band_noise, noise_robustness
from landscape.fourier.noise import BANDS, accuracy, check_labels, hits


def exact_mask(h, w, centre, width):
    """Brute force in exact rational arithmetic: f - b/2 <= max(|fy|, |fx|) < f + b/2, units of pi."""
    c, b = Fraction(centre).limit_denominator(1000), Fraction(width).limit_denominator(1000)
    out = np.zeros((h, w), bool)
    for ky in range(h):
        for kx in range(w):
            fy = Fraction(2 * (ky if 2 * ky < h else ky - h), h)
            fx = Fraction(2 * (kx if 2 * kx < w else kx - w), w)
            rho = max(abs(fy), abs(fx))
            out[ky, kx] = c - b / 2 <= rho < c + b / 2
    return out


@pytest.mark.parametrize("size", [(32, 32), (20, 20), (40, 40), (7, 9), (10, 16)])
def test_band_mask_selects_exactly_the_annulus(size):
    for centre in BANDS:
        np.testing.assert_array_equal(band_mask(*size, centre, 0.1), exact_mask(*size, centre, 0.1))
    np.testing.assert_array_equal(band_mask(*size, 0.5, 0.3), exact_mask(*size, 0.5, 0.3))


def test_bands_partition_the_square():
    covered = sum(band_mask(40, 40, c, 0.1).astype(int) for c in BANDS)
    rho = np.maximum.outer(np.abs(2 * np.fft.fftfreq(40)), np.abs(2 * np.fft.fftfreq(40)))
    np.testing.assert_array_equal(covered, ((rho >= 0.05) & (rho < 0.95)).astype(int))


def test_band_noise_lives_in_its_band():
    gen = torch.Generator().manual_seed(0)
    n = band_noise((3, 2, 16, 16), 0.4, 0.1, strength=0.7, generator=gen, dtype=torch.float64)
    spec = np.abs(np.fft.fft2(n.numpy()))
    mask = band_mask(16, 16, 0.4, 0.1)
    assert spec[..., ~mask].max() < 1e-10
    assert spec[..., mask].mean() > 1e-2
    rms = np.sqrt((n.numpy() ** 2).mean(axis=(1, 2, 3)))
    np.testing.assert_allclose(rms, 0.7, rtol=1e-12)
    with pytest.raises(LandscapeError, match="band"):
        band_noise((1, 1, 4, 4), 0.1, 0.1)  # 4x4 has frequencies 0, 0.5, 1 only


class LowPassClassifier(nn.Module):
    """Predicts the sign of each image's mean: blind to every band but zero frequency."""

    def forward(self, x):
        m = x.mean(dim=(1, 2, 3))
        return torch.stack([-m, m], dim=1)


class PixelClassifier(nn.Module):
    """Predicts the sign of one pixel: sensitive to noise of every band."""

    def forward(self, x):
        p = x[:, 0, 0, 0]
        return torch.stack([-p, p], dim=1)


def test_noise_robustness_of_known_models():
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (64,), generator=gen)
    x = (y.float() * 2 - 1)[:, None, None, None] * 0.3 * torch.ones(64, 1, 8, 8)
    batches = [(x[:32], y[:32]), (x[32:], y[32:])]
    low = noise_robustness(LowPassClassifier(), batches, bands=(0.25, 0.75), strength=1.0)
    assert low.clean_accuracy == 1.0
    np.testing.assert_array_equal(low.drop, [0.0, 0.0])  # band noise has zero mean: no effect
    pix = noise_robustness(PixelClassifier(), batches, bands=(0.25, 0.75), strength=1.0)
    assert pix.clean_accuracy == 1.0 and (pix.drop > 0.05).all()
    # reproducible, seeded per batch
    assert (
        accuracy(PixelClassifier(), batches, {"centre": 0.25, "width": 0.1, "strength": 1.0, "seed": 0})
        == pix.accuracy[0]
    )


def test_counts_over_shares_of_the_batches_add_up_to_the_whole():
    gen = torch.Generator().manual_seed(1)
    y = torch.randint(0, 2, (50,), generator=gen)
    x = torch.randn(50, 1, 8, 8, generator=gen)
    batches = [(x[i : i + 12], y[i : i + 12]) for i in range(0, 50, 12)]  # 5 batches, the last of 2
    noise = {"centre": 0.5, "width": 0.1, "strength": 1.0, "seed": 3}
    whole = hits(PixelClassifier(), enumerate(batches), noise)
    indexed = list(enumerate(batches))
    parts = [hits(PixelClassifier(), indexed[r::2], noise) for r in range(2)]  # as two ranks share them
    assert (sum(c for c, _ in parts), sum(t for _, t in parts)) == whole
    assert whole[1] == 50 and accuracy(PixelClassifier(), batches, noise) == whole[0] / 50


def test_labels_the_model_cannot_output_are_refused():
    x = torch.zeros(4, 1, 8, 8)
    check_labels(PixelClassifier(), [(x, torch.tensor([0, 1, 1, 0]))])
    with pytest.raises(LandscapeError, match="labels 0..5 but the model outputs 2 classes"):
        check_labels(PixelClassifier(), [(x, torch.tensor([0, 1, 5, 0]))])
