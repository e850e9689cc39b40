import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from landscape.cli import cli
from landscape.data.batches import fixed_batches
from landscape.data.loading import load_dataset
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.store.read import read_result
from tests.helpers import tiny_resnet_checkpoint

ENTRY = str(Path(sys.executable).parent / "landscape")
COMMON = ["--samples", "48", "--batch-size", "20", "--device", "cpu", "--quiet"]


def make_checkpoint(path, seed=0, num_classes=10):
    torch.manual_seed(seed)
    model = create_model("resnet_mini", num_classes=num_classes, in_chans=1)
    save_checkpoint(
        path,
        model,
        model_name="resnet_mini",
        model_kwargs=model.model_kwargs,
        num_classes=num_classes,
        dataset="digits",
    )
    return path, model


def direct_loss(model, seed=0):
    """Cross-entropy and accuracy of the model itself on the samples the command uses (48, batches of 20)."""
    batches = fixed_batches(load_dataset("digits", "train"), 20, 48, seed=seed)
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    with torch.no_grad():
        out = model.eval()(x)
    return float(F.cross_entropy(out, y)), float((out.argmax(1) == y).float().mean())


def invoke(*args):
    return CliRunner().invoke(cli, ["surface", *map(str, args), *COMMON])


def test_surface_command_centre_resume_and_force(tmp_path):
    ckpt, model = make_checkpoint(tmp_path / "a.pt")
    out = tmp_path / "s.h5"
    r = invoke("--ckpt", ckpt, "--x", "-1:1:3", "--y", "0:0.5:2", "--out", out)
    assert r.exit_code == 0, r.output
    assert "2D surface 3x2" in r.output
    res = read_result(out)
    loss, acc = direct_loss(model)
    assert res["loss"].shape == (2, 3)
    assert res["loss"][0, 1] == pytest.approx(loss, rel=1e-6)  # (x=0, y=0) is the centre
    assert res["accuracy"][0, 1] == pytest.approx(acc)
    assert res.attrs["model"] == "resnet_mini" and res.attrs["norm"] == "filter" and res.attrs["bn"] == "eval"
    # the same command again resumes a complete file: nothing changes
    again = invoke("--ckpt", ckpt, "--x", "-1:1:3", "--y", "0:0.5:2", "--out", out)
    assert again.exit_code == 0, again.output
    np.testing.assert_array_equal(read_result(out)["loss"], res["loss"])
    other = invoke("--ckpt", ckpt, "--x", "-1:1:3", "--y", "0:0.5:2", "--out", out, "--norm", "dim0")
    assert other.exit_code == 2 and "--force" in other.output and "norm" in other.output
    assert len(other.output.strip().splitlines()) == 1
    forced = invoke("--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", out, "--norm", "dim0", "--force")
    assert forced.exit_code == 0, forced.output
    res1 = read_result(out)
    assert res1.attrs["norm"] == "dim0" and res1["loss"].shape == (1, 3)
    assert res1["loss"][0, 1] == pytest.approx(loss, rel=1e-6)


def test_without_grid_options_the_surface_is_the_21_by_21_plane_and_y_none_is_a_line(tmp_path):
    ckpt, _ = tiny_resnet_checkpoint(tmp_path)
    tiny = ["--samples", "8", "--batch-size", "8", "--device", "cpu", "--quiet"]
    plane = CliRunner().invoke(cli, ["surface", "--ckpt", str(ckpt), "--out", str(tmp_path / "p.h5"), *tiny])
    assert plane.exit_code == 0, plane.output
    res = read_result(tmp_path / "p.h5")
    assert res["loss"].shape == (21, 21) and res.attrs["surface_ndim"] == 2
    np.testing.assert_array_equal(res["xcoordinates"], np.linspace(-1, 1, 21))
    np.testing.assert_array_equal(res["ycoordinates"], np.linspace(-1, 1, 21))
    args = ["surface", "--ckpt", str(ckpt), "--x", "-1:1:3", "--y", "None", "--out", str(tmp_path / "l.h5"), *tiny]
    line = CliRunner().invoke(cli, args)
    assert line.exit_code == 0, line.output
    assert "1D surface 3x1" in line.output and read_result(tmp_path / "l.h5").attrs["surface_ndim"] == 1


