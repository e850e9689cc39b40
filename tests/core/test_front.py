"""The shared front half: errors while building the Objective are classified by type."""

import numpy as np
import pytest
import torch

import landscape.core.objective
from landscape.core.front import batches_for, build_objective, load_inputs
from landscape.core.params import flatten, unflatten
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


# ---------------------------------------------------------------------------- the model's floating-point type
def _float64_model():
    from landscape.models import create_model

    torch.manual_seed(0)
    return create_model("resnet_mini", num_classes=10, in_chans=1, widths=(4, 8), layers=(1, 1)).eval().double()


def _batches_loss(model, batches):
    """The mean cross-entropy of each batch at the model's weights, in the model's own type (the definition)."""
    with torch.no_grad():
        return [float(torch.nn.functional.cross_entropy(model(x.to(torch.float64)), y)) for x, y in batches]


def test_a_float64_model_is_analysed_in_float64_unless_dtype_says_otherwise():
    import landscape
    from landscape.data import fixed_batches, load_dataset

    model = _float64_model()
    batches = fixed_batches(load_dataset("digits", "train"), 8, 16, seed=0)  # float32 images, as a loader gives
    exact = _batches_loss(model, batches)
    common = {"rho": [0.01], "measure": "average", "samples": 16, "batch_size": 8, "progress": False}
    own = landscape.sharpness(model, batches, **common)
    assert own.attrs["dtype"] == "float64"
    np.testing.assert_allclose(own["base_loss"], exact, rtol=1e-13)  # float32 would be ~1e-7 away
    asked = landscape.sharpness(model, batches, dtype="float32", **common)
    assert asked.attrs["dtype"] == "float32"
    assert np.abs(np.asarray(asked["base_loss"]) / exact - 1).max() > 1e-12  # computed in float32, as asked
    np.testing.assert_allclose(asked["base_loss"], exact, rtol=1e-5)
    # a small float64 MLP's top Hessian eigenvalue on one batch, against its dense float64 Hessian
    g = torch.Generator().manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 6), torch.nn.Tanh(), torch.nn.Linear(6, 10))
    with torch.no_grad():
        for p in mlp.double().parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    small = fixed_batches(load_dataset("digits:8", "train"), 16, 16, seed=0)
    top = landscape.hessian(mlp, small, top_k=1, tol=1e-10, samples=16, batch_size=16, progress=False)
    params = {n: p.detach() for n, p in mlp.named_parameters()}
    x, y = small[0][0].to(torch.float64), small[0][1]

    def loss(flat):
        return torch.nn.functional.cross_entropy(torch.func.functional_call(mlp, unflatten(flat, params), (x,)), y)

    H = torch.func.hessian(loss)(flatten(params))
    assert top.attrs["dtype"] == "float64"
    assert float(top["eigenvalues"][-1]) == pytest.approx(float(torch.linalg.eigvalsh(H).max()), rel=1e-9)


def test_a_float64_model_never_fails_on_torch_dtype_error_in_any_analysis():
    import copy

    import landscape

    model = _float64_model()
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.01)
    data = {"samples": 8, "batch_size": 8, "progress": False}
    runs = {
        "surface": lambda: landscape.surface(model, "digits", x="-1:1:2", **data),
        "spectrum": lambda: landscape.spectrum(model, "digits", top_k=1, **data),
        "worst sharpness": lambda: landscape.sharpness(model, "digits", rho=[0.01], steps=1, restarts=1, **data),
        "fourier": lambda: landscape.fourier(model, "digits", **data),
        "lesion": lambda: landscape.lesion(model, "digits", **data),
        "similarity": lambda: landscape.similarity(model, "digits", **data),
        "connect": lambda: landscape.connect(model, other, "digits", steps=2, **data),
        "align": lambda: landscape.align(model, other, "digits", **data),
    }
    for name, run in runs.items():
        run()  # a dtype mismatch would raise (torch's own error, or ours naming the model's forward)
        assert all(p.dtype == torch.float64 for p in model.parameters()), name  # the caller's model untouched


def test_a_float64_checkpoint_rebuilds_a_float64_model(tmp_path):
    from landscape.models.checkpoint import load_model, save_checkpoint

    model = _float64_model()
    path = save_checkpoint(
        tmp_path / "f64.pt", model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10
    )
    loaded, _ = load_model(path)
    assert all(t.dtype == torch.float64 for t in loaded.state_dict().values() if t.is_floating_point())
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    single = save_checkpoint(
        tmp_path / "f32.pt", model.float(), model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10
    )
    assert next(load_model(single)[0].parameters()).dtype == torch.float32
