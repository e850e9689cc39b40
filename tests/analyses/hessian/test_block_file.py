"""``landscape hessian --per-block``: the blocks/ section equals the dense diagonal blocks, resumes by block."""

import json

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error, tiny_resnet_checkpoint, torchrun

import landscape
from analyses.hessian.test_blocks import dense_block
from analyses.hessian.test_operator import dense_hessian, tiny_batches, tiny_model
from landscape.analyses.registry import analysis_of, summarize
from landscape.cli import cli
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.options.hessian import HessianOptions
from landscape.plot import plot_files
from landscape.store.read import read_result

F64 = torch.float64
EXACT = {"dtype": "float64", "tol": 1e-12, "trace_samples": 63, "top_k": 0, "samples": None}


def test_per_block_through_run_hessian_equals_the_dense_diagonal_blocks():
    model, batches = tiny_model(), tiny_batches()
    blocks = ("norm=1", "last=3.weight,3.bias")
    res = landscape.hessian(
        model, batches, per_block=True, block=blocks, regularizer="l2", reg_coef=0.1, progress=False, **EXACT
    )
    obj = Objective(model, batches, dtype=F64, regularizer=Regularizer("l2", 0.1))
    H = dense_hessian(obj)
    names = [str(n) for n in res["blocks/names"]]
    assert names == ["norm", "last", "other"] and [str(k) for k in res["blocks/kinds"]] == ["pattern"] * 2 + ["other"]
    groups = {"norm": ["1.weight", "1.bias"], "last": ["3.weight", "3.bias"], "other": ["0.weight", "0.bias"]}
    for i, name in enumerate(names):
        Hb = dense_block(H, obj.params, groups[name])
        assert res["blocks/size"][i] == Hb.shape[0]
        assert res["blocks/top_eigenvalue"][i] == pytest.approx(float(torch.linalg.eigvalsh(Hb).max()), rel=1e-9)
        # Hutch++ is exact once its sketch (63 // 3 = 21 columns) spans the block (at most 30 entries: 21 here)
        if Hb.shape[0] <= 21:
            assert res["blocks/trace"][i] == pytest.approx(float(torch.trace(Hb)), rel=1e-9)
    assert res["blocks/done"].all() and res["blocks/converged"].all()
    np.testing.assert_allclose(res["blocks/depth"], [0.0, 0.5, 1.0])
    assert "per block (3 of 3): top eigenvalue" in summarize(res)
    peak = int(np.argmax(res["blocks/top_eigenvalue"]))
    assert analysis_of("hessian").numbers(res)["sharpest block"].endswith(f"({names[peak]})")


def test_bad_blocks_are_refused_in_one_line():
    one_line_error(HessianOptions, per_block=True, block=("nameless",), match="--block takes NAME=PATTERN")
    one_line_error(HessianOptions, per_block=True, block=("a=x", "a=y"), match="given twice")
    one_line_error(HessianOptions, block=("a=x",), match="add --per-block")
    one_line_error(HessianOptions, taps=("0=stem",), match="add --per-block")
    one_line_error(HessianOptions, per_block=True, block=("a=x",), taps=("0=stem",), match="not both")
    one_line_error(landscape.hessian, tiny_model(), tiny_batches(), per_block=True, top_k=0, match="taps=")
    one_line_error(
        landscape.hessian, tiny_model(), tiny_batches(), per_block=True, block=("x=fc.*",), top_k=0, match="fc"
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path, _ = tiny_resnet_checkpoint(tmp_path_factory.mktemp("ckpt"))
    return path


# one way of making products (--hvp auto may pick another on the rerun: the same numbers to rounding only)
OPTS = [
    "--samples",
    "16",
    "--batch-size",
    "8",
    "--top-k",
    "1",
    "--trace-samples",
    "12",
    "--hvp",
    "jvp",
    "--device",
    "cpu",
]


def test_the_taps_blocks_resume_by_block_and_are_drawn(checkpoint, tmp_path):
    out = tmp_path / "h.h5"
    result = CliRunner().invoke(cli, ["hessian", "--ckpt", str(checkpoint), *OPTS, "--per-block", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "per block (" in result.output
    full = read_result(out)
    names = [str(n) for n in full["blocks/names"]]
    assert len(names) >= 3 and names[-1] == "other" and full["blocks/done"].all()
    with h5py.File(out, "r") as f:  # every parameter in exactly one block
        owned = [n for block in json.loads(f["blocks"].attrs["parameters"]).values() for n in block]
    assert sorted(owned) == sorted(full.attrs["parameter_names"])
    with h5py.File(out, "r+") as f:  # as a run killed after its first block leaves it
        f["blocks/done"][1:] = False
        f["blocks/top_eigenvalue"][1:] = np.nan
        f.attrs["complete"] = False
    again = CliRunner().invoke(cli, ["hessian", "--ckpt", str(checkpoint), *OPTS, "--per-block", "--out", str(out)])
    assert again.exit_code == 0, again.output
    resumed = read_result(out)
    for name in ("top_eigenvalue", "trace", "trace_stderr", "residual", "done"):
        np.testing.assert_array_equal(resumed[f"blocks/{name}"], full[f"blocks/{name}"], err_msg=name)
    np.testing.assert_array_equal(resumed["eigenvalues"], full["eigenvalues"])
    figures = plot_files([out], tmp_path / "figs")
    assert any(p.name.endswith("_blocks.png") for p in figures)
    taps = ["--taps", "stem=stem", "--taps", "layer?.0=conv", "--per-block", "--out", str(tmp_path / "t.h5")]
    tapped = CliRunner().invoke(cli, ["hessian", "--ckpt", str(checkpoint), *OPTS, *taps])
    assert tapped.exit_code == 0, tapped.output
    assert [str(n) for n in read_result(tmp_path / "t.h5")["blocks/names"]] == ["stem", "layer1.0", "layer2.0", "other"]


def test_two_rank_torchrun_shares_the_blocks_and_equals_one_process(checkpoint, tmp_path):
    one, two = tmp_path / "one.h5", tmp_path / "two.h5"
    opts = [*OPTS[: OPTS.index("--top-k")], "--top-k", "0", *OPTS[OPTS.index("--top-k") + 2 :]]  # the blocks alone
    single = CliRunner().invoke(cli, ["hessian", "--ckpt", str(checkpoint), *opts, "--per-block", "--out", str(one)])
    assert single.exit_code == 0, single.output
    proc = torchrun("-m", "landscape", "hessian", "--ckpt", checkpoint, *opts, "--per-block", "--out", two, "--quiet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = read_result(one), read_result(two)
    assert [str(n) for n in a["blocks/names"]] == [str(n) for n in b["blocks/names"]] and b["blocks/done"].all()
    for name in ("top_eigenvalue", "trace", "trace_stderr", "size"):  # each block on one rank, whole
        np.testing.assert_array_equal(b[f"blocks/{name}"], a[f"blocks/{name}"], err_msg=name)
