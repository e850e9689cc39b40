"""The negative-curvature row: the share of R's most negative eigenvalue in H's, on hand-made stage files."""

import math

import numpy as np
import pytest
from plot_results import spectrum_arrays, write_result

from landscape.reproduce import findings as F
from landscape.reproduce import inputs as I
from landscape.reproduce.negative import NEGATIVE_DIR, NEGATIVE_FILE, NEGATIVE_SHARE, negative_curvature
from landscape.reproduce.widths import WidthSweep


def _stage(folder, model, hessian, residual):
    folder = folder / NEGATIVE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for operator, values in (("hessian", hessian), ("residual", residual)):
        eig = np.asarray(values, float).reshape(-1, 1)
        path = folder / NEGATIVE_FILE.format(model=model, operator=operator)
        write_result(path, "spectrum", spectrum_arrays(eig), model=model, operator=operator, which="SA")


def test_the_share_is_the_ratio_of_the_means_with_an_interval_over_seeds(tmp_path):
    _stage(tmp_path, "vit_mini", [-3.0, -1.0], [-4.0, -2.0])
    _stage(tmp_path / "seed1", "vit_mini", [-2.0, -2.0, -1.0], [-2.5, -2.0, -1.5])
    row = negative_curvature(I.seed_folders(tmp_path, (0, 1)), "vit_mini")
    value, low, high = row.estimate.value, row.estimate.low, row.estimate.high
    assert value == pytest.approx((3 + 1 + 2 + 2 + 1) / (4 + 2 + 2.5 + 2 + 1.5))
    # delete-one-seed jackknife by its definition: seed 1 alone 5 / 6, seed 0 alone 4 / 6; t of 1 degree of freedom
    left_out = np.array([5 / 6, 4 / 6])
    se = math.sqrt((2 - 1) / 2 * ((left_out - left_out.mean()) ** 2).sum())
    t = 12.706204736174698  # scipy.stats.t.ppf(0.975, 1)
    assert (low, high) == pytest.approx((value - t * se, value + t * se), rel=1e-9)
    assert row.units == (5, 2) and "seeds 0, 1" in row.where
    one = negative_curvature(I.seed_folders(tmp_path, (0,)), "vit_mini")
    assert one.estimate.value == pytest.approx(4 / 6) and math.isnan(one.estimate.low)  # one seed: no interval


def test_seeds_without_both_files_of_equal_length_are_left_out(tmp_path):
    _stage(tmp_path, "resnet_mini", [-1.0, -1.0], [-2.0, -2.0])
    _stage(tmp_path / "seed1", "resnet_mini", [-1.0], [-3.0, -3.0])  # another number of batches: not paired
    row = negative_curvature(I.seed_folders(tmp_path, (0, 1)), "resnet_mini")
    assert row.units == (2, 1) and row.estimate.value == pytest.approx(0.5)
    missing = negative_curvature(I.seed_folders(tmp_path / "none", (0,)), "vit_mini")
    assert missing.estimate is None and missing.units == (0, 0)


def test_the_findings_give_one_row_per_model_with_the_verdict_rule(tmp_path):
    for folder in (tmp_path, tmp_path / "seed1"):
        _stage(folder, "vit_mini", [-3.0, -2.5], [-3.2, -2.6])  # G leaves R's negative curvature standing
        _stage(folder, "resnet_mini", [-0.1, 0.05], [-2.0, -1.5])  # G cancels it
    seeds = I.seed_folders(tmp_path, (0, 1))
    rows = F._negative_curvature_findings(F.DemoFiles(tmp_path, seeds, ("resnet_mini", "vit_mini"), 16, WidthSweep()))
    vit, resnet = rows
    assert "vit_mini" in vit.claim and vit.verdict == "reproduced" and vit.low > NEGATIVE_SHARE
    assert "resnet_mini" in resnet.claim and resnet.verdict == "contradicted" and resnet.high < NEGATIVE_SHARE
    assert all(r.paper == "A" and (r.n, r.seeds) == (4, 2) for r in rows)
    every = F.findings(tmp_path, ("resnet_mini", "vit_mini"), training_seeds=(0, 1))
    assert [r.claim for r in every if "R = H - G" in r.claim] == [vit.claim, resnet.claim]
