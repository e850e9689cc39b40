import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

from landscape.cli import cli
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.store.read import read_result

ENTRY = str(Path(sys.executable).parent / "landscape")


def make_checkpoint(path):
    torch.manual_seed(0)
    model = create_model("resnet_mini", num_classes=10, in_chans=1)
    return save_checkpoint(
        path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10, dataset="digits"
    )


def test_fourier_command_writes_the_file_and_refuses_to_overwrite(tmp_path):
    ckpt = make_checkpoint(tmp_path / "r.pt")
    out = tmp_path / "f.h5"
    args = [
        "fourier",
        "--ckpt",
        str(ckpt),
        "--samples",
        "6",
        "--batch-size",
        "3",
        "--noise-bands",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--quiet",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}: 5 layers, 6 samples" in result.output and "accuracy drop per band" in result.output
    res = read_result(out)
    assert res.attrs["noise_bands"] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    assert res["noise/done"].all() and not np.isnan(res["noise/accuracy"]).any()
    other = CliRunner().invoke(cli, [*args, "--profile", "radial"])
    assert other.exit_code == 2 and "use --force" in other.output
    forced = CliRunner().invoke(cli, [*args, "--profile", "radial", "--force"])
    assert forced.exit_code == 0 and read_result(out).attrs["profile"] == "radial"


def test_band_options_reach_the_file_and_bad_ones_are_one_line_errors(tmp_path):
    ckpt = make_checkpoint(tmp_path / "r.pt")
    out = tmp_path / "b.h5"
    args = [
        "fourier",
        "--ckpt",
        str(ckpt),
        "--samples",
        "4",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--quiet",
        "--noise-bands",
        "--bands",
        "0.3, 0.6",
        "--noise-width",
        "0.2",
        "--noise-strength",
        "1",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    res = read_result(out)
    assert res.attrs["noise_bands"] == [0.3, 0.6] and res.attrs["noise_width"] == 0.2
    assert res.attrs["noise_strength"] == 1.0 and res["noise/frequencies"].tolist() == [0.3, 0.6]
    official = CliRunner().invoke(
        cli,
        [
            *args,
            "--noise-construction",
            "official",
            "--noise-eps",
            "0.25",
            "--first-samples",
            "--out",
            str(tmp_path / "o.h5"),
        ],
    )
    assert official.exit_code == 0, official.output
    attrs = read_result(tmp_path / "o.h5").attrs
    assert attrs["noise_construction"] == "official" and attrs["noise_eps"] == 0.25 and attrs["first_samples"] is True
    assert (
        attrs["noise_strength"] is None and "noise_construction" not in res.attrs and "first_samples" not in res.attrs
    )
    bad_cases = (
        (["--noise-width", "0"], "--noise-width"),
        (["--bands", "0.3,1.5"], "noise band centre"),
        (["--noise-eps", "-1"], "--noise-eps"),
    )
    for bad, match in bad_cases:
        r = CliRunner().invoke(cli, [*args, *bad, "--out", str(tmp_path / "x.h5")])
        assert r.exit_code == 2 and match in r.output and len(r.output.strip().splitlines()) == 1, r.output
        assert not (tmp_path / "x.h5").exists()


def test_entry_point_runs_fourier_and_plot(tmp_path):
    ckpt = make_checkpoint(tmp_path / "r.pt")
    out = tmp_path / "f.h5"
    proc = subprocess.run(
        [ENTRY, "fourier", "--ckpt", str(ckpt), "--samples", "4", "--device", "cpu", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "Warning" not in proc.stderr and "\r" not in proc.stderr  # no bar, no warning
    assert read_result(out).kind == "fourier"
    bad = subprocess.run(
        [ENTRY, "fourier", "--ckpt", str(tmp_path / "missing.pt"), "--out", str(out)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stderr.startswith("Error:")
