import numpy as np
import pytest
import torch
from click.testing import CliRunner

from landscape.analyses.similarity.run import (
    GramStats,
    biased_linear_cka,
    gram,
    hsic1,
    hsic_matrix,
    linear_cka,
    run_similarity,
    similarity_sums,
)
from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.options.similarity import SimilarityOptions
from landscape.plot import plot_files
from landscape.store.read import read_result


def direct_hsic1(k: np.ndarray, l: np.ndarray) -> float:  # noqa: E741
    """Nguyen et al. (2021), eq. 3, written out with loops over the entries."""
    n = k.shape[0]
    kt, lt = k.copy(), l.copy()
    for i in range(n):
        kt[i, i] = lt[i, i] = 0.0
    trace = sum(kt[i, j] * lt[j, i] for i in range(n) for j in range(n))
    sum_k = sum(kt[i, j] for i in range(n) for j in range(n))
    sum_l = sum(lt[i, j] for i in range(n) for j in range(n))
    kl = sum(kt[i, j] * lt[j, m] for i in range(n) for j in range(n) for m in range(n))
    return (trace + sum_k * sum_l / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * kl) / (n * (n - 3))


def features(n, d, seed):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("n", [4, 5, 9])
def test_unbiased_hsic_equals_the_direct_formula(n):
    x, y = features(n, 7, 0), features(n, 3, 1) ** 3
    k, l = gram(x), gram(y)  # noqa: E741
    assert float(hsic1(k, l)) == pytest.approx(direct_hsic1(k.numpy(), l.numpy()), rel=1e-10, abs=1e-10)
    assert float(hsic1(k, k)) == pytest.approx(direct_hsic1(k.numpy(), k.numpy()), rel=1e-10, abs=1e-10)
    # the vectorised matrix of every pair of a stack
    ks = torch.stack([k, gram(features(n, 5, 2))])
    ls = torch.stack([l, k, gram(features(n, 2, 3))])
    got = hsic_matrix(GramStats.of(ks), GramStats.of(ls)).numpy()
    want = np.array([[direct_hsic1(a.numpy(), b.numpy()) for b in ls] for a in ks])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_unbiased_cka_is_close_to_the_biased_one_for_large_n():
    n = 2000
    x = features(n, 20, 0)
    y = x @ features(20, 20, 1) + 0.7 * features(n, 20, 2)
    biased, unbiased = biased_linear_cka(x, y), linear_cka(x, y)
    assert 0.2 < unbiased < 0.95
    assert unbiased == pytest.approx(biased, abs=0.02)
    # the biased estimate of two independent features is far from 0 for few samples; the unbiased one is not
    a, b = features(30, 40, 3), features(30, 40, 4)
    assert abs(linear_cka(a, b)) < biased_linear_cka(a, b)


def test_exact_invariances():
    x, y = features(12, 6, 0), features(12, 9, 1)
    q, _ = torch.linalg.qr(features(6, 6, 2))
    assert linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(x, x @ q) == pytest.approx(1.0, abs=1e-10)
    assert linear_cka(x, 3.7 * x) == pytest.approx(1.0, abs=1e-10)
    assert linear_cka(x, y) == pytest.approx(linear_cka(y, x), abs=1e-12)
    assert linear_cka(x, y) < 0.9
    assert biased_linear_cka(x, x @ q) == pytest.approx(1.0, abs=1e-10)


def test_fewer_than_four_samples_are_refused():
    with pytest.raises(LandscapeError, match="at least 4"):
        GramStats.of(gram(features(3, 2, 0))[None])


def make_checkpoint(path, seed):
    torch.manual_seed(seed)
    model = create_model("resnet_mini", num_classes=10, in_chans=1)
    return save_checkpoint(
        path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10, dataset="digits"
    )


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    return make_checkpoint(folder / "a.pt", 0), make_checkpoint(folder / "b.pt", 1)


OPTS = SimilarityOptions(samples=24, batch_size=8)


def test_within_one_model_symmetric_with_ones_on_the_diagonal(ckpts, tmp_path):
    res = run_similarity(ckpts[0], OPTS, out=tmp_path / "s.h5", device="cpu", progress=False)
    cka = res["cka"]
    n = len(res["names_a"])
    assert cka.shape == (n, n) and n >= 3
    assert (cka == cka.T).all()
    np.testing.assert_array_equal(np.diag(cka), np.ones(n))
    assert list(res["names_a"]) == list(res["names_b"]) and list(res["kinds_a"]) == list(res["kinds_b"])
    assert int(res["n_batches"]) == 3 and res.attrs["n_samples"] == 24 and res.attrs["comparison"] == "within"
    assert res.attrs["complete"]
    # the stored sums give the matrix; and a rerun returns the complete file as it is
    want = res["hsic_xy"] / np.sqrt(np.outer(res["hsic_xx"], res["hsic_yy"]))
    np.testing.assert_allclose(cka, want, rtol=1e-12)
    again = run_similarity(ckpts[0], OPTS, out=tmp_path / "s.h5", device="cpu", progress=False)
    assert again.attrs["created"] == res.attrs["created"]
    with pytest.raises(LandscapeError):
        run_similarity(
            ckpts[0], SimilarityOptions(samples=16, batch_size=8), out=tmp_path / "s.h5", device="cpu", progress=False
        )


