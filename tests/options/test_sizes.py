"""Seeds, grids and counts that cannot work are one-line errors when the options are built, before any work."""

import pytest
from helpers import one_line_error

from landscape.options import checks
from landscape.options.fourier import FourierOptions
from landscape.options.hessian import HessianOptions, SpectrumOptions
from landscape.options.lesion import LesionOptions
from landscape.options.similarity import SimilarityOptions
from landscape.options.surface import SurfaceOptions, parse_grid

EVERY_ANALYSIS = [SurfaceOptions, HessianOptions, SpectrumOptions, FourierOptions, LesionOptions, SimilarityOptions]


@pytest.mark.parametrize("options", EVERY_ANALYSIS, ids=lambda o: o.__name__)
@pytest.mark.parametrize("seed", [2**66, checks.MAX_SEED + 1, -1, 1.0, True])
def test_a_seed_torch_cannot_take_is_refused_by_every_analysis(options, seed):
    assert "--seed must be a whole number from 0 to 2**62" in one_line_error(options, seed=seed)


@pytest.mark.parametrize("options", EVERY_ANALYSIS, ids=lambda o: o.__name__)
def test_the_largest_seed_passes(options):
    assert options(seed=checks.MAX_SEED).seed == checks.MAX_SEED


@pytest.mark.parametrize("grid", ["-1e308:1e308:3", "-1.7e308:1.7e308:2"])
def test_a_grid_whose_span_overflows_is_refused_not_filled_with_nan(grid):
    assert "MAX - MIN overflows a float" in one_line_error(parse_grid, grid)
    assert "overflows" in one_line_error(SurfaceOptions, x=grid)


def test_a_wide_grid_that_fits_a_float_is_exact():
    assert list(parse_grid("-8e307:8e307:3")) == [-8e307, 0.0, 8e307]


@pytest.mark.parametrize("options", [SurfaceOptions, HessianOptions, SpectrumOptions], ids=lambda o: o.__name__)
def test_augmented_copies_without_augmentation_are_refused_as_having_no_effect(options):
    msg = one_line_error(options, augment_copies=3)
    assert "--augment-copies 3 has no effect without augmentation" in msg and "--augment paper-a" in msg
    assert options(augment="paper-a", augment_copies=3).augment_copies == 3


@pytest.mark.parametrize(
    ("kwargs", "flag", "switch"),
    [
        ({"top_k": 1, "probes": 8}, "--probes", "--density"),
        ({"top_k": 1, "steps": 10}, "--steps", "--density"),
        ({"top_k": 1, "sigma": 0.1}, "--sigma", "--density"),
        ({"top_k": 1, "grid_points": 50}, "--grid-points", "--density"),
        ({"top_k": 1, "trace_samples": 30}, "--trace-samples", "--trace"),
        ({"top_k": 1, "trace_method": "hutchinson"}, "--trace-method", "--trace"),
        ({"top_k": 0, "density": True, "eigenvectors": True}, "--eigenvectors", "--top-k >= 1"),
    ],
)
def test_a_hessian_option_without_the_one_it_acts_with_is_refused_as_having_no_effect(kwargs, flag, switch):
    assert f"{flag} has no effect without {switch}" in one_line_error(HessianOptions, **kwargs)
