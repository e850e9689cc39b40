"""Where central differences cannot be accurate they are refused in one line that names the cause and what works."""

import numpy as np
import pytest
import torch
from torch import nn

import landscape
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.operators import curvature_operator
from landscape.analyses.surface.hessian_directions import hessian_eigendirections
from landscape.core.objective import Objective
from landscape.errors import LandscapeError
from landscape.options.hessian import FD_MAX_ERROR, SpectrumOptions


def mlp(activation, *, zero_inputs=False, seed=0):
    """A 3-layer MLP of width 256 (PyTorch's initialisation, ``||theta||`` 13) and two batches of Gaussian inputs.

    ``zero_inputs``: the first 16 samples are 0 and the biases are 0, so that their pre-activations lie exactly on
    ReLU's kink, which a displacement of any length crosses.
    """
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 256), activation(), nn.Linear(256, 256), activation(), nn.Linear(256, 10))
    g = torch.Generator().manual_seed(seed + 1)
    x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
    if zero_inputs:
        x[:16] = 0
        with torch.no_grad():
            for m in model:
                if isinstance(m, nn.Linear):
                    m.bias.zero_()
    return model, [(x[:40], y[:40]), (x[40:], y[40:])]


def test_a_relu_network_in_float32_is_refused_naming_its_kinks_and_the_exact_ways():
    model, batches = mlp(nn.ReLU)
    op = HessianOperator(Objective(model, batches), mode="finite-difference")
    with pytest.raises(LandscapeError) as err:
        lanczos(op, k=3, tol=1e-4, seed=0)
    message = str(err.value)
    assert "\n" not in message and message.startswith("--hvp 'finite-difference'")
    assert "kinks of the model's piecewise-linear relu" in message
    assert "--hvp 'graph' or --hvp 'jvp'" in message and "--dtype 'float64'" in message
    assert "once_differentiable" not in message


def test_a_caller_without_dtype_is_not_advised_float64():
    model, batches = mlp(nn.ReLU)
    op = HessianOperator(Objective(model, batches), mode="finite-difference")
    op.dtype_option = False  # as a surface along Hessian directions sets it: a surface has no --dtype
    with pytest.raises(LandscapeError, match="kinks of the model's piecewise-linear relu") as err:
        lanczos(op, k=3, tol=1e-4, seed=0)
    assert "--hvp 'graph' or --hvp 'jvp'" in str(err.value) and "float64" not in str(err.value)
    assert "float64" not in op.remedy("asymmetric") and "float64" not in op.remedy("non-finite")
    with pytest.raises(LandscapeError, match="kinks") as err:  # the surface's own solve
        hessian_eigendirections(Objective(model, batches), 2, tol=1e-4, hvp="finite-difference")
    assert "float64" not in str(err.value)


def test_the_same_relu_network_in_float64_gives_its_exact_top_eigenvalues():
    model, batches = mlp(nn.ReLU)
    objective = Objective(model, batches, dtype=torch.float64)
    exact = lanczos(HessianOperator(objective, mode="graph"), k=3, tol=1e-10, seed=0)
    found = lanczos(HessianOperator(objective, mode="finite-difference"), k=3, tol=1e-6, seed=0)
    torch.testing.assert_close(found.eigenvalues, exact.eigenvalues, rtol=1e-6, atol=0)  # measured: 1.1e-8


def test_kinks_no_step_avoids_are_refused_in_float64_without_advising_float64():
    model, batches = mlp(nn.ReLU, zero_inputs=True)
    op = HessianOperator(Objective(model, batches, dtype=torch.float64), mode="finite-difference")
    with pytest.raises(LandscapeError, match="kinks of the model's piecewise-linear relu") as err:
        lanczos(op, k=3, tol=1e-6, seed=0)
    assert "--hvp 'graph' or --hvp 'jvp'" in str(err.value) and "float64" not in str(err.value)


def test_a_python_call_is_refused_in_its_own_keywords():
    model, batches = mlp(nn.ReLU)
    with pytest.raises(LandscapeError) as err:
        landscape.hessian(model, batches, top_k=3, hvp="finite-difference", progress=False)
    message = str(err.value)
    assert "hvp='graph' or hvp='jvp'" in message and "dtype='float64'" in message and "--" not in message


