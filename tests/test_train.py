import math

import pytest
import torch
from click.testing import CliRunner

from landscape.checkpoint import load_model, read_checkpoint
from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.train import TrainConfig, lr_factor, snapshot_path, train_model

TINY = dict(model="resnet_mini", data="digits:16", epochs=2, batch_size=32, subset=64, warmup_epochs=1, seed=3)


def test_lr_schedule_closed_form():
    total, warm = 100, 10
    assert [lr_factor(s, total, warm) for s in range(3)] == [0.1, 0.2, 0.3]
    assert lr_factor(9, total, warm) == 1.0
    assert lr_factor(10, total, warm) == 1.0
    assert lr_factor(55, total, warm) == pytest.approx(0.5 * (1 + math.cos(math.pi * 45 / 90)))
    assert lr_factor(100, total, warm) == pytest.approx(0.0)
    assert lr_factor(0, total, 0) == 1.0


def test_training_is_reproducible_and_saves_everything(tmp_path):
    config = TrainConfig(**TINY, snapshot_initial=True, snapshot_warmup=True, snapshot_every=1)
    a = train_model(config, tmp_path / "a.pt", quiet=True)
    b = train_model(config, tmp_path / "b.pt", quiet=True)
    sa, sb = read_checkpoint(a.checkpoint).state_dict, read_checkpoint(b.checkpoint).state_dict
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    ckpt = read_checkpoint(a.checkpoint)
    assert ckpt.model_name == "resnet_mini" and ckpt.num_classes == 10
    assert ckpt.model_kwargs == {"in_chans": 1, "img_size": 16}
    assert ckpt.meta["train_options"]["subset"] == 64 and ckpt.meta["epoch"] == 2
    assert set(ckpt.meta["metrics"]) >= {"train_loss", "test_accuracy", "minutes"}
    assert [p.name for p in a.snapshots] == ["a.init.pt", "a.warmup.pt", "a.epoch001.pt"]
    init = read_checkpoint(tmp_path / "a.init.pt").state_dict
    assert not all(torch.equal(init[k], sa[k]) for k in sa)
    assert len(a.history) == 2 and a.history[0]["epoch"] == 1


def test_init_starts_from_other_weights_and_zero_lr_keeps_them(tmp_path):
    first = train_model(TrainConfig(**TINY), tmp_path / "first.pt", quiet=True)
    # with a learning rate too small to move float32 weights, the run ends where --init started it
    second = train_model(
        TrainConfig(**{**TINY, "lr": 1e-30, "weight_decay": 0.0, "init": str(first.checkpoint)}),
        tmp_path / "second.pt",
        quiet=True,
    )
    m1, _ = load_model(first.checkpoint)
    m2, _ = load_model(second.checkpoint)
    for (name, p1), p2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        if p1.is_floating_point() and "running" not in name:
            assert torch.equal(p1, p2), name


def test_user_errors(tmp_path):
    out = tmp_path / "run.pt"
    out.write_bytes(b"precious")
    with pytest.raises(LandscapeError, match="--force"):
        train_model(TrainConfig(**TINY), out, quiet=True)
    assert out.read_bytes() == b"precious"
    with pytest.raises(LandscapeError, match="optimizer"):
        TrainConfig(**{**TINY, "optimizer": "lbfgs"})
    with pytest.raises(LandscapeError, match="warmup"):
        TrainConfig(**{**TINY, "warmup_epochs": 5})
    other = train_model(TrainConfig(**{**TINY, "epochs": 1}), tmp_path / "other.pt", quiet=True)
    with pytest.raises(LandscapeError, match="does not fit"):
        train_model(TrainConfig(**{**TINY, "model": "vit_mini", "init": str(other.checkpoint)}), tmp_path / "x.pt")


def test_paper_a_recipe():
    config = TrainConfig.paper_a("alternet50", epochs=2)
    assert (config.lr, config.weight_decay, config.batch_size, config.warmup_epochs) == (1.25e-4, 0.05, 96, 2)
    assert config.randaugment and config.mixup > 0 and config.cutmix > 0 and config.label_smoothing == 0.1
    assert config.clip_grad == 5.0 and config.drop_path == 0.1 and config.epochs == 2
    assert TrainConfig.paper_a("alternet50").warmup_epochs == 5


def test_augmented_training_runs(tmp_path):
    config = TrainConfig(**{**TINY, "epochs": 1, "randaugment": True, "mixup": 0.8, "cutmix": 1.0, "clip_grad": 5.0})
    result = train_model(config, tmp_path / "aug.pt", quiet=True)
    assert math.isfinite(result.metrics["train_loss"])


def test_cli_train(tmp_path):
    out = tmp_path / "cli.pt"
    args = ["train", "--model", "resnet_mini", "--data", "digits:16", "--epochs", "1", "--subset", "0.05"]
    result = CliRunner().invoke(cli, [*args, "--out", str(out), "--quiet", "--model-kw", "widths=[8,16,16,16]"])
    assert result.exit_code == 0, result.output
    assert "test accuracy" in result.output
    assert read_checkpoint(out).model_kwargs["widths"] == [8, 16, 16, 16]
    again = CliRunner().invoke(cli, [*args, "--out", str(out), "--quiet"])
    assert again.exit_code == 2 and "--force" in again.output
    assert snapshot_path(out, "init").name == "cli.init.pt"
