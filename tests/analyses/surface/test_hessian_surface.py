"""Surfaces along Hessian eigenvectors end to end: run_surface, the eigenvector file, the CLI and the figures."""

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error
from torch import nn

import landscape
from landscape.analyses.hessian.run import run_hessian
from landscape.analyses.surface.run import run_surface
from landscape.cli import cli
from landscape.core.objective import Objective
from landscape.options.hessian import HessianOptions
from landscape.options.surface import SurfaceOptions
from landscape.plot.common import caption_of
from landscape.plot.surface import lines_figure
from tests.analyses.surface.test_hessian_directions import DATA, checkpoint, dense_hessian

H = 1e-3


def small_problem():
    """A float64 MLP of 31 parameters (small enough for a dense Hessian) and two unequal batches."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(10, 3, generator=g, dtype=torch.float64), torch.arange(10) % 3
    return model, [(x[:6], y[:6]), (x[6:], y[6:])]


@pytest.mark.parametrize("which", ["LA", "SA"])
def test_the_measured_curvature_and_directions_are_the_dense_hessian_eigenpairs(which):
    model, batches = small_problem()
    names = [n for n, _ in model.named_parameters()]
    evals, evecs = torch.linalg.eigh(dense_hessian(Objective(model, batches), names))
    order = torch.argsort(evals, descending=which == "LA")[:2].tolist()
    grid = f"{-H}:{H}:3"
    res = landscape.surface(
        model, batches, directions="hessian", which=which, eigen_tol=1e-10, x=grid, y=grid, device="cpu"
    )
    assert res.attrs["direction_type"] == "hessian" and res.attrs["norm"] == "none" and res.attrs["which"] == which
    assert res.attrs["eigen_source"] == "lanczos"
    np.testing.assert_allclose(res.attrs["direction_eigenvalues"], evals[order].numpy(), rtol=1e-6)
    loss = np.asarray(res["loss"])  # loss[j, i] at (x_i, y_j)
    second_x = (loss[1, 2] - 2 * loss[1, 1] + loss[1, 0]) / H**2
    second_y = (loss[2, 1] - 2 * loss[1, 1] + loss[0, 1]) / H**2
    assert second_x == pytest.approx(float(evals[order[0]]), rel=1e-3)
    assert second_y == pytest.approx(float(evals[order[1]]), rel=1e-3)
    for axis, j, residual in zip("xy", order, res.attrs["direction_residuals"]):
        got = torch.cat([torch.as_tensor(res[f"directions/{axis}/{n}"]).reshape(-1) for n in names])
        want = torch.sign(got @ evecs[:, j]) * evecs[:, j]
        gap = float(torch.cat([evals[:j], evals[j + 1 :]]).sub(evals[j]).abs().min())
        # Davis-Kahan: sin(angle) <= ||H v - lambda v|| / gap, so ||v - v*|| <= sqrt(2) residual / gap
        assert float(torch.linalg.vector_norm(got - want)) <= 2**0.5 * residual / gap + 1e-12
        assert float(torch.linalg.vector_norm(got - want)) < 1e-5
    assert "direction_eigenvalues" not in res.attrs["identity"]  # measured, not an option


def test_a_line_along_the_top_eigenvector_and_its_quadratic_model_in_the_figure(tmp_path):
    model, batches = small_problem()
    out = tmp_path / "line.h5"
    res = landscape.surface(model, batches, out=out, directions="hessian", x=f"{-H}:{H}:3", y=None, device="cpu")
    top = res.attrs["direction_eigenvalues"][0]
    loss = np.asarray(res["loss"])[0]
    assert (loss[2] - 2 * loss[1] + loss[0]) / H**2 == pytest.approx(top, rel=1e-3)
    again = landscape.surface(model, batches, out=out, directions="hessian", x=f"{-H}:{H}:3", y=None, device="cpu")
    np.testing.assert_array_equal(again["loss"], res["loss"])  # the same run: resumed, complete
    fig = lines_figure([again])
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert any("L(0) + λa²/2" in label for label in labels)
    assert fig.axes[0].get_xlabel().startswith("eigenvector 1 (λ = ")


def test_directions_from_an_eigenvector_file_and_a_file_of_another_checkpoint_refused(tmp_path):
    ckpt, other = checkpoint(tmp_path / "a.pt", 0), checkpoint(tmp_path / "b.pt", 1)
    eig = tmp_path / "h.h5"
    hessian = HessianOptions(top_k=2, tol=1e-4, eigenvectors=True, samples=8, batch_size=4, hvp="jvp")
    run_hessian(ckpt, hessian, out=eig, device="cpu", progress=False)
    options = SurfaceOptions(
        directions="hessian", eigenvectors=str(eig), samples=8, batch_size=4, x="-0.01:0.01:3", y=None
    )
    res = run_surface(ckpt, options, out=tmp_path / "s.h5", device="cpu", progress=False)
    assert res.attrs["eigen_source"] == str(eig) and res.attrs["which"] == "LA"
    np.testing.assert_allclose(res.attrs["direction_eigenvalues"], [max(hessian_eigenvalues(eig))], rtol=1e-9)
    out = tmp_path / "o.h5"
    msg = one_line_error(run_surface, other, options, out=out, device="cpu", match="checkpoint_sha256")
    assert "there but" in msg and not out.exists()
    fewer = SurfaceOptions(**{**options.__dict__, "samples": 4})
    one_line_error(run_surface, ckpt, fewer, out=out, device="cpu", match="n_samples is 8 there but 4 here")
    assert not out.exists()
    with h5py.File(eig, "r+") as f:  # as an older release flagged it: converged by a gap estimate, residual 1%
        f["residuals"][-1] = 0.01 * abs(f["eigenvalues"][-1])
        assert f["converged"][-1]
    one_line_error(run_surface, ckpt, options, out=out, device="cpu", match="eigenpair 1 .* did not converge")


def test_a_surface_along_the_gauss_newtons_eigenvectors_records_its_operator(tmp_path):
    from analyses.hessian.references import dense_ggn

    model, batches = small_problem()
    top = torch.linalg.eigvalsh(dense_ggn(Objective(model, batches)))[-1]
    grid = f"{-H}:{H}:3"
    res = landscape.surface(model, batches, directions="hessian", operator="ggn", eigen_tol=1e-10, x=grid, y=None)
    assert res.attrs["operator"] == "ggn" and res.attrs["eigen_source"] == "lanczos"
    assert res.attrs["direction_eigenvalues"][0] == pytest.approx(float(top), rel=1e-8)
    one_line_error(landscape.surface, model, batches, operator="ggn", x=grid, y=None, match="add directions=")


def hessian_eigenvalues(path):
    from landscape.store.read import read_result

    return list(np.asarray(read_result(path)["eigenvalues"], dtype=float))


def test_bad_hessian_direction_options_are_one_line_errors(tmp_path):
    one_line_error(SurfaceOptions, directions="eigen", match="--directions")
    one_line_error(SurfaceOptions, directions="hessian", which="BE", match="--which")
    one_line_error(SurfaceOptions, directions="hessian", eigen_tol=0.0, match="--eigen-tol")
    one_line_error(SurfaceOptions, eigenvectors="h.h5", match="--directions hessian")
    one_line_error(SurfaceOptions, directions="hessian", target="t.pt", match="--target")
    one_line_error(SurfaceOptions, directions="hessian", bn="recompute", match="--bn eval")
    ckpt = checkpoint(tmp_path / "a.pt", 0)
    args = ["surface", "--ckpt", str(ckpt), "--data", DATA, "--samples", "8", "--x", "-0.01:0.01:3", "--y", "none"]
    result = CliRunner().invoke(cli, [*args, "--eigenvectors", str(ckpt), "--out", str(tmp_path / "x.h5")])
    assert result.exit_code == 2 and "--directions hessian" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(
        cli, [*args, "--directions", "hessian", "--eigenvectors", str(tmp_path / "none.h5"), "--out", "y.h5"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output and not (tmp_path / "y.h5").exists()


def activation_problem(activation):
    """A float64 MLP with ``activation`` between two layers (small enough for a dense Hessian), one batch."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), activation, nn.Linear(6, 3)).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.arange(12) % 3
    return model, [(x, y)]


