"""A model whose constructor options make it larger than the memory is one line before it is built."""

import pytest
import torch
from helpers import one_line_error

from landscape.models import create_model
from landscape.runtime import devices


def test_a_model_too_large_for_the_memory_is_refused_before_it_is_built():
    msg = one_line_error(create_model, "resnet_mini", in_chans=1, widths=[100_000] * 4)
    assert "model 'resnet_mini' of " in msg and "parameters needs" in msg and "--model-kw" in msg


def test_the_estimate_leaves_the_callers_random_state_and_the_weights_as_they_were():
    torch.manual_seed(5)
    state = torch.random.get_rng_state()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        reference = create_model("resnet_mini", in_chans=1).state_dict()
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(0)
    again = create_model("resnet_mini", in_chans=1).state_dict()
    assert all(torch.equal(reference[k], again[k]) for k in reference)


def test_an_allocation_that_fails_while_the_model_is_built_is_one_line(monkeypatch):
    monkeypatch.setattr(devices, "device_memory", lambda device: 0)  # no estimate possible

    def fails(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes")

    monkeypatch.setattr(torch.nn.Conv2d, "reset_parameters", fails)
    msg = one_line_error(create_model, "resnet_mini", in_chans=1)
    assert "does not fit the memory" in msg and "can't allocate memory" in msg


@pytest.mark.parametrize("name", ["resnet_mini", "vit_mini"])
def test_models_of_ordinary_sizes_are_built(name):
    assert sum(p.numel() for p in create_model(name, in_chans=1).parameters()) > 0
