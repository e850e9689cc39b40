"""The negative-curvature row: the share of R's most negative eigenvalue in H's, on hand-made stage files."""

import math

import numpy as np
import pytest
from plot_results import spectrum_arrays, write_result

from landscape.reproduce import findings as F
from landscape.reproduce import inputs as I
from landscape.reproduce.negative import NEGATIVE_DIR, NEGATIVE_FILE, NEGATIVE_SHARE, negative_curvature


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
    row = negative_curvature(I.seed_folders(tmp_path, (0, 1)), "vit_mini", np.random.default_rng(0), 500)
    value, low, high = row.estimate
    assert value == pytest.approx((3 + 1 + 2 + 2 + 1) / (4 + 2 + 2.5 + 2 + 1.5))
    assert low <= value <= high and high <= 1.0 and row.units == (5, 2) and "seeds 0, 1" in row.where
    one = negative_curvature(I.seed_folders(tmp_path, (0,)), "vit_mini", np.random.default_rng(0), 500)
    assert one.estimate[0] == pytest.approx(4 / 6) and math.isnan(one.estimate[1])  # one seed: no interval


def test_seeds_without_both_files_of_equal_length_are_left_out(tmp_path):
    _stage(tmp_path, "resnet_mini", [-1.0, -1.0], [-2.0, -2.0])
    _stage(tmp_path / "seed1", "resnet_mini", [-1.0], [-3.0, -3.0])  # another number of batches: not paired
    row = negative_curvature(I.seed_folders(tmp_path, (0, 1)), "resnet_mini", np.random.default_rng(0), 100)
    assert row.units == (2, 1) and row.estimate[0] == pytest.approx(0.5)
    missing = negative_curvature(I.seed_folders(tmp_path / "none", (0,)), "vit_mini", np.random.default_rng(0), 10)
    assert missing.estimate is None and missing.units == (0, 0)


def test_the_findings_give_one_row_per_model_with_the_verdict_rule(tmp_path):
    for folder in (tmp_path, tmp_path / "seed1"):
        _stage(folder, "vit_mini", [-3.0, -2.5], [-3.2, -2.6])  # G leaves R's negative curvature standing
        _stage(folder, "resnet_mini", [-0.1, 0.05], [-2.0, -1.5])  # G cancels it
    rows = F._negative_curvature_findings(
        I.seed_folders(tmp_path, (0, 1)), ("resnet_mini", "vit_mini"), np.random.default_rng(0), 200
    )
    vit, resnet = rows
    assert "vit_mini" in vit.claim and vit.verdict == "reproduced" and vit.low > NEGATIVE_SHARE
    assert "resnet_mini" in resnet.claim and resnet.verdict == "contradicted" and resnet.high < NEGATIVE_SHARE
    assert all(r.paper == "A" and (r.n, r.seeds) == (4, 2) for r in rows)
    every = F.findings(tmp_path, ("resnet_mini", "vit_mini"), training_seeds=(0, 1), resamples=50)
    assert [r.claim for r in every if "R = H - G" in r.claim] == [vit.claim, resnet.claim]