def test_a_smooth_network_s_second_difference_is_the_dense_eigenvalue_and_has_no_kinks(tmp_path):
    model, batches = activation_problem(nn.GELU())
    names = [n for n, _ in model.named_parameters()]
    top = float(torch.linalg.eigvalsh(dense_hessian(Objective(model, batches), names)).max())
    res = landscape.surface(
        model, batches, out=tmp_path / "g.h5", directions="hessian", eigen_tol=1e-10, x="-0.5:0.5:101", y=None
    )
    assert res.attrs["kinked_operations"] == [] and res.attrs["second_difference_steps"] == [pytest.approx(0.01)]
    assert res.attrs["direction_second_differences"][0] == pytest.approx(top, rel=1e-4)
    note = "piecewise linear"
    assert note not in caption_of(lines_figure([res]))


def test_a_relu_network_is_said_to_have_kinks_where_the_quadratic_model_is_drawn(tmp_path):
    model, batches = activation_problem(nn.ReLU())
    res = landscape.surface(model, batches, out=tmp_path / "r.h5", directions="hessian", x="-0.5:0.5:11", y=None)
    assert res.attrs["kinked_operations"] == ["relu"]
    measured = res.attrs["direction_second_differences"][0]
    loss = np.asarray(res["loss"])[0]
    assert measured == pytest.approx((loss[6] - 2 * loss[5] + loss[4]) / 0.1**2, rel=1e-9)  # the grid's own curve
    fig = lines_figure([res])
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert any("kinks (relu): not the curve's curvature" in label for label in labels)
    assert "piecewise linear (relu)" in caption_of(fig) and f"{measured:.3g}" in caption_of(fig)
    assert "direction_second_differences" not in res.attrs["identity"]  # measured, not an option


class _Noisy(nn.Module):
    """Adds fresh noise at every pass, as a stochastic layer left on does."""

    def forward(self, x):
        return x + 0.1 * torch.randn_like(x)


@pytest.mark.parametrize(("directions", "compared"), [("random", "losses:"), ("hessian", "losses or gradients:")])
def test_a_stochastic_model_is_refused_by_the_check_its_directions_need(directions, compared):
    model, batches = small_problem()
    noisy = nn.Sequential(model[0], _Noisy(), model[1], model[2])
    with pytest.raises(landscape.LandscapeError, match=f"two passes gave different {compared}"):
        landscape.surface(noisy, batches, directions=directions, x="-1:1:3", y=None, device="cpu", progress=False)
