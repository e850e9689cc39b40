"""run_hessian / run_spectrum: HDF5 schema, provenance, exact values on a layer block, resume and --force."""

import importlib
from dataclasses import replace

import h5py
import numpy as np
import pytest
import torch
from helpers import torchrun

from landscape.analyses.hessian.run import run_hessian, run_spectrum
from landscape.core.front import batches_for, load_inputs
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import load_model, save_checkpoint
from landscape.options.hessian import HessianOptions, SpectrumOptions
from landscape.store.read import read_result

TINY = {"widths": (4, 8), "layers": (1, 1)}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    model = create_model("resnet_mini", num_classes=10, in_chans=1, **TINY)
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    return save_checkpoint(
        path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10, dataset="digits"
    )


COMMON = {"samples": 8, "batch_size": 3, "hvp": "jvp"}
RUN = {"device": "cpu", "progress": False}


def test_run_hessian_writes_the_schema_with_exact_values_on_a_layer_block(ckpt, tmp_path):
    out = tmp_path / "h.h5"
    res = run_hessian(
        ckpt,
        HessianOptions(
            top_k=2,
            which="LA",
            tol=1e-10,
            eigenvectors=True,
            density=True,
            probes=2,
            steps=5,
            trace=True,
            trace_samples=9,
            params="fc",
            dtype="float64",
            regularizer="l2",
            reg_coef=0.01,
            **COMMON,
        ),
        out=out,
        **RUN,
    )
    assert res.kind == "hessian" and res.attrs["complete"]
    for name in (
        "eigenvalues",
        "eigenvectors",
        "residuals",
        "converged",
        "density/grid",
        "density/values",
        "density/nodes",
        "density/weights",
        "trace/samples",
    ):
        assert name in res, name
    a = res.attrs
    assert a["model"] == "resnet_mini" and a["dataset"] == "digits" and a["n_samples"] == 8
    assert a["params"] == ["fc"] and a["which"] == "LA" and a["bn_mode"] == "eval" and a["n_params"] == 90
    assert a["parameter_names"] == ["fc.weight", "fc.bias"] and len(a["checkpoint_sha256"]) == 64
    assert res["eigenvectors"].shape == (90, 2) and res.axes["eigenvectors"] == ["parameter", "pair"]
    # exact reference: the dense Hessian of the fc block of the same objective
    model, _ = load_model(ckpt)
    inputs = load_inputs(ckpt, device="cpu")
    obj = Objective(
        model,
        batches_for(inputs, batch_size=3, n_samples=8, seed=0),
        dtype=torch.float64,
        regularizer=Regularizer("l2", 0.01),
    )
    names = ["fc.weight", "fc.bias"]

    def loss(flat):
        w, b = flat[:80].view(10, 8), flat[80:]
        return obj.loss({**obj.params, "fc.weight": w, "fc.bias": b})

    flat = torch.cat([obj.params[n].reshape(-1) for n in names])
    ev = torch.linalg.eigvalsh(torch.func.hessian(loss)(flat)).numpy()
    np.testing.assert_allclose(res["eigenvalues"], ev[-2:], rtol=1e-8)
    assert res["density/values"].sum() * np.diff(res["density/grid"][:2])[0] == pytest.approx(1.0, abs=1e-6)
    assert abs(res["trace/samples"].mean() - ev.sum()) < 1e-6 * abs(ev.sum()) + 5 * res["trace/samples"].std()


def test_run_hessian_resumes_by_section_and_refuses_other_options(ckpt, tmp_path):
    out = tmp_path / "h.h5"
    opts = HessianOptions(top_k=1, tol=1e-2, trace=True, trace_samples=6, params="fc", **COMMON)
    first = run_hessian(ckpt, opts, out=out, **RUN)
    with h5py.File(out, "r+") as f:
        del f["trace"]
        f.attrs["complete"] = False
        f["eigenvalues"][0] = 123.0  # marks that the eigen section is not recomputed
    again = run_hessian(ckpt, opts, out=out, **RUN)
    assert again.attrs["complete"] and again["eigenvalues"][0] == 123.0
    np.testing.assert_array_equal(again["trace/samples"], first["trace/samples"])
    with pytest.raises(LandscapeError, match="--force"):
        run_hessian(ckpt, replace(opts, top_k=2), out=out, **RUN)
    forced = run_hessian(ckpt, replace(opts, top_k=2), out=out, force=True, **RUN)
    assert forced["eigenvalues"].shape == (2,)
    with pytest.raises(LandscapeError, match="nothing to compute"):
        run_hessian(ckpt, HessianOptions(top_k=0), out=tmp_path / "x.h5")


