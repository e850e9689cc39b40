"""landscape.reproduce.statistics: the hierarchical (seeds, then units) bootstrap against exact answers."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch

from landscape.errors import LandscapeError
from landscape.reproduce import statistics as stats


def _mean(x):
    return lambda w: (w @ x) / w.sum(1)


def test_counts_draw_whole_groups_then_their_units():
    sizes = [3, 1, 5, 2]
    w = stats.hierarchical_counts(sizes, 500, np.random.default_rng(0))
    assert w.shape == (500, 11) and w.dtype.kind == "i" and (w >= 0).all()
    edges = np.cumsum([0] + sizes)
    per_group = np.stack([w[:, a:b].sum(1) for a, b in zip(edges[:-1], edges[1:])], axis=1)
    draws = per_group // np.array(sizes)
    assert (per_group % np.array(sizes) == 0).all()  # a drawn group brings a whole resample of its units
    assert (draws.sum(1) == len(sizes)).all()  # G groups drawn per resample
    assert (draws == 0).any() and (draws >= 2).any()  # with replacement: some groups left out, some twice


def test_seed_spread_sets_the_interval_when_the_units_agree():
    # three seeds whose units all agree: the unit-level bootstrap sees no spread at all, the hierarchical one
    # exactly the seeds' spread. The pooled mean of a resample is the mean of its three drawn seeds' values;
    # P(all three draws are seed 0) = 1/27 > 2.5%, so the 2.5% percentile is 0 and the 97.5% is 2.
    x = np.repeat([0.0, 1.0, 2.0], 4)
    value, low, high = stats.hierarchical_bootstrap([4, 4, 4], _mean(x), resamples=10_000, rng=np.random.default_rng(1))
    assert (value, low, high) == (1.0, 0.0, 2.0)
    within = [stats.bootstrap(4, _mean(x[i : i + 4]), resamples=500, rng=np.random.default_rng(0)) for i in (0, 4, 8)]
    assert all(lo == hi for _, lo, hi in within)  # each seed alone: a zero-width interval


def _brute_force(groups):
    """The exact distribution of the pooled mean over every equally likely two-stage resample."""
    out = Counter()
    G = len(groups)
    for seeds in itertools.product(range(G), repeat=G):
        per_slot = [itertools.product(groups[s], repeat=len(groups[s])) for s in seeds]
        for draw in itertools.product(*per_slot):
            out[float(np.mean(np.concatenate(draw)))] += 1
    total = sum(out.values())
    return {k: v / total for k, v in sorted(out.items())}


def test_distribution_and_interval_match_a_brute_force_enumeration():
    groups = [np.array([0.0, 1.0]), np.array([3.0, 5.0])]
    exact = _brute_force(groups)  # 4 seed draws x 16 unit draws, 64 equally likely resamples
    assert len(exact) == 16 and math.isclose(sum(exact.values()), 1)
    x = np.concatenate(groups)
    r = 20_000
    w = stats.hierarchical_counts([2, 2], r, np.random.default_rng(2))
    seen = Counter(((w @ x) / w.sum(1)).tolist())
    assert set(seen) <= set(exact)
    for value, p in exact.items():
        assert abs(seen[value] / r - p) < 5 * math.sqrt(p * (1 - p) / r), value
    # the exact 2.5% and 97.5% quantiles: the CDF passes 0.025 inside the atom at 0.25 (0.0156 -> 0.078) and
    # 0.975 inside the atom at 4.5 (0.922 -> 0.984), so the percentile interval is exactly [0.25, 4.5]
    cdf = np.cumsum(list(exact.values()))
    keys = list(exact)
    assert keys[int(np.searchsorted(cdf, 0.025))] == 0.25 and keys[int(np.searchsorted(cdf, 0.975))] == 4.5
    value, low, high = stats.hierarchical_bootstrap([2, 2], _mean(x), resamples=r, rng=np.random.default_rng(3))
    assert (value, low, high) == (2.25, 0.25, 4.5)


def test_one_seed_gives_no_interval():
    value, low, high = stats.hierarchical_bootstrap(
        [5], _mean(np.arange(5.0)), resamples=100, rng=np.random.default_rng()
    )
    assert value == 2.0 and math.isnan(low) and math.isnan(high)


def test_two_sample_resamples_the_seeds_of_each_side():
    a = np.repeat([0.0, 1.0, 2.0], 3)  # three seeds, three identical units each
    b = np.zeros(4)  # two seeds, all zero
    est = stats.hierarchical_two_sample(
        a,
        [3, 3, 3],
        b,
        [2, 2],
        lambda u, w: (w @ u) / w.sum(1),
        np.subtract,
        resamples=10_000,
        rng=np.random.default_rng(4),
    )
    assert est == (1.0, 0.0, 2.0)
    with pytest.raises(LandscapeError, match="add up"):
        stats.hierarchical_two_sample(
            a, [3, 3], b, [2, 2], lambda u, w: w @ u, np.subtract, resamples=10, rng=np.random.default_rng()
        )
    one = stats.hierarchical_two_sample(
        a, [9], b, [2, 2], lambda u, w: (w @ u) / w.sum(1), np.subtract, resamples=10, rng=np.random.default_rng()
    )
    assert one[0] == 1.0 and math.isnan(one[1]) and math.isnan(one[2])


@pytest.mark.parametrize("sizes", [[], [2, 0], [1.5, 2], [[2, 2]]])
def test_bad_group_sizes_are_one_line_errors(sizes):
    with pytest.raises(LandscapeError) as info:
        stats.hierarchical_counts(sizes, 10, np.random.default_rng())
    assert "\n" not in str(info.value)


def test_only_the_generator_passed_in_is_used():
    np.random.seed(7)
    torch.manual_seed(7)
    np_state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    x = np.random.default_rng(0).normal(size=12)
    first = stats.hierarchical_bootstrap([4, 4, 4], _mean(x), resamples=300, rng=np.random.default_rng(5))
    assert (np.random.get_state()[1] == np_state).all() and torch.equal(torch.get_rng_state(), torch_state)
    assert stats.hierarchical_bootstrap([4, 4, 4], _mean(x), resamples=300, rng=np.random.default_rng(5)) == first
