"""Maps too small for a Fourier profile (a side below 3) are named, not reported as a profile of 0.000."""

import numpy as np
import torch
from plot_results import fourier_arrays, fourier_attrs, write_result

from landscape.analyses.fourier.features import FourierProfile, LayerSpectrum
from landscape.analyses.fourier.run import small_maps_warning
from landscape.analyses.registry import summarize
from landscape.options.fourier import MIN_PROFILE_SIDE
from landscape.store.read import read_result


def layer(name, h, w):
    """A layer of an ``h x w`` map whose half-diagonal mean log amplitude falls by 1 per frequency step."""
    diagonal = -torch.arange(int(np.ceil(h / 2)), dtype=torch.float64)
    return LayerSpectrum(name, "conv", h, w, diagonal, torch.tensor(1.0, dtype=torch.float64), count=1)


def test_layers_with_a_side_below_three_have_no_high_frequency_value():
    profile = FourierProfile(
        "diagonal", [layer("big", 8, 8), layer("two", 2, 2), layer("thin", 8, 2), layer("3", 3, 3)]
    )
    assert MIN_PROFILE_SIDE == 3 and profile.too_small == ["two", "thin"]
    np.testing.assert_array_equal(profile.high_frequency, [-3.0, np.nan, np.nan, -1.0])


def test_the_warning_names_the_blocks_and_the_minimum_size():
    line = small_maps_warning(["blocks.0", "blocks.1"])
    assert "\n" not in line and line.startswith("warning: the feature maps of 2 blocks (blocks.0, blocks.1)")
    assert "smaller than 3 x 3" in line and "--input-size" in line
    assert "and 1 more" in small_maps_warning([f"b{i}" for i in range(7)])


def test_the_summary_says_which_blocks_are_too_small_instead_of_0_000(tmp_path):
    arrays = fourier_arrays(["conv", "msa", "mlp"])
    arrays["layer_sizes"] = np.array([[8, 8], [2, 2], [2, 2]])
    arrays["high_frequency"] = np.array([-1.5, np.nan, np.nan])
    summary = summarize(read_result(write_result(tmp_path / "f.h5", "fourier", arrays, **fourier_attrs("vit"))))
    assert "-1.500 (first with a profile) .. -1.500 (last with a profile)" in summary
    assert "2 of them with maps smaller than 3 x 3, too small for a profile: l1, l2" in summary
    assert "0.000" not in summary
