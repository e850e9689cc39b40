"""The demo's width sweep: widened models, the lines between seed pairs, their barriers and the findings row."""

import math

import numpy as np
import pytest
import torch

from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import load_model
from landscape.options.connect import ConnectOptions
from landscape.reproduce import findings as F
from landscape.reproduce import inputs as I
from landscape.reproduce import widths as W
from landscape.reproduce.summary import _width_section
from landscape.store.read import read_result


def _row(k, pair, aligned, unaligned=1.0):
    return W.PairBarriers("resnet_mini", k, pair, 100 * k, aligned, unaligned, 0.0, 0.0)


def test_a_widened_resnet_mini_has_every_stage_k_times_as_wide():
    assert W.widened("resnet_mini", 1) == {}
    assert W.widened("resnet_mini", 0.25) == {"widths": [4, 8, 16, 24]}
    assert W.widened("resnet_mini", 4) == {"widths": [64, 128, 256, 384]}
    model = create_model("resnet_mini", num_classes=10, in_chans=1, **W.widened("resnet_mini", 0.5))
    assert model.widths == (8, 16, 32, 48) and model.fc.in_features == 48
    with pytest.raises(LandscapeError, match="not whole numbers of channels"):
        W.widened("resnet_mini", 0.1)


def test_every_pair_of_seeds_once():
    assert W.pairs((0, 1, 2)) == [(0, 1), (0, 2), (1, 2)]
    assert W.pairs((5,)) == []


def test_the_width_change_is_the_mean_over_pairs_of_widest_minus_narrowest():
    rows = [_row(1, (0, 1), 0.5), _row(1, (0, 2), 0.4), _row(2, (0, 1), 0.9), _row(4, (0, 1), 0.1)]
    rows.append(_row(4, (0, 2), 0.3))
    narrow, wide, common, d = W.width_change(rows)
    assert (narrow, wide, common) == (1, 4, [(0, 1), (0, 2)]) and np.allclose(d, [0.1 - 0.5, 0.3 - 0.4])
    _, _, n, seeds, est = W.width_estimate(rows)
    # seed 0 is in both pairs: without it no pair is left, so there is no interval over seeds
    assert (n, seeds) == (2, 3) and est.value == pytest.approx(-0.25) and math.isnan(est.low)
    assert W.width_change([_row(1, (0, 1), 0.5)]) is None  # one width: nothing to compare
    assert W.width_change([_row(1, (0, 1), 0.5), _row(2, (0, 2), 0.1)]) is None  # no pair at both widths


def test_the_width_interval_leaves_each_seed_out_with_its_pairs():
    # three seeds, three pairs: without seed i only the pair of the two others is left, so the jackknife's
    # leave-one-out values are the three pairs' differences and se^2 = (2/3) sum (d - mean d)^2
    d = {(0, 1): -0.2, (0, 2): 0.1, (1, 2): -0.5}
    rows = [r for pair, x in d.items() for r in (_row(0.25, pair, 1.0), _row(1, pair, 1.0 + x))]
    _, _, n, seeds, est = W.width_estimate(rows)
    values = np.array(list(d.values()))
    se = math.sqrt(2 / 3 * ((values - values.mean()) ** 2).sum())
    assert (n, seeds, est.df) == (3, 3, 2) and est.value == pytest.approx(values.mean()) and est.se == pytest.approx(se)
    t2 = 4.302652729749464
    assert (est.low, est.high) == pytest.approx((values.mean() - t2 * se, values.mean() + t2 * se))


def _reference_barrier(coords, values):
    """max over the path of the value above the straight interpolation of the ends (the definition)."""
    coords, values = np.asarray(coords, float), np.asarray(values, float)
    return float(np.max(values - ((1 - coords) * values[0] + coords * values[-1])))


def test_the_sweep_trains_widened_models_and_reads_every_pairs_barriers(tmp_path):
    torch.manual_seed(0)
    sweep = W.WidthSweep(
        multipliers=(0.5, 1.0),
        connect=ConnectOptions(split="test", samples=48, batch_size=48, steps=3, align="weights"),
    )
    train = {"epochs": 1, "batch_size": 64, "lr": 2e-3, "subset": 0.05}
    for k in (0.5, 1.0):
        for seed in (0, 1):
            if k == 1:  # the demo's own checkpoints at 1x
                (tmp_path / f"seed{seed}").mkdir(exist_ok=True)
                path = tmp_path / f"seed{seed}" / "resnet_mini.pt" if seed else tmp_path / "resnet_mini.pt"
                assert W.checkpoint(tmp_path, "resnet_mini", 1, seed) == path
            W.train_unit(sweep, k, train, tmp_path, seed=seed, device="cpu", force=False, quiet=True)
    narrow, _ = load_model(W.checkpoint(tmp_path, "resnet_mini", 0.5, 1))
    assert narrow.widths == (8, 16, 32, 48) and W.checkpoint(tmp_path, "resnet_mini", 0.5, 1).name.endswith(
        "w0.5x_seed1.pt"
    )
    wide, _ = load_model(W.checkpoint(tmp_path, "resnet_mini", 1, 1))
    for k in (0.5, 1.0):
        W.connect_unit(sweep, k, (0, 1), tmp_path, device="cpu", force=False, quiet=True)
    rows = W.read_barriers(tmp_path, sweep, (0, 1))
    assert [(r.k, r.pair) for r in rows] == [(0.5, (0, 1)), (1.0, (0, 1))]
    for r in rows:
        res = read_result(W.connect_file(tmp_path, "resnet_mini", r.k, (0, 1)))
        coords = np.asarray(res["line/coords"], float)
        assert r.aligned == pytest.approx(_reference_barrier(coords, np.asarray(res["line/loss"])[0]), abs=1e-12)
        unaligned = np.asarray(res["unaligned_line/loss"])[0]
        assert r.unaligned == pytest.approx(_reference_barrier(coords, unaligned), abs=1e-12)
    assert rows[1].parameters == sum(p.numel() for p in wide.parameters())
    row = F._width_finding(F.DemoFiles(tmp_path, I.seed_folders(tmp_path, (0, 1)), ("resnet_mini",), 16, sweep))
    assert row.paper == F.REBASIN and row.n == 1 and row.seeds == 2
    assert row.value == pytest.approx(rows[1].aligned - rows[0].aligned) and math.isnan(row.low)
    assert row.verdict == "inconclusive"  # one pair: no interval
    section = "\n".join(_width_section(rows, under_between=True))
    assert "### Barriers against width" in section and "| 0.5x |" in section and "at 0.5x, 1x its channels" in section


def test_without_the_sweeps_files_the_row_is_not_measured(tmp_path):
    row = F._width_finding(F.DemoFiles(tmp_path, I.seed_folders(tmp_path, (0, 1, 2)), (), 16, W.WidthSweep()))
    assert row.verdict == "not measured" and "landscape demo" in row.where


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0, -0.5, 1e400, "two"])
def test_a_multiplier_that_is_not_finite_and_positive_is_refused_in_one_line(bad):
    with pytest.raises(LandscapeError, match="a width multiplier must be a (finite )?number") as error:
        W.WidthSweep(multipliers=(bad, 1.0))
    assert "\n" not in str(error.value)
    with pytest.raises(LandscapeError, match="repeat one"):
        W.WidthSweep(multipliers=(0.5, 1, 1.0))