def test_run_spectrum_rows_resume_and_schema(ckpt, tmp_path):
    out = tmp_path / "s.h5"
    opts = SpectrumOptions(samples=7, batch_size=3, top_k=2, tol=1e-3)
    res = run_spectrum(ckpt, opts, out=out, **RUN)
    assert res.kind == "spectrum" and res.attrs["complete"]
    assert res["eigenvalues"].shape == (3, 2) and res["batch_sizes"].tolist() == [3, 3, 1]
    assert res["done"].all() and (res["n_matvec"] > 0).all() and res.axes["eigenvalues"] == ["batch", "rank"]
    assert res.attrs["which"] == "LM" and res.attrs["solver"] == "lanczos" and res.attrs["n_samples"] == 7
    with h5py.File(out, "r+") as f:
        f["done"][1] = False
        f["eigenvalues"][1] = np.nan
        f["eigenvalues"][0] = 7.0  # a done row is kept as is
        f.attrs["complete"] = False
    again = run_spectrum(ckpt, opts, out=out, **RUN)  # batch 1 alone now, maybe grouped before: equal to rounding
    np.testing.assert_allclose(again["eigenvalues"][1:], res["eigenvalues"][1:], rtol=1e-5)
    assert (again["eigenvalues"][0] == 7.0).all()
    frac = run_spectrum(
        ckpt, SpectrumOptions(fraction=0.002, batch_size=4, top_k=1, tol=1e-1), out=tmp_path / "f.h5", **RUN
    )
    assert frac.attrs["n_samples"] == round(0.002 * len(load_dataset("digits"))) == frac["batch_sizes"].sum()
    with pytest.raises(LandscapeError, match="fraction"):
        run_spectrum(ckpt, SpectrumOptions(fraction=1.5), out=tmp_path / "g.h5")


