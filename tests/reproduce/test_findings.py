"""landscape.reproduce.findings: each statistic and its interval over seeds against a hand computation, the seed
folders, RNG hygiene (the interval itself and the verdict rule: test_statistics.py)."""

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
from landscape.reproduce import table as T
from landscape.reproduce.widths import WidthSweep
from landscape.train import evaluate_model

#: Student's t 97.5% quantile at 1 and 2 degrees of freedom (2 and 3 seeds)
T1, T2 = 12.706204736174707, 4.302652729749464


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


def _src(root, models=("resnet_mini", "vit_mini"), seeds=(0, 1), unit=16):
    """What a row reads: the demo folder ``root`` with the given training seeds."""
    return F.DemoFiles(root, I.seed_folders(root, seeds), tuple(models), unit, WidthSweep())


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
    share, diff, ratio = F._spectrum_findings(_src(tmp_path))
    data = F._data_size_finding(_src(tmp_path))
    assert share.value == pytest.approx(3 / 15) and (share.n, share.seeds) == (6, 2)
    # two trainings that agree exactly: no spread between them, the interval is the value itself
    assert share.se == 0 and share.low == share.high == pytest.approx(share.value)
    assert diff.value == pytest.approx(3 / 15 - 1 / 10) and (diff.n, diff.seeds) == (4, 2)
    assert ratio.value == pytest.approx(np.mean([4, 3, 5]) / np.mean([10, 8]))
    assert ratio.verdict == "reproduced" and ratio.df == 1
    assert data.verdict == "not measured" and "data_size" in data.where
    # NaN rows (not done) are left out; a data-size spectrum gives the last claim a number
    for folder in (tmp_path, tmp_path / "seed1"):
        _spectrum(folder / "data_size" / "vit_mini_data0.06_spectrum.h5", np.full((4, 5), -1.0))
    data = F._data_size_finding(_src(tmp_path))
    assert data.value == pytest.approx(1 - 3 / 15) and data.verdict == "reproduced" and "6%" in data.claim
    # one seed: no interval, whatever the units say
    one = F._spectrum_findings(_src(tmp_path, seeds=(0,)))
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
    average, worst = F._sharpness_findings(_src(tmp_path))
    for row, measure in [(average, "average"), (worst, "worst")]:
        assert f"adaptive {measure}-case" in row.claim and row.paper == "A"
        assert row.value == pytest.approx(2.0 / 5.0) and (row.n, row.seeds) == (4, 2)
        assert row.verdict == "reproduced" and row.low == pytest.approx(0.4)  # the seeds agree: no spread
        assert "rho = 0.05" in row.where and "m = 16" in row.where
    assert F.batch_mean(np.array([1.0, 3.0]), np.array([[1, 1], [2, 0]])) == pytest.approx([2.0, 1.0])
    missing = F._sharpness_findings(_src(tmp_path / "none"))
    assert [r.verdict for r in missing] == ["not measured"] * 2 and all("sharpness" in r.where for r in missing)


def test_a_claim_must_hold_across_seeds(tmp_path):
    # seed 0: 2 negative eigenvalues of 5 in every mini-batch (share 0.4); seed 1: none (share 0). Without seed 0
    # the share is 0, without seed 1 it is 0.4: the jackknife standard error is sqrt(1/2 (0.2^2 + 0.2^2)) = 0.2
    # and the interval 0.2 -/+ t_1 0.2, inconclusive.
    _spectrum(tmp_path / "vit_mini_spectrum.h5", np.tile([-2.0, -1.0, 1.0, 2.0, 3.0], (4, 1)))
    _spectrum(tmp_path / "seed1" / "vit_mini_spectrum.h5", np.tile([1.0, 1.0, 2.0, 2.0, 3.0], (4, 1)))
    share = F._spectrum_findings(_src(tmp_path, ("vit_mini",)))[0]
    assert share.value == pytest.approx(0.2) and share.se == pytest.approx(0.2) and share.df == 1
    assert (share.low, share.high) == pytest.approx((0.2 - T1 * 0.2, 0.2 + T1 * 0.2))
    assert share.verdict == "inconclusive"
    # what the eight mini-batches alone would have claimed: a t interval over them excludes 0
    per_batch = np.r_[np.full(4, 0.4), np.zeros(4)]
    assert per_batch.mean() - 2.3646 * per_batch.std(ddof=1) / math.sqrt(8) > 0
    assert "seeds 0, 1" in share.where and "(2 seeds, n = 8)" in T.findings_markdown([share])


