"""Training that diverges, options that would have no effect, and messages that name the true cause."""

import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

from landscape.cli import cli
from landscape.errors import LandscapeWarning
from landscape.models import create_model
from landscape.models.checkpoint import read_checkpoint
from landscape.train import TrainConfig, lr_factor, train_model

TINY = dict(model="resnet_mini", data="digits:16", epochs=2, batch_size=32, subset=32, warmup_epochs=0, seed=3)


def test_a_diverging_loss_stops_with_the_epoch_and_the_learning_rate(tmp_path):
    config = TrainConfig(**{**TINY, "subset": 64, "optimizer": "sgd-nesterov", "lr": 1e30}, snapshot_every=1)
    msg = one_line_error(train_model, config, tmp_path / "run.pt", quiet=True)
    lr = 1e30 * lr_factor(1, 4, 0)  # the second of 4 steps: the first step's weights give no finite loss
    assert msg.startswith(f"training diverged in epoch 1 of 2 at learning rate {lr:.3g} (--lr 1e+30): the loss is nan")
    assert "lower --lr" in msg
    assert list(tmp_path.iterdir()) == []  # neither the checkpoint nor a snapshot


def test_weights_broken_by_a_step_with_a_finite_loss_are_caught_after_the_epoch(tmp_path, monkeypatch):
    step = torch.optim.AdamW.step

    def breaking_step(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        with torch.no_grad():
            self.param_groups[0]["params"][0].view(-1)[0] = float("nan")
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", breaking_step)
    config = TrainConfig(**TINY, snapshot_initial=True, snapshot_every=1)
    msg = one_line_error(train_model, config, tmp_path / "run.pt", quiet=True)
    assert msg.startswith("training diverged in epoch 1 of 2 at learning rate 0.002 (--lr 0.002): parameter ")
    assert "holds 1 non-finite value(s)" in msg
    assert [p.name for p in tmp_path.iterdir()] == ["run.init.pt"]  # saved before the first step, finite
    assert all(torch.isfinite(t).all() for t in read_checkpoint(tmp_path / "run.init.pt").state_dict.values())


def test_a_recipe_on_a_model_without_stochastic_depth_applies_the_rest(tmp_path):
    with pytest.warns(LandscapeWarning, match="resnet_mini has no stochastic depth: --recipe paper-a is applied"):
        config = TrainConfig.paper_a(**{**TINY, "epochs": 1})
        result = train_model(config, tmp_path / "run.pt", quiet=True)
    options = read_checkpoint(result.checkpoint).meta["train_options"]
    assert options["drop_path"] == 0.0 and options["mixup"] == 0.8 and options["recipe"] == "paper-a"
    msg = one_line_error(train_model, TrainConfig(**TINY, drop_path=0.1), tmp_path / "b.pt", quiet=True)
    assert msg.startswith("model resnet_mini has no stochastic depth (drop_path_rate): drop_path 0.1 is for")


def test_init_from_a_plain_state_dict_needs_no_model_name(tmp_path):
    with torch.random.fork_rng():
        torch.manual_seed(1)
        plain = create_model("resnet_mini", num_classes=10, in_chans=1, img_size=16)
    torch.save(plain.state_dict(), tmp_path / "plain.pt")
    args = ["train", "--model", "resnet_mini", "--data", "digits:16", "--epochs", "1", "--subset", "32"]
    args += ["--lr", "1e-30", "--init", str(tmp_path / "plain.pt"), "--out", str(tmp_path / "run.pt"), "--quiet"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    trained = read_checkpoint(tmp_path / "run.pt").state_dict
    assert torch.equal(trained["fc.weight"], plain.state_dict()["fc.weight"])  # the run started from plain.pt


def test_amp_on_a_cpu_is_warned_of_and_recorded_as_not_applied(tmp_path):
    args = ["train", "--model", "resnet_mini", "--data", "digits:16", "--epochs", "1", "--subset", "32", "--amp"]
    result = CliRunner().invoke(cli, [*args, "--device", "cpu", "--out", str(tmp_path / "run.pt"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        "Warning: --amp (bfloat16 autocast) works on CUDA only: training on cpu in float32 (recorded as amp: false)"
    )
    assert read_checkpoint(tmp_path / "run.pt").meta["train_options"]["amp"] is False


@pytest.mark.parametrize(
    ("options", "start"),
    [
        ({"epochs": 3, "snapshot_every": 3}, "--snapshot-every 3 saves no snapshot in 3 epoch(s)"),
        ({"snapshot_warmup": True}, "--snapshot-warmup saves the weights after the warm-up, and there is none"),
        ({"optimizer": "adam", "momentum": 0.9}, "--momentum 0.9 has no effect with --optimizer adam"),
        ({"momentum": 0.5}, "--momentum 0.5 has no effect with --optimizer adamw"),
        ({"optimizer": "sgd", "momentum": float("nan")}, "--momentum nan has no effect with --optimizer sgd"),
    ],
)
def test_options_that_would_have_no_effect_are_refused(options, start):
    assert one_line_error(TrainConfig, **{**TINY, **options}).startswith(start)


def test_clip_grad_zero_without_a_recipe_is_warned_of():
    with pytest.warns(LandscapeWarning, match="--clip-grad 0 clips nothing"):
        TrainConfig(**TINY, clip_grad=0.0)


def test_training_under_several_processes_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    msg = one_line_error(train_model, TrainConfig(**TINY), tmp_path / "run.pt", quiet=True)
    assert msg.startswith("landscape train runs in one process: under torchrun every rank would train")
    assert not (tmp_path / "run.pt").exists()


@pytest.mark.parametrize("subset", ["nan", "inf", "abc", "1e999"])
def test_a_subset_that_is_neither_a_fraction_nor_a_count_is_one_line(subset, tmp_path):
    out = tmp_path / "run.pt"
    result = CliRunner().invoke(cli, ["train", "--model", "resnet_mini", "--subset", subset, "--out", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output and not out.exists()
    assert "'--subset'" in result.output and "neither a fraction" in result.output


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_momentum_with_an_optimiser_without_one_is_refused_before_training(tmp_path, optimizer):
    base = ["train", "--model", "resnet_mini", "--data", "digits:16", "--out", str(tmp_path / "x.pt")]
    for value in ("0.9", "nan"):
        run = CliRunner().invoke(cli, [*base, "--optimizer", optimizer, "--momentum", value])
        assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
        assert f"--momentum {value} has no effect with --optimizer {optimizer}" in run.output
    assert list(tmp_path.iterdir()) == []


def test_the_momentum_applied_is_the_one_recorded():
    assert TrainConfig(**TINY, optimizer="heavy-ball").momentum == 0.9  # the default, recorded as applied
    assert TrainConfig(**TINY, optimizer="sgd-nesterov", momentum=0.5).momentum == 0.5
    assert TrainConfig(**TINY, optimizer="adam").momentum is None  # Adam has none
