import copy
from typing import NamedTuple

import numpy as np
import pytest
import torch
from torch import nn

from landscape.analyses.fourier.features import as_grid, fourier_profile
from landscape.analyses.fourier.spectrum import reference_diagonal as numpy_diagonal
from landscape.analyses.fourier.spectrum import reference_mean_log_map as numpy_mean_log_map
from landscape.errors import LandscapeError


class Feat(NamedTuple):
    name: str
    kind: str
    tensor: torch.Tensor


def fixed_conv(kernel: np.ndarray, channels: int) -> nn.Conv2d:
    k = kernel.shape[0]
    conv = nn.Conv2d(channels, channels, k, padding=k // 2, groups=channels, bias=False, padding_mode="circular")
    conv.weight.data[:] = torch.from_numpy(kernel)
    return conv.double()


class FilterNet(nn.Module):
    """input -> Gaussian blur (low-pass) ; input -> Laplacian (high-pass); a dropout to catch train mode."""

    def __init__(self, channels: int = 2):
        super().__init__()
        g = np.exp(-0.5 * (np.arange(5) - 2.0) ** 2 / 1.0)
        self.blur = fixed_conv(np.outer(g, g) / np.outer(g, g).sum(), channels)
        self.lap = fixed_conv(np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], float), channels)
        self.drop = nn.Dropout(0.5)

    def block_features(self, x):
        x = self.drop(x)
        return [Feat("input", "stem", x), Feat("blur", "msa", self.blur(x)), Feat("laplacian", "conv", self.lap(x))]


def test_blur_lowers_and_laplacian_raises_high_frequency():
    torch.manual_seed(0)
    x = torch.randn(16, 2, 16, 16, dtype=torch.float64)
    model = FilterNet().train()
    before = copy.deepcopy(model.state_dict())
    prof = fourier_profile(model, [x])
    hf = prof.high_frequency
    assert hf[1] < hf[0] - 1.0  # blur lowers the high-frequency Delta log amplitude
    assert hf[2] > hf[0] + 1.0  # Laplacian raises it
    # model untouched and still in training mode; eval mode was used (dropout off: stem map == input)
    assert model.training and model.drop.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    np.testing.assert_allclose(prof.log_amplitude(0), numpy_diagonal(x.numpy()), atol=1e-10)


def test_batched_equals_one_shot_and_numpy():
    torch.manual_seed(1)
    x = torch.randn(10, 2, 8, 8, dtype=torch.float64)
    model = FilterNet().eval()
    for kwargs in ({"profile": "diagonal"}, {"profile": "radial"}, {"profile": "diagonal", "maps": True}):
        one = fourier_profile(model, [x], **kwargs)
        many = fourier_profile(model, [(x[:3], None), (x[3:7], None), (x[7:], None)], **kwargs)
        assert many.n_samples == one.n_samples == 10
        for i in range(3):
            np.testing.assert_allclose(many.log_amplitude(i), one.log_amplitude(i), atol=1e-12)
        np.testing.assert_allclose(many.variance, one.variance, rtol=1e-12)
        np.testing.assert_allclose(many.high_frequency, one.high_frequency, atol=1e-12)
    maps = fourier_profile(model, [x[:4], x[4:]], maps=True)
    blurred = model.blur(x).detach().numpy()
    np.testing.assert_allclose(maps.mean_map(1), numpy_mean_log_map(blurred), atol=1e-10)
    ref = numpy_diagonal(blurred)
    np.testing.assert_allclose(maps.delta_log_amplitude(1), ref - ref[0], atol=1e-10)


def test_variance_matches_direct():
    x = torch.randn(5, 3, 6, 6, dtype=torch.float64)
    model = FilterNet(3).eval()
    prof = fourier_profile(model, [x[:2], x[2:]])
    lap = model.lap(x).detach().numpy()
    direct = np.mean([np.var(lap[b, c], ddof=1) for b in range(5) for c in range(3)])
    assert prof.variance[2] == pytest.approx(direct, rel=1e-12)


def test_token_to_grid_places_each_token():
    b, s, c = 2, 3, 4
    tokens = torch.zeros(b, s * s, c)
    for i in range(s * s):
        tokens[:, i, :] = i
    grid = as_grid(tokens)
    with_cls = as_grid(torch.cat([torch.full((b, 1, c), -1.0), tokens], dim=1))
    for g in (grid, with_cls):
        assert g.shape == (b, c, s, s)
        for i in range(s * s):
            assert torch.all(g[:, :, i // s, i % s] == i)
    assert as_grid(grid) is grid
    with pytest.raises(LandscapeError, match="square grid"):
        as_grid(torch.zeros(1, 7, 2))


class MixedSizes(nn.Module):
    def block_features(self, x):
        return [Feat("a", "stem", x), Feat("b", "downsample", x[..., ::2, ::2]), Feat("c", "conv", x[..., :2, :2])]


def test_common_axes():
    x = torch.randn(4, 2, 8, 8, dtype=torch.float64)
    prof = fourier_profile(MixedSizes(), [x])
    assert [len(prof.frequencies(i)) for i in range(3)] == [4, 2, 1]
    grid, common = prof.common_axis("normalised")
    np.testing.assert_allclose(grid, np.linspace(0, 1, 4))
    np.testing.assert_allclose(common[0], prof.delta_log_amplitude(0))
    d1 = prof.delta_log_amplitude(1)
    np.testing.assert_allclose(common[1], [0, d1[1] / 3, 2 * d1[1] / 3, d1[1]])
    assert common[2, 0] == 0 and np.isnan(common[2, 1:]).all()
    grid, common = prof.common_axis("physical")
    np.testing.assert_allclose(grid, [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(common[1], [0, d1[1] / 2, d1[1], np.nan])  # layer b: 0 and 0.5 pi
    # the third layer's map (a side below 3) has only frequency 0: no high-frequency value, not its 0
    np.testing.assert_allclose(prof.high_frequency, [prof.delta_log_amplitude(i)[-1] for i in range(2)] + [np.nan])
    assert prof.too_small == [prof.names[2]]
    np.testing.assert_allclose(prof.depth, [0, 0.5, 1])


def test_errors():
    with pytest.raises(LandscapeError, match="block_features"):
        fourier_profile(nn.Linear(2, 2), [torch.zeros(1, 2)])
    with pytest.raises(LandscapeError, match="profile"):
        fourier_profile(MixedSizes(), [torch.zeros(1, 1, 4, 4)], profile="diag")
    with pytest.raises(LandscapeError, match="at least one"):
        fourier_profile(MixedSizes(), [])


def test_zoo_vit_tokens_land_on_their_patch():
    from landscape.models import create_model

    torch.manual_seed(0)
    vit = create_model("vit_mini", num_classes=10, in_chans=1).eval()
    with torch.no_grad():
        vit.pos_embed.zero_()
        x = torch.randn(2, 1, 32, 32)
        embed = vit.block_features(x)[0]
        conv = vit.patch_embed(x)  # (B, C, 8, 8): patch (r, c) of the image at [..., r, c]
    assert embed.kind == "embed"
    torch.testing.assert_close(embed.tensor, conv)
    prof = fourier_profile(vit, [x])
    np.testing.assert_allclose(prof.log_amplitude(0), numpy_diagonal(conv.double().numpy()), atol=1e-4)