def test_missing_inputs_are_not_measured_with_the_command(tmp_path):
    rows = F.findings(tmp_path)
    assert rows and all(r.verdict == "not measured" for r in rows)
    assert all("landscape demo" in r.where or "cnn_init_vit.py" in r.where for r in rows)
    assert "full demo" in rows[-1].where and "quick" in rows[-1].where
    assert rows[-1].paper == "B" and F.PAPER_B_COMMAND in rows[-1].where
    kinds = [r.claim for r in rows if "high-frequency" in r.claim]
    assert len(kinds) == 5  # resnet Conv; vit MSA, MLP; alternet MSA, Conv
    table = T.findings_markdown(rows)
    lines = table.splitlines()
    assert lines[0] == "| claim | paper | statistic | value [95% interval] | verdict |"
    assert len(lines) == 2 + len(rows) and all("not measured" in line for line in lines[2:])


def test_paper_b_rows_give_a_t_interval_over_seeds(tmp_path):
    rows = [
        {"fraction": 0.1, "seed": s, "steps": 100, "vit_random_2x": 0.5, "vit_cnn_init": 0.6 + 0.01 * s}
        for s in range(3)
    ] + [{"fraction": 1.0, "seed": 0, "vit_random_2x": 0.9, "vit_cnn_init": 0.8}]
    (tmp_path / "paper_b.json").write_text(json.dumps(rows))
    f = F._paper_b_finding(_src(tmp_path))
    assert f.paper == "B" and f.n == f.seeds == 3 and f.value == pytest.approx(0.11)
    assert f.where == "paper_b.json: fraction 0.1, 100 steps per stage, over 3 seed(s)"
    half = T2 * 0.01 / math.sqrt(3)  # differences 0.10, 0.11, 0.12: standard deviation 0.01
    assert (f.low, f.high) == pytest.approx((0.11 - half, 0.11 + half)) and f.verdict == "reproduced"
    (tmp_path / "paper_b.json").write_text(json.dumps({"rows": rows[:1]}))
    f = F._paper_b_finding(_src(tmp_path))
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
    f = F._accuracy_finding(_src(out, ("resnet_mini", "alternet_mini")))
    differences = [acc[s, "alternet_mini"] - acc[s, "resnet_mini"] for s in (0, 1)]
    assert f.value == pytest.approx(np.mean(differences)) and (f.n, f.seeds) == (2 * len(test), 2)
    half = T1 * abs(differences[0] - differences[1]) / 2  # equal test sets: the t interval of the two differences
    assert (f.low, f.high) == pytest.approx((f.value - half, f.value + half))
    # the paired statistic and the epsilon rule on hand-made correctness
    made = {"alternet_mini.pt": np.r_[np.ones(990), np.zeros(10)], "resnet_mini.pt": np.r_[np.ones(995), np.zeros(5)]}
    monkeypatch.setattr(F, "per_image_correct", lambda path: made[path.name].astype(bool))
    f = F._accuracy_finding(_src(out, ("resnet_mini", "alternet_mini")))
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
    rows = F._fourier_findings(_src(out, ("resnet_mini",), seeds=(0,), unit=8))
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
    hf, var = F._fourier_findings(_src(out, ("resnet_mini",), unit=8))
    pooled = (res["high_frequency"] + other["high_frequency"]) / 2
    assert hf.value == pytest.approx(F.change_across_blocks(pooled, sums.kinds, F.CONV_KINDS), abs=1e-5)
    assert (hf.n, hf.seeds) == (6, 2) and hf.low <= hf.value <= hf.high and "seeds 0, 1" in hf.where


def test_the_callers_random_state_is_untouched(folder):
    out, _ = folder
    np.random.seed(123)
    torch.manual_seed(123)
    np_state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    first = F.findings(out, ("resnet_mini", "alternet_mini"))
    assert (np.random.get_state()[1] == np_state).all() and torch.equal(torch.get_rng_state(), torch_state)
    again = F.findings(out, ("resnet_mini", "alternet_mini"))
    values = np.array([(f.value, f.low, f.high) for f in first])
    np.testing.assert_array_equal(values, [(f.value, f.low, f.high) for f in again])  # nothing random: the same