def test_a_bfloat16_forward_is_refused_naming_its_rounding():
    model, batches = mlp(nn.GELU)
    objective = Objective(model, batches)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        op = HessianOperator(objective, mode="finite-difference")
        with pytest.raises(LandscapeError) as err:
            op.step()
    message = str(err.value)
    assert "runs in bfloat16, which rounds every weight to 2^-8 of itself" in message
    assert message.endswith("run it in float32, outside torch.autocast") and "\n" not in message
    step = HessianOperator(objective, mode="finite-difference").step()  # the same network in float32: accurate
    assert step.lattice == "float32" and step.accuracy < 1e-3


def test_every_file_records_the_step_and_the_measured_errors(tmp_path):
    model, batches = mlp(nn.GELU)
    common = {"hvp": "finite-difference", "progress": False, "samples": None, "tol": 1e-4}
    hessian = landscape.hessian(
        model, batches, top_k=2, per_block=True, block=("first=0.*",), trace_samples=6, out=tmp_path / "h.h5", **common
    )
    choice = hessian.attrs["hvp_choice"]
    step = choice["finite_difference"]
    assert choice["finite_difference_step"] == step["step"] > 0 and step["estimated_error"] < 1e-3
    assert 0 < hessian.attrs["eigen_symmetry_defect"] < 1e-3
    assert choice["finite_difference_gradients"] <= 2.2 * hessian.attrs["eigen_n_matvec"]
    exact = landscape.hessian(
        model, batches, top_k=2, per_block=True, block=("first=0.*",), trace_samples=6, **{**common, "hvp": "graph"}
    )
    assert exact.attrs["eigen_symmetry_defect"] < 1e-5 and "finite_difference" not in exact.attrs["hvp_choice"]
    assert np.isnan(exact["blocks/finite_difference_step"]).all()
    for i in range(2):  # each block measures its own step (predicted error 1.3e-3, 3.1e-4), its Lanczos the asymmetry
        assert hessian["blocks/finite_difference_step"][i] > 0
        assert 0 < hessian["blocks/finite_difference_error"][i] < FD_MAX_ERROR
        assert 0 < hessian["blocks/symmetry_defect"][i] < 1e-3
    # measured: 3.5e-5 and 1.0e-5
    np.testing.assert_allclose(hessian["blocks/top_eigenvalue"], exact["blocks/top_eigenvalue"], rtol=1e-4)
    spectrum = landscape.spectrum(model, batches, top_k=2, out=tmp_path / "s.h5", **common)  # batches as given
    for shape in spectrum.attrs["hvp_choice"].values():  # batches of one shape share the step measured on the first
        assert shape["finite_difference"]["estimated_error"] < 1e-3
    assert spectrum.attrs["group"] == 1
    assert ((spectrum["symmetry_defect"] > 0) & (spectrum["symmetry_defect"] < 1e-3)).all()
    with pytest.raises(LandscapeError, match="give --group 1 or leave it out"):
        SpectrumOptions(hvp="finite-difference", group=4, samples=64)


def test_the_residual_by_differences_takes_its_hessian_parts_step_and_refusal():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 5))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g)
    objective = Objective(model, [(x[:40], y[:40]), (x[40:], y[40:])])
    exact = lanczos(curvature_operator(objective, "residual", mode="graph"), k=2, which="BE", tol=1e-6, seed=0)
    op = curvature_operator(objective, "residual", mode="finite-difference")
    found = lanczos(op, k=2, which="BE", tol=1e-4, seed=0)
    torch.testing.assert_close(found.eigenvalues, exact.eigenvalues, rtol=1e-4, atol=0)  # measured: 2e-6
    assert op.asymmetry_tolerance == FD_MAX_ERROR and op.hvp_choice()["hessian"]["finite_difference_step"] > 0
    model, batches = mlp(nn.ReLU)
    with pytest.raises(LandscapeError) as err:  # the Hessian part's refusal, not the generic once_differentiable
        lanczos(curvature_operator(Objective(model, batches), "residual", mode="finite-difference"), k=3, seed=0)
    assert str(err.value).startswith("--hvp 'finite-difference'") and "kinks" in str(err.value)
