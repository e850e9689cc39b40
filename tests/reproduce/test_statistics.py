"""landscape.reproduce.statistics: the interval over seeds against closed forms and its coverage on simulated
trainings with a known effect; the verdict rule."""

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from landscape.errors import LandscapeError
from landscape.reproduce import statistics as stats

#: Student's t 97.5% quantile at 2 degrees of freedom (scipy's, an independent implementation)
T2 = float(sps.t.ppf(0.975, 2))


def _mean(x, sizes):
    return lambda keep: (stats.seed_weights(keep, sizes) @ x) / stats.seed_weights(keep, sizes).sum(1)


def test_the_mean_of_seed_means_gets_the_t_interval_over_seeds():
    # equal units per seed: the pooled mean is the mean of the seed means, and the jackknife over seeds is the
    # classical t interval with S - 1 degrees of freedom (written here from its definition)
    x = np.array([0.0, 2.0, 1.0, 5.0, 3.0, 4.0, 9.0, 7.0, 8.0])
    sizes = [3, 3, 3]
    est = stats.seed_jackknife(3, _mean(x, sizes))
    means = x.reshape(3, 3).mean(1)
    half = T2 * means.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert est.value == pytest.approx(x.mean()) and est.df == 2
    assert (est.low, est.high) == pytest.approx((x.mean() - half, x.mean() + half), rel=1e-12)
    assert est.se == pytest.approx(means.std(ddof=1) / math.sqrt(3), rel=1e-12)
    assert stats.seed_mean(means) == est
    assert stats.t_quantile(2) == pytest.approx(4.3027, abs=1e-4) and stats.t_quantile(1000) == pytest.approx(
        1.962, abs=1e-3
    )


def test_units_within_a_seed_give_no_interval_only_seeds_do():
    # every unit of a seed agrees with its seed's value: the spread is between seeds, as wide as the seeds say
    x = np.repeat([0.0, 1.0, 2.0], 4)
    est = stats.seed_jackknife(3, _mean(x, [4, 4, 4]))
    assert est.se == pytest.approx(1 / math.sqrt(3)) and est.low < 0 and est.high > 2
    one = stats.seed_jackknife(1, _mean(x[:4], [4]))  # one training: no interval whatever its units
    assert one.value == 0.0 and math.isnan(one.low) and math.isnan(one.high) and math.isnan(one.se)
    with pytest.raises(LandscapeError, match="at least one seed"):
        stats.seed_jackknife(0, lambda keep: keep.sum(1))


def test_a_pooled_ratio_gets_its_linearised_interval_on_the_log_scale():
    # a ratio of pooled means: the jackknife of log(ratio), written out by hand from leave-one-seed-out ratios
    a, b = np.array([2.0, 3.0, 4.0, 8.0, 5.0, 1.0]), np.array([4.0, 5.0, 6.0, 3.0, 7.0, 9.0])
    sizes = [2, 2, 2]

    def ratio(keep):
        w = stats.seed_weights(keep, sizes)
        return ((w @ a) / w.sum(1)) / ((w @ b) / w.sum(1))

    est = stats.seed_jackknife(3, ratio, log=True)
    loo = [np.log(a[m].mean() / b[m].mean()) for m in (np.r_[2:6], np.r_[0:2, 4:6], np.r_[0:4])]
    se = math.sqrt(2 / 3 * sum((v - np.mean(loo)) ** 2 for v in loo))
    centre = math.log(a.mean() / b.mean())
    assert est.value == pytest.approx(a.mean() / b.mean()) and est.se == pytest.approx(se) and est.log
    assert (est.low, est.high) == pytest.approx((math.exp(centre - T2 * se), math.exp(centre + T2 * se)))
    # the inverse ratio's interval is the mirror image
    inverse = stats.seed_jackknife(3, lambda keep: 1 / ratio(keep), log=True)
    assert (inverse.low, inverse.high) == pytest.approx((1 / est.high, 1 / est.low))
    # a non-positive ratio has no log interval
    assert math.isnan(stats.seed_jackknife(3, lambda keep: ratio(keep) - 10, log=True).low)


