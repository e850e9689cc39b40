"""One rule for models with NaN or Inf weights: every command refuses them in the same one line."""

import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.models.convert import convert_model, max_logit_difference


def _poisoned_convvit(path: Path) -> Path:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        cnn = create_model("convvit_mini", in_chans=1, depth=1)
    with torch.no_grad():
        cnn.head.weight[1, 2] = float("nan")
    save_checkpoint(path, cnn, model_name=cnn.model_name, model_kwargs=cnn.model_kwargs, num_classes=10)
    return path


def test_convert_refuses_nan_weights_with_the_message_every_analysis_gives(tmp_path: Path) -> None:
    ckpt = _poisoned_convvit(tmp_path / "nan.pt")
    out = tmp_path / "vit.pt"
    convert = CliRunner().invoke(cli, ["convert", "--ckpt", str(ckpt), "--out", str(out), "--samples", "8"])
    assert convert.exit_code == 2 and convert.output.count("\n") == 1, convert.output
    assert convert.output.startswith(f"Error: {ckpt}: parameter 'head.weight' holds 1 non-finite value(s)")
    assert not out.exists()
    fourier = ["fourier", "--ckpt", str(ckpt), "--data", "digits", "--samples", "4", "--out", str(tmp_path / "f.h5")]
    analysis = CliRunner().invoke(cli, [*fourier, "--device", "cpu", "--quiet"])
    assert analysis.exit_code == 2 and analysis.output == convert.output  # the same check, the same line
    assert not (tmp_path / "f.h5").exists()


def test_convert_model_refuses_a_model_given_from_python() -> None:
    cnn = create_model("convvit_mini", in_chans=1, depth=1)
    with torch.no_grad():
        cnn.head.bias[0] = float("inf")
    with pytest.raises(LandscapeError, match="parameter 'head.bias' holds 1 non-finite value"):
        convert_model(cnn)


def test_a_nan_logit_is_no_exact_conversion() -> None:
    a, b = nn.Linear(2, 3), nn.Linear(2, 3)
    with torch.no_grad():
        b.weight.copy_(a.weight)
        b.bias.copy_(a.bias)
        b.bias[1] = float("nan")
    batches = [(torch.ones(4, 2), torch.zeros(4))]
    assert math.isnan(max_logit_difference(a, b, batches))
    b.bias.data[1] = a.bias.data[1]
    assert max_logit_difference(a, b, batches) == 0.0
