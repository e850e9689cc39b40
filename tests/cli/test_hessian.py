"""``landscape hessian`` and ``landscape spectrum`` through click and through the installed entry point."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import tiny_resnet_checkpoint

from landscape.cli import cli
from landscape.store.read import read_result

ENTRY = str(Path(sys.executable).parent / "landscape")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_resnet_checkpoint(tmp_path_factory.mktemp("ckpt"))[0]


def test_hessian_command_and_plot(ckpt, tmp_path):
    out = tmp_path / "h.h5"
    args = [
        "hessian",
        "--ckpt",
        str(ckpt),
        "--samples",
        "6",
        "--batch-size",
        "3",
        "--top-k",
        "2",
        "--tol",
        "1e-3",
        "--params",
        "fc.*",
        "--density",
        "--probes",
        "2",
        "--steps",
        "4",
        "--trace",
        "--trace-samples",
        "6",
        "--hvp",
        "jvp",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--quiet",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    res = read_result(out)
    assert f"wrote {out}: 90 parameters, 6 samples" in result.output
    assert "eigenvalues (LA): " + ", ".join(f"{v:.6g}" for v in res["eigenvalues"]) in result.output
    assert "trace: " in result.output and "density: 2 probes" in result.output
    other = CliRunner().invoke(cli, [*args[:-3], "--which", "SA", "--out", str(out), "--quiet"])
    assert other.exit_code == 2 and "use --force" in other.output
    plotted = CliRunner().invoke(cli, ["plot", str(out), "--out", str(tmp_path / "figs")])
    assert plotted.exit_code == 0 and "h_density.png" in plotted.output and "h_eigenvalues.png" in plotted.output


def test_spectrum_command(ckpt, tmp_path):
    out = tmp_path / "s.h5"
    result = CliRunner().invoke(
        cli,
        [
            "spectrum",
            "--ckpt",
            str(ckpt),
            "--samples",
            "4",
            "--batch-size",
            "2",
            "--top-k",
            "2",
            "--regularizer",
            "l2",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    res = read_result(out)
    assert res["eigenvalues"].shape == (2, 2) and not np.isnan(res["eigenvalues"]).any()
    assert f"wrote {out}: 2 batches x top-2" in result.output
    assert res.attrs["regularizer"] == {"kind": "l2", "coef": 0.0005} and res.attrs["solver"] == "lanczos"
    bad = CliRunner().invoke(cli, ["spectrum", "--ckpt", str(ckpt), "--fraction", "2", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "Error: --fraction must lie in (0, 1]" in bad.output


def test_entry_point_runs_hessian(ckpt, tmp_path):
    out = tmp_path / "h.h5"
    proc = subprocess.run(
        [
            ENTRY,
            "hessian",
            "--ckpt",
            str(ckpt),
            "--samples",
            "4",
            "--top-k",
            "1",
            "--tol",
            "1e-2",
            "--params",
            "fc",
            "--hvp",
            "jvp",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "Warning" not in proc.stderr and "\r" not in proc.stderr  # no bar, no warning
    assert read_result(out).kind == "hessian"
    bad = subprocess.run(
        [ENTRY, "hessian", "--ckpt", str(tmp_path / "missing.pt"), "--out", str(out)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.startswith("Error:") and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["hessian", "--samples", "6", "--ncv", "100000000"], ["ncv must satisfy", "got 100000000"]),
        (["spectrum", "--samples", "6", "--top-k", "100000000"], ["--top-k must lie in", "got 100000000"]),
    ],
)
def test_a_solver_option_too_large_for_the_model_is_one_line_and_leaves_no_file(ckpt, tmp_path, args, words):
    out = tmp_path / "r.h5"
    r = CliRunner().invoke(cli, [*args, "--ckpt", str(ckpt), "--out", str(out), "--device", "cpu", "--quiet"])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert all(w in lines[0] for w in words), lines[0]
    assert not out.exists()


def test_hessian_and_spectrum_take_an_operator(ckpt, tmp_path):
    out = tmp_path / "g.h5"
    common = ["--ckpt", str(ckpt), "--samples", "6", "--batch-size", "3", "--device", "cpu", "--quiet"]
    args = ["hessian", *common, "--top-k", "2", "--tol", "1e-3", "--params", "fc.*", "--operator", "kfac"]
    result = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    res = read_result(out)
    assert res.attrs["operator"] == "kfac" and res.attrs["eigen_method"] == "kronecker"
    assert f"wrote {out}: kfac (0 parameter tensors not covered): 90 parameters, 6 samples" in result.output
    refused = CliRunner().invoke(cli, [*args, "--hvp", "graph", "--out", str(tmp_path / "x.h5")])
    assert refused.exit_code == 2 and "drop --hvp" in refused.output and not (tmp_path / "x.h5").exists()
    spectrum = ["spectrum", *common, "--top-k", "1", "--which", "SA", "--operator", "residual"]
    result = CliRunner().invoke(cli, [*spectrum, "--out", str(tmp_path / "r.h5")])
    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'r.h5'}: residual: 2 batches x top-1" in result.output
