"""Hostile input through the command line: one line, exit status 2, nothing lost, and the same command recovers."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.options import checks
from landscape.store.read import read_result

COMMON = ["--samples", "24", "--batch-size", "12", "--device", "cpu", "--quiet"]


def make_checkpoint(path, poison=None):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = create_model("resnet_mini", num_classes=10, in_chans=1)
    if poison is not None:
        with torch.no_grad():
            dict(model.named_parameters())[poison].view(-1)[3] = float("nan")
    save_checkpoint(
        path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10, dataset="digits"
    )
    return path


def run(*args):
    result = CliRunner().invoke(cli, [*map(str, args), *COMMON])
    return result.exit_code, result.output.strip()


def assert_one_line_error(code, output, *words):
    assert code == 2, output
    lines = output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in output, output
    for word in words:
        assert word in lines[0], lines[0]


def test_a_nan_weight_is_named_and_no_file_is_left(tmp_path):
    ckpt = make_checkpoint(tmp_path / "bad.pt", poison="fc.weight")
    out = tmp_path / "s.h5"
    code, output = run("surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", out)
    assert_one_line_error(code, output, "'fc.weight'", "non-finite")
    assert "stochastic" not in output
    assert not out.exists()


def test_the_same_checkpoint_by_another_path_resumes(tmp_path, monkeypatch):
    make_checkpoint(tmp_path / "a.pt")
    monkeypatch.chdir(tmp_path)
    code, output = run("surface", "--ckpt", "a.pt", "--x", "-1:1:3", "--y", "none", "--out", "s.h5")
    assert code == 0, output
    before = read_result(tmp_path / "s.h5")["loss"]
    code, output = run(
        "surface", "--ckpt", tmp_path / "a.pt", "--x", "-1:1:3", "--y", "none", "--out", tmp_path / "s.h5"
    )
    assert code == 0, output
    np.testing.assert_array_equal(read_result(tmp_path / "s.h5")["loss"], before)


def test_an_output_folder_that_cannot_be_created_is_one_line(tmp_path):
    ckpt = make_checkpoint(tmp_path / "a.pt")
    (tmp_path / "taken").write_text("a file, not a folder")
    code, output = run("surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", tmp_path / "taken" / "s.h5")
    assert_one_line_error(code, output, "cannot")
    assert (tmp_path / "taken").read_text() == "a file, not a folder"
    code, output = run("surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", tmp_path / "free" / "s.h5")
    assert code == 0, output


def test_a_late_option_error_leaves_no_file_that_blocks_the_corrected_command(tmp_path):
    ckpt = make_checkpoint(tmp_path / "a.pt")
    out = tmp_path / "h.h5"
    code, output = run("hessian", "--ckpt", ckpt, "--top-k", "10000000", "--out", out)
    assert_one_line_error(code, output, "--top-k", "parameters")
    code, output = run("hessian", "--ckpt", ckpt, "--top-k", "1", "--tol", "1e-2", "--out", out)
    assert code == 0, output


def test_a_surface_whose_losses_are_all_nan_says_so(tmp_path):
    ckpt = make_checkpoint(tmp_path / "a.pt")
    out = tmp_path / "s.h5"
    code, output = run("surface", "--ckpt", ckpt, "--x", "1e30:2e30:2", "--y", "none", "--norm", "none", "--out", out)
    assert_one_line_error(code, output, "NaN or Inf")
    res = read_result(out)  # the file is kept and readable, its points done
    assert res["done"].all() and not np.isfinite(res["loss"]).any()
    assert np.isnan(res["accuracy"]).all()  # no prediction from non-finite logits


def test_force_is_refused_while_a_running_analysis_writes_the_file(tmp_path):
    out = tmp_path / "s.h5"
    code = textwrap.dedent(f"""
        import sys
        from landscape.store.result import open_result
        f = open_result({str(out)!r}, "surface", {{"model": "m"}})
        print("open", flush=True)
        sys.stdin.read()
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        ckpt = make_checkpoint(tmp_path / "a.pt")
        code, output = run("surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", out, "--force")
        assert_one_line_error(code, output, "being written by a running analysis", str(holder.pid))
        assert out.exists()
    finally:
        holder.stdin.close()
        holder.wait()
    code, output = run("surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", out, "--force")
    assert code == 0, output


