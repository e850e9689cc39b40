"""``landscape fourier`` under torchrun: the batches are shared among ranks and the file equals one process's."""

import helpers
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from landscape.cli import cli
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.store.read import read_result

# 5 batches (the last one short) over 2 ranks: rank 0 takes 3, rank 1 takes 2
ARGS = ["--samples", "36", "--batch-size", "8", "--noise-bands", "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "r.pt"
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = create_model("resnet_mini", num_classes=10, in_chans=1)
    save_checkpoint(
        path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10, dataset="digits"
    )
    return path


def torchrun(*args):
    return helpers.torchrun("-m", "landscape", *args)


@pytest.mark.slow
def test_two_ranks_share_the_batches_and_equal_one_process(ckpt, tmp_path):
    one = tmp_path / "one.h5"
    r = CliRunner().invoke(cli, ["fourier", "--ckpt", str(ckpt), *ARGS, "--out", str(one)])
    assert r.exit_code == 0, r.output
    two = tmp_path / "two.h5"
    proc = torchrun("fourier", "--ckpt", ckpt, *ARGS, "--out", two)
    assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = read_result(one), read_result(two)
    assert b.attrs["complete"] and b.attrs["n_samples"] == a.attrs["n_samples"] == 36
    for name in ("delta_log_amplitude", "high_frequency", "variance", "noise/accuracy", "noise/accuracy_drop"):
        np.testing.assert_allclose(b[name], a[name], rtol=1e-12, atol=1e-12, err_msg=name)
    # rank 0 refuses the file (other options): every rank stops with the same one-line error, none hangs
    proc = torchrun("fourier", "--ckpt", ckpt, *ARGS, "--profile", "radial", "--out", two)
    assert proc.returncode != 0
    assert proc.stderr.count("holds a fourier result from other options") == 2, proc.stderr[-2000:]
