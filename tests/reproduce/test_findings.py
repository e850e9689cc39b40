"""landscape.reproduce.findings: the verdict rule, the bootstrap, each statistic against a hand computation, the
seed folders, RNG hygiene."""

import json
import math

import numpy as np
import pytest
import torch
from plot_results import spectrum_arrays, write_result

from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.reproduce import findings as F
from landscape.reproduce import inputs as I
from landscape.reproduce import statistics as stats
from landscape.train import evaluate_model


# ------------------------------------------------------------------------------------------ verdict and bootstrap
def test_verdict_rule_on_each_side_and_across_the_threshold():
    assert F.verdict(0.1, 0.3, side="greater") == "reproduced"
    assert F.verdict(-0.3, -0.1, side="greater") == "contradicted"
    assert F.verdict(-0.1, 0.3, side="greater") == "inconclusive"
    assert F.verdict(-0.3, -0.1, side="less") == "reproduced"
    assert F.verdict(0.1, 0.3, side="less") == "contradicted"
    assert F.verdict(-0.1, 0.1, side="less") == "inconclusive"
    assert F.verdict(0.0, 0.2, side="greater") == "inconclusive"  # touching the threshold is containing it
    # a threshold other than zero: "at least as accurate", epsilon = 0.5 points
    eps = F.ACCURACY_EPSILON
    assert F.verdict(-0.004, 0.01, side="greater", threshold=-eps) == "reproduced"
    assert F.verdict(-0.02, -0.006, side="greater", threshold=-eps) == "contradicted"
    assert F.verdict(-0.01, 0.01, side="greater", threshold=-eps) == "inconclusive"
    assert F.verdict(0.5, 0.9, side="less", threshold=1.0) == "reproduced"
    assert F.verdict(math.nan, math.nan, side="less") == "inconclusive"
    with pytest.raises(LandscapeError):
        F.verdict(0, 1, side="above")


def test_resample_counts_rows_sum_to_n():
    w = stats.resample_counts(7, 50, np.random.default_rng(3))
    assert w.shape == (50, 7) and (w.sum(1) == 7).all() and (w >= 0).all()


@pytest.mark.parametrize("n", [100, 400])
def test_bootstrap_interval_of_a_mean(n):
    mu = 1.5
    x = np.random.default_rng(n).normal(mu, 1.0, n)
    value, low, high = stats.bootstrap_mean(x, resamples=2000, seed=0)
    assert value == pytest.approx(x.mean())
    assert low < mu < high
    assert high - low == pytest.approx(2 * 1.96 * x.std(ddof=1) / math.sqrt(n), rel=0.15)
    assert stats.bootstrap_mean(x, resamples=2000, seed=0) == (value, low, high)  # seeded: the same interval again


def test_one_unit_has_no_interval():
    value, low, high = stats.bootstrap_mean([2.0])
    assert value == 2.0 and math.isnan(low) and math.isnan(high)


# ------------------------------------------------------------------------------------------ statistics
def test_change_across_blocks_by_hand():
    kinds = ["embed", "msa", "mlp", "msa", "mlp"]
    hf = np.array([-1.0, -2.5, -1.0, -3.0, -0.5])
    # MSA blocks: (-2.5 - -1.0) and (-3.0 - -1.0) -> mean -1.75; MLP blocks: (-1.0 - -2.5), (-0.5 - -3.0) -> 2.0
    assert F.change_across_blocks(hf, kinds, F.MSA_KINDS) == pytest.approx(-1.75)
    assert F.change_across_blocks(hf, kinds, F.CONV_KINDS) == pytest.approx(2.0)
    # the first map is nobody's output; batched rows; a group with no block is NaN
    rows = np.stack([hf, 2 * hf])
    np.testing.assert_allclose(F.change_across_blocks(rows, kinds, F.MSA_KINDS), [-1.75, -3.5])
    assert np.isnan(F.change_across_blocks(hf, ["stem", "conv", "conv", "conv", "downsample"], F.MSA_KINDS))
    assert F.change_across_blocks(hf, ["stem", "conv", "conv", "conv", "downsample"], F.CONV_KINDS) == pytest.approx(
        (-2.5 + 1.0 + -1.0 + 2.5 + -3.0 + 1.0 + -0.5 + 3.0) / 4
    )


