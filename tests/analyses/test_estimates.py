"""Every analysis's time estimate comes from timed work: within a factor of 3 of the run it announces.

Each run is a few seconds long, so that timing noise is small against it; the estimate and the time are taken in
the same run (a loaded machine slows both alike).
"""

import time

import pytest
import torch

import landscape
from landscape.models import create_model
from landscape.runtime import progress

#: the most an estimate may be off, either way
FACTOR = 3.0


def model(seed=0, name="resnet_mini"):
    torch.manual_seed(seed)
    return create_model(name, num_classes=10, in_chans=1)


RUNS = {
    "surface": lambda: landscape.surface(model(), "digits", samples=64, batch_size=32, x="-1:1:5", y="-1:1:5"),
    "hessian": lambda: landscape.hessian(model(), "digits", samples=16, batch_size=16, top_k=1),
    "hessian_per_block": lambda: landscape.hessian(
        model(), "digits", samples=8, batch_size=8, top_k=0, per_block=True, trace_samples=6
    ),
    # the defaults: auto's measurement of the ways to make products and to group the batches comes after the
    # announcement, and is part of the time the estimate is held against
    "spectrum": lambda: landscape.spectrum(model(), "digits", samples=24, batch_size=8, top_k=1),
    "sharpness": lambda: landscape.sharpness(
        model(), "digits", samples=24, batch_size=8, measure="worst", steps=3, rho=[0.01, 0.05]
    ),
    "connect": lambda: landscape.connect(model(0), model(1), "digits", samples=64, batch_size=64, steps=9),
    "fourier": lambda: landscape.fourier(model(), "digits", samples=128, batch_size=64),
    "lesion": lambda: landscape.lesion(model(), "digits", samples=128, batch_size=64),
    "similarity": lambda: landscape.similarity(model(), "digits", samples=128, batch_size=64),
}


@pytest.mark.parametrize("analysis", sorted(RUNS))
def test_the_estimate_is_within_a_factor_of_three_of_the_time_the_run_takes(monkeypatch, analysis):
    announced = []
    words = progress.estimate

    def record(units, seconds_per_unit, unit, *, at_least=False):
        announced.append((None if seconds_per_unit is None else units * seconds_per_unit, time.perf_counter()))
        return words(units, seconds_per_unit, unit, at_least=at_least)

    monkeypatch.setattr(progress, "estimate", record)
    RUNS[analysis]()
    end = time.perf_counter()
    ((estimated, start),) = announced
    took = end - start
    print(f"{analysis}: estimated {estimated:.2f} s, took {took:.2f} s")
    assert estimated is not None and took / FACTOR <= estimated <= took * FACTOR, (estimated, took)
