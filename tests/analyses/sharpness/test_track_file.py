"""``landscape train --track-sharpness``: the sidecar's records on a quadratic, warm starts, training unchanged."""

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

from analyses.sharpness.test_measures import dummy_batches, mean_output
from analyses.sharpness.test_tracking import EIGENVALUES, quadratic_model
from landscape.analyses.registry import summarize
from landscape.analyses.sharpness.track_file import TrainingTrack, sidecar_path, start_tracking
from landscape.analyses.sharpness.tracking import SharpnessTracker
from landscape.cli import cli
from landscape.core.source import resolve_preprocess
from landscape.models.checkpoint import load_model
from landscape.options.train import MOMENTUM_OPTIMIZERS, OPTIMIZERS
from landscape.plot import plot_files
from landscape.runtime.optimizers import build_optimizer, load_optimizer_state
from landscape.store.read import read_result
from landscape.train import TrainConfig, param_groups, train_model

TINY = dict(model="resnet_mini", data="digits:16", epochs=1, batch_size=16, subset=64, warmup_epochs=0, seed=3)


def test_sgd_on_a_quadratic_records_lambda_max_at_every_record(tmp_path):
    model = quadratic_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batch = dummy_batches(1)[0]
    tracker = SharpnessTracker(model, optimizer, batch, every=3, criterion=mean_output, tol=1e-10, seed=1)
    track = TrainingTrack(tracker, tmp_path / "q.sharpness.h5", {"model": "quadratic"}, total_steps=10, force=False)
    for step in range(1, 11):
        for group in optimizer.param_groups:  # a schedule: the threshold 2 / lr follows it
            group["lr"] = 0.05 / step
        optimizer.zero_grad()
        mean_output(model(batch[0]), batch[1]).backward()
        optimizer.step()
        track.after_step(step)
    res = track.finish()
    assert res.kind == "sharpness_track" and res.attrs["complete"] and res["done"].all()
    assert res["step"].tolist() == [3, 6, 9]
    np.testing.assert_allclose(res["sharpness"], max(EIGENVALUES), rtol=1e-10)
    np.testing.assert_allclose(res["lr"], [0.05 / 3, 0.05 / 6, 0.05 / 9], rtol=1e-15)
    np.testing.assert_allclose(res["threshold"], 2 / res["lr"], rtol=1e-12)
    assert res["warm"].tolist() == [False, True, True] and res["converged"].all()
    assert all(n < res["n_products"][0] for n in res["n_products"][1:])  # warm starts need fewer products
    assert "3 of 3 records every 3 steps: sharpness 6..6" in summarize(res)


def test_tracking_leaves_training_unchanged_and_writes_the_sidecar(tmp_path):
    plain = train_model(TrainConfig(**TINY), tmp_path / "plain.pt", quiet=True)
    tracked = train_model(TrainConfig(**TINY, track_sharpness=2), tmp_path / "tracked.pt", quiet=True)
    a, b = (load_model(r.checkpoint)[0].state_dict() for r in (plain, tracked))
    assert all(torch.equal(a[k], b[k]) for k in a)
    side = read_result(sidecar_path(tracked.checkpoint))
    assert side.path.name == "tracked.sharpness.h5" and side["step"].tolist() == [2, 4] and side["done"].all()
    assert side.attrs["preconditioned"] and side.attrs["optimizer"] == "AdamW" and side.attrs["model"] == "resnet_mini"
    assert (
        side.attrs["tracked_function"]
        == "the tracking batch's loss (the decoupled weight decay, lambda 0.05, is no term of it)"
    )
    assert np.isfinite(side["sharpness"]).all() and (side["threshold"] > 0).all()
    (figure,) = plot_files([side.path], tmp_path / "figs")
    assert figure.read_bytes()[:4] == b"\x89PNG"
    with h5py.File(side.path, "r+") as f:  # as a run killed after its first record leaves it
        f["done"][1] = False
        f["sharpness"][1] = np.nan
        f.attrs["complete"] = False
    again = train_model(TrainConfig(**TINY, track_sharpness=2), tmp_path / "tracked.pt", force=True, quiet=True)
    rerun = read_result(sidecar_path(again.checkpoint))
    for name in ("sharpness", "threshold", "lr", "n_products", "done"):  # the same seed: the same records
        np.testing.assert_array_equal(rerun[name], side[name], err_msg=name)
    (tmp_path / "tracked.pt").unlink()  # a sidecar of other options is refused before training, and kept
    one_line_error(train_model, TrainConfig(**TINY, track_sharpness=1), tmp_path / "tracked.pt", match="--force")
    assert not (tmp_path / "tracked.pt").exists()
    np.testing.assert_array_equal(read_result(side.path)["sharpness"], side["sharpness"])


