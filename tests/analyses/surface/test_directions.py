import numpy as np
import pytest
import torch
from helpers import one_line_error
from sklearn.decomposition import PCA

from landscape.analyses.surface import directions as D
from landscape.core import params as P
from landscape.errors import LandscapeError
from landscape.options.names import matches_any


def make_theta(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return {
        "conv.weight": torch.randn(4, 3, 2, 2, generator=g, dtype=dtype),
        "conv.bias": torch.randn(4, generator=g, dtype=dtype),
        "fc.weight": torch.randn(5, 6, generator=g, dtype=dtype),
        "pos_embed": torch.randn(1, 3, 6, generator=g, dtype=dtype),
        "blocks.0.attn.rel_pos.table": torch.randn(2, 9, generator=g, dtype=dtype),
    }


def raw_gaussians(theta, seed, count=1):
    """The Gaussian draws random_direction makes: every tensor in order, float64 on the CPU."""
    g = torch.Generator().manual_seed(seed)
    return [{n: torch.randn(t.shape, generator=g, dtype=torch.float64) for n, t in theta.items()} for _ in range(count)]


def test_filter_normalisation_matches_per_output_filter_norms():
    theta = make_theta()
    d = D.random_directions(theta, ndim=1, seed=3, norm="filter", zero_patterns=()).x
    (raw,) = raw_gaussians(theta, 3)
    for name in ("conv.weight", "fc.weight"):
        w, r = theta[name].numpy(), raw[name].numpy()
        for i in range(w.shape[0]):
            expected = r[i] / np.linalg.norm(r[i]) * np.linalg.norm(w[i])
            np.testing.assert_allclose(d[name][i].numpy(), expected, rtol=1e-12)
            assert np.linalg.norm(d[name][i].numpy()) == pytest.approx(np.linalg.norm(w[i]), rel=1e-12)


def test_dim0_normalisation_matches_column_norms():
    theta = make_theta()
    d = D.random_directions(theta, ndim=1, seed=4, norm="dim0", zero_patterns=()).x
    (raw,) = raw_gaussians(theta, 4)
    w, r = theta["conv.weight"].numpy(), raw["conv.weight"].numpy()
    for c in range(3):
        for a in range(2):
            for b in range(2):
                col_w, col_r = w[:, c, a, b], r[:, c, a, b]
                expected = col_r / np.linalg.norm(col_r) * np.linalg.norm(col_w)
                np.testing.assert_allclose(d["conv.weight"][:, c, a, b].numpy(), expected, rtol=1e-12)


def test_layer_weight_and_none_normalisations():
    theta = make_theta()
    (raw,) = raw_gaussians(theta, 5)
    layer = D.random_directions(theta, ndim=1, seed=5, norm="layer", zero_patterns=()).x
    w, r = theta["fc.weight"].numpy(), raw["fc.weight"].numpy()
    np.testing.assert_allclose(layer["fc.weight"].numpy(), r / np.linalg.norm(r) * np.linalg.norm(w), rtol=1e-12)
    weight = D.random_directions(theta, ndim=1, seed=5, norm="weight", zero_patterns=()).x
    np.testing.assert_allclose(weight["fc.weight"].numpy(), r * w, rtol=1e-14)
    none = D.random_directions(theta, ndim=1, seed=5, norm="none", zero_patterns=()).x
    np.testing.assert_array_equal(none["fc.weight"].numpy(), r)


def test_1d_tensors_and_position_tables_are_zero_by_default():
    theta = make_theta()
    d = D.random_directions(theta, ndim=2, seed=0)
    for dd in (d.x, d.y):
        assert torch.count_nonzero(dd["conv.bias"]) == 0
        assert torch.count_nonzero(dd["pos_embed"]) == 0
        assert torch.count_nonzero(dd["blocks.0.attn.rel_pos.table"]) == 0
        assert torch.count_nonzero(dd["fc.weight"]) == dd["fc.weight"].numel()
    kept = D.random_directions(theta, ndim=1, seed=0, ignore_1d=False, zero_patterns=("fc.*",)).x
    assert torch.count_nonzero(kept["conv.bias"]) == 4
    assert torch.count_nonzero(kept["fc.weight"]) == 0
    # filter normalisation of a 1-D tensor: each entry is its own filter, |d_i| = |theta_i|
    np.testing.assert_allclose(kept["conv.bias"].abs().numpy(), theta["conv.bias"].abs().numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    "spec, zeroed",
    [
        ("timm:vit_tiny_patch16_224", {"cls_token", "pos_embed", "reg_token"}),
        ("py:torchvision.models:VisionTransformer", {"class_token", "encoder.pos_embedding"}),
    ],
)
def test_library_position_tables_and_tokens_are_zero_by_default(spec, zeroed):
    pytest.importorskip("timm")
    from landscape.models import create_model

    kwargs = (
        {"img_size": 32, "patch_size": 8, "depth": 1, "reg_tokens": 2}
        if spec.startswith("timm")
        else {"image_size": 32, "patch_size": 8, "num_layers": 1, "num_heads": 2, "hidden_dim": 8, "mlp_dim": 8}
    )
    params = {k: v.detach() for k, v in create_model(spec, num_classes=3, **kwargs).named_parameters()}
    assert zeroed <= set(params)
    d = D.random_directions(params, ndim=1, seed=0)
    for name, tensor in d.x.items():
        if params[name].any():  # filter normalisation scales a zero tensor's direction to zero
            assert (not tensor.any()) == (name in zeroed or params[name].ndim < 2), name


def test_seeded_reproducible_and_cosine_recorded():
    theta = make_theta()
    a = D.random_directions(theta, seed=7)
    b = D.random_directions(theta, seed=7)
    c = D.random_directions(theta, seed=8)
    assert all(torch.equal(a.x[n], b.x[n]) and torch.equal(a.y[n], b.y[n]) for n in theta)
    assert not torch.equal(a.x["fc.weight"], c.x["fc.weight"])
    fx = np.concatenate([t.numpy().ravel() for t in a.x.values()])
    fy = np.concatenate([t.numpy().ravel() for t in a.y.values()])
    expected = fx @ fy / (np.linalg.norm(fx) * np.linalg.norm(fy))
    assert a.meta["cosine"] == pytest.approx(expected, rel=1e-10)
    assert a.meta["x_norm"] == pytest.approx(np.linalg.norm(fx), rel=1e-12)


def test_random_direction_does_not_depend_on_the_device_dtype():
    theta64 = make_theta()
    theta32 = {n: t.float() for n, t in theta64.items()}
    d64 = D.random_directions(theta64, ndim=1, seed=1).x
    d32 = D.random_directions(theta32, ndim=1, seed=1).x
    for n in theta64:
        np.testing.assert_allclose(d32[n].numpy(), d64[n].numpy(), rtol=1e-5, atol=1e-7)


def test_unknown_norm_is_an_error():
    with pytest.raises(LandscapeError, match="normalisation"):
        D.random_directions(make_theta(), norm="bogus")


def test_target_direction_lands_on_the_second_model():
    theta, other = make_theta(0), make_theta(1)
    d = D.target_directions(theta, other, ndim=1)
    for n in theta:
        torch.testing.assert_close(theta[n] + 1.0 * d.x[n], other[n], rtol=0, atol=1e-15)
    assert d.y is None and d.meta["direction_type"] == "target"
    two = D.target_directions(theta, other, ndim=2, seed=2)
    assert two.y is not None and "cosine" in two.meta


def test_target_mismatch_is_a_one_line_error():
    theta, other = make_theta(0), make_theta(1)
    other["fc.weight"] = torch.zeros(5, 7, dtype=torch.float64)
    with pytest.raises(LandscapeError, match="does not match") as exc:
        D.target_direction(theta, other)
    assert "\n" not in str(exc.value)
    del other["fc.weight"]
    with pytest.raises(LandscapeError, match="missing"):
        D.target_direction(theta, other)


def test_pca_directions_match_sklearn_and_project_the_trajectory():
    theta = make_theta(0)
    g = torch.Generator().manual_seed(9)
    snaps = [
        {n: t + (k + 1) * 0.1 * torch.randn(t.shape, generator=g, dtype=t.dtype) for n, t in theta.items()}
        for k in range(6)
    ]
    d = D.pca_directions(theta, snaps, ndim=2)
    base = np.concatenate([t.numpy().ravel() for t in theta.values()])
    rows = np.stack([np.concatenate([s[n].numpy().ravel() for n in theta]) for s in snaps]) - base
    pca = PCA(n_components=2).fit(rows)
    fx = np.concatenate([t.numpy().ravel() for t in d.x.values()])
    fy = np.concatenate([t.numpy().ravel() for t in d.y.values()])
    for mine, ref in ((fx, pca.components_[0]), (fy, pca.components_[1])):
        assert abs(mine @ ref) == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(d.meta["explained_variance_ratio"], pca.explained_variance_ratio_, rtol=1e-10)
    np.testing.assert_allclose(d.trajectory, rows @ np.stack([fx, fy]).T, rtol=1e-12)
    assert d.meta["cosine"] == pytest.approx(0.0, abs=1e-12)


def test_pca_needs_enough_snapshots():
    theta = make_theta(0)
    with pytest.raises(LandscapeError, match="at least 3"):
        D.pca_directions(theta, [make_theta(1), make_theta(2)], ndim=2)


# ------------------------------------------------------------------- position parameters: one definition


def named_by(model, patterns):
    return sorted(n for n, _ in model.named_parameters() if matches_any(n, patterns))


@pytest.mark.parametrize(
    "model, position, tokens",
    [
        ("resnet_mini", [], []),
        ("vit_mini", ["pos_embed"], ["cls_token"]),
        ("alternet_mini", [f"layer{i}.1.attn.rel_pos.table" for i in (2, 3, 4)], []),
        (
            "vit_rpe_mini",
            sorted(f"blocks.{i}.attn.rel_pos.{p}" for i in range(4) for p in ("cls_bias", "table")),
            ["cls_token"],
        ),
    ],
)
def test_position_parameters_of_the_zoo(model, position, tokens):
    from landscape.models import create_model

    m = create_model(model, num_classes=3)
    assert named_by(m, D.POSITION_PARAMETER_PATTERNS) == position
    assert named_by(m, D.DEFAULT_ZERO_PATTERNS) == sorted(position + tokens)  # the surface also fixes the tokens


@pytest.mark.parametrize(
    "model, exempt_2d",
    [
        ("vit_mini", ["pos_embed"]),  # cls_token keeps weight decay, as in the zoo's measured recipe
        ("alternet_mini", [f"layer{i}.1.attn.rel_pos.table" for i in (2, 3, 4)]),
    ],
)
def test_training_exempts_exactly_the_position_parameters_and_1d_tensors(model, exempt_2d, tmp_path, monkeypatch):
    from landscape import train as T

    built, seen = [], []

    class StopError(Exception):
        pass

    def build(*args, **kwargs):
        made = original(*args, **kwargs)  # (the model, the stochastic depth applied)
        built.append(made[0])
        return made

    def optimizer(groups, **kwargs):
        seen.extend(groups)
        raise StopError

    original = T._build_model
    monkeypatch.setattr(T, "_build_model", build)
    monkeypatch.setattr(torch.optim, "AdamW", optimizer)
    with pytest.raises(StopError):
        config = T.TrainConfig(model=model, data="digits:16", epochs=1, batch_size=8, subset=16)
        T.train_model(config, tmp_path / "m.pt", quiet=True)
    names = {id(p): n for n, p in built[0].named_parameters()}
    decay, no_decay = ({names[id(p)] for p in g["params"]} for g in seen)
    assert [g["weight_decay"] for g in seen] == [0.05, 0.0]
    assert sorted(n for n in no_decay if built[0].get_parameter(n).ndim >= 2) == exempt_2d
    assert {n for n, p in built[0].named_parameters() if p.ndim < 2} <= no_decay
    assert decay | no_decay == set(names.values()) and not decay & no_decay


# ------------------------------------------------------------------------------- hostile direction options


@pytest.mark.parametrize("ndim", [0, 3, -1, True])
def test_ndim_other_than_1_or_2_is_refused(ndim):
    theta = make_theta()
    expected = f"ndim must be 1 (a line) or 2 (a plane), got {ndim!r}"
    assert one_line_error(D.random_directions, theta, ndim=ndim) == expected
    assert one_line_error(D.target_directions, theta, make_theta(1), ndim=ndim) == expected
    assert one_line_error(D.pca_directions, theta, [make_theta(s) for s in range(1, 5)], ndim=ndim) == expected


def test_target_equal_to_the_centre_is_refused():
    theta = make_theta(0)
    same = {n: t.clone() for n, t in theta.items()}
    for ndim in (1, 2):
        msg = one_line_error(D.target_directions, theta, same, ndim=ndim)
        assert msg.startswith("the target equals the centre checkpoint (||target - centre|| = 0)")
    # 1e-14 of the centre's norm is the centre; 1e-9 is a (near) target that draws a surface
    tiny = {n: t * (1 + 1e-14) for n, t in theta.items()}
    one_line_error(D.target_directions, theta, tiny, match="the target equals the centre checkpoint")
    near = {n: t * (1 + 1e-9) for n, t in theta.items()}
    assert D.target_directions(theta, near).meta["x_norm"] == pytest.approx(1e-9 * float(P.norm(theta)), rel=1e-5)


def test_options_that_leave_nothing_to_perturb_are_refused():
    theta = make_theta()
    msg = one_line_error(D.random_directions, theta, zero_patterns=("*",))
    assert msg.startswith("the zero patterns (*) match every parameter, leaving no parameter to perturb")
    only_1d = {"a.bias": theta["conv.bias"], "b.weight": torch.ones(3, dtype=torch.float64)}
    msg = one_line_error(D.random_directions, only_1d, ndim=1)
    assert msg.startswith("every parameter has ndim < 2") and "--keep-1d" in msg
    assert D.random_directions(only_1d, ndim=1, ignore_1d=False).meta["x_norm"] > 0  # --keep-1d is the cure
    both = ("conv.weight", "fc.weight", *D.DEFAULT_ZERO_PATTERNS)
    msg = one_line_error(D.random_directions, theta, zero_patterns=both)
    assert msg.startswith("the zero patterns (conv.weight, fc.weight, *pos_embed*") and "--keep-1d" in msg
    # the y direction of a target plane is random: the same options are refused there
    one_line_error(D.target_directions, theta, make_theta(1), ndim=2, zero_patterns=("*",), match="match every")
    assert D.target_directions(theta, make_theta(1), ndim=1, zero_patterns=("*",)).y is None  # x holds every tensor


def test_a_direction_normalised_to_zero_is_refused():
    theta = {n: torch.zeros_like(t) if t.ndim >= 2 else t for n, t in make_theta().items()}
    for norm in ("filter", "dim0", "layer", "weight"):
        msg = one_line_error(D.random_directions, theta, norm=norm)
        assert msg.startswith(f"every tensor the direction perturbs is zero in the centre, so {norm} normalisation")
    assert D.random_directions(theta, norm="none").meta["x_norm"] > 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_directions_name_their_tensor(bad):
    theta = make_theta(0)
    theta["fc.weight"][2, 3] = bad
    msg = one_line_error(D.random_directions, theta, ndim=1)
    assert msg.startswith(
        "the x direction has NaN or infinite entries in 'fc.weight' (the centre checkpoint's "
        "'fc.weight' has NaN or infinite entries)"
    )
    clean, other = make_theta(0), make_theta(1)
    other["conv.weight"][0, 0, 0, 0] = bad
    msg = one_line_error(D.target_directions, clean, other, ndim=2)
    assert msg.startswith("the x direction has NaN or infinite entries in 'conv.weight' (the target's 'conv.weight'")
    # a tensor that stays fixed does not matter: NaN in a zeroed position table draws a finite surface
    fixed = make_theta(0)
    fixed["pos_embed"][0, 0, 0] = bad
    assert np.isfinite(D.random_directions(fixed).meta["y_norm"])
    snaps = [make_theta(s) for s in range(1, 4)]
    snaps[1]["fc.weight"][0, 0] = bad
    msg = one_line_error(D.pca_directions, make_theta(0), snaps, ndim=2)
    assert msg.startswith("trajectory snapshot 2's 'fc.weight' has NaN or infinite entries")


def test_a_trajectory_that_does_not_move_is_refused():
    theta = make_theta(0)
    snaps = [make_theta(1) for _ in range(4)]
    msg = one_line_error(D.pca_directions, theta, snaps, ndim=2)
    assert msg.startswith("the trajectory snapshots are all the same point")


def test_directions_drawn_again_from_their_recipe_are_bit_identical_and_leave_the_global_rng_alone():
    theta = make_theta(dtype=torch.float32)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = D.random_directions(theta, ndim=2, seed=9, norm="filter")
    again = D.regenerate(first.recipe, theta)
    assert torch.equal(torch.get_rng_state(), before)
    for axis in ("x", "y"):
        for name, t in getattr(first, axis).items():
            assert torch.equal(getattr(again, axis)[name], t) and t.dtype == torch.float32
    assert first.recipe["params"][0] == ["conv.weight", [4, 3, 2, 2]] and first.recipe["seed"] == 9
    other = {**theta, "fc.weight": torch.zeros(5, 7)}
    one_line_error(D.regenerate, first.recipe, other, match=r"recipe does not match the centre model \(shape of")
    one_line_error(D.regenerate, {**first.recipe, "generator": "numpy"}, theta, match="cannot draw|not one")
