import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn

from landscape.analyses.fourier.noise import (
    BAND_NOISE,
    BANDS,
    accuracy,
    band_mask,
    band_noise,
    hits,
    make_noise,
    noise_robustness,
    official_band_noise,
    official_mask,
)
from landscape.core.front import check_labels
from landscape.errors import LandscapeError
from landscape.options.fourier import NOISE_CONSTRUCTIONS


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


# ------------------------------------------------------------------------- the official construction
def centred_square(h, w, half_h, half_w):
    """Explicit 0/1 (h, w) square in centred order: frequency indices -half .. half-1 around (h // 2, w // 2)."""
    m = np.zeros((h, w))
    rows = range(h) if 2 * half_h >= h else range(h // 2 - max(half_h, 0), h // 2 + max(half_h, 0))
    cols = range(w) if 2 * half_w >= w else range(w // 2 - max(half_w, 0), w // 2 + max(half_w, 0))
    for r in rows:
        for c in cols:
            m[r, c] = 1.0
    return m


def reference_official(x, centre, width):
    """Direct numpy FreqAttack: fftshift(fft2), times outer square minus inner square, ifftshift, ifft2, real."""
    _, _, h, w = x.shape
    f, s = centre * np.pi, width / 2 * np.pi  # our band (units of pi) in the released code's radians

    def half(r, n):
        return int((r * n) / (2 * np.pi))

    mask = centred_square(h, w, half(f + s, h), half(f + s, w)) - centred_square(h, w, half(f - s, h), half(f - s, w))
    spec = np.fft.fftshift(np.fft.fft2(x), axes=(-2, -1)) * mask
    return np.fft.ifft2(np.fft.ifftshift(spec, axes=(-2, -1))).real, mask


@pytest.mark.parametrize("size", [(32, 32), (31, 31), (15, 17), (8, 8)])
def test_official_noise_equals_a_direct_numpy_freqattack(size):
    h, w = size
    eps = 0.03
    for centre, width in [(c, 0.1) for c in BANDS] + [(0.5, 0.3), (0.05, 0.2)]:
        signs = eps * torch.randn((2, 3, h, w), generator=torch.Generator().manual_seed(5), dtype=torch.float64).sign()
        want, mask = reference_official(signs.numpy(), centre, width)
        np.testing.assert_array_equal(official_mask(h, w, centre, width), mask.astype(bool))
        gen = torch.Generator().manual_seed(5)
        if not mask.any():
            with pytest.raises(LandscapeError, match="keeps no frequency"):
                official_band_noise((2, 3, h, w), centre, width, eps, gen, torch.float64)
            continue
        got = official_band_noise((2, 3, h, w), centre, width, eps, gen, torch.float64)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-6, rtol=0)
        assert np.abs(want).max() > 1e-4  # not trivially zero


def test_official_mask_is_the_released_padded_square_on_even_sizes():
    """For even h the released _center_mask pads ones(m, m) by (h - m) / 2 on every side; clipped to [0, h]."""

    def released(side, h):
        side = min(max(side, 0), h)
        return np.pad(np.ones((side, side)), (h - side) // 2)

    for h in (8, 32, 224):
        for centre in (*BANDS, 1.0):
            f, s = centre * math.pi, 0.05 * math.pi
            outer = released(int(((f + s) * h) / (2 * math.pi)) * 2, h)
            inner = released(int(((f - s) * h) / (2 * math.pi)) * 2, h)
            np.testing.assert_array_equal(official_mask(h, h, centre, 0.1), (outer - inner).astype(bool))


def test_official_lowest_band_holds_the_zero_frequency_and_is_not_renormalised():
    mask = official_mask(32, 32, 0.1, 0.1)  # int(0.05 * 16) = 0: no inner square
    assert mask[16, 16] and mask.sum() == 16  # indices -2..1 on each axis
    gen = torch.Generator().manual_seed(0)
    lo = official_band_noise((4, 1, 32, 32), 0.1, 0.1, 1.0, gen, torch.float64)
    hi = official_band_noise((4, 1, 32, 32), 0.9, 0.1, 1.0, torch.Generator().manual_seed(0), torch.float64)
    # Parseval: the energy is eps^2 times the fraction of kept frequencies (about), so it depends on the band
    assert lo.pow(2).mean() < 0.05 < hi.pow(2).mean()
    np.testing.assert_allclose(
        official_band_noise((4, 1, 32, 32), 0.9, 0.1, 2.0, torch.Generator().manual_seed(0), torch.float64), 2 * hi
    )


def test_constructions_are_chosen_by_name():
    assert tuple(BAND_NOISE) == NOISE_CONSTRUCTIONS
    shape = (2, 1, 16, 16)
    noise = {"centre": 0.5, "width": 0.1, "strength": 0.7, "eps": 0.2}
    annulus = make_noise(shape, noise, torch.Generator().manual_seed(1), torch.float64)
    assert torch.equal(annulus, band_noise(shape, 0.5, 0.1, 0.7, torch.Generator().manual_seed(1), torch.float64))
    official = make_noise(shape, {**noise, "construction": "official"}, torch.Generator().manual_seed(1), torch.float64)
    want = official_band_noise(shape, 0.5, 0.1, 0.2, torch.Generator().manual_seed(1), torch.float64)
    assert torch.equal(official, want)
    with pytest.raises(LandscapeError, match="unknown noise construction"):
        make_noise(shape, {**noise, "construction": "disk"})


def test_official_noise_robustness_goes_through_the_same_loop():
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (64,), generator=gen)
    x = (y.float() * 2 - 1)[:, None, None, None] * 0.3 * torch.ones(64, 1, 8, 8)
    batches = [(x[:32], y[:32]), (x[32:], y[32:])]
    low = noise_robustness(LowPassClassifier(), batches, bands=(0.25, 0.75), construction="official", eps=5.0)
    assert low.clean_accuracy == 1.0 and low.construction == "official" and low.eps == 5.0
    assert low.drop[0] > 0.05  # the lowest official band holds the zero frequency: the mean moves
    assert low.drop[1] == 0.0  # a band without the zero frequency has zero mean
    noise = {"centre": 0.75, "width": 0.1, "eps": 5.0, "seed": 0, "construction": "official"}
    assert (
        accuracy(PixelClassifier(), batches, noise)
        == noise_robustness(PixelClassifier(), batches, bands=(0.75,), construction="official", eps=5.0).accuracy[0]
    )