def test_two_rank_torchrun_spectrum_equals_the_single_process_run(ckpt, tmp_path):
    # 13 samples: batches of 3, 3, 3, 3, 1; each rank computes two equal batches together, then the last alone
    opts = ["--samples", "13", "--batch-size", "3", "--top-k", "2", "--group", "2", "--device", "cpu"]
    single = run_spectrum(
        ckpt, SpectrumOptions(samples=13, batch_size=3, top_k=2, group=1), out=tmp_path / "one.h5", **RUN
    )
    out = tmp_path / "two.h5"
    proc = torchrun("-m", "landscape", "spectrum", "--ckpt", ckpt, *opts, "--out", out, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("wrote") == 1  # only rank 0 reports (and writes)
    two = read_result(out)
    assert two.attrs["complete"] and two["done"].all()
    np.testing.assert_allclose(two["eigenvalues"], single["eigenvalues"], rtol=1e-5)
    np.testing.assert_array_equal(two["batch_sizes"], single["batch_sizes"])
    assert two.attrs["group"] == 2 and single.attrs["group"] == 1


def test_two_rank_torchrun_hessian_shares_the_batches_and_equals_the_single_process_run(ckpt, tmp_path):
    opts = HessianOptions(samples=7, batch_size=3, top_k=2, tol=1e-8, trace=True, trace_samples=6)
    single = run_hessian(ckpt, opts, out=tmp_path / "one.h5", **RUN)
    out = tmp_path / "two.h5"
    args = ["--samples", "7", "--batch-size", "3", "--top-k", "2", "--tol", "1e-8", "--trace", "--trace-samples", "6"]
    proc = torchrun("-m", "landscape", "hessian", "--ckpt", ckpt, *args, "--device", "cpu", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("wrote") == 1
    two = read_result(out)
    np.testing.assert_allclose(two["eigenvalues"], single["eigenvalues"], rtol=1e-5)
    np.testing.assert_allclose(two["trace/samples"], single["trace/samples"], rtol=1e-4, atol=1e-6)


def test_a_density_basis_larger_than_the_memory_is_refused_before_the_file_is_made(ckpt, tmp_path, monkeypatch):
    devices = importlib.import_module("landscape.runtime.devices")
    monkeypatch.setattr(devices, "device_memory", lambda device: 100_000)  # a machine with 100 kB
    opts = HessianOptions(top_k=0, density=True, steps=64, samples=4, batch_size=4)
    with pytest.raises(LandscapeError, match="lower --steps"):
        run_hessian(ckpt, opts, out=tmp_path / "h.h5", **RUN)
    assert not (tmp_path / "h.h5").exists()


@pytest.mark.parametrize("operator", ["ggn", "empirical-fisher", "residual", "kfac"])
def test_run_hessian_of_each_operator_records_it_and_equals_the_reference(ckpt, tmp_path, operator):
    from analyses.hessian.references import dense_empirical_fisher, dense_ggn
    from analyses.hessian.test_operator import dense_hessian

    hvp = {"hvp": "jvp"} if operator == "residual" else {}  # --hvp is the Hessian's: refused for the others
    block = "layer2.0.bn2.*,fc"  # the head alone has R = 0: the logits are linear in it
    opts = HessianOptions(
        samples=8, batch_size=3, top_k=2, tol=1e-10, eigenvectors=True, params=block, dtype="float64", **hvp
    )
    res = run_hessian(ckpt, replace(opts, operator=operator), out=tmp_path / "h.h5", **RUN)
    a = res.attrs
    assert a["operator"] == operator and a["hvp_choice"]["operator"] == operator and res["converged"].all()
    assert a["eigen_method"] == ("kronecker" if operator == "kfac" else "lanczos")
    model, _ = load_model(ckpt)
    batches = batches_for(load_inputs(ckpt, device="cpu"), batch_size=3, n_samples=8, seed=0)
    obj = Objective(model, batches, dtype=torch.float64)
    names = ["layer2.0.bn2.weight", "layer2.0.bn2.bias", "fc.weight", "fc.bias"]
    dense = {
        "ggn": lambda: dense_ggn(obj, names),
        "empirical-fisher": lambda: dense_empirical_fisher(obj, names),
        "residual": lambda: dense_hessian(obj, names) - dense_ggn(obj, names),
        "kfac": lambda: torch.block_diag(torch.zeros(16, 16, dtype=torch.float64), head_kfac(obj)),
    }[operator]()
    if operator == "kfac":
        assert a["hvp_choice"]["layers"] == ["fc"] and a["hvp_choice"]["uncovered"] == names[:2]
    np.testing.assert_allclose(res["eigenvalues"], torch.linalg.eigvalsh(dense).numpy()[-2:], rtol=1e-8)


def head_kfac(obj):
    """K-FAC of the head ``fc`` (a Linear on vectors, logits out): ``S (x) A`` with ``S = (1/N) sum H_z,n`` (dz/ds = I)
    and ``A`` the second moment of its inputs with a 1, reordered to the flat order (weight row-major, then bias)."""
    inputs = []
    hook = obj.module.fc.register_forward_pre_hook(lambda m, args: inputs.append(args[0].detach()))
    z = torch.cat([obj.logits(obj.params, x) for x, _ in obj.batches])
    hook.remove()
    a = torch.cat(inputs)
    a = torch.cat([a, a.new_ones(len(a), 1)], dim=1)
    p = torch.softmax(z, -1)
    S = (torch.diag_embed(p) - p[:, :, None] * p[:, None, :]).mean(0)
    K = torch.kron(S, a.T @ a / len(a))  # over vec_rowmajor([W | b])
    out, width = S.shape[0], a.shape[1]
    order = [o * width + i for o in range(out) for i in range(width - 1)] + [o * width + width - 1 for o in range(out)]
    return K[order][:, order]


def test_run_spectrum_of_the_residual_per_batch(ckpt, tmp_path):
    opts = SpectrumOptions(samples=6, batch_size=3, top_k=1, which="SA", tol=1e-8, operator="residual")
    res = run_spectrum(ckpt, replace(opts, dtype="float64"), out=tmp_path / "r.h5", **RUN)
    assert res.attrs["operator"] == "residual" and res.attrs["group"] == 1
    assert res.attrs["hvp_choice"]["operator"] == "residual" and res["done"].all()
    assert res.attrs["group_choice"]["reason"] == "operator residual"
    hessian = run_spectrum(ckpt, replace(opts, dtype="float64", operator="hessian"), out=tmp_path / "h.h5", **RUN)
    assert "operator" not in hessian.attrs  # a Hessian file keeps the identity it had before operators existed
    assert (res["eigenvalues"] <= hessian["eigenvalues"] + 1e-8).all()  # Weyl: lambda_min(R) <= lambda_min(H)
