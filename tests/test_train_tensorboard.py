"""``landscape train --tensorboard DIR``: the training's scalars read back from the event file TensorBoard reads.

The learning rates are checked against the schedule's closed form, the losses against the epoch's mean and the
sharpness scalars against the sidecar; training itself is unchanged, and every refusal comes before training.
"""

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

from landscape.analyses.sharpness.track_file import sidecar_path
from landscape.cli import cli
from landscape.models.checkpoint import read_checkpoint
from landscape.store.read import read_result
from landscape.train import BOARD_TAGS, TrainConfig, train_model

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

#: 64 images in batches of 16: 4 optimiser steps, a cosine schedule from the first step (no warm-up)
TINY = dict(model="resnet_mini", data="digits:16", epochs=1, batch_size=16, subset=64, warmup_epochs=0, seed=3)
ARGS = ["--model", "resnet_mini", "--data", "digits:16", "--epochs", "1", "--batch-size", "16", "--subset", "64"]
ARGS += ["--warmup-epochs", "0", "--seed", "3", "--device", "cpu", "--quiet"]
LR = 2e-3  # TrainConfig's default


def scalars(folder):
    """Every scalar of the event files in ``folder``: tag -> (steps, values)."""
    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: ([e.step for e in events.Scalars(tag)], np.array([e.value for e in events.Scalars(tag)]))
        for tag in events.Tags()["scalars"]
    }


def test_the_scalars_of_a_tracked_run(tmp_path):
    out, board = tmp_path / "run.pt", tmp_path / "board"
    result = CliRunner().invoke(cli, ["train", *ARGS, "--track-sharpness", "2", "--tensorboard", board, "--out", out])
    assert result.exit_code == 0, result.output
    assert f"tensorboard {board}" in result.output
    logged = scalars(board)
    assert set(logged) == set(BOARD_TAGS.values())
    steps, lr = logged["train/lr"]
    cosine = [LR * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(4)]  # the lr of steps 1..4
    assert steps == [1, 2, 3, 4] and lr == pytest.approx(cosine, rel=1e-6)
    meta = read_checkpoint(out).meta
    steps, loss = logged["train/loss"]
    assert steps == [1, 2, 3, 4] and np.all(np.isfinite(loss))
    assert logged["epoch/train_loss"] == ([4], pytest.approx([loss.mean()], rel=1e-6))  # equal batches: the mean
    assert logged["epoch/train_loss"][1] == pytest.approx([meta["metrics"]["train_loss"]], rel=1e-6)
    assert logged["test/accuracy"][1] == pytest.approx([meta["metrics"]["test_accuracy"]], rel=1e-6)
    side = read_result(sidecar_path(out))
    for name in ("sharpness", "threshold", "lr"):
        tag = f"sharpness/{name}"
        assert logged[tag][0] == side["step"].tolist() == [2, 4], tag
        assert logged[tag][1] == pytest.approx(side[name], rel=1e-6), tag
    assert logged["sharpness/lr"][1] == pytest.approx(lr[[1, 3]], rel=1e-6)  # the records' lr are the steps'

    board = tmp_path / "again"
    out.unlink()  # a rerun without --force keeps the complete sidecar of the same run
    again = CliRunner().invoke(cli, ["train", *ARGS, "--track-sharpness", "2", "--tensorboard", board, "--out", out])
    assert again.exit_code == 0, again.output
    kept = scalars(board)  # the complete sidecar is kept, not computed again: its records are logged from it
    assert kept["sharpness/sharpness"][0] == [2, 4]
    assert kept["sharpness/sharpness"][1] == pytest.approx(side["sharpness"], rel=1e-6)
    assert scalars(board)["train/loss"][1] == pytest.approx(loss, rel=1e-6)  # the same seed: the same steps


def test_without_tracking_the_loss_and_lr_are_logged_and_training_is_unchanged(tmp_path):
    plain = train_model(TrainConfig(**TINY), tmp_path / "plain.pt", quiet=True)
    logged = train_model(TrainConfig(**TINY), tmp_path / "logged.pt", quiet=True, tensorboard=tmp_path / "board")
    a, b = (read_checkpoint(r.checkpoint) for r in (plain, logged))
    assert all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict)
    assert "tensorboard" not in b.meta["train_options"]  # where the scalars go is not an option of the run
    tags = scalars(tmp_path / "board")
    assert set(tags) == {t for k, t in BOARD_TAGS.items() if k not in ("sharpness", "threshold", "sharpness_lr")}
    assert tags["train/loss"][0] == [1, 2, 3, 4]


def test_refusals_come_before_training(tmp_path, monkeypatch):
    (tmp_path / "taken").write_text("")
    one_line_error(
        train_model, TrainConfig(**TINY), tmp_path / "a.pt", tensorboard=tmp_path / "taken", match="a file of that"
    )
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as without the tensorboard package
    result = CliRunner().invoke(cli, ["train", *ARGS, "--tensorboard", tmp_path / "board", "--out", tmp_path / "a.pt"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "pip install 'landscape-toolkit[tensorboard]'" in result.output and "--tensorboard" in result.output
    assert not (tmp_path / "a.pt").exists() and not (tmp_path / "board").exists()


@pytest.mark.parametrize(
    "board, out, says",
    [
        ("x.pt", "x.pt", "--out {out} and --tensorboard {board} are one path"),
        ("x.pt/logs", "x.pt", "--tensorboard {board} lies inside --out {out}"),
        ("x.sharpness.h5", "x.pt", "the sharpness file {side} and --tensorboard {board} are one path"),
        ("x.init.pt", "x.pt", "the snapshot {snap} and --tensorboard {board} are one path"),
    ],
)
def test_outputs_that_collide_are_refused_before_any_work(tmp_path, monkeypatch, board, out, says):
    # `train --tensorboard x.pt --out x.pt` made the folder, trained, then could not save: the model was lost
    trained = []
    monkeypatch.setattr("landscape.train._train", lambda *a, **k: trained.append(1))
    board, out = tmp_path / board, tmp_path / out
    args = ["train", *ARGS, "--track-sharpness", "1", "--snapshot-initial", "--tensorboard", board, "--out", out]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    side, snap = tmp_path / "x.sharpness.h5", tmp_path / "x.init.pt"
    assert says.format(out=out, board=board, side=side, snap=snap) in result.output
    assert not trained and not board.exists() and not out.exists()


def test_a_folder_that_cannot_be_made_names_tensorboard_not_out(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    msg = one_line_error(train_model, TrainConfig(**TINY), tmp_path / "a.pt", tensorboard=tmp_path / "file" / "board")
    assert msg.endswith("choose another --tensorboard") and "--out" not in msg

    mkdir = Path.mkdir

    def refused(self, *args, **kwargs):
        if self.name == "board":
            raise PermissionError(13, "Permission denied")
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)
    msg = one_line_error(train_model, TrainConfig(**TINY), tmp_path / "a.pt", tensorboard=tmp_path / "board")
    assert msg.endswith("permission denied; choose a writable --tensorboard"), msg
    assert not (tmp_path / "a.pt").exists()