@pytest.mark.parametrize("every", [0, -3])
def test_a_non_positive_interval_is_refused_in_one_line(every, tmp_path):
    one_line_error(TrainConfig, **TINY, track_sharpness=every, match="--track-sharpness must be")
    out = tmp_path / "x.pt"
    result = CliRunner().invoke(
        cli, ["train", "--model", "resnet_mini", "--track-sharpness", str(every), "--out", str(out)]
    )
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "--track-sharpness" in result.output
    assert not out.exists()


def closed_form_threshold(optimizer, lr, beta):
    """The stability thresholds of docs/analyses.md, written out."""
    return {
        "sgd": 2 / lr,
        "heavy-ball": (2 + 2 * beta) / lr,
        "sgd-nesterov": (2 + 2 * beta) / ((1 + 2 * beta) * lr),
        "adam": (2 + 2 * 0.9) / ((1 - 0.9) * lr),
        "adamw": (2 + 2 * 0.9) / ((1 - 0.9) * lr),
    }[optimizer]


def test_every_optimizer_records_its_threshold_and_its_state_reproduces_the_record(tmp_path):
    """Each --optimizer's threshold is its closed form; the checkpoint's optimiser state gives Adam's record again."""
    small = {**TINY, "subset": 32, "lr": 0.01}  # two steps; one record, after the last
    for optimizer in OPTIMIZERS:
        mode = "eval" if optimizer == "heavy-ball" else None
        beta = {"momentum": 0.8} if optimizer in MOMENTUM_OPTIMIZERS else {}
        config = TrainConfig(**small, **beta, optimizer=optimizer, track_sharpness=2, track_mode=mode)
        run = train_model(config, tmp_path / f"{optimizer}.pt")
        side = read_result(sidecar_path(run.checkpoint))
        np.testing.assert_allclose(side["threshold"], closed_form_threshold(optimizer, side["lr"][0], 0.8), rtol=1e-12)
        assert side.attrs["track_mode"] == (mode or "train")  # resnet_mini has BatchNorm
        assert side.attrs["preconditioned"] == optimizer.startswith("adam") and side["lr"][0] > 0
        model, ckpt = load_model(run.checkpoint)
        saved = ckpt.meta["extra"]["optimizer"]
        assert saved["type"] == {"adam": "Adam", "adamw": "AdamW"}.get(optimizer, "SGD") and (
            len(saved["state"]) > 0 or optimizer == "sgd"
        )
        if optimizer != "adam":
            continue
        rebuilt = build_optimizer(optimizer, param_groups(model, TrainConfig.weight_decay), side["lr"][0], 0.8)
        load_optimizer_state(rebuilt, model, saved)
        track = start_tracking(
            model,
            rebuilt,
            every=2,
            checkpoint=tmp_path / "again.pt",
            data=small["data"],
            subset=small["subset"],
            seed=small["seed"],
            preprocess=resolve_preprocess(model, small["data"]),
            total_steps=2,
            attrs={},
        )
        again = track.tracker.track(2)
        assert again.sharpness == pytest.approx(side["sharpness"][0], rel=1e-9) and again.preconditioned


def test_track_mode_without_tracking_and_unknown_names_are_refused_in_one_line():
    one_line_error(TrainConfig, **TINY, track_mode="eval", match="--track-sharpness")
    one_line_error(TrainConfig, **TINY, track_sharpness=2, track_mode="batch", match="--track-mode")
    one_line_error(TrainConfig, **TINY, optimizer="lion", match="--optimizer")
    one_line_error(TrainConfig, **TINY, optimizer="heavy-ball", momentum=1.0, match="momentum")


def test_cli_track_mode_and_optimizer_choices(tmp_path):
    out = str(tmp_path / "x.pt")
    base = ["train", "--model", "resnet_mini", "--data", "digits:16", "--out", out]
    bad = CliRunner().invoke(cli, [*base, "--track-sharpness", "2", "--track-mode", "batch"])
    assert bad.exit_code == 2 and "--track-mode" in bad.output
    alone = CliRunner().invoke(cli, [*base, "--track-mode", "eval"])
    assert alone.exit_code == 2 and alone.output.count("\n") == 1 and "give --track-sharpness N" in alone.output
    for name in ("sgd-nesterov", "heavy-ball"):  # checked before any training
        run = CliRunner().invoke(cli, [*base, "--optimizer", name, "--momentum", "1.5"])
        assert run.exit_code == 2 and "momentum must lie in (0, 1)" in run.output and not (tmp_path / "x.pt").exists()
    assert "[adamw|adam|sgd|sgd-nesterov|heavy-ball]" in CliRunner().invoke(cli, ["train", "--help"]).output
