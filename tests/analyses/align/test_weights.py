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


# ------------------------------------------------------------------ independent MLPs trained on digits
def _digits_mlp(widths, seed, epochs=3):
    """An MLP (Linear-ReLU-...-Linear) trained briefly by SGD on digits at 8 x 8 (64 inputs)."""
    from torch import nn

    from landscape.data import load_dataset

    x, y = load_dataset("digits:8", "train").tensors()
    x = x.reshape(len(x), -1)
    g = torch.Generator().manual_seed(seed)
    layers = []
    for k, (i, o) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [nn.Linear(i, o)] + ([nn.ReLU()] if k < len(widths) - 2 else [])
    net = nn.Sequential(*layers)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / p.shape[-1] ** 0.5)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 32):
            idx = order[i : i + 32]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    return net.eval()


def _plain_descent_from_the_identity(a, b, n_linear):
    """Git Re-Basin's coordinate descent, written from the definition for a Sequential MLP, from the identity.

    ``p_l`` (new unit i <- old unit p_l[i]) permutes layer l's rows and bias and layer l+1's columns; one step
    solves ``p_l`` with the others held, ``M[i, j] = <W_l^A[i], W_l^B[j, p_{l-1}]> + b_l^A[i] b_l^B[j] +
    <W_{l+1}^A[:, i], W_{l+1}^B[p_{l+1}, j]>``, layer by layer, until a sweep changes nothing. Returns
    ``sum_t <A_t, pi(B)_t>`` over every tensor a permutation moves (every weight and bias but the last bias).
    """
    from scipy.optimize import linear_sum_assignment

    W = [(a[f"{2 * k}.weight"].double(), b[f"{2 * k}.weight"].double()) for k in range(n_linear)]
    B = [(a[f"{2 * k}.bias"].double(), b[f"{2 * k}.bias"].double()) for k in range(n_linear)]
    sizes = [w.shape[0] for w, _ in W[:-1]]
    perms = [torch.arange(n) for n in sizes]

    def rows(k):  # the permutation of layer k's outputs (the last layer's are fixed)
        return perms[k] if k < len(perms) else torch.arange(W[k][0].shape[0])

    def cols(k):  # the permutation of layer k's inputs (the first layer's are fixed)
        return perms[k - 1] if k > 0 else torch.arange(W[k][0].shape[1])

    changed = True
    while changed:
        changed = False
        for k in range(len(perms)):
            (wa, wb), (ba, bb), (na, nb) = W[k], B[k], W[k + 1]
            m = wa @ wb[:, cols(k)].T + torch.outer(ba, bb) + na.T @ nb[rows(k + 1)]
            new = torch.as_tensor(linear_sum_assignment(m.numpy(), maximize=True)[1])
            if not torch.equal(new, perms[k]):
                perms[k], changed = new, True
    total = 0.0
    for k in range(n_linear):
        (wa, wb), (ba, bb) = W[k], B[k]
        total += float((wa * wb[rows(k)][:, cols(k)]).sum() + (ba * bb[rows(k)]).sum() * (k < len(perms)))
    return total


PAIRS = [
    (widths, seeds)
    for widths in [(64, 16, 12, 10), (64, 20, 16, 12, 10), (64, 32, 24, 10), (64, 24, 32, 10)]
    for seeds in [(0, 1), (2, 3)]
]


def test_between_independent_mlps_the_best_start_is_never_below_a_plain_descent_from_the_identity():
    wins = set()
    for widths, (sa, sb) in PAIRS:
        net_a, net_b = (_digits_mlp(widths, s) for s in (sa, sb))
        a, b = net_a.state_dict(), net_b.state_dict()
        spec = permutation_spec(net_a, torch.randn(2, 64))
        m = weight_matching(spec, a, b, seed=0)
        reference = _plain_descent_from_the_identity(a, b, len(widths) - 1)
        by_start = {(d.start, d.order): d.objective for d in m.starts}
        assert set(by_start) == {
            ("invariant", "seeded"),
            ("identity", "seeded"),
            ("invariant", "layers"),
            ("identity", "layers"),
        }
        # the package's descent from the identity in the layers' order is the reference's, step for step
        assert by_start[("identity", "layers")] == pytest.approx(reference, rel=1e-12), widths
        assert m.objective_after == max(by_start.values()) >= reference * (1 - 1e-12), (widths, sa)
        assert m.kept_start.objective == m.objective_after and m.converged == m.kept_start.converged
        wins.add(max(by_start, key=by_start.get)[0])
        # the objective recorded is that of the permutations kept
        aligned, last = apply(spec, b, m.perms), f"{2 * (len(widths) - 2)}.bias"
        moved = sum(float((a[n].double() * aligned[n].double()).sum()) for n in a if n != last)
        assert moved == pytest.approx(m.objective_after, rel=1e-12)
    assert wins == {"invariant", "identity"}  # neither start alone would do: each is the best on some pair
