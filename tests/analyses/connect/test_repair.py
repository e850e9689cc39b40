"""REPAIR: each repaired channel's statistics, measured with the test's own hooks, equal the interpolated targets."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import one_line_error, reestimate_bn
from torch import nn

import landscape
from landscape.analyses.connect.path import Endpoint, linear_point
from landscape.analyses.connect.repair import Repair
from landscape.core.objective import Objective
from landscape.data import load_dataset
from landscape.models import create_model
from landscape.options.connect import ConnectOptions

TINY = {"num_classes": 10, "in_chans": 1, "widths": (4, 8), "layers": (1, 1)}


def tiny_resnet(seed):
    torch.manual_seed(seed)
    return create_model("resnet_mini", **TINY).eval()


def mlp(seed, width=24, inputs=64):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Flatten(), nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)
    ).eval()


def batches(n=40, seed=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return [(x[:24], y[:24]), (x[24:], y[24:])]


def hidden_layers(model):
    """Every Conv and Linear layer but the classifier (the last Linear), by name, in module order."""
    names = [n for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    return names[:-1]


@torch.no_grad()
def reference_statistics(net, data, layers, *, before=None):
    """Per-channel mean and population std of each layer's output (after the hooks in ``before``), float64."""
    sums, handles = {}, []
    for name in layers:
        module = net.get_submodule(name)
        if before is not None:
            handles.append(module.register_forward_hook(before[name]))

        def record(m, i, out, name=name):
            x = (
                out.double()
                .movedim(1 if out.dim() == 4 else -1, -1)
                .reshape(-1, out.shape[1 if out.dim() == 4 else -1])
            )
            held = sums.setdefault(name, [])
            held.append(x)

        handles.append(module.register_forward_hook(record))
    try:
        for x, _ in data:
            net(x)
    finally:
        for h in handles:
            h.remove()
    out = {}
    for name, parts in sums.items():
        x = torch.cat(parts)
        out[name] = (x.mean(0), x.std(0, correction=0))
    return out


def lerp(a, b, alpha):
    net = copy.deepcopy(a)
    sa, sb = a.state_dict(), b.state_dict()
    net.load_state_dict({k: (1 - alpha) * v + alpha * sb[k] if v.is_floating_point() else v for k, v in sa.items()})
    return net


def correction_hooks(corrections):
    def hook_of(c):
        def hook(m, i, out):
            shape = [1] * out.dim()
            shape[c.dim] = -1
            return out * c.scale.to(out).view(shape) + c.shift.to(out).view(shape)

        return hook

    return {c.module: hook_of(c) for c in corrections}


@pytest.mark.parametrize("build", [tiny_resnet, mlp], ids=["batchnorm", "no-batchnorm"])
def test_repaired_channels_have_the_interpolated_statistics_of_the_ends(build):
    a, b, data = build(0), build(1), batches()
    bn = any(isinstance(m, nn.BatchNorm2d) for m in a.modules())
    layers = hidden_layers(a)
    objective = Objective(a, data)
    repair = Repair(objective, Endpoint.of(a), Endpoint.of(b), "recompute")
    assert [s.module for s in repair.sites] == layers
    ends = [reference_statistics(reestimate_bn(copy.deepcopy(m), data) if bn else m, data, layers) for m in (a, b)]
    for alpha in (0.3, 0.5):
        point = linear_point(Endpoint.of(a), Endpoint.of(b), alpha)
        corrections = repair.corrections(point, alpha)
        hooks = correction_hooks(corrections)
        net = lerp(a, b, alpha)
        handles = [net.get_submodule(n).register_forward_hook(h) for n, h in hooks.items()]
        if bn:
            reestimate_bn(net, data)  # the point's statistics, with the corrections on
        for h in handles:
            h.remove()
        found = reference_statistics(net.eval(), data, layers, before=hooks)
        unrepaired = reference_statistics(
            reestimate_bn(lerp(a, b, alpha), data) if bn else lerp(a, b, alpha), data, layers
        )
        moved = 0.0
        for name in layers:
            want_mean = (1 - alpha) * ends[0][name][0] + alpha * ends[1][name][0]
            want_std = (1 - alpha) * ends[0][name][1] + alpha * ends[1][name][1]
            torch.testing.assert_close(found[name][0], want_mean, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(found[name][1], want_std, atol=1e-5, rtol=1e-5)
            moved = max(moved, float((unrepaired[name][1] - want_std).abs().max()))
        assert moved > 1e-3  # the test could fail: without REPAIR the statistics are elsewhere


def trained_mlp(seed, data, steps=400):
    net = mlp(seed, width=32).train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    x, y = data
    for _ in range(steps):
        idx = torch.randint(0, len(y), (64,), generator=g)
        opt.zero_grad()
        F.cross_entropy(net(x[idx]), y[idx]).backward()
        opt.step()
    return net.eval()


def test_repair_lowers_the_midpoint_barrier_of_two_trained_networks_without_batchnorm():
    train = load_dataset("digits", "train")
    x = F.avg_pool2d(torch.stack([train[i][0] for i in range(len(train))]), 4)  # 8 x 8 images
    y = torch.tensor([int(train[i][1]) for i in range(len(train))])
    a, b = trained_mlp(0, (x, y)), trained_mlp(1, (x, y))
    data = [(x[i : i + 256], y[i : i + 256]) for i in range(0, 768, 256)]
    plain = landscape.connect(a, b, data, steps=3, align="weights", device="cpu", progress=False)
    repaired = landscape.connect(a, b, data, steps=3, align="weights", repair=True, device="cpu", progress=False)
    assert repaired.attrs["repair_layers"] == 2 and repaired.attrs["repair_channels"] == 64
    assert "REPAIR" in repaired.attrs["repair_statistics"]
    np.testing.assert_allclose(repaired["line/loss"][0, [0, 2]], plain["line/loss"][0, [0, 2]], rtol=1e-5)
    before = plain.attrs["barriers"]["line"]["train"]["loss"]
    after = repaired.attrs["barriers"]["line"]["train"]["loss"]
    assert after < 0.9 * before, (before, after)
    assert "unaligned_line" in repaired.attrs["barriers"]


def test_repair_options():
    assert ConnectOptions(repair=True).attrs()["repair"] is True and "repair" not in ConnectOptions().attrs()
    one_line_error(ConnectOptions, repair="yes", match="repair must be True or False")


class _Concat(nn.Module):
    """Two Linear layers whose units are concatenated: no permutation spec covers a concatenation along the units."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(64, 3), nn.Linear(64, 3), nn.Linear(6, 10)

    def forward(self, x):
        x = x.flatten(1)
        return self.head(torch.cat([self.a(x), self.b(x)], dim=1))


def test_repair_refuses_a_network_without_a_permutation_spec_in_one_line():
    a, b = _Concat().eval(), _Concat().eval()
    one_line_error(landscape.connect, a, b, batches(), repair=True, steps=2, device="cpu", match="repair=True")
