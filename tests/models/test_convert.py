"""Paper B's conversion convvit_* -> vit_rpe_*: exactness, error vs sharpness, checkpoints, CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

import landscape.models.vit_rpe  # noqa: F401  (registers the models)
from landscape.cli import cli
from landscape.data.batches import fixed_batches
from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import load_model, read_checkpoint, save_checkpoint
from landscape.models.convert import convert_checkpoint, convert_model, max_logit_difference


def _cnn(seed: int = 0, dtype: torch.dtype = torch.float64, **kw: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    cnn = create_model("convvit_mini", in_chans=1, **{"depth": 2, **kw}).to(dtype).eval()
    with torch.no_grad():  # weights far from the small init, so that the logits vary strongly with x
        for p in cnn.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return cnn


def test_conversion_is_exact_at_high_sharpness_with_zero_query() -> None:
    cnn = _cnn(qkv_bias=True)
    x = torch.randn(4, 1, 32, 32, dtype=torch.float64)
    vit = convert_model(cnn, sharpness=60.0, k_std=0.5)
    assert vit.model_name == "vit_rpe_mini" and vit.model_kwargs == cnn.model_kwargs
    ref = cnn(x)
    assert ref.abs().max() > 0.5
    assert (vit(x) - ref).abs().max() < 1e-10 * ref.abs().max()
    # the CNN is left untouched and W_V / W_O / MLPs are copied
    assert torch.equal(vit.blocks[0].attn.proj.weight, cnn.blocks[0].attn.proj.weight)
    inner = cnn.blocks[0].attn.v.out_features
    assert torch.equal(vit.blocks[1].attn.qkv.weight[2 * inner :], cnn.blocks[1].attn.v.weight)
    assert torch.count_nonzero(vit.blocks[1].attn.qkv.weight[:inner]) == 0
    assert float(vit.blocks[1].attn.qkv.weight[inner : 2 * inner].detach().std()) == pytest.approx(0.5, rel=0.1)


def test_error_falls_as_sharpness_rises() -> None:
    cnn = _cnn(seed=1)
    x = torch.randn(2, 1, 32, 32, dtype=torch.float64)
    errors = [max_logit_difference(cnn, convert_model(cnn, c), [(x, None)]) for c in (4.0, 8.0, 14.0, 30.0)]
    assert all(b < a for a, b in zip(errors, errors[1:]))
    assert errors[0] > 1e-2 and errors[-1] < 1e-9
    # a random W_Q too perturbs the CLS query's flat attention, whatever the sharpness
    both = max_logit_difference(cnn, convert_model(cnn, 30.0, k_std=0.05, q_std=0.05), [(x, None)])
    assert both > 100 * errors[-1]


def test_convert_refuses_other_models() -> None:
    with pytest.raises(LandscapeError, match="convvit"):
        convert_model(create_model("vit_rpe_mini", in_chans=1))


@pytest.fixture(scope="module")
def cnn_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("convert") / "cnn.pt"
    cnn = _cnn(seed=3, dtype=torch.float32)
    save_checkpoint(
        path, cnn, model_name=cnn.model_name, model_kwargs=cnn.model_kwargs, num_classes=10, dataset="digits"
    )
    return path


def test_convert_checkpoint_reports_the_logit_difference(cnn_ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "vit.pt"
    r = convert_checkpoint(cnn_ckpt, out, sharpness=9.0, samples=100, seed=4)
    assert r.model == "vit_rpe_mini" and r.n_samples == 100 and r.dataset == "digits"
    assert 0 < r.max_logit_difference < 0.1
    vit, meta = load_model(out)
    cnn, _ = load_model(cnn_ckpt)
    assert meta.meta["metrics"]["max_logit_difference"] == pytest.approx(r.max_logit_difference)
    assert meta.meta["extra"]["conversion"]["sharpness"] == 9.0
    batches = fixed_batches(load_dataset("digits", "train"), 128, 100, seed=4)
    assert max_logit_difference(cnn, vit, batches) == pytest.approx(r.max_logit_difference, rel=1e-5)
    # on held-out images the difference stays of the reported size (same leak, other inputs)
    test = fixed_batches(load_dataset("digits", "test"), 128, 100, seed=0)
    assert max_logit_difference(cnn, vit, test) < 3 * r.max_logit_difference
    with pytest.raises(LandscapeError, match="exists"):
        convert_checkpoint(cnn_ckpt, out)
    with pytest.raises(LandscapeError, match="convvit"):
        convert_checkpoint(out, tmp_path / "again.pt")
    with pytest.raises(LandscapeError, match="images"):
        convert_checkpoint(cnn_ckpt, tmp_path / "x.pt", data="synthetic", force=True)


def test_cli_convert_then_train(cnn_ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "vit_init.pt"
    res = CliRunner().invoke(cli, ["convert", "--ckpt", str(cnn_ckpt), "--out", str(out), "--samples", "64"])
    assert res.exit_code == 0, res.output
    assert "max |logit difference|" in res.output and "vit_rpe_mini" in res.output
    res = CliRunner().invoke(cli, ["convert", "--ckpt", str(cnn_ckpt), "--out", str(out)])
    assert res.exit_code == 2 and "Error:" in res.output and "--force" in res.output
    # the installed entry point, and the converted checkpoint trains
    exe = str(Path(sys.executable).parent / "landscape")
    run = subprocess.run(
        [exe, "convert", "--ckpt", str(cnn_ckpt), "--out", str(out), "--force", "--samples", "32", "--sharpness", "12"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "sharpness 12" in run.stdout
    trained = tmp_path / "ft.pt"
    res = CliRunner().invoke(
        cli,
        [
            "train",
            "--model",
            "vit_rpe_mini",
            "--init",
            str(out),
            "--epochs",
            "1",
            "--model-kw",
            "depth=2",
            "--subset",
            "40",
            "--batch-size",
            "20",
            "--out",
            str(trained),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    before, after = read_checkpoint(out).state_dict, read_checkpoint(trained).state_dict
    assert before.keys() == after.keys()
    key = "blocks.0.attn.qkv.weight"
    assert not torch.equal(before[key], after[key])  # it trained: W_Q left zero, moved by its gradient
    inner = before[key].shape[0] // 3
    assert torch.count_nonzero(after[key][:inner]) > 0


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("sharpness", float("nan"), "--sharpness must be a finite number, got nan"),
        ("sharpness", float("inf"), "--sharpness must be a finite number, got inf"),
        ("k_std", float("-inf"), "--k-std must be a finite number, got -inf"),
        ("k_std", -0.5, "--k-std must be a finite number >= 0, got -0.5"),
        ("q_std", float("nan"), "--q-std must be a finite number, got nan"),
        ("q_std", -1e-9, "--q-std must be a finite number >= 0, got -1e-09"),
    ],
)
def test_non_finite_or_negative_options_are_refused(option, value, message, cnn_ckpt: Path, tmp_path: Path) -> None:
    assert one_line_error(convert_model, _cnn(), **{option: value}) == message
    out = tmp_path / "vit.pt"
    assert one_line_error(convert_checkpoint, cnn_ckpt, out, **{option: value}) == message
    assert not out.exists()
    res = CliRunner().invoke(
        cli, ["convert", "--ckpt", str(cnn_ckpt), "--out", str(out), "--" + option.replace("_", "-"), str(value)]
    )
    assert res.exit_code == 2 and message in res.output and not out.exists()


def test_samples_below_one_is_refused(cnn_ckpt: Path, tmp_path: Path) -> None:
    msg = one_line_error(convert_checkpoint, cnn_ckpt, tmp_path / "vit.pt", samples=0)
    assert msg == "--samples must be a whole number >= 1, got 0"
