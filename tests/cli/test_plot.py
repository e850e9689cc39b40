"""``landscape plot`` on hostile input: bad options, damaged or inconsistent files, unwritable folders, planted links.

Every error is exit status 2 with one line naming the cause, leaves what existed as it was, and the same
command works once the cause is removed.
"""

import os

import numpy as np
import pytest
from click.testing import CliRunner
from plot_results import (
    FOREIGN,
    SURFACE_ATTRS,
    XS,
    YS,
    foreign_surface,
    fourier_arrays,
    fourier_attrs,
    hessian_arrays,
    spectrum_arrays,
    surface_arrays,
    write_result,
)

from landscape.cli import cli

SURFACE_FIGURES = ["s.vtp", "s_3d.png", "s_contour.png", "s_contourf.png", "s_heatmap.png"]


def plot(*args):
    return CliRunner().invoke(cli, ["plot", *map(str, args)])


def one_line_failure(result, *words):
    """Assert exit status 2 and a single ``Error:`` line (no traceback) holding every one of ``words``."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def succeeds(result, *names):
    assert result.exit_code == 0, result.output
    for name in names:
        assert name in result.output
    return result


def surface(tmp_path, name="s.h5", **changes):
    arrays = {**surface_arrays(), **changes}
    return write_result(tmp_path / name, "surface", arrays, **SURFACE_ATTRS)


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# ------------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize("value", ["0", "-3", "1"])
def test_levels_below_two_is_an_error_then_works(tmp_path, value):
    path = surface(tmp_path)
    one_line_failure(plot(path, "--out", tmp_path / "figs", "--levels", value), "--levels", ">= 2", f"got {value}")
    assert not (tmp_path / "figs").exists()  # options are checked before anything is written
    succeeds(plot(path, "--out", tmp_path / "figs", "--levels", "2"), "s_contour.png")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_non_finite_zmax_is_an_error_then_works(tmp_path, value):
    path = surface(tmp_path)
    one_line_failure(plot(path, "--out", tmp_path / "figs", "--zmax", value), "--zmax", "finite")
    succeeds(plot(path, "--out", tmp_path / "figs", "--zmax", "3"), "s_3d.png")


def test_a_zmax_below_the_lowest_loss_is_a_one_line_error_then_works(tmp_path):
    path, out = surface(tmp_path), tmp_path / "figs"
    lowest = float(np.nanmin(surface_arrays()["loss"]))
    one_line_failure(plot(path, "--out", out, "--zmax", "0.25"), str(path), "--zmax 0.25", f"{lowest:.6g}")
    assert not list(out.iterdir())  # no figure drawn
    succeeds(plot(path, "--out", out, "--zmax", str(lowest + 1)), *SURFACE_FIGURES)


# ------------------------------------------------------------------------------------ arrays of the files
@pytest.mark.parametrize("missing", ["loss", "xcoordinates", "ycoordinates", "accuracy"])
def test_a_surface_without_an_array_is_an_error_and_old_figures_stay(tmp_path, missing):
    path, out = surface(tmp_path), tmp_path / "figs"
    succeeds(plot(path, "--out", out), *SURFACE_FIGURES)
    before = snapshot(out)
    surface(tmp_path, **{missing: None})
    one_line_failure(plot(path, "--out", out), str(path), f"no array '{missing}'", "landscape surface")
    assert snapshot(out) == before
    surface(tmp_path)
    succeeds(plot(path, "--out", out), *SURFACE_FIGURES)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"loss": surface_arrays()["loss"].T}, ["'loss'", "along y", "'ycoordinates' has 4"]),
        ({"accuracy": surface_arrays()["accuracy"][:, :3]}, ["'accuracy'", "along x"]),
        ({"done": np.ones(len(XS), bool)}, ["'done'", "2 axes"]),
        ({"loss": np.full((len(YS), len(XS)), "a")}, ["'loss'", "numbers"]),
        ({"xcoordinates": np.array([0.0, np.nan, 1, 2, 3, 4, 5])}, ["'xcoordinates'", "not finite"]),
        ({"xcoordinates": np.zeros(0)}, ["'xcoordinates'", "empty"]),
    ],
)
def test_inconsistent_surface_arrays_are_an_error(tmp_path, change, words):
    path = surface(tmp_path, **change)
    one_line_failure(plot(path, "--out", tmp_path / "figs"), str(path), *words)
    assert not (tmp_path / "figs").exists()
    surface(tmp_path)
    succeeds(plot(path, "--out", tmp_path / "figs"), *SURFACE_FIGURES)


def test_a_surface_ndim_that_does_not_fit_the_grid_is_an_error(tmp_path):
    path = write_result(tmp_path / "s.h5", "surface", surface_arrays(), **{**SURFACE_ATTRS, "surface_ndim": 1})
    one_line_failure(plot(path, "--out", tmp_path), "surface_ndim=1", "4 x 7")
    flat = write_result(tmp_path / "f.h5", "surface", surface_arrays(ys=np.zeros(1)), **SURFACE_ATTRS)
    one_line_failure(plot(flat, "--out", tmp_path), "1 x 7", "at least 2 points")
    write_result(flat, "surface", surface_arrays(ys=np.zeros(1)), **{**SURFACE_ATTRS, "surface_ndim": 1})
    succeeds(plot(flat, "--out", tmp_path), "f_1d.png")


def fourier(tmp_path, name="a.h5", **changes):
    arrays = {**fourier_arrays(["embed", "msa", "mlp"], noise=True), **changes}
    return write_result(tmp_path / name, "fourier", arrays, **fourier_attrs("vit"))


@pytest.mark.parametrize(
    "change, words",
    [
        ({"layer_names": np.array(["l0", "l1"])}, ["'layer_names'", "2 entries along layer", "has 3"]),
        ({"delta_log_amplitude": np.zeros((3, 4))}, ["'delta_log_amplitude'", "along frequency"]),
        ({"layer_kinds": None}, ["no array 'layer_kinds'", "landscape fourier"]),
        ({"high_frequency": None}, ["no array 'high_frequency'"]),
        ({"noise/done": None}, ["'noise/frequencies' comes without 'noise/done'"]),
        ({"noise/done": np.ones(2, bool)}, ["'noise/done'", "along band"]),
        ({"maps/007": np.zeros((2, 2))}, ["'maps/007'", "names no layer"]),
        ({"maps/001": np.zeros(4)}, ["'maps/001'", "2 axes"]),
        ({"layer_names": np.arange(3)}, ["'layer_names'", "expected text"]),
    ],
)
def test_inconsistent_fourier_arrays_are_an_error(tmp_path, change, words):
    path = fourier(tmp_path, **change)
    one_line_failure(plot(path, "--out", tmp_path / "figs"), str(path), *words)
    assert not (tmp_path / "figs").exists()
    fourier(tmp_path)
    succeeds(plot(path, "--out", tmp_path / "figs"), "a_delta_log_amplitude.png", "a_noise.png")


@pytest.mark.parametrize(
    "kind, arrays, words",
    [
        ("spectrum", {**spectrum_arrays(np.ones((4, 3))), "eigenvalues": np.ones(4)}, ["'eigenvalues'", "2 axes"]),
        ("spectrum", {**spectrum_arrays(np.ones((4, 3))), "eigenvalues": np.ones((2, 4, 3))}, ["'eigenvalues'"]),
        ("spectrum", {**spectrum_arrays(np.ones((4, 3))), "eigenvalues": None}, ["no array 'eigenvalues'"]),
        ("spectrum", {**spectrum_arrays(np.ones((4, 3))), "done": np.ones(5, bool)}, ["'done'", "along batch"]),
        ("hessian", {**hessian_arrays(), "density/grid": np.linspace(0, 1, 10)}, ["'density/values'", "along grid"]),
        ("hessian", {**hessian_arrays(), "density/grid": None}, ["'density/values' comes without 'density/grid'"]),
        ("hessian", {**hessian_arrays(), "residuals": np.ones(3)}, ["'residuals'", "along pair"]),
        ("hessian", {**hessian_arrays(), "eigenvalues": np.ones((2, 2))}, ["'eigenvalues'", "1 axes"]),
        ("hessian", {"trace/samples": np.ones(3)}, ["neither eigenvalues, a density nor blocks", "landscape hessian"]),
    ],
)
def test_inconsistent_hessian_and_spectrum_arrays_are_an_error(tmp_path, kind, arrays, words):
    path = write_result(tmp_path / "h.h5", kind, arrays, model="m")
    one_line_failure(plot(path, "--out", tmp_path / "figs"), str(path), *words)
    good = hessian_arrays() if kind == "hessian" else spectrum_arrays(np.ones((4, 3)))
    write_result(path, kind, good, model="m")
    succeeds(plot(path, "--out", tmp_path / "figs"), "h_spectrum.png" if kind == "spectrum" else "h_density.png")


def test_a_bad_second_file_stops_before_any_figure(tmp_path):
    good = surface(tmp_path)
    bad = fourier(tmp_path, layer_kinds=None)
    one_line_failure(plot(good, bad, "--out", tmp_path / "figs"), str(bad), "layer_kinds")
    assert not (tmp_path / "figs").exists()


# --------------------------------------------------------------------------------------- all-NaN surfaces
def all_nan(tmp_path, done):
    arrays = surface_arrays(done=done)
    arrays["loss"] = np.full_like(arrays["loss"], np.nan)
    if done is None:
        arrays["done"] = None
    return surface(tmp_path, **arrays)


@pytest.mark.parametrize(
    "done, words",
    [
        (np.zeros((len(YS), len(XS)), bool), ["none of its 28 points is done yet", "run (or resume)"]),
        (np.ones((len(YS), len(XS)), bool), ["all 28 points are done but the loss diverged", "smaller range"]),
        (np.eye(len(YS), len(XS), dtype=bool), ["24 of its 28 points are not done yet", "diverged", "at the 4 done"]),
        (None, ["not done yet or diverged"]),
    ],
)
def test_a_surface_with_no_finite_loss_says_whether_points_are_pending_or_diverged(tmp_path, done, words):
    path = all_nan(tmp_path, done)
    one_line_failure(plot(path, "--out", tmp_path / "figs"), str(path), "no grid point has a finite loss", *words)
    assert not (tmp_path / "figs").exists()
    surface(tmp_path)
    succeeds(plot(path, "--out", tmp_path / "figs"), *SURFACE_FIGURES)


def test_a_surface_with_one_finite_point_is_drawn(tmp_path):
    done = np.zeros((len(YS), len(XS)), bool)
    done[1, 2] = True
    succeeds(plot(surface(tmp_path, **surface_arrays(done=done)), "--out", tmp_path / "figs"), *SURFACE_FIGURES)


# ------------------------------------------------------------------------------------------ the out folder
def test_an_out_folder_under_a_regular_file_is_an_error_then_works(tmp_path):
    path = surface(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"keep me")
    one_line_failure(plot(path, "--out", blocker / "figs"), str(blocker / "figs"), "is a file, not a folder", "--out")
    assert blocker.read_bytes() == b"keep me"
    one_line_failure(plot(path, "--out", blocker), str(blocker), "a file of that name exists", "--out")
    assert blocker.read_bytes() == b"keep me"
    blocker.unlink()
    succeeds(plot(path, "--out", blocker / "figs"), *SURFACE_FIGURES)


def test_an_out_folder_that_cannot_be_written_is_an_error(tmp_path, monkeypatch):
    import tempfile

    path, out = surface(tmp_path), tmp_path / "figs"
    succeeds(plot(path, "--out", out), *SURFACE_FIGURES)
    before = snapshot(out)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", denied)  # what a folder without write permission does, also for root
    one_line_failure(plot(path, "--out", out), f"cannot write {out / 's_contour.png'}", "permission denied", "--out")
    assert snapshot(out) == before
    monkeypatch.undo()
    succeeds(plot(path, "--out", out), *SURFACE_FIGURES)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_a_read_only_out_folder_is_an_error(tmp_path):
    path, out = surface(tmp_path), tmp_path / "figs"
    out.mkdir()
    os.chmod(out, 0o500)
    try:
        one_line_failure(plot(path, "--out", out), "cannot write", "permission denied")
        assert not list(out.iterdir())
    finally:
        os.chmod(out, 0o700)
    succeeds(plot(path, "--out", out), *SURFACE_FIGURES)


# -------------------------------------------------------------------------------- links and half-written
def test_planted_symlinks_are_refused_then_replaced_with_force_never_followed(tmp_path):
    path, out = surface(tmp_path), tmp_path / "figs"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    for name in ("s_contour.png", "s.vtp"):
        (out / name).symlink_to(victim)
    one_line_failure(plot(path, "--out", out), "s_contour.png is a symbolic link", "--force")
    succeeds(plot(path, "--out", out, "--force"), *SURFACE_FIGURES)
    assert victim.read_bytes() == b"precious"
    assert not (out / "s_contour.png").is_symlink() and (out / "s_contour.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "s.vtp").is_symlink() and (out / "s.vtp").read_bytes().startswith(b"<?xml")
    assert sorted(p.name for p in out.iterdir()) == sorted(SURFACE_FIGURES)  # no temporary left behind


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_a_file_landscape_did_not_write_is_replaced_only_with_force(tmp_path, fmt):
    path, out = surface(tmp_path), tmp_path / "figs"
    out.mkdir()
    mine = out / f"s_contour.{fmt}"
    mine.write_bytes(b"my own figure")
    one_line_failure(plot(path, "--out", out, "--format", fmt), f"{mine} exists and landscape did not write it")
    assert mine.read_bytes() == b"my own figure"
    succeeds(plot(path, "--out", out, "--format", fmt, "--force"), mine.name)
    before = snapshot(out)
    succeeds(plot(path, "--out", out, "--format", fmt), mine.name)  # its own figures are replaced without --force
    assert snapshot(out).keys() == before.keys()


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "folder"])
def test_what_is_not_a_regular_file_is_never_replaced_by_a_figure(tmp_path, make):
    path, out = surface(tmp_path), tmp_path / "figs"
    out.mkdir()
    make(out / "s_contour.png")
    for force in ((), ("--force",)):
        one_line_failure(plot(path, "--out", out, *force), "s_contour.png is a", "not a regular file", "never replaced")
    assert not (out / "s_contour.png").is_file()


def test_a_failed_write_leaves_the_old_figure_and_no_temporary(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from landscape.plot import UndrawableError, plot_files

    path, out = surface(tmp_path), tmp_path / "figs"
    succeeds(plot(path, "--out", out), *SURFACE_FIGURES)
    before = snapshot(out)

    def half_then_fail(self, handle, **kwargs):
        handle.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_then_fail)
    msg = one_line_failure(plot(path, "--out", out), f"cannot write {out / 's_contour.png'}", "no space left")
    assert "--out" in msg or "free some space" in msg
    assert snapshot(out) == before

    def crash(self, handle, **kwargs):
        handle.write(b"\x89PNG half")
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(Figure, "savefig", crash)
    with pytest.raises(UndrawableError, match="renderer crashed"):  # one line naming the file, not a traceback
        plot_files([path], out, "png")
    assert snapshot(out) == before


def test_overlays_are_named_by_models_or_by_name_and_spectra_take_a_style(tmp_path):
    eig = np.abs(np.random.default_rng(0).normal(5, 1, (10, 3)))
    paths = [
        write_result(tmp_path / f"{m}_spectrum.h5", "spectrum", spectrum_arrays(eig), model=m)
        for m in ("resnet_mini", "vit_mini")
    ]
    succeeds(plot(*paths, "--out", tmp_path / "figs"), "spectrum_resnet_mini_vs_vit_mini.png")
    succeeds(plot(*paths, "--out", tmp_path / "n", "--name", "final", "--spectrum-style", "kde"), "final_spectrum.png")
    one_line_failure(plot(*paths, "--out", tmp_path / "figs", "--name", "../up"), "--name", "'../up'")
    succeeds(plot(surface(tmp_path), "--out", tmp_path / "s", "--level-spacing", "linear"), *SURFACE_FIGURES)


@pytest.mark.parametrize("how", FOREIGN)
def test_a_file_that_keeps_data_elsewhere_is_refused_before_any_figure(tmp_path, how):
    secret = tmp_path / "secret.bin"
    if how == "external":
        secret.write_bytes(np.full(28, 3.0).tobytes())
    path = foreign_surface(tmp_path / "s.h5", how, secret)
    one_line_failure(plot(path, "--out", tmp_path / "figs"), str(path), "is refused", "loss")
    assert not (tmp_path / "figs").exists() or not list((tmp_path / "figs").iterdir())
