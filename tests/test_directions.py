import numpy as np
import pytest
import torch
from sklearn.decomposition import PCA

from landscape import directions as D
from landscape.errors import LandscapeError


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


@pytest.mark.parametrize("spec, zeroed", [
    ("timm:vit_tiny_patch16_224", {"cls_token", "pos_embed", "reg_token"}),
    ("py:torchvision.models:VisionTransformer", {"class_token", "encoder.pos_embedding"}),
])
def test_library_position_tables_and_tokens_are_zero_by_default(spec, zeroed):
    pytest.importorskip("timm")
    from landscape.models import create_model

    kwargs = {"img_size": 32, "patch_size": 8, "depth": 1, "reg_tokens": 2} if spec.startswith("timm") else {
        "image_size": 32, "patch_size": 8, "num_layers": 1, "num_heads": 2, "hidden_dim": 8, "mlp_dim": 8}
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