def test_pooled_batch_sums_match_a_hand_computation():
    # two batches, two maps: pooled value = sum of sums / sum of counts, weights repeat batches
    sums = I.BatchSums(
        ["stem", "conv"],
        delta_sum=np.array([[-2.0, -6.0], [-4.0, -2.0]]),
        variance_sum=np.array([[2.0, 8.0], [4.0, 4.0]]),
        count=np.array([[2.0, 2.0], [2.0, 2.0]]),
    )
    np.testing.assert_allclose(sums.high_frequency(np.ones((1, 2))), [[-1.5, -2.0]])
    np.testing.assert_allclose(sums.variance(np.array([[2, 0], [0, 2]])), [[1.0, 4.0], [2.0, 2.0]])
    change = F.change_across_blocks(sums.variance(np.ones((1, 2))), sums.kinds, F.CONV_KINDS)
    assert change == pytest.approx((12 / 4) - (6 / 4))


def _spectrum(path, eig):
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_result(path, "spectrum", spectrum_arrays(np.asarray(eig, float)), model="toy")


def _folders(root, seeds=(0, 1)):
    return I.seed_folders(root, seeds)


def test_seed_folders_are_the_folder_then_seed_k(tmp_path):
    for name in ("seed2", "seed1", "seed01", "seedx", "seed0"):
        (tmp_path / name).mkdir()
    (tmp_path / "seed3").write_text("not a folder")
    assert I.seed_folders(tmp_path) == {0: tmp_path, 1: tmp_path / "seed1", 2: tmp_path / "seed2"}
    assert I.seed_folders(tmp_path, [2, 0]) == {0: tmp_path, 2: tmp_path / "seed2"}
    assert I.seed_folder(tmp_path, 7) == tmp_path / "seed7"
    for bad in (-1, 1.0, True):
        with pytest.raises(LandscapeError):
            I.seed_folder(tmp_path, bad)
    assert I.seeds_text([0]) == "seed 0" and I.seeds_text([0, 1, 2]) == "seeds 0, 1, 2"


def test_negative_share_and_magnitude_on_hand_made_spectra(tmp_path):
    vit = np.array([[-3.0, -1.0, 1.0, 2.0, 4.0], [-2.0, 0.5, 1.0, 2.0, 3.0], [1.0, 1.0, 2.0, 2.0, 5.0]])
    res = np.array([[1.0, 2.0, 3.0, 4.0, 10.0], [-1.0, 2.0, 3.0, 4.0, 8.0]])
    for folder in (tmp_path, tmp_path / "seed1"):  # two seeds with the same spectra: the value is as for one
        _spectrum(folder / "vit_mini_spectrum.h5", vit)
        _spectrum(folder / "resnet_mini_spectrum.h5", res)
    rows = F._spectrum_findings(_folders(tmp_path), ("resnet_mini", "vit_mini"), np.random.default_rng(0), 200)
    share, diff, ratio = rows
    data = F._data_size_finding(_folders(tmp_path), ("resnet_mini", "vit_mini"), np.random.default_rng(0), 200)
    assert share.value == pytest.approx(3 / 15) and (share.n, share.seeds) == (6, 2)
    assert share.low <= share.value <= share.high and share.verdict in F.VERDICTS
    assert diff.value == pytest.approx(3 / 15 - 1 / 10) and (diff.n, diff.seeds) == (4, 2)
    assert ratio.value == pytest.approx(np.mean([4, 3, 5]) / np.mean([10, 8]))
    assert ratio.verdict == "reproduced"  # every resample of these rows has ratio < 1
    assert data.verdict == "not measured" and "data_size" in data.where
    # NaN rows (not done) are left out; a data-size spectrum gives the last claim a number
    for folder in (tmp_path, tmp_path / "seed1"):
        _spectrum(folder / "data_size" / "vit_mini_data0.06_spectrum.h5", np.full((4, 5), -1.0))
    data = F._data_size_finding(_folders(tmp_path), ("resnet_mini", "vit_mini"), np.random.default_rng(0), 200)
    assert data.value == pytest.approx(1 - 3 / 15) and data.verdict == "reproduced" and "6%" in data.claim
    # one seed: no interval, whatever the units say
    one = F._spectrum_findings(_folders(tmp_path, (0,)), ("resnet_mini", "vit_mini"), np.random.default_rng(0), 200)
    assert all(f.seeds == 1 and math.isnan(f.low) and f.verdict == "inconclusive" for f in one)