@pytest.mark.parametrize("spec", ["-1:1", "1:-1:3", "0:1:x", "0:1:0"])
def test_bad_grid_is_a_one_line_error(tmp_path, spec):
    r = invoke("--ckpt", tmp_path / "missing.pt", "--x", spec, "--out", tmp_path / "s.h5")
    assert r.exit_code == 2
    assert r.output.startswith("Error: bad grid --x") and len(r.output.strip().splitlines()) == 1


def test_target_direction_lands_on_the_target_and_mismatch_is_an_error(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "a.pt", seed=0)
    target, target_model = make_checkpoint(tmp_path / "b.pt", seed=1)
    out = tmp_path / "t.h5"
    r = invoke("--ckpt", ckpt, "--target", target, "--x", "0:1:2", "--y", "none", "--out", out)
    assert r.exit_code == 0, r.output
    res = read_result(out)
    assert res.attrs["direction_type"] == "target"
    loss, _ = direct_loss(target_model)
    assert res["loss"][0, 1] == pytest.approx(loss, rel=1e-5)  # alpha = 1 is the target model
    wrong, _ = make_checkpoint(tmp_path / "c.pt", num_classes=5)
    bad = invoke("--ckpt", ckpt, "--target", wrong, "--x", "0:1:2", "--y", "none", "--out", tmp_path / "w.h5")
    assert bad.exit_code == 2 and "does not match the centre model" in bad.output
    assert len(bad.output.strip().splitlines()) == 1


def test_trajectory_gives_pca_directions_and_coordinates(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "a.pt", seed=0)
    snaps = [make_checkpoint(tmp_path / f"s{k}.pt", seed=k + 1)[0] for k in range(3)]
    out = tmp_path / "p.h5"
    args = ["--ckpt", ckpt, "--x", "-1:1:2", "--y", "-1:1:2", "--out", out]
    for s in snaps:
        args += ["--trajectory", s]
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    res = read_result(out)
    assert res.attrs["direction_type"] == "pca"
    assert len(res.attrs["explained_variance_ratio"]) == 2 and res.attrs["cosine"] == pytest.approx(0, abs=1e-6)
    assert res["trajectory/coordinates"].shape == (3, 2)


def test_bn_recompute_is_recorded(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "a.pt")
    out = tmp_path / "bn.h5"
    r = invoke("--ckpt", ckpt, "--x", "0:0.5:2", "--y", "none", "--bn", "recompute", "--out", out)
    assert r.exit_code == 0, r.output
    res = read_result(out)
    assert res.attrs["bn"] == "recompute" and res.attrs["batch_points"] == 1
    assert np.isfinite(res["loss"]).all()


def test_entry_point_surface_info_and_plot(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "a.pt")
    out = tmp_path / "e.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            ENTRY,
            "surface",
            "--ckpt",
            str(ckpt),
            "--x",
            "-1:1:3",
            "--y",
            "-1:1:2",
            "--out",
            str(out),
            "--samples",
            "20",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "\r" not in proc.stderr  # lines of its own, no bar, no warning
    info = subprocess.run([ENTRY, "info", str(out)], capture_output=True, text=True, env=env)
    assert info.returncode == 0 and "surface result" in info.stdout
    assert "(6 of 6 done)" in info.stdout and "norm: filter" in info.stdout
    assert "directions/x/" not in info.stdout and "directions_storage: seed" in info.stdout  # the recipe only
    figs = CliRunner().invoke(
        cli, ["plot", str(out), "--out", str(tmp_path / "figs"), "--style", "paper", "--zmax", "5"]
    )
    assert figs.exit_code == 0, figs.output
    assert sorted(Path(p).name for p in figs.output.split()) == [
        "e.vtp",
        "e_3d.png",
        "e_contour.png",
        "e_contourf.png",
        "e_heatmap.png",
    ]