def test_sums_are_means_over_minibatches(ckpts):
    from landscape.models.checkpoint import load_model

    model, _ = load_model(ckpts[0])
    xs = [features(6, 1 * 28 * 28, s).float().reshape(6, 1, 28, 28) for s in range(2)]
    whole = similarity_sums(model, xs)
    parts = [similarity_sums(model, [x]) for x in xs]
    np.testing.assert_allclose(whole.hsic_xy, parts[0].hsic_xy + parts[1].hsic_xy, rtol=1e-12)
    np.testing.assert_allclose(parts[0].add(parts[1]).cka, whole.cka, rtol=1e-12)


def test_two_different_random_models(ckpts, tmp_path):
    res = run_similarity(ckpts[0], OPTS, other=ckpts[1], out=tmp_path / "s.h5", device="cpu", progress=False)
    cka = res["cka"]
    assert cka.shape == (len(res["names_a"]), len(res["names_b"]))
    assert np.isfinite(cka).all() and (cka < 1 - 1e-6).all() and (cka > 0).all()
    assert res.attrs["comparison"] == "between" and res.attrs["other_model"] == "resnet_mini"
    assert (
        res.attrs["other_checkpoint_sha256"] and res.attrs["other_checkpoint_sha256"] != res.attrs["checkpoint_sha256"]
    )
    # the same model as "other" gives the within matrix (up to rounding)
    same = run_similarity(ckpts[0], OPTS, other=ckpts[0], out=tmp_path / "t.h5", device="cpu", progress=False)
    within = run_similarity(ckpts[0], OPTS, out=tmp_path / "u.h5", device="cpu", progress=False)
    np.testing.assert_allclose(same["cka"], within["cka"], rtol=1e-10)


def test_cli_and_plot(ckpts, tmp_path):
    out = tmp_path / "cka.h5"
    args = ["similarity", "--ckpt", str(ckpts[0]), "--samples", "16", "--batch-size", "8", "--device", "cpu"]
    result = CliRunner().invoke(cli, [*args, "--other", str(ckpts[1]), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "CKA of" in result.output and "2 minibatches" in result.output
    res = read_result(out)
    assert res.kind == "similarity" and res.attrs["other_checkpoint"] == str(ckpts[1])
    within = tmp_path / "within.h5"
    result = CliRunner().invoke(cli, [*args, "--out", str(within), "--quiet"])
    assert result.exit_code == 0, result.output
    figures = plot_files([out, within], tmp_path / "figs")
    assert sorted(p.name for p in figures) == ["cka_similarity.png", "within_similarity.png"]
    assert all(p.stat().st_size > 0 for p in figures)
    result = CliRunner().invoke(cli, ["plot", str(out), "--out", str(tmp_path / "figs2")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "figs2" / "cka_similarity.png").exists()


def test_cli_errors_are_one_line(ckpts, tmp_path):
    base = ["similarity", "--ckpt", str(ckpts[0]), "--device", "cpu", "--out", str(tmp_path / "x.h5")]
    for extra, message in [
        (["--batch-size", "3"], "--batch-size must be at least 4"),
        (["--samples", "10", "--batch-size", "4"], "last batch of 2"),
        (["--other-model", "vit_mini"], "--other-model describes a second model"),
    ]:
        result = CliRunner().invoke(cli, [*base, *extra])
        assert result.exit_code == 2, result.output
        assert message in result.output and result.output.strip().count("\n") == 0
    assert not (tmp_path / "x.h5").exists()


def test_options_validation():
    with pytest.raises(LandscapeError, match="--batch-size must be at least 4") as info:
        SimilarityOptions(batch_size=3)
    assert "\n" not in str(info.value)
    with pytest.raises(LandscapeError, match="--samples"):
        SimilarityOptions(samples=3, batch_size=4)
    with pytest.raises(LandscapeError, match="split"):
        SimilarityOptions(split="dev")
    assert SimilarityOptions(samples=None).samples is None
    assert SimilarityOptions(taps="stem=stem").taps == ("stem=stem",)
    assert SimilarityOptions().attrs() == {
        "split": "test",
        "seed": 0,
        "batch_size": 64,
        "taps": [],
        "other_taps": [],
    }


def _own_cnn(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1), nn.Flatten(), nn.Linear(384, 10)
    ).eval()


def test_two_own_modules_on_given_batches_against_the_direct_formula():
    """landscape.similarity(model, batches, other=...) on modules and a list of batches: CKA from hooks and eq. 3."""
    import landscape

    a, b = _own_cnn(0), _own_cnn(1)
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(6, 1, 8, 8, generator=g), torch.randint(0, 10, (6,), generator=g)) for _ in range(2)]
    taps = ["0=stem", "2=conv"]
    res = landscape.similarity(a, batches, other=b, taps=taps, other_taps=taps, device="cpu", progress=False)
    assert res.attrs["comparison"] == "between" and res.attrs["n_samples"] == 12

    def outputs(model):
        seen = []
        hooks = [model[i].register_forward_hook(lambda m, args, out: seen.append(out)) for i in (0, 2)]
        with torch.no_grad():
            per_batch = []
            for x, _ in batches:
                seen.clear()
                model(x)
                per_batch.append([gram(t).numpy() for t in seen])
        for hook in hooks:
            hook.remove()
        return per_batch

    ga, gb = outputs(a), outputs(b)
    xy = np.array([[sum(direct_hsic1(ka[i], kb[j]) for ka, kb in zip(ga, gb)) for j in range(2)] for i in range(2)])
    xx = np.array([sum(direct_hsic1(k[i], k[i]) for k in ga) for i in range(2)])
    yy = np.array([sum(direct_hsic1(k[j], k[j]) for k in gb) for j in range(2)])
    np.testing.assert_allclose(res["cka"], xy / np.sqrt(np.outer(xx, yy)), rtol=1e-8)
