"""BatchNorm folding: exact against the unfolded model at perturbed points, refusals, the zoo, the surface."""

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.run import compute_surface
from landscape.core.objective import Objective
from landscape.models import create_model
from landscape.models.bn_fold import fold_batchnorm


def randomise_bn(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=g, dtype=torch.float64) - 0.5)
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g, dtype=torch.float64))
    return model


class Block(nn.Module):
    """conv (no bias) -> BN -> ReLU -> conv (bias) -> BN (no affine), plus a 1x1 shortcut conv -> BN."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 3, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(3)
        self.conv2 = nn.Conv2d(3, 3, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(3, affine=False)
        self.short = nn.Sequential(nn.Conv2d(2, 3, 1, bias=False), nn.BatchNorm2d(3))
        self.head = nn.Linear(3 * 5 * 5, 4)

    def forward(self, x):
        h = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return self.head(torch.relu(h + self.short(x)).flatten(1))


def state_of(model):
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def perturbed(model, a, b, seed=1):
    """theta + a*d1 + b*d2 over every parameter (BatchNorm weights and biases included), buffers as they are."""
    g = torch.Generator().manual_seed(seed)
    out = state_of(model)
    for n, p in model.named_parameters():
        d1 = torch.randn(p.shape, generator=g, dtype=p.dtype)
        d2 = torch.randn(p.shape, generator=g, dtype=p.dtype)
        out[n] = p.detach() + a * d1 + b * d2
    return out


def test_folded_forward_equals_the_unfolded_one_at_several_points_in_float64():
    torch.manual_seed(0)
    model = randomise_bn(Block().double().eval())
    with torch.no_grad():
        model.bn1.weight.uniform_(0.5, 1.5)
        model.bn1.bias.uniform_(-0.3, 0.3)
    before = copy.deepcopy(model.state_dict())
    folded = fold_batchnorm(model)
    assert folded.n_folded == 3 and folded.module is not model
    assert {p.bn for p in folded.pairs} == {"bn1", "bn2", "short.1"}
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.module.modules())
    # the user's model is untouched: same modules, same tensors
    assert isinstance(model.bn1, nn.BatchNorm2d) and model.conv1.bias is None
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    x = torch.randn(6, 2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for a, b in [(0.0, 0.0), (0.3, -0.2), (-1.0, 0.7), (0.05, 1.3)]:
        state = perturbed(model, a, b)
        with torch.no_grad():
            want = functional_call(model, state, (x,))
            got = functional_call(folded.module, folded.state(state), (x,))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12 * float(want.abs().max()))
        if a or b:  # the point really moved
            assert not torch.allclose(want, functional_call(model, state_of(model), (x,)))


class UsesConvOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)

    def forward(self, x):
        z = self.conv(x)
        return self.bn(z) + z  # the conv's output is used beside the BN: folding would change z


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)

    def forward(self, x):
        if x.sum() > 0:  # control flow on data: torch.fx cannot trace it, and conv/bn are leaves
            x = -x
        return self.bn(self.conv(x))


def plain(**bn_kwargs):
    return nn.Sequential(nn.Conv2d(2, 2, 3, padding=1), nn.BatchNorm2d(2, **bn_kwargs))


@pytest.mark.parametrize(
    "make, note",
    [
        (UsesConvOutput, "used elsewhere"),
        (DataDependent, "does not trace"),
        (lambda: plain(track_running_stats=False), "running statistics"),
        (lambda: plain().train(), "train mode"),
    ],
    ids=["conv-output-reused", "untraceable", "no-running-stats", "train-mode"],
)
def test_folding_is_refused_where_it_cannot_be_proven(make, note):
    model = make().double()
    if note != "train mode":
        model.eval()
    folded = fold_batchnorm(model)
    assert folded.n_folded == 0 and folded.module is model
    assert any(note in n for n in folded.notes), folded.notes


def test_zoo_models_fold_and_agree(one_thread):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    for name, expect in (("resnet_mini", 12), ("alternet_mini", None)):
        model = randomise_bn(create_model(name, num_classes=10).double().eval())
        folded = fold_batchnorm(model)
        n_bn = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
        assert folded.n_folded == (expect if expect is not None else folded.n_folded) and 0 < folded.n_folded <= n_bn
        state = perturbed(model, 0.2, -0.1)
        with torch.no_grad():
            want = functional_call(model, state, (x,))
            got = functional_call(folded.module, folded.state(state), (x,))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-11, atol=1e-12 * float(want.abs().max()))


def test_surface_with_folding_equals_the_unfolded_surface(tmp_path, monkeypatch):
    monkeypatch.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(0)
    model = randomise_bn(Block().double().eval())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(10, 2, 5, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (10,), generator=g)
    objective = Objective(model, [(x[:6], y[:6]), (x[6:], y[6:])])
    dirs = random_directions(objective.params, ndim=2, seed=2, ignore_1d=False)
    xs, ys = np.linspace(-1, 1, 3), np.linspace(-0.5, 0.5, 2)
    kw = {"batch_points": 1, "progress": False, "compile": "off"}
    a = compute_surface(objective, dirs, xs, ys, out=tmp_path / "a.h5", **kw)
    b = compute_surface(objective, dirs, xs, ys, out=tmp_path / "b.h5", fold_bn=False, **kw)
    assert a.attrs["bn_folded"] == 3 and b.attrs["bn_folded"] == 0
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-12)
    np.testing.assert_array_equal(a["accuracy"], b["accuracy"])