def _simulate(rng, reps, seeds, units, mu, tau, sigma):
    """``reps`` demos: unit u of seed s is mu + b_s + e_su, b_s ~ N(0, tau^2), e_su ~ N(0, sigma^2)."""
    b = rng.normal(0, tau, (reps, seeds, 1))
    return mu + b + rng.normal(0, sigma, (reps, seeds, units))


@pytest.mark.parametrize("tau", [1.0, 0.2])
def test_the_interval_covers_a_known_effect_95_percent_of_the_time(tau):
    """Coverage at the demo's sizes (3 seeds, 3 mini-batches each) with a known effect, between-training spread
    ``tau`` and within-training spread 1: 2000 simulated demos, the interval must hold the effect 95% of the
    time (binomial standard error 0.5 points)."""
    rng = np.random.default_rng(0)
    data = _simulate(rng, 2000, 3, 3, mu=0.7, tau=tau, sigma=1.0)
    sizes = [3, 3, 3]
    hits = 0
    for x in data.reshape(2000, 9):
        est = stats.seed_jackknife(3, _mean(x, sizes))
        hits += est.low <= 0.7 <= est.high
    assert 0.93 <= hits / 2000 <= 0.97, hits / 2000


def test_a_ratio_of_two_models_covers_its_known_ratio():
    """Two models of three seeds, three units each, means 2 and 4 (ratio 0.5), spreads 0.3 between and 0.5
    within trainings: the log-scale interval of the ratio of pooled means holds 0.5 about 95% of the time."""
    rng = np.random.default_rng(1)
    a = _simulate(rng, 2000, 3, 3, mu=2.0, tau=0.3, sigma=0.5).reshape(2000, 9)
    b = _simulate(rng, 2000, 3, 3, mu=4.0, tau=0.3, sigma=0.5).reshape(2000, 9)
    hits = 0
    for xa, xb in zip(a, b):
        ma, mb = _mean(xa, [3] * 3), _mean(xb, [3] * 3)
        est = stats.seed_jackknife(3, lambda keep, ma=ma, mb=mb: ma(keep) / mb(keep), log=True)
        hits += est.low <= 0.5 <= est.high
    assert 0.93 <= hits / 2000 <= 0.975, hits / 2000


def test_verdict_rule_on_each_side_and_across_the_threshold():
    assert stats.verdict(0.1, 0.3, side="greater") == "reproduced"
    assert stats.verdict(-0.3, -0.1, side="greater") == "contradicted"
    assert stats.verdict(-0.1, 0.3, side="greater") == "inconclusive"
    assert stats.verdict(-0.3, -0.1, side="less") == "reproduced"
    assert stats.verdict(0.1, 0.3, side="less") == "contradicted"
    assert stats.verdict(0.0, 0.2, side="greater") == "inconclusive"  # touching the threshold is containing it
    assert stats.verdict(0.5, 0.9, side="less", threshold=1.0) == "reproduced"
    eps = 0.005  # "at least as accurate": a threshold of -0.5 points
    assert stats.verdict(-0.004, 0.01, side="greater", threshold=-eps) == "reproduced"
    assert stats.verdict(-0.02, -0.006, side="greater", threshold=-eps) == "contradicted"
    assert stats.verdict(-0.01, 0.01, side="greater", threshold=-eps) == "inconclusive"
    assert stats.verdict(math.nan, math.nan, side="less") == "inconclusive"
    with pytest.raises(LandscapeError):
        stats.verdict(0, 1, side="above")


def test_nothing_is_drawn_at_random():
    state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state()
    x = np.arange(9.0)
    first = stats.seed_jackknife(3, _mean(x, [3, 3, 3]))
    assert stats.seed_jackknife(3, _mean(x, [3, 3, 3])) == first
    assert (np.random.get_state()[1] == state).all() and torch.equal(torch.get_rng_state(), torch_state)
