import math

import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.models.checkpoint import load_model, read_checkpoint, snapshot_path
from landscape.train import TrainConfig, lr_factor, train_model

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


def test_the_callers_random_state_is_untouched_and_does_not_change_the_run(tmp_path):
    config = TrainConfig(**{**TINY, "epochs": 1})
    torch.manual_seed(1)
    before = torch.get_rng_state()
    a = train_model(config, tmp_path / "a.pt", quiet=True)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(2)  # another global state: the run is the same, bit for bit
    b = train_model(config, tmp_path / "b.pt", quiet=True)
    sa, sb = read_checkpoint(a.checkpoint).state_dict, read_checkpoint(b.checkpoint).state_dict
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.history == b.history


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    ("field", "name", "extra"),
    [
        ("lr", "--lr", {}),
        ("weight_decay", "--weight-decay", {}),
        ("warmup_epochs", "--warmup-epochs", {}),
        ("label_smoothing", "--label-smoothing", {}),
        ("mixup", "mixup alpha", {}),
        ("cutmix", "cutmix alpha", {}),
        ("clip_grad", "--clip-grad", {}),
        ("drop_path", "drop_path", {}),
        ("momentum", "momentum", {"optimizer": "sgd-nesterov"}),
    ],
)
def test_non_finite_numbers_are_refused(field, name, extra, bad):
    msg = one_line_error(TrainConfig, **{**TINY, **extra, field: bad})
    assert msg.startswith(name) and f"must be a finite number, got {bad!r}" in msg


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("lr", 0.0, "--lr"),
        ("weight_decay", -0.1, "--weight-decay"),
        ("label_smoothing", 1.5, "--label-smoothing"),
        ("mixup", -1.0, "mixup"),
        ("clip_grad", -1.0, "--clip-grad"),
        ("epochs", 0, "--epochs"),
        ("batch_size", 2.5, "--batch-size"),
        ("snapshot_every", 0, "--snapshot-every"),
    ],
)
def test_out_of_range_numbers_are_refused(field, value, match):
    one_line_error(TrainConfig, **{**TINY, field: value}, match=match)


def test_a_head_with_fewer_classes_than_the_labels_is_a_one_line_error(tmp_path, monkeypatch):
    msg = one_line_error(
        train_model, TrainConfig(**{**TINY, "model_kwargs": {"num_classes": 3}}), tmp_path / "a.pt", quiet=True
    )
    assert "labels of digits:16 run 0..9 (10 classes)" in msg and "head has 3 classes" in msg
    assert not (tmp_path / "a.pt").exists()
    # a user's factory that ignores num_classes: the logits' width is what is checked
    (tmp_path / "fixed_head.py").write_text(
        "from torch import nn\n\n\ndef build(in_chans=1, img_size=16):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_chans * img_size * img_size, 4))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    msg = one_line_error(
        train_model, TrainConfig(**{**TINY, "model": "py:fixed_head:build"}), tmp_path / "b.pt", quiet=True
    )
    assert "run 0..9 (10 classes)" in msg and "head has 4 classes" in msg


def test_a_larger_head_trains_and_its_checkpoint_rebuilds_it(tmp_path):
    result = train_model(
        TrainConfig(**{**TINY, "epochs": 1, "model_kwargs": {"num_classes": 12}}), tmp_path / "wide.pt", quiet=True
    )
    assert read_checkpoint(result.checkpoint).num_classes == 12
    model, _ = load_model(result.checkpoint)
    assert model(torch.zeros(2, 1, 16, 16)).shape == (2, 12)


def test_cli_train_head_mismatch_is_a_one_line_error(tmp_path):
    args = [
        "train",
        "--model",
        "resnet_mini",
        "--data",
        "digits:16",
        "--epochs",
        "1",
        "--subset",
        "64",
        "--model-kw",
        "num_classes=3",
        "--out",
        str(tmp_path / "x.pt"),
        "--quiet",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "head has 3 classes" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    nan = CliRunner().invoke(cli, [*args[:-5], "--lr", "nan", "--out", str(tmp_path / "y.pt"), "--quiet"])
    assert nan.exit_code == 2 and "--lr must be a finite number" in nan.output


def test_an_output_folder_that_cannot_take_files_is_refused_before_training(tmp_path, monkeypatch):
    import landscape.train as T

    (tmp_path / "taken").write_text("a file")
    monkeypatch.setattr(T, "_train", lambda *a, **k: pytest.fail("trained before checking --out"))
    config = TrainConfig(model="resnet_mini", data="digits", epochs=1, batch_size=64, subset=0.05)
    one_line_error(train_model, config, tmp_path / "taken" / "m.pt", quiet=True, match="a file of that name exists")
    assert (tmp_path / "taken").read_text() == "a file"
    assert not list(tmp_path.glob(".*.tmp"))
