"""landscape.curvature on a float64 network against dense references; resume; the command; the figures."""

import h5py
import numpy as np
import pytest
import scipy.linalg
import torch
from click.testing import CliRunner
from helpers import one_line_error, tiny_resnet_checkpoint

from analyses.hessian.references import dense_empirical_fisher, dense_ggn, dense_kfac, regularizer_hessian
from analyses.hessian.test_kfac import bn_mlp
from analyses.hessian.test_operator import dense_hessian, tiny_batches
from landscape import curvature
from landscape.cli import cli
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.options.curvature import CurvatureOptions
from landscape.plot import plot_files
from landscape.store.read import read_result

OPTIONS = {
    "top_k": 3,
    "tol": 1e-10,
    "probes": 2,
    "steps": 8,
    "distance_samples": 40,
    "block": ("first=0.*,1.*", "last=3.*"),
    "regularizer": "l2",
    "reg_coef": 0.01,
    "dtype": "float64",
    "progress": False,
    "device": "cpu",
}


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("curvature") / "c.h5"
    model, batches = bn_mlp(), tiny_batches()
    result = curvature(model, [(x.double(), y) for x, y in batches], out=out, samples=16, batch_size=7, **OPTIONS)
    obj = Objective(model, batches, dtype=torch.float64, regularizer=Regularizer("l2", 0.01))
    names = list(obj.params)
    H = dense_hessian(obj)
    G = dense_ggn(obj)
    dense = {
        "hessian": H,
        "ggn": G,
        "empirical-fisher": dense_empirical_fisher(obj),
        "residual": H - G,
        "kfac": dense_kfac(obj, obj.module)[0] + regularizer_hessian(obj, names),
    }
    return result, dense, obj


def test_every_operators_spectrum_and_angles_are_the_dense_ones(compared):
    result, dense, obj = compared
    assert list(result["operators"]) == ["hessian", "ggn", "empirical-fisher", "residual", "kfac"]
    assert result.attrs["uncovered"] == ["1.weight", "1.bias"] and result.attrs["n_params"] == 63
    top = {}
    for i, name in enumerate(result["operators"]):
        values, vectors = torch.linalg.eigh(dense[name])
        np.testing.assert_allclose(result["spectra/eigenvalues"][i], values[-3:].numpy(), rtol=1e-8, err_msg=name)
        top[name] = vectors[:, -3:].numpy()
        want = np.sort(scipy.linalg.subspace_angles(top["hessian"], top[name]))
        np.testing.assert_allclose(result["spectra/angles"][i], want, atol=1e-6, err_msg=name)
    assert result["spectra/converged"].all() and result["spectra/done"].all()
    spacing = np.diff(result["density/grid"][:2])[0]
    np.testing.assert_allclose(result["density/values"].sum(1) * spacing, 1.0, atol=1e-6)  # one grid for all


def test_the_distances_are_the_dense_ones(compared):
    result, dense, obj = compared
    H = dense["hessian"]
    for i, name in enumerate(result["approximations"]):
        D = H - dense[name]
        spectral = float(torch.linalg.eigvalsh(D).abs().max() / torch.linalg.eigvalsh(H).abs().max())
        frob = float(torch.linalg.matrix_norm(D) / torch.linalg.matrix_norm(H))
        assert result["distance/spectral"][i] == pytest.approx(spectral, rel=1e-8), name
        assert result["distance/spectral_converged"][i]
        error = result["distance/frobenius_stderr"][i]
        assert abs(result["distance/frobenius"][i] - frob) < 4 * error and error < 0.1 * frob, name
    offsets = np.cumsum([0] + [p.numel() for p in obj.params.values()])
    index = dict(zip(obj.params, zip(offsets[:-1], offsets[1:])))
    for b, patterns in enumerate([["0.weight", "0.bias", "1.weight", "1.bias"], ["3.weight", "3.bias"]]):
        rows = np.concatenate([np.arange(*index[n]) for n in patterns])
        Hb = H[rows][:, rows]
        for i, name in enumerate(result["approximations"]):
            Db = Hb - dense[name][rows][:, rows]
            want = float(torch.linalg.eigvalsh(Db).abs().max() / torch.linalg.eigvalsh(Hb).abs().max())
            if want < 1e-6:  # the head's Gauss-Newton is its Hessian: H - G is rounding, given as a bound
                assert result["blocks/spectral"][b, i] < 1e-6 and not result["blocks/spectral_converged"][b, i]
            else:
                assert result["blocks/spectral"][b, i] == pytest.approx(want, rel=1e-7), (b, name)
    assert list(result["blocks/size"]) == [30 + 12, 21]


def test_a_killed_run_resumes_its_rows_with_the_same_numbers(compared, tmp_path):
    result, _, _ = compared
    path = tmp_path / "c.h5"
    path.write_bytes(result.path.read_bytes())
    with h5py.File(path, "r+") as f:
        f["spectra/done"][2] = False
        f["spectra/eigenvalues"][2] = np.nan
        f["distance/done"][1] = False
        f["blocks/done"][0] = False
        for name in ("density/grid", "density/values"):
            del f[name]
        f.attrs["complete"] = False
    model, batches = bn_mlp(), [(x.double(), y) for x, y in tiny_batches()]
    again = curvature(model, batches, out=path, samples=16, batch_size=7, **OPTIONS)
    assert again.attrs["complete"]
    np.testing.assert_array_equal(
        again["spectra/eigenvalues"][[0, 1, 3, 4]], result["spectra/eigenvalues"][[0, 1, 3, 4]]
    )  # kept
    np.testing.assert_array_equal(again["distance/spectral"][0], result["distance/spectral"][0])
    np.testing.assert_array_equal(again["blocks/spectral"][1], result["blocks/spectral"][1])
    # the rows done again: the same numbers to rounding (--hvp auto measures which way makes the products)
    for name in ("spectra/eigenvalues", "spectra/angles", "distance/spectral", "distance/frobenius", "blocks/spectral"):
        np.testing.assert_allclose(again[name], result[name], rtol=1e-10, atol=1e-14, err_msg=name)
    np.testing.assert_allclose(again["density/values"], result["density/values"], rtol=1e-10)


def test_the_command_the_figures_and_the_refusals(tmp_path):
    ckpt = tiny_resnet_checkpoint(tmp_path)[0]
    out = tmp_path / "c.h5"
    args = ["curvature", "--ckpt", str(ckpt), "--samples", "8", "--batch-size", "4", "--operators", "ggn,kfac"]
    args += ["--top-k", "2", "--steps", "4", "--distance-samples", "3", "--device", "cpu", "--quiet"]
    run = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert run.exit_code == 0, run.output
    assert f"wrote {out}: " in run.output and "||H - A|| / ||H||: ggn" in run.output and "per block" in run.output
    res = read_result(out)
    assert list(res["approximations"]) == ["ggn", "kfac"] and res["blocks/done"].all()
    drawn = plot_files([out], tmp_path / "figs", "png")
    assert [p.name for p in drawn if p.suffix == ".png"] == ["c_densities.png", "c_distances.png"]
    bad = CliRunner().invoke(cli, [*args, "--operators", "ggn,hessian", "--out", str(tmp_path / "x.h5")])
    assert bad.exit_code == 2 and "--operators" in bad.output and not (tmp_path / "x.h5").exists()
    assert "--operators names an operator twice" in one_line_error(CurvatureOptions, operators="ggn,ggn")
    assert "add --per-block" not in one_line_error(CurvatureOptions, per_block=False, block=("a=fc",))
