"""Weight matching's start and descent: the invariant match from its definition, its independence of the other
permutations, permuted copies undone exactly for every seed, and the result a fixed point of every step."""

import pytest
import torch

from landscape.analyses.align.permute import apply, identity
from landscape.analyses.align.spec import permutation_spec
from landscape.analyses.align.weights import invariant_matrix, score_matrix, solve, weight_matching
from landscape.models import create_model

from .references import (
    ResidualCNN,
    TokenMLP,
    mlp,
    permuted_mlp,
    permuted_residual_cnn,
    permuted_resnet,
    permuted_token_mlp,
    randomise,
    randomise_bn,
)


def _resnet(seed=0):
    torch.manual_seed(seed)
    return randomise_bn(create_model("resnet_mini", num_classes=10, in_chans=1, widths=(4, 6, 8), layers=(1, 2, 1)))


# model, permuted copy (seeded), input shape; the copies are built by hand from the definition (references)
CASES = {
    "mlp": (lambda: mlp(), permuted_mlp, (1, 4, 4)),
    "residual_cnn": (lambda: randomise_bn(ResidualCNN()), permuted_residual_cnn, (1, 8, 8)),
    "token_mlp_layernorm": (lambda: TokenMLP().eval(), permuted_token_mlp, (5, 4)),
    "resnet_mini": (_resnet, lambda m, seed: permuted_resnet(m, ("stem.0", "stem.1"), "shortcut", seed), (1, 8, 8)),
}


def _entries(t, axis, i):
    """Every entry of unit ``i`` on ``axis`` (its span, its repeat), in any order."""
    start = axis.span[0] if axis.span else 0
    return t.narrow(axis.dim, start + i * axis.repeat, axis.repeat).flatten().double()


@pytest.mark.parametrize("case", ["residual_cnn", "resnet_mini"])
def test_the_invariant_match_is_its_definition_and_ignores_every_other_permutation(case):
    build, permute, shape = CASES[case]
    a = build()
    g = torch.Generator().manual_seed(7)
    noisy = {n: t + 0.1 * torch.randn(t.shape, generator=g) for n, t in permute(a, seed=2).state_dict().items()}
    sa, sb = a.state_dict(), {n: noisy[n] if t.is_floating_point() else t for n, t in a.state_dict().items()}
    spec = permutation_spec(a, torch.randn(2, *shape))
    for p in spec.permutations:
        expected = torch.zeros(p.size, p.size, dtype=torch.float64)
        for i in range(p.size):
            for j in range(p.size):
                for axis in p.axes:
                    ea, eb = _entries(sa[axis.tensor], axis, i), _entries(sb[axis.tensor], axis, j)
                    expected[i, j] += ea.sort().values @ eb.sort().values
        m0 = invariant_matrix(p, sa, sb)
        torch.testing.assert_close(m0, expected, rtol=1e-12, atol=1e-12)
        others = {q.name: torch.randperm(q.size, generator=g) for q in spec.permutations}
        others[p.name] = torch.arange(p.size)
        assert torch.equal(invariant_matrix(p, sa, apply(spec, sb, others)), m0)  # the others are forgotten


@pytest.mark.parametrize("case", sorted(CASES))
def test_permuted_copies_are_undone_exactly_for_every_seed(case):
    build, permute, shape = CASES[case]
    a = build()
    sa = a.state_dict()
    spec = permutation_spec(a, torch.randn(2, *shape))
    for draw in range(3):
        sb = permute(a, seed=draw).state_dict()
        for seed in range(5):
            m = weight_matching(spec, sa, sb, seed=seed)
            aligned = apply(spec, sb, m.perms)
            assert all(torch.equal(aligned[n], t) for n, t in sa.items()), (draw, seed)
            assert m.converged and m.sweeps == 1


def _vit(seed):
    torch.manual_seed(0)
    kw = {"in_chans": 1, "img_size": 8, "patch_size": 2, "depth": 2, "embed_dim": 12, "num_heads": 3}
    return randomise(create_model("vit_mini", num_classes=10, qkv_bias=True, **kw), seed=seed), (1, 8, 8)


@pytest.mark.parametrize("case", ["resnet_mini", "vit_mini"])
def test_between_independent_networks_every_step_solved_again_keeps_what_the_descent_returned(case):
    (a, shape), (b, _) = ((_resnet(s), (1, 8, 8)) for s in (0, 1)) if case == "resnet_mini" else (_vit(3), _vit(4))
    sa, sb = a.state_dict(), b.state_dict()
    spec = permutation_spec(a, torch.randn(2, *shape))
    touching = spec.touching()
    for seed in range(3):
        m = weight_matching(spec, sa, sb, seed=seed)
        assert m.converged and m.sweeps > 1 and m.objective_after > m.objective_before
        steps = {}
        for p in spec.permutations:  # an attention module's two permutations are one step
            steps.setdefault(p.heads_of or p.name, []).append(p)
        for step in steps.values():  # a fixed point: no step, solved with the others held, moves
            found = solve(step, [score_matrix(p, sa, sb, m.perms, touching) for p in step])
            assert all(torch.equal(new, m.perms[p.name]) for p, new in zip(step, found)), (seed, step[0].name)
        assert set(m.perms) == set(identity(spec))