def test_a_read_only_result_is_read_and_not_replaced(tmp_path):
    ckpt = make_checkpoint(tmp_path / "a.pt")
    out = tmp_path / "s.h5"
    assert run("surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", out)[0] == 0
    os.chmod(out, 0o444)
    try:
        code, output = CliRunner().invoke(cli, ["info", str(out)]).exit_code, ""
        assert code == 0
        code, output = run(
            "surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", out
        )  # same run: complete, as is
        assert code == 0, output
        code, output = run("surface", "--ckpt", ckpt, "--x", "-1:1:5", "--y", "none", "--out", out, "--force")
        assert_one_line_error(code, output, "read-only")
        assert read_result(out)["loss"].shape == (1, 3)
    finally:
        os.chmod(out, 0o644)


def test_a_plain_state_dict_of_a_non_default_model_loads_with_model_kw_and_val_is_test(tmp_path):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = create_model("resnet_mini", num_classes=10, in_chans=1, widths=(8, 8, 16, 16))
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    args = ["surface", "--ckpt", tmp_path / "sd.pt", "--model", "resnet_mini", "--x", "0:0:1", "--y", "none"]
    code, output = run(*args, "--out", tmp_path / "a.h5")
    assert_one_line_error(code, output)  # the default widths do not fit the file's tensors
    kw = ["--model-kw", "in_chans=1", "--model-kw", "widths=[8,8,16,16]"]
    code, output = run(*args, *kw, "--split", "val", "--out", tmp_path / "val.h5")
    assert code == 0, output
    code, output = run(*args, *kw, "--split", "test", "--out", tmp_path / "test.h5")
    assert code == 0, output
    assert read_result(tmp_path / "val.h5")["loss"][0, 0] == read_result(tmp_path / "test.h5")["loss"][0, 0]


def test_every_check_refuses_nan_inf_and_a_number_too_large_for_a_float_in_one_line():
    for value in (float("nan"), float("inf"), "nan", "1e999", 10**400):
        for check in (checks.finite, checks.non_negative, checks.positive):
            with pytest.raises(LandscapeError, match="--x must be a finite number"):
                check(value, "--x")
        with pytest.raises(LandscapeError, match="--x must be a finite number"):
            checks.in_range(value, "--x", 0, 1)
    with pytest.raises(LandscapeError, match=r"--w\[1\] must be a finite number"):
        checks.finite_all([1, 10**400], "--w")


