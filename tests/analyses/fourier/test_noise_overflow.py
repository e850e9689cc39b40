"""Band noise too strong for the images' dtype is one line, never an accuracy drop measured from NaN logits."""

import pytest
import torch
from helpers import one_line_error
from torch import nn

from landscape.analyses.fourier.noise import hits


def batches():
    gen = torch.Generator().manual_seed(0)
    return [(0, (torch.randn(4, 1, 8, 8, generator=gen), torch.tensor([0, 1, 0, 1])))]


def model(scale=1.0):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Flatten(), nn.Linear(64, 2))
    with torch.no_grad():
        net[1].weight.mul_(scale)
    return net


def noise(strength):
    return {"centre": 0.5, "width": 0.1, "seed": 0, "construction": "annulus", "strength": strength}


def test_an_ordinary_strength_counts_every_sample():
    assert hits(model(), batches(), noise(0.5))[1] == 4


@pytest.mark.parametrize(
    ("strength", "words"),
    [(1e308, "makes the noisy images non-finite"), (3e38, "makes the noisy images non-finite"), (1e30, "logits")],
)
def test_noise_that_overflows_the_images_or_the_logits_is_one_line(strength, words):
    msg = one_line_error(hits, model(scale=1e10), batches(), noise(strength))
    assert words in msg and "--noise-strength" in msg
