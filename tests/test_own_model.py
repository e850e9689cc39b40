"""A researcher's own model and data through the Python API: a BatchNorm CNN, a DataLoader of dict batches."""

import importlib
import inspect

import matplotlib
import matplotlib.figure
import numpy as np
import pytest
import torch
from helpers import one_line_error
from torch import nn
from torch.utils.data import DataLoader, Dataset

import landscape
from landscape.core.calls import field_default

matplotlib.use("Agg")


class SmallCNN(nn.Module):
    """conv - BatchNorm - ReLU - pool - linear, for 1 x 8 x 8 images and 3 classes."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AvgPool2d(2))
        self.head = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class DictImages(Dataset):
    """40 seeded images with labels, each item a dict (as many datasets of the field give them)."""

    def __init__(self, n=40):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"image": self.x[i], "label": self.y[i], "index": i}


def pick(batch):
    return batch["image"], batch["label"]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    net = SmallCNN()
    with torch.no_grad():  # running statistics away from their initial values, as after training
        net.features[1].running_mean.uniform_(-0.1, 0.1)
        net.features[1].running_var.uniform_(0.5, 1.5)
    return net.eval()


@pytest.fixture(scope="module")
def loader():
    return DataLoader(DictImages(), batch_size=8)


def loss_of(model, x, y):
    """The reference: the mean cross-entropy of the first images, from the definition."""
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(x), y))


def test_an_own_cnn_with_dict_batches_runs_every_analysis(model, loader, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = DictImages()
    common = {"batch": pick, "samples": 20, "progress": False}
    surface = landscape.surface(
        model, loader, x=(-0.5, 0.5, 3), y=[-0.5, 0.0, 0.5], compile="off", batch_points=1, **common
    )
    hessian = landscape.hessian(model, loader, top_k=1, **common)
    sharpness = landscape.sharpness(model, loader, rho=(0.01,), measure="average", draws=2, **common)
    other = SmallCNN().eval()
    connect = landscape.connect(model, other, loader, steps=3, bn="eval", **common)
    fourier = landscape.fourier(model, loader, taps=("features.0=conv", "features.2=conv"), **common)
    results = {"surface": surface, "hessian": hessian, "sharpness": sharpness, "connect": connect, "fourier": fourier}
    for kind, result in results.items():
        assert result.attrs["n_samples"] == 20, kind
        assert "0x" not in result.attrs["command"], result.attrs["command"]
        assert result.attrs["command"].startswith(f"landscape.{kind}(<SmallCNN>")
        assert (
            "data=<DataLoader of 5 batches>" in result.attrs["command"]
            and "batch=<function pick>" in result.attrs["command"]
        )
        assert len(repr(result)) < 1000, kind
        figures = result.plot()
        assert figures and all(isinstance(f, matplotlib.figure.Figure) for f in figures.values()), kind
        dataset = result.to_xarray()
        assert dataset.sizes, kind
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written without out=
    # the centre of the surface is the loss of the first 20 images, from the definition
    centre = surface["loss"][1, 1]
    assert centre == pytest.approx(loss_of(model, data.x[:20], data.y[:20]), rel=1e-5)
    np.testing.assert_array_equal(surface["xcoordinates"], [-0.5, 0.0, 0.5])
    assert surface.attrs["ygrid_points"] == [-0.5, 0.0, 0.5] and "xgrid_points" not in surface.attrs
    xr = surface.to_xarray()
    assert set(xr["loss"].dims) == {"y", "x"}
    # the top Hessian eigenvalue against the dense float64 Hessian of the same 20 images
    assert hessian["eigenvalues"][0] == pytest.approx(dense_top_eigenvalue(model, data.x[:20], data.y[:20]), rel=1e-3)
    assert connect["line/loss"][0, 0] == pytest.approx(loss_of(model, data.x[:20], data.y[:20]), rel=1e-5)


def dense_top_eigenvalue(model, x, y):
    """The largest eigenvalue of the loss Hessian over every parameter: torch.func.hessian, float64, eigh."""
    names = [n for n, _ in model.named_parameters()]
    net = SmallCNN().double().eval()
    net.load_state_dict(model.state_dict())
    params = {n: p.detach().double() for n, p in net.named_parameters()}
    buffers = {n: b.double() if b.is_floating_point() else b for n, b in net.named_buffers()}
    sizes = [params[n].numel() for n in names]

    def loss(flat):
        chunks = dict(zip(names, torch.split(flat, sizes), strict=True))
        state = {n: chunks[n].view_as(params[n]) for n in names}
        out = torch.func.functional_call(net, {**state, **buffers}, (x.double(),))
        return nn.functional.cross_entropy(out, y)

    flat = torch.cat([params[n].reshape(-1) for n in names])
    return float(torch.linalg.eigvalsh(torch.func.hessian(loss)(flat))[-1])


def test_a_dataset_is_read_in_batches_of_batch_size_and_samples_takes_the_first(model):
    data = DictImages()
    result = landscape.surface(model, data, batch=pick, samples=12, batch_size=5, x=(0, 0, 1), y=None, progress=False)
    assert result.attrs["n_samples"] == 12 and result.attrs["dataset"] == "batches"
    assert result["loss"][0, 0] == pytest.approx(loss_of(model, data.x[:12], data.y[:12]), rel=1e-5)
    assert "data=<DictImages of 40 samples>" in result.attrs["command"]
    one_line_error(
        landscape.surface,
        model,
        data,
        batch=pick,
        samples=41,
        x=(0, 0, 1),
        y=None,
        progress=False,
        match=r"^samples=41 asks for more images than the data holds \(40\); lower samples= or leave it out$",
    )
    # the default samples (1000) takes what the data holds
    whole = landscape.surface(model, data, batch=pick, x=(0, 0, 1), y=None, progress=False)
    assert whole.attrs["n_samples"] == 40


def test_signatures_name_every_option_of_the_options_class():
    from landscape.analyses.registry import analyses
    from landscape.core.calls import option_fields

    for item in (a for a in analyses() if a.api):
        module, _, name = item.api.partition(":")
        function = getattr(importlib.import_module(module), name)
        params = inspect.signature(function).parameters
        own = inspect.signature(inspect.unwrap(function)).parameters
        options = [f for f in option_fields(item.options) if f.name not in own]
        assert [n for n in params if n not in own] == [f.name for f in options], item.kind
        for field in options:
            assert params[field.name].kind is inspect.Parameter.KEYWORD_ONLY
            assert params[field.name].default == field_default(field), (item.kind, field.name)
            assert f"    {field.name}: " in function.__doc__, (item.kind, field.name)
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), item.kind
    assert "top_k: int = 5" in str(inspect.signature(landscape.hessian))
    assert "    top_k: eigenpairs to compute (0: none). Default: ``5``." in landscape.hessian.__doc__


def test_mistakes_are_named_as_what_they_are(model, loader):
    one_line_error(
        landscape.hessian,
        model,
        loader,
        topk=5,
        match=r"^landscape.hessian\(\) got an unexpected keyword argument 'topk'; did you mean top_k\?$",
    )
    with pytest.raises(TypeError):
        landscape.hessian(model, loader, topk=5)
    one_line_error(landscape.surface, model, 123, match=r"^data= takes a dataset spec .*; got an int \(123\)$")
    one_line_error(
        landscape.connect,
        model,
        loader,
        match=r"^the second model is <DataLoader of 5 batches>, not a model: .* takes 2 models, then the data",
    )
    one_line_error(
        landscape.surface,
        model,
        loader,
        progress=False,
        match=r"batch 0 is a dict \(keys 'image', 'label', 'index'\); .*batch=lambda",
    )
    one_line_error(
        landscape.surface,
        model,
        loader,
        batch=pick,
        x="1:0:3",
        match=r"^bad grid x='1:0:3': MIN must be smaller than MAX$",
    )
    one_line_error(landscape.surface, model, loader, batch=pick, batch_points=0, match=r"^batch_points= must be")
    bad = [(torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 5]))]
    one_line_error(
        landscape.hessian,
        model,
        bad,
        top_k=1,
        progress=False,
        match=r"^the data has labels 0..5 but the model outputs 3 classes",
    )
    negative = [(torch.randn(4, 1, 8, 8), torch.tensor([0, -1, 2, 1]))]
    one_line_error(
        landscape.hessian, model, negative, top_k=1, progress=False, match=r"labels -1..2 but the model outputs 3"
    )
    two_d = [(torch.randn(4, 1, 8, 8), torch.zeros(4, 3, dtype=torch.long))]
    one_line_error(landscape.hessian, model, two_d, top_k=1, progress=False, match=r"int64 labels of shape \(4, 3\)")
    empty = [(torch.randn(0, 1, 8, 8), torch.zeros(0, dtype=torch.long))]
    one_line_error(landscape.hessian, model, empty, top_k=1, progress=False, match=r"^batch 0 is empty")
    no_weights = nn.Sequential(nn.Flatten(), nn.AdaptiveAvgPool1d(3))
    one_line_error(
        landscape.hessian,
        no_weights,
        bad[:0] or [(torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 1]))],
        top_k=1,
        progress=False,
        match=r"has no parameters",
    )