def _limited(limit_bytes):
    """A ``preexec_fn`` that sets the file size limit of the child (``ulimit -f``)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))


TINY = ["--model-kw", "widths=[4,8]", "--model-kw", "layers=[1,1]"]


@pytest.mark.parametrize(
    ("command", "limit"),
    [
        (["surface", "--x", "-1:1:41", "--y", "-1:1:41", "--samples", "32", "--out", "s.h5"], 20_000),
        (["surface", "--x", "-1:1:41", "--y", "-1:1:41", "--samples", "32", "--out", "s.h5"], 31_000),
        (["train", "--model", "resnet_mini", *TINY, "--epochs", "1", "--subset", "100", "--out", "t.pt"], 10_000),
    ],
    ids=["surface-early", "surface-late", "train-checkpoint"],
)
def test_a_file_size_limit_is_one_line_wherever_it_strikes_and_the_same_command_recovers(tmp_path, command, limit):
    if command[0] == "surface":
        from helpers import tiny_resnet_checkpoint

        tiny_resnet_checkpoint(tmp_path)
        command = [*command, "--ckpt", "tiny.pt"]
    cmd = [sys.executable, "-m", "landscape", *command, "--quiet"]
    limited = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, preexec_fn=_limited(limit))
    output = (limited.stdout + limited.stderr).strip()
    assert limited.returncode == 2, output
    assert output.splitlines() == [output] and "Traceback" not in output and "Exception ignored" not in output, output
    assert output.startswith("Error: cannot write") and "file size limit" in output, output
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    if command[0] == "surface":
        assert read_result(tmp_path / "s.h5")["done"].all()
    else:
        assert torch.load(tmp_path / "t.pt", weights_only=True)["epoch"] == 1


@pytest.mark.parametrize("command", ["surface", "hessian", "spectrum", "fourier", "lesion", "similarity"])
def test_a_seed_beyond_what_torch_takes_is_one_line_before_any_work(tmp_path, command):
    code, output = run(command, "--model", "resnet_mini", "--random-init", "--seed", 2**66, "--out", tmp_path / "r.h5")
    assert_one_line_error(code, output, "--seed must be a whole number from 0 to 2**62", str(2**66))
    assert not (tmp_path / "r.h5").exists()


INTEGER_OPTIONS = {
    "surface": ["--samples", "--batch-size", "--augment-copies", "--num-classes"],
    "hessian": ["--steps", "--batch-size", "--trace-samples", "--probes", "--top-k", "--ncv", "--maxiter"],
    "spectrum": ["--batch-size", "--samples", "--top-k"],
    "sharpness": ["--steps", "--batch-size", "--draws", "--resamples", "--samples"],
    "connect": ["--steps", "--bend-epochs", "--plane-steps", "--samples"],
    "fourier": ["--samples", "--batch-size"],
    "lesion": ["--samples", "--batch-size"],
    "similarity": ["--samples", "--batch-size", "--other-num-classes"],
    "align": ["--samples", "--max-sweeps", "--seed"],
    "train": ["--seed", "--epochs", "--batch-size", "--snapshot-every", "--track-sharpness"],
    "models": ["--num-classes", "--in-chans"],
    "convert": ["--samples", "--seed"],
    "plot": ["--levels"],
}


@pytest.mark.parametrize("command", sorted(INTEGER_OPTIONS))
def test_every_integer_option_beyond_64_bits_is_one_line_naming_it(tmp_path, command):
    for option in INTEGER_OPTIONS[command]:
        out = [] if command == "models" else ["--out", tmp_path / "r.h5"]
        result = CliRunner().invoke(cli, list(map(str, [command, option, 2**66, *out])))
        least = {"--seed": 0, "--top-k": 0, "--levels": 2}.get(option, 1)
        expected = f"Error: {option} must be a whole number from {least} to 2**62 = {2**62}, got {2**66}"
        assert result.exit_code == 2 and result.output.strip() == expected, result.output
    assert list(tmp_path.iterdir()) == []


def test_the_options_classes_refuse_integers_beyond_64_bits_from_python():
    from landscape.options.connect import ConnectOptions
    from landscape.options.hessian import HessianOptions
    from landscape.options.sharpness import SharpnessOptions
    from landscape.train import TrainConfig

    for make, name in [
        (lambda v: HessianOptions(steps=v), "--steps"),
        (lambda v: HessianOptions(trace_samples=v), "--trace-samples"),
        (lambda v: SharpnessOptions(draws=v), "--draws"),
        (lambda v: ConnectOptions(bend_epochs=v), "--bend-epochs"),
        (lambda v: TrainConfig(model="resnet_mini", seed=v), "--seed"),
    ]:
        with pytest.raises(LandscapeError, match=f"^{re.escape(name)}.* must be a whole number from .* to 2\\*\\*62"):
            make(2**66)


def test_sizes_beyond_the_memory_are_one_line_before_they_are_allocated(tmp_path):
    model = ["--model", "resnet_mini", "--random-init"]
    code, output = run("surface", *model, "--input-size", "100000", "--x", "-1:1:3", "--out", tmp_path / "s.h5")
    assert_one_line_error(code, output, "images of 1 x 100000 x 100000", "lower --input-size")
    code, output = run("hessian", *model, "--density", "--probes", 10**12, "--top-k", 0, "--out", tmp_path / "h.h5")
    assert_one_line_error(code, output, "1,000,000,000,000 probe vectors", "lower --probes")
    code, output = run("surface", *model, "--x", "-1e308:1e308:3", "--out", tmp_path / "s.h5")
    assert_one_line_error(code, output, "MAX - MIN overflows a float")
    code, output = run("surface", *model, "--augment-copies", 4, "--x", "-1:1:3", "--out", tmp_path / "s.h5")
    assert_one_line_error(code, output, "--augment-copies 4 has no effect")
    assert not list(tmp_path.glob("*.h5"))


@pytest.mark.parametrize("command", ["surface", "train", "trajectory", "report", "align"])
def test_an_out_ending_with_a_slash_is_a_folder_and_refused(tmp_path, command):
    given = {"train": ["--model", "resnet_mini"], "report": [str(tmp_path)], "trajectory": ["a.pt"]}
    args = [command, *given.get(command, []), "--out", f"{tmp_path}/newdir/"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and result.output.startswith(f"Error: --out '{tmp_path}/newdir/' names a folder")
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert list(tmp_path.iterdir()) == []


def test_track_sharpness_beyond_the_runs_steps_is_refused_before_training(tmp_path):
    args = ["train", "--model", "resnet_mini", *TINY, "--epochs", "1", "--subset", "100", "--batch-size", "64"]
    result = CliRunner().invoke(cli, [*args, "--track-sharpness", "3", "--out", str(tmp_path / "t.pt")])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "Error: --track-sharpness 3 records nothing in a run of 2 optimiser steps (1 epoch(s) of 2): "
        "give N <= 2 or more --epochs"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_complete_file_with_a_point_not_done_is_refused_by_its_analysis_as_by_the_readers(tmp_path):
    import h5py

    ckpt = make_checkpoint(tmp_path / "a.pt")
    out = tmp_path / "s.h5"
    args = ["surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", out]
    code, output = run(*args)
    assert code == 0, output
    with h5py.File(out, "r+") as f:
        done = f["done"][()]
        done.reshape(-1)[1] = False
        f["done"][...] = done
        assert f.attrs["complete"]
    before = out.read_bytes()
    info = CliRunner().invoke(cli, ["info", str(out)])
    assert "marked complete" in info.output, info.output
    code, output = run(*args)
    assert_one_line_error(code, output, f"{out} is marked complete but contradicts itself", "marked complete")
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "s.h5"]


def _small_result(path):
    from plot_results import SURFACE_ATTRS, surface_arrays, write_result

    return write_result(path, "surface", surface_arrays(), axes=True, **SURFACE_ATTRS)


@pytest.mark.parametrize("reader", ["info", "plot"])
def test_readers_of_a_non_hdf5_or_truncated_file_give_a_readers_advice(tmp_path, reader):
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    good = _small_result(tmp_path / "good.h5")
    (tmp_path / "cut.h5").write_bytes(good.read_bytes()[:2000])
    for name, what in (("junk.h5", "is not an HDF5 file"), ("cut.h5", "is a damaged HDF5 file")):
        args = [reader, str(tmp_path / name)] + (["--out", str(tmp_path / "figs")] if reader == "plot" else [])
        result = CliRunner().invoke(cli, args)
        assert_one_line_error(result.exit_code, result.output.strip(), f"{tmp_path / name} {what}", "cannot be read")
        assert "--force" not in result.output and "--out" not in result.output
    assert not (tmp_path / "figs").exists()


def test_a_crafted_axes_attribute_or_a_declared_terabyte_is_one_line_and_the_report_goes_on(tmp_path):
    import h5py

    folder = tmp_path / "d"
    folder.mkdir()
    _small_result(folder / "good.h5")
    for name in ("axes.h5", "huge.h5"):
        _small_result(folder / name)
    with h5py.File(folder / "axes.h5", "r+") as f:
        f["loss"].attrs["axes"] = "[not json"
    with h5py.File(folder / "huge.h5", "r+") as f:
        f.create_dataset("ghost", shape=(2**37,), dtype="f8", chunks=(1024,))  # 1 TiB declared, nothing written
    assert (folder / "huge.h5").stat().st_size < 1_000_000
    expected = {
        "axes.h5": "the axes attribute of 'loss' is not a JSON list of names",
        "huge.h5": "array 'ghost' declares (137438953472,) x float64 (1,099,511,627,776 bytes) in a file of",
    }
    for name, words in expected.items():
        result = CliRunner().invoke(cli, ["info", str(folder / name)])
        assert_one_line_error(result.exit_code, result.output.strip(), f"{folder / name}: {words}")
    result = CliRunner().invoke(cli, ["report", str(folder), "--format", "png"])
    assert result.exit_code == 0, result.output
    page = (folder / "report.html").read_text()
    assert "not a JSON list of names" in page and "declares (137438953472,)" in page


def test_non_utf8_names_are_stored_and_shown_as_escapes(tmp_path, monkeypatch):
    folder = os.fsencode(tmp_path / "d")
    os.mkdir(folder)
    good = _small_result(tmp_path / "d" / "good.h5")
    os.rename(os.fsencode(good), folder + b"/\xff\xfe.h5")
    result = CliRunner().invoke(cli, ["report", os.fsdecode(folder), "--format", "png"])
    assert result.exit_code == 0, result.output
    assert "\\xff\\xfe.h5" in (tmp_path / "d" / "report.html").read_text(encoding="utf-8")
    ckpt = make_checkpoint(tmp_path / "a.pt")
    out = os.fsdecode(os.fsencode(tmp_path) + b"/\xff.h5")
    monkeypatch.setattr(sys, "argv", ["landscape", "surface", "--out", out])  # the command line the file records
    code, output = run("surface", "--ckpt", ckpt, "--x", "-1:1:3", "--y", "none", "--out", out)
    assert code == 0, output
    assert "\\xff.h5" in str(read_result(out).attrs["command"])


def test_a_read_only_report_folder_says_the_figures_go_there(tmp_path, monkeypatch):
    import landscape.plot.report as report

    folder = tmp_path / "d"
    folder.mkdir()
    _small_result(folder / "s.h5")
    access = os.access

    def read_only(path, mode, **kwargs):  # the folder as a user sees a read-only one (the tests may run as root)
        return not (mode & os.W_OK and Path(path) == folder) and access(path, mode, **kwargs)

    monkeypatch.setattr(report.os, "access", read_only)
    result = CliRunner().invoke(cli, ["report", str(folder), "--out", str(tmp_path / "page.html")])
    assert_one_line_error(result.exit_code, result.output.strip(), f"{folder} is read-only", "chmod u+w")
    assert "--out" not in result.output and sorted(p.name for p in folder.iterdir()) == ["s.h5"]


def test_block_messages_name_the_true_cause(tmp_path):
    from helpers import tiny_resnet_checkpoint

    tiny_resnet_checkpoint(tmp_path)
    args = ["hessian", "--ckpt", tmp_path / "tiny.pt", "--per-block", "--top-k", 0, "--out", tmp_path / "h.h5"]
    code, output = run(*args, "--params", "fc", "--block", "early=stem")
    assert_one_line_error(code, output, "--block early: its patterns match only parameters outside --params fc")
    assert "glob" not in output
    code, output = run(*args, "--block", "other=fc")
    assert_one_line_error(code, output, "block 'other' is the name of the block of the parameters no group matches")
    assert not (tmp_path / "h.h5").exists()


def test_taps_of_modules_that_never_run_are_one_line_not_an_empty_analysis(tmp_path):
    vit = ["--model", "vit_mini", "--random-init", "--samples", 4, "--batch-size", 4, "--out", tmp_path / "f.h5"]
    code, output = run("fourier", *vit, "--taps", "blocks.?=mlp")
    assert_one_line_error(code, output, "the --taps modules of ViT (blocks.0, blocks.1, blocks.2, ...) never run")
    assert "drop --taps" in output and "blocks.0.norm1" in output and "no batches" not in output
    # the file it began holds no result: the corrected command replaces it
    code, output = run("fourier", *vit, "--taps", "blocks.?.mlp=mlp")
    assert code == 0, output
