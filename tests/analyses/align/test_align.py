"""Permutation alignment: permuted copies aligned back exactly, weight matching against brute force, the
function check, and the networks that are refused."""

import itertools

import pytest
import torch
from helpers import one_line_error
from torch import nn

from landscape.analyses.align import run as align_run
from landscape.analyses.align.run import align_models, function_error
from landscape.analyses.align.spec import PermutationSpec, permutation_spec
from landscape.models import create_model

from .references import (
    ResidualCNN,
    TokenMLP,
    mlp,
    permuted_mlp,
    permuted_residual_cnn,
    permuted_resnet,
    permuted_token_mlp,
    randomise_bn,
    relative_difference,
)


def _zoo_resnet():
    torch.manual_seed(0)
    return randomise_bn(create_model("resnet_mini", num_classes=10, in_chans=1, widths=(4, 6, 8), layers=(1, 2, 1)))


CASES = {
    "mlp": (lambda: mlp(), permuted_mlp, (1, 4, 4)),
    "residual_cnn": (lambda: randomise_bn(ResidualCNN()), permuted_residual_cnn, (1, 8, 8)),
    "token_mlp_layernorm": (lambda: TokenMLP().eval(), permuted_token_mlp, (5, 4)),
    "resnet_mini": (_zoo_resnet, lambda m: permuted_resnet(m, ("stem.0", "stem.1"), "shortcut"), (1, 8, 8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("method", ["weights", "activations"])
def test_a_permuted_copy_is_aligned_back_exactly(case, method):
    build, permute, shape = CASES[case]
    a = build()
    b = permute(a)
    x = torch.randn(64, *shape, generator=torch.Generator().manual_seed(5))
    assert relative_difference(a, b, x) < 1e-5  # the hand-made copy computes A's function...
    assert any(not torch.equal(u, v) for u, v in zip(a.state_dict().values(), b.state_dict().values()))  # ...apart
    held = {n: t.clone() for n, t in b.state_dict().items()}
    r = align_models(a, b, [(x, None)], method=method)
    for name, t in a.state_dict().items():
        assert torch.equal(r.model.state_dict()[name], t), name
    assert r.function_error <= 1e-5 and relative_difference(b, r.model, x) <= 1e-5
    assert r.matching.converged and r.matching.objective_after > r.matching.objective_before
    assert all(torch.equal(t, held[n]) for n, t in b.state_dict().items())  # theta_B itself is not changed


def test_torchvision_resnet18_at_random_init_is_aligned_back_exactly():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    a = randomise_bn(torchvision.models.resnet18(num_classes=10))
    b = permuted_resnet(a, ("conv1", "bn1"), "downsample")
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    assert relative_difference(a, b, x) < 1e-5
    r = align_models(a, b, [(x, None)], method="weights")
    assert len(r.spec.permutations) == 12  # 4 streams and 8 blocks' inner units
    assert all(torch.equal(r.model.state_dict()[n], t) for n, t in a.state_dict().items())
    assert r.function_error <= 1e-5


def test_the_spec_ties_residual_streams_and_batchnorm_buffers_and_fixes_the_ends():
    spec = permutation_spec(randomise_bn(ResidualCNN()), torch.randn(2, 1, 8, 8))
    assert [(p.name, p.size) for p in spec.permutations] == [("conv0", 6), ("conv1", 5)]
    stream = {(a.tensor, a.dim, a.repeat) for a in spec.permutations[0].axes}
    assert {("bn0.running_mean", 0, 1), ("bn2.running_var", 0, 1), ("conv2.bias", 0, 1)} <= stream
    assert ("fc.weight", 1, 16) in stream and not any(a.tensor == "fc.weight" and a.dim == 0 for _, a in _axes(spec))
    assert not any(a.tensor == "conv0.weight" and a.dim == 1 for _, a in _axes(spec))  # the input's channels


def _axes(spec: PermutationSpec):
    return [(p.name, a) for p in spec.permutations for a in p.axes]


def _mlp_objective(a, b):
    """sum_t <A_t, B_t> of a Linear-ReLU-Linear MLP, every tensor the hidden permutation moves (all of them)."""
    return sum(float((a[n].double() * b[n].double()).sum()) for n in ("1.weight", "1.bias", "3.weight"))


def test_weight_matching_of_one_hidden_layer_reaches_the_brute_force_optimum():
    a, b = mlp((3, 5, 2), seed=0), mlp((3, 5, 2), seed=1)
    sa, sb = a.state_dict(), b.state_dict()
    best = -float("inf")
    for p in itertools.permutations(range(5)):
        p = list(p)
        moved = {"1.weight": sb["1.weight"][p], "1.bias": sb["1.bias"][p], "3.weight": sb["3.weight"][:, p]}
        best = max(best, _mlp_objective(sa, moved))
    r = align_models(a, b, [(torch.randn(8, 3), None)], method="weights")
    assert _mlp_objective(sa, r.model.state_dict()) == pytest.approx(best, rel=1e-12)
    assert r.matching.objective_after == pytest.approx(best, rel=1e-12)
    assert r.matching.sweeps == 2 and r.matching.converged  # one to solve it, one that changes nothing


def test_the_function_check_catches_a_spec_that_misses_a_tie(monkeypatch):
    a = randomise_bn(ResidualCNN())
    b = permuted_residual_cnn(a)
    x = torch.randn(16, 1, 8, 8)
    traced = permutation_spec

    def without_running_mean(model, example):
        spec = traced(model, example)
        p = spec.permutations[1]
        kept = tuple(ax for ax in p.axes if ax.tensor != "bn1.running_mean")
        return PermutationSpec(spec.model, (spec.permutations[0], type(p)(p.name, p.size, kept, p.sites)))

    monkeypatch.setattr(align_run, "permutation_spec", without_running_mean)
    one_line_error(align_models, a, b, [(x, None)], match="computes another function than theta_B")
    assert function_error(a, a, [(x, None)]) == 0.0


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.att = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        y = self.embed(x)
        z, _ = self.att(y, y, y)
        return self.head(z.mean(1))


class _Concat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(4, 3), nn.Linear(4, 3), nn.Linear(6, 2)

    def forward(self, x):
        return self.head(torch.cat([self.a(x), self.b(x)], dim=1))


class _Branch(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x  # control flow on data


def test_networks_no_spec_covers_are_refused_in_one_line_naming_the_module():
    one_line_error(permutation_spec, _Attention().eval(), torch.randn(2, 3, 4), match=r"module att \(MultiheadAtt")
    one_line_error(permutation_spec, _Concat().eval(), torch.randn(2, 4), match="cat")
    branching = nn.Sequential(nn.Linear(4, 3), nn.Sequential(_Branch()))
    one_line_error(permutation_spec, branching, torch.randn(2, 4), match=r"cannot trace module 1\.0 \(_Branch\)")


def test_unpermutable_parts_with_fixed_inputs_are_left_alone():
    class Gate(nn.Module):  # an unknown elementwise product of the input: every unit is fixed by it
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            return self.fc2(self.fc1(x) * x)

    spec = permutation_spec(Gate().eval(), torch.randn(2, 4))
    assert spec.permutations == ()


def test_models_in_training_mode_are_aligned_in_eval_mode_and_left_as_they_were():
    a = randomise_bn(ResidualCNN())
    b = permuted_residual_cnn(a).train()
    held = {n: t.clone() for n, t in b.state_dict().items()}
    r = align_models(a.train(), b, [(torch.randn(16, 1, 8, 8), None)])
    assert all(torch.equal(r.model.state_dict()[n], t) for n, t in a.state_dict().items())
    assert a.training and b.training and all(torch.equal(t, held[n]) for n, t in b.state_dict().items())
