"""``landscape connect --align``: theta_B aligned before the paths, the barriers before and after alignment."""

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

import landscape
from landscape.cli import cli
from landscape.models import create_model
from landscape.store import read_result

from .references import permuted_resnet, randomise_bn
from .test_run import KW, _save


@pytest.mark.parametrize("method", ["weights", "activations"])
def test_the_barrier_to_an_aligned_permuted_copy_is_zero_and_both_lines_are_stored(tmp_path, method):
    torch.manual_seed(0)
    a = randomise_bn(create_model("resnet_mini", num_classes=10, **KW))
    b = permuted_resnet(a, ("stem.0", "stem.1"), "shortcut")
    out = tmp_path / "c.h5"
    # bn="eval": every point of the line is then the network as given (the ends keep their own statistics, which
    # randomise_bn drew; "recompute" would re-estimate them at the points between, a network of its own)
    grid = {"steps": 5, "samples": 32, "batch_size": 16, "progress": False, "bn": "eval"}
    r = landscape.connect(a, b, "digits", out=out, align=method, **grid)
    barriers = r.attrs["barriers"]
    aligned, unaligned = barriers["line"]["train"], barriers["unaligned_line"]["train"]
    assert abs(aligned["loss"]) < 1e-6 and abs(aligned["error"]) < 1e-9
    assert unaligned["loss"] >= 0.0 and np.ptp(r["unaligned_line/loss"][0]) > 1e-3  # to another point of space
    np.testing.assert_allclose(r["line/loss"][0], r["line/loss"][0, 0], rtol=1e-6)  # the same network all along
    assert r.attrs["align"] == method and r.attrs["align_function_error"] <= 1e-5
    assert sorted(k for k in r.arrays if k.startswith("align/")) == [
        "align/layer1.0.conv1",
        "align/layer2.0.conv1",
        "align/layer2.0.conv2",
        "align/stem.0",
    ]
    assert "line (aligned by" in landscape.analyses.registry.summarize(read_result(out))
    one_line_error(landscape.connect, a, b, "digits", out=out, **grid, match="align")  # another run: refused


def test_the_command_prints_both_lines(tmp_path):
    torch.manual_seed(0)
    a = randomise_bn(create_model("resnet_mini", num_classes=10, **KW))
    pa = _save(tmp_path / "a.pt", a)
    pb = _save(tmp_path / "b.pt", permuted_resnet(a, ("stem.0", "stem.1"), "shortcut"))
    args = ["connect", "--ckpt", pa, "--ckpt", pb, "--align", "weights", "--steps", "3", "--samples", "16"]
    result = CliRunner().invoke(cli, [*map(str, args), "--out", str(tmp_path / "c.h5"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "line (train): loss barrier" in result.output and "unaligned_line (train): loss barrier" in result.output