def _sharpness(path, values, rho=(0.01, 0.05), done=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    values = np.asarray(values, float)
    done = np.ones(len(values), bool) if done is None else np.asarray(done)
    arrays = {"values": values, "rho": np.asarray(rho, float), "done": done}
    return write_result(path, "sharpness", arrays, batch_size=16, adaptive=True)


def test_adaptive_sharpness_rows_on_hand_made_files(tmp_path):
    # the largest radius (last column) is read; a batch not done is left out
    vit = np.array([[9.0, 1.0], [9.0, 2.0], [9.0, 3.0], [9.0, 99.0]])
    res = np.array([[0.0, 4.0], [0.0, 6.0]])
    for folder in (tmp_path, tmp_path / "seed1"):
        for measure in ("average", "worst"):
            _sharpness(folder / f"vit_mini_sharpness_{measure}.h5", vit, done=[True, True, True, False])
            _sharpness(folder / f"resnet_mini_sharpness_{measure}.h5", res)
    average, worst = F._sharpness_findings(
        _folders(tmp_path), ("resnet_mini", "vit_mini"), np.random.default_rng(0), 200
    )
    for row, measure in [(average, "average"), (worst, "worst")]:
        assert f"adaptive {measure}-case" in row.claim and row.paper == "A"
        assert row.value == pytest.approx(2.0 / 5.0) and (row.n, row.seeds) == (4, 2)
        assert row.verdict == "reproduced"  # every resample's ratio is at most 3 / 4
        assert "rho = 0.05" in row.where and "m = 16" in row.where
    assert F.batch_mean(np.array([1.0, 3.0]), np.array([[1, 1], [2, 0]])) == pytest.approx([2.0, 1.0])
    missing = F._sharpness_findings(_folders(tmp_path / "none"), ("resnet_mini", "vit_mini"), None, 10)
    assert [r.verdict for r in missing] == ["not measured"] * 2 and all("sharpness" in r.where for r in missing)


def test_a_claim_must_hold_across_seeds(tmp_path):
    # seed 0: 2 negative eigenvalues of 5 in every mini-batch; seed 1: none. The unit-level bootstrap of the
    # pooled 8 mini-batches never reaches 0; the hierarchical one draws seed 1 twice in a quarter of the resamples
    # (share 0) and seed 0 twice in another quarter (share 0.4): the interval is exactly [0, 0.4], inconclusive.
    _spectrum(tmp_path / "vit_mini_spectrum.h5", np.tile([-2.0, -1.0, 1.0, 2.0, 3.0], (4, 1)))
    _spectrum(tmp_path / "seed1" / "vit_mini_spectrum.h5", np.tile([1.0, 1.0, 2.0, 2.0, 3.0], (4, 1)))
    share = F._spectrum_findings(_folders(tmp_path), ("vit_mini",), np.random.default_rng(0), 2000)[0]
    assert (share.value, share.low, share.high, share.verdict) == (0.2, 0.0, 0.4, "inconclusive")
    pooled = np.vstack([np.tile([-2.0, -1.0, 1.0, 2.0, 3.0], (4, 1)), np.tile([1.0, 1.0, 2.0, 2.0, 3.0], (4, 1))])
    _, low, _ = stats.bootstrap(8, lambda w: F.negative_share(pooled, w), resamples=2000, rng=np.random.default_rng(0))
    assert low > 0  # what the units alone would have claimed
    assert "seeds 0, 1" in share.where and "(2 seeds, n = 8)" in F.findings_markdown([share])


def test_missing_inputs_are_not_measured_with_the_command(tmp_path):
    rows = F.findings(tmp_path, resamples=10)
    assert rows and all(r.verdict == "not measured" for r in rows)
    assert all("landscape demo" in r.where or "cnn_init_vit.py" in r.where for r in rows)
    assert "full demo" in rows[-1].where and "quick" in rows[-1].where
    assert rows[-1].paper == "B" and F.PAPER_B_COMMAND in rows[-1].where
    kinds = [r.claim for r in rows if "high-frequency" in r.claim]
    assert len(kinds) == 5  # resnet Conv; vit MSA, MLP; alternet MSA, Conv
    table = F.findings_markdown(rows)
    lines = table.splitlines()
    assert lines[0] == "| claim | paper | statistic | value [95% interval] | verdict |"
    assert len(lines) == 2 + len(rows) and all("not measured" in line for line in lines[2:])


def test_paper_b_rows_bootstrap_over_seeds(tmp_path):
    rows = [
        {"fraction": 0.1, "seed": s, "steps": 100, "vit_random_2x": 0.5, "vit_cnn_init": 0.6 + 0.01 * s}
        for s in range(3)
    ] + [{"fraction": 1.0, "seed": 0, "vit_random_2x": 0.9, "vit_cnn_init": 0.8}]
    (tmp_path / "paper_b.json").write_text(json.dumps(rows))
    f = F._paper_b_finding(tmp_path, np.random.default_rng(0), 500)
    assert f.paper == "B" and f.n == f.seeds == 3 and f.value == pytest.approx(0.11)
    assert f.where == "paper_b.json: fraction 0.1, 100 steps per stage, over 3 seed(s)"
    assert 0.1 <= f.low <= f.high <= 0.12 and f.verdict == "reproduced"
    (tmp_path / "paper_b.json").write_text(json.dumps({"rows": rows[:1]}))
    f = F._paper_b_finding(tmp_path, np.random.default_rng(0), 500)
    assert f.n == 1 and f.verdict == "inconclusive"  # one seed: no interval


# ------------------------------------------------------------------------------------------ from checkpoints
def _checkpoint(path, name, seed, **kwargs):
    torch.manual_seed(seed)
    model = create_model(name, num_classes=10, in_chans=1, **kwargs)
    save_checkpoint(path, model, model_name=name, model_kwargs=model.model_kwargs, num_classes=10, dataset="digits")
    return model.eval()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("findings")
    (out / "seed1").mkdir()
    models = {
        (seed, name): _checkpoint(I.seed_folder(out, seed) / f"{name}.pt", name, 2 * seed + i, **kwargs)
        for seed in (0, 1)
        for i, (name, kwargs) in enumerate(
            [("resnet_mini", {"widths": (4, 8), "layers": (1, 1)}), ("alternet_mini", {})]
        )
    }
    return out, models


def test_accuracy_difference_from_per_image_correctness(folder, monkeypatch):
    out, models = folder
    test = load_dataset("digits", "test")
    acc = {key: evaluate_model(net, test, torch.device("cpu"))["accuracy"] for key, net in models.items()}
    correct = I.per_image_correct(out / "resnet_mini.pt")
    assert correct.dtype == bool and len(correct) == len(test)
    assert correct.mean() == pytest.approx(acc[0, "resnet_mini"])
    f = F._accuracy_finding(_folders(out), ("resnet_mini", "alternet_mini"), np.random.default_rng(0), 300)
    pooled = np.mean([acc[s, "alternet_mini"] - acc[s, "resnet_mini"] for s in (0, 1)])  # equal test sets
    assert f.value == pytest.approx(pooled) and (f.n, f.seeds) == (2 * len(test), 2)
    assert f.low <= f.value <= f.high
    # the paired statistic and the epsilon rule on hand-made correctness
    made = {"alternet_mini.pt": np.r_[np.ones(990), np.zeros(10)], "resnet_mini.pt": np.r_[np.ones(995), np.zeros(5)]}
    monkeypatch.setattr(F, "per_image_correct", lambda path: made[path.name].astype(bool))
    f = F._accuracy_finding(_folders(out), ("resnet_mini", "alternet_mini"), np.random.default_rng(0), 300)
    assert f.value == pytest.approx(-0.005) and f.verdict == "inconclusive"


def test_fourier_sums_recompute_the_file_on_its_samples(folder):
    from landscape.analyses.fourier.run import run_fourier
    from landscape.options.fourier import FourierOptions
    from landscape.store.read import read_result

    out, _ = folder
    run_fourier(
        out / "resnet_mini.pt", FourierOptions(samples=24, seed=3), out=out / "resnet_mini_fourier.h5", device="cpu"
    )
    res = read_result(out / "resnet_mini_fourier.h5")
    sums = I.fourier_batch_sums(out / "resnet_mini_fourier.h5", out / "resnet_mini.pt", unit=8)
    assert sums.count.shape[0] == 3 and sums.kinds == list(res["layer_kinds"].astype(str))
    ones = np.ones((1, 3))
    np.testing.assert_allclose(sums.high_frequency(ones)[0], res["high_frequency"], atol=1e-5)
    np.testing.assert_allclose(sums.variance(ones)[0], res["variance"], rtol=1e-5)
    rows = F._fourier_findings(_folders(out, (0,)), ("resnet_mini",), np.random.default_rng(0), 100, 8)
    hf, var = rows
    assert (hf.n, hf.seeds) == (3, 1) and "Conv" in hf.claim and hf.verdict == "inconclusive"  # one seed
    assert hf.value == pytest.approx(F.change_across_blocks(res["high_frequency"], sums.kinds, F.CONV_KINDS))
    assert var.value == pytest.approx(F.change_across_blocks(res["variance"], sums.kinds, F.CONV_KINDS))
    # a second seed's model on the same samples: the value is that of the pooled profile, here the mean of the
    # two files' values map by map (equal counts), and the interval now exists
    run_fourier(
        out / "seed1" / "resnet_mini.pt",
        FourierOptions(samples=24, seed=3),
        out=out / "seed1" / "resnet_mini_fourier.h5",
        device="cpu",
    )
    other = read_result(out / "seed1" / "resnet_mini_fourier.h5")
    hf, var = F._fourier_findings(_folders(out), ("resnet_mini",), np.random.default_rng(0), 100, 8)
    pooled = (res["high_frequency"] + other["high_frequency"]) / 2
    assert hf.value == pytest.approx(F.change_across_blocks(pooled, sums.kinds, F.CONV_KINDS), abs=1e-5)
    assert (hf.n, hf.seeds) == (6, 2) and hf.low <= hf.value <= hf.high and "seeds 0, 1" in hf.where


def test_the_callers_random_state_is_untouched(folder):
    out, _ = folder
    np.random.seed(123)
    torch.manual_seed(123)
    np_state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    first = F.findings(out, ("resnet_mini", "alternet_mini"), resamples=50)
    assert (np.random.get_state()[1] == np_state).all() and torch.equal(torch.get_rng_state(), torch_state)
    again = F.findings(out, ("resnet_mini", "alternet_mini"), resamples=50)
    values = np.array([(f.value, f.low, f.high) for f in first])
    np.testing.assert_array_equal(values, [(f.value, f.low, f.high) for f in again])  # seeded: the same again
