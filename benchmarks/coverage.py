"""Whether the findings' 95% intervals hold a known effect 95% of the time, at the demo's sizes, by simulation.

A simulated demo: ``S`` trained models (seeds) of a model, each giving ``units`` values (mini-batches), the value
of unit ``u`` of seed ``s`` being ``mu + b_s + e_su`` with ``b_s`` the training's deviation (spread ``tau``,
normal or heavy-tailed: Student's t with 3 degrees of freedom scaled to the same standard deviation) and ``e_su``
the unit's (spread ``sigma``). For each setting, ``--reps`` simulated demos; printed: how often the 95% interval
of the pooled mean holds ``mu`` (one model), and how often that of a ratio of two such models' pooled means holds
their ratio, by

- the findings' interval (:func:`landscape.reproduce.statistics.seed_jackknife`: the delete-one-seed jackknife
  with a t quantile of ``S - 1`` degrees of freedom, for a ratio on the log scale);
- the percentile bootstrap over seeds then units that the findings used before (1000 resamples: draw ``S``
  seeds with replacement, then each drawn seed's units with replacement).

Then how often two independent demos (two disjoint sets of seeds, or two machines whose kernels send training
elsewhere) give a claim "mean > 0" the same verdict, for effects of several sizes in units of the pooled mean's
standard error, by both intervals: the share of pairs that agree, and of pairs where one reproduces and the
other contradicts.

    python benchmarks/coverage.py [--reps 2000] [--seeds 3 5] [--units 3]

The binomial standard error of a coverage over 2000 demos is 0.5 points.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from landscape.reproduce.statistics import seed_jackknife, seed_weights, verdict

#: (name, tau, sigma, heavy-tailed seed effects)
SPREADS = (
    ("between only", 1.0, 0.0, False),
    ("between = within", 1.0, 1.0, False),
    ("within 5x between", 0.2, 1.0, False),
    ("between = within, t3 seeds", 1.0, 1.0, True),
)


def simulate(
    rng: np.random.Generator, reps: int, seeds: int, units: int, mu: float, tau: float, sigma: float, heavy: bool
) -> np.ndarray:
    """``(reps, seeds * units)`` unit values, seed by seed."""
    # Student's t with 3 degrees of freedom has variance 3: scaled to standard deviation tau
    heavy_b = tau * rng.standard_t(3, (reps, seeds, 1)) / math.sqrt(3)
    b = heavy_b if heavy else rng.normal(0, tau, (reps, seeds, 1))
    return (mu + b + rng.normal(0, sigma, (reps, seeds, units))).reshape(reps, seeds * units)


def pooled_mean(x: np.ndarray, sizes: list[int]):
    """The pooled mean of ``x`` as a function of seed weights."""
    return lambda keep: (seed_weights(keep, sizes) @ x) / seed_weights(keep, sizes).sum(1)


def bootstrap_interval(
    x: np.ndarray, seeds: int, units: int, rng: np.random.Generator, resamples: int = 1000
) -> tuple[float, float]:
    """The percentile interval of the pooled mean over two-stage resamples (seeds, then units), as before."""
    groups = x.reshape(seeds, units)
    picked = rng.integers(0, seeds, (resamples, seeds))  # the seeds drawn
    within = rng.integers(0, units, (resamples, seeds, units))  # each drawn seed's units drawn
    values = groups[picked[:, :, None], within].mean((1, 2))
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def bootstrap_ratio(
    xa: np.ndarray, xb: np.ndarray, seeds: int, units: int, rng: np.random.Generator
) -> tuple[float, float]:
    """The percentile interval of the ratio of pooled means, each side resampled apart, as before."""
    ga, gb = xa.reshape(seeds, units), xb.reshape(seeds, units)
    values = []
    for g in (ga, gb):
        picked = rng.integers(0, seeds, (1000, seeds))
        within = rng.integers(0, units, (1000, seeds, units))
        values.append(g[picked[:, :, None], within].mean((1, 2)))
    low, high = np.percentile(values[0] / values[1], [2.5, 97.5])
    return float(low), float(high)


def coverage_row(rng: np.random.Generator, reps: int, seeds: int, units: int, spread: tuple) -> str:
    """One setting: the coverage of the one-model mean and of the two-model ratio, by both methods."""
    name, tau, sigma, heavy = spread
    sizes = [units] * seeds
    x = simulate(rng, reps, seeds, units, 1.0, tau, sigma, heavy)
    jack = boot = 0
    for row in x:
        est = seed_jackknife(seeds, pooled_mean(row, sizes))
        jack += est.low <= 1.0 <= est.high
        low, high = bootstrap_interval(row, seeds, units, rng)
        boot += low <= 1.0 <= high
    # a ratio: means 2 and 4 (ratio 0.5), the spreads scaled to a quarter of the smaller mean
    a = simulate(rng, reps, seeds, units, 2.0, tau / 4, sigma / 4, heavy)
    b = simulate(rng, reps, seeds, units, 4.0, tau / 4, sigma / 4, heavy)
    jack_r = boot_r = 0
    for xa, xb in zip(a, b):
        ma, mb = pooled_mean(xa, sizes), pooled_mean(xb, sizes)
        est = seed_jackknife(seeds, lambda keep, ma=ma, mb=mb: ma(keep) / mb(keep), log=True)
        jack_r += est.low <= 0.5 <= est.high
        low, high = bootstrap_ratio(xa, xb, seeds, units, rng)
        boot_r += low <= 0.5 <= high
    cells = [f"{100 * k / reps:.1f}%" for k in (jack, boot, jack_r, boot_r)]
    return f"| {name} | {seeds} | {units} | " + " | ".join(cells) + " |"


def _verdicts(x: np.ndarray, seeds: int, units: int, rng: np.random.Generator) -> tuple[str, str]:
    """The verdict on "mean > 0" by the seed jackknife's interval and by the bootstrap's."""
    est = seed_jackknife(seeds, pooled_mean(x, [units] * seeds))
    return verdict(est.low, est.high, side="greater"), verdict(
        *bootstrap_interval(x, seeds, units, rng), side="greater"
    )


def agreement_row(rng: np.random.Generator, reps: int, seeds: int, units: int, effect: float) -> str:
    """Pairs of independent demos whose mean is ``effect`` standard errors above 0: how often the verdicts agree."""
    se = math.sqrt((1.0 + 1.0 / units) / seeds)  # tau = sigma = 1: the pooled mean's standard error
    first = simulate(rng, reps, seeds, units, effect * se, 1.0, 1.0, False)
    second = simulate(rng, reps, seeds, units, effect * se, 1.0, 1.0, False)
    same = np.zeros(2)
    opposite = np.zeros(2)
    for x1, x2 in zip(first, second):
        v1, v2 = _verdicts(x1, seeds, units, rng), _verdicts(x2, seeds, units, rng)
        for k in range(2):
            same[k] += v1[k] == v2[k]
            opposite[k] += {v1[k], v2[k]} == {"reproduced", "contradicted"}
    cells = [f"{100 * x / reps:.1f}%" for x in (same[0], opposite[0], same[1], opposite[1])]
    return f"| {effect:g} | {seeds} | " + " | ".join(cells) + " |"


def main() -> None:
    """Print the coverage table, then the agreement table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000, help="simulated demos per setting")
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 5], help="trained models per model")
    parser.add_argument("--units", type=int, default=3, help="units (mini-batches) per trained model")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"Coverage of the 95% interval, {args.reps} simulated demos per row (binomial s.e. "
        f"{100 * math.sqrt(0.95 * 0.05 / args.reps):.1f} points)\n"
    )
    print(
        "| spreads | seeds | units per seed | mean: seed jackknife t | mean: bootstrap seeds, units "
        "| ratio: seed jackknife t (log) | ratio: bootstrap seeds, units |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for seeds in args.seeds:
        for spread in SPREADS:
            print(coverage_row(rng, args.reps, seeds, args.units, spread))
    print(
        "\nTwo independent demos, claim mean > 0 (tau = sigma = 1), the effect in standard errors of the pooled "
        f"mean; {args.reps} pairs per row: the share with the same verdict, and with one reproduced and the other "
        "contradicted\n"
    )
    print("| effect / s.e. | seeds | jackknife t: same | opposite | bootstrap: same | opposite |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for seeds in args.seeds:
        for effect in (0.0, 2.0, 4.0, 6.0, 8.0, 12.0):
            print(agreement_row(rng, args.reps, seeds, args.units, effect))
    print(
        "\ncommand: python benchmarks/coverage.py "
        + f"--reps {args.reps} --seeds {' '.join(map(str, args.seeds))} --units {args.units}"
    )


if __name__ == "__main__":
    main()
