"""The shared front half: errors while building the Objective are classified by type."""

import pytest
import torch

import landscape.core.objective
from landscape.core.front import batches_for, build_objective, load_inputs
from landscape.core.source import ModelSource
from landscape.errors import ForeignError, LandscapeError


@pytest.fixture(scope="module")
def inputs():
    source = ModelSource(model="resnet_mini", random_init=True)
    return load_inputs(source, data="digits", device="cpu")


def _raising(exc):
    def init(self, *args, **kwargs):
        raise exc

    return init


def test_out_of_memory_names_the_batch_size_to_lower(inputs, monkeypatch):
    batches = batches_for(inputs, batch_size=12, n_samples=24)
    monkeypatch.setattr(landscape.core.objective.Objective, "__init__", _raising(torch.OutOfMemoryError("CUDA oom")))
    with pytest.raises(LandscapeError, match="out of memory on cpu with batches of 12 samples; lower --batch-size"):
        build_objective(inputs, batches)


def test_a_runtime_error_of_our_own_code_stays_a_traceback(inputs, monkeypatch):
    batches = batches_for(inputs, batch_size=12, n_samples=24)
    monkeypatch.setattr(landscape.core.objective.Objective, "__init__", _raising(RuntimeError("a bug of landscape")))
    with pytest.raises(RuntimeError, match="a bug of landscape"):
        build_objective(inputs, batches)


def test_a_forward_that_cannot_run_on_the_data_is_named_as_the_models(inputs, monkeypatch):
    batches = batches_for(inputs, batch_size=12, n_samples=24)
    message = "mat1 and mat2 shapes cannot be multiplied (12x64 and 96x10)"

    def forward(self, x):
        raise RuntimeError(message + "\nmore detail")

    monkeypatch.setattr(type(inputs.model), "forward", forward)
    with pytest.raises(ForeignError) as e:
        build_objective(inputs, batches)
    assert str(e.value).startswith(f"the forward of model resnet_mini raised RuntimeError: {message}; ")
    assert "inputs of shape (12, 1, 32, 32)" in str(e.value) and isinstance(e.value.__cause__, RuntimeError)


def test_the_real_objective_is_built(inputs):
    objective = build_objective(inputs, batches_for(inputs, batch_size=12, n_samples=24))
    assert objective.n_samples == 24 and objective.device == torch.device("cpu")
