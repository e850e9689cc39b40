"""The options every analysis shares: one canonical split name, one list of choices."""

import pytest
from helpers import one_line_error

from landscape.options.common import SPLIT_CHOICES, SPLITS, canonical_split
from landscape.options.fourier import FourierOptions
from landscape.options.hessian import HessianOptions, SpectrumOptions
from landscape.options.lesion import LesionOptions
from landscape.options.similarity import SimilarityOptions
from landscape.options.surface import SurfaceOptions

OPTIONS = [SurfaceOptions, HessianOptions, SpectrumOptions, FourierOptions, LesionOptions, SimilarityOptions]


def test_val_is_another_name_for_test_everywhere():
    assert SPLITS == ("train", "test") and set(SPLIT_CHOICES) == {"train", "test", "val"}
    assert canonical_split("VAL") == "test" == canonical_split("test")
    one_line_error(canonical_split, "dev", match="unknown split 'dev'")


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: o.__name__)
def test_a_run_on_val_is_the_same_run_as_on_test(options):
    val, test = options(split="val"), options(split="test")
    assert val.split == "test" and val.attrs() == test.attrs()
