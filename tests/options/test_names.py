"""The one rule for name patterns: globs over the whole name, plain names for themselves and what is below."""

import pytest
import torch
from helpers import one_line_error
from torch import nn

from landscape.analyses.hessian.operator import HessianOperator
from landscape.options.names import is_glob, matches_any, name_matches, select

NAMES = ["fc.weight", "fc.bias", "fc2.weight", "head.fc.weight", "blocks.0.pos_embed"]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("fc", ["fc.weight", "fc.bias"]),
        ("fc.weight", ["fc.weight"]),
        ("fc*", ["fc.weight", "fc.bias", "fc2.weight"]),
        ("*fc*", ["fc.weight", "fc.bias", "fc2.weight", "head.fc.weight"]),
        ("*.weight", ["fc.weight", "fc2.weight", "head.fc.weight"]),
        ("*pos_embed*", ["blocks.0.pos_embed"]),
        ("blocks.0", ["blocks.0.pos_embed"]),
        ("pos_embed", []),
    ],
)
def test_a_glob_matches_the_whole_name_a_plain_name_itself_and_below(pattern, expected):
    assert [n for n in NAMES if name_matches(n, pattern)] == expected
    assert is_glob(pattern) == any(c in pattern for c in "*?[")


def test_select_keeps_the_order_and_names_the_rule_when_nothing_matches():
    assert select(NAMES, None) == NAMES == select(NAMES, [])
    assert select(NAMES, ["fc2", "fc"]) == ["fc.weight", "fc.bias", "fc2.weight"]
    assert matches_any("head.fc.weight", ["x", "head"]) and not matches_any("head.fc.weight", ["fc"])
    one_line_error(select, NAMES, "nothing", match="no parameter matches nothing; a plain name matches itself")


def test_the_hessian_block_the_surface_zeros_and_the_taps_follow_the_same_rule():
    from landscape.analyses.surface.directions import random_directions
    from landscape.models.taps import FeatureTaps

    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("fc", nn.Linear(2, 3))
    model.add_module("fc2", nn.Linear(3, 2))
    from landscape.core.objective import Objective

    batches = [(torch.randn(4, 2), torch.tensor([0, 1, 1, 0]))]
    obj = Objective(model, batches, dtype=torch.float64)
    assert HessianOperator(obj, patterns="fc").names == ["fc.weight", "fc.bias"]
    d = random_directions(obj.params, ndim=1, seed=0, norm="filter", ignore_1d=False, zero_patterns=("fc",))
    assert not d.x["fc.weight"].any() and not d.x["fc.bias"].any() and d.x["fc2.weight"].any()
    convs = nn.Sequential()
    convs.add_module("fc", nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Conv2d(2, 2, 3, padding=1)))
    convs.add_module("fc2", nn.Conv2d(2, 2, 3, padding=1))
    tapped = FeatureTaps(convs, taps=["fc=conv"])(torch.randn(1, 1, 6, 6))
    assert [f.name for f in tapped] == ["fc"]  # the module itself, not what is below it, nor fc2
