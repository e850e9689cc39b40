"""Per-mini-batch max-eigenvalue spectra against dense per-batch Hessians, and PyHessian's power iteration."""

import numpy as np
import pytest
import torch
from torch import nn

from analyses.hessian.test_operator import Noisy, dense_hessian, tiny_batches, tiny_model
from landscape.analyses.hessian.spectrum import max_eigenvalue_spectrum, pyhessian_top_eigenvalues
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError


def largest_magnitude(ev, k):
    return np.sort(ev[np.argsort(-np.abs(ev))[:k]])


@pytest.mark.parametrize("reg", [Regularizer("l2", 0.1), Regularizer("norm-sum", 0.05)], ids=lambda r: r.kind)
def test_each_row_is_the_batch_hessians_top_k_by_magnitude(reg):
    model, batches = tiny_model(), tiny_batches()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seen = []
    out = max_eigenvalue_spectrum(
        model,
        batches,
        k=4,
        regularizer=reg,
        tol=1e-12,
        dtype=torch.float64,
        on_batch=lambda item: seen.append(item.index),
    )
    obj = Objective(model, batches, dtype=torch.float64, regularizer=reg)
    for i in range(3):
        ev = torch.linalg.eigvalsh(dense_hessian(obj, batches=[i])).numpy()
        np.testing.assert_allclose(out.eigenvalues[i], largest_magnitude(ev, 4), rtol=1e-8)
    assert out.batch_sizes.tolist() == [7, 4, 5] and seen == [0, 1, 2]
    assert out.converged.all() and (out.n_matvec > 0).all()
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_which_and_skip():
    model, batches = tiny_model(), tiny_batches()
    out = max_eigenvalue_spectrum(model, batches, k=2, which="SA", tol=1e-12, dtype=torch.float64, skip=[0, 2])
    assert np.isnan(out.eigenvalues[[0, 2]]).all()
    obj = Objective(model, batches, dtype=torch.float64)
    ev = torch.linalg.eigvalsh(dense_hessian(obj, batches=[1])).numpy()
    np.testing.assert_allclose(out.eigenvalues[1], ev[:2], rtol=1e-8)


def test_pyhessian_agrees_on_a_top_eigenvalue_with_a_clear_gap_and_includes_the_regulariser():
    model, batches = tiny_model(), tiny_batches()
    reg = Regularizer("norm-sum", 0.05)
    obj = Objective(model, batches, dtype=torch.float64, regularizer=reg)
    ev = torch.linalg.eigvalsh(dense_hessian(obj, batches=[0])).numpy()
    top = ev[np.argmax(np.abs(ev))]
    second = np.sort(np.abs(ev))[-2]
    assert second < 0.8 * abs(top)  # a clear gap for power iteration
    py = pyhessian_top_eigenvalues(obj, 0, 1, tol=1e-10, maxiter=2000, seed=0)
    ours = max_eigenvalue_spectrum(model, batches[:1], k=1, regularizer=reg, tol=1e-10, dtype=torch.float64)
    # PyHessian normalises by (||v|| + 1e-6), which biases its Rayleigh quotient by ~1e-6 relative
    assert py[0] == pytest.approx(top, rel=1e-5)
    assert ours.eigenvalues[0, 0] == pytest.approx(top, rel=1e-10)
    assert ours.eigenvalues[0, 0] == pytest.approx(py[0], rel=1e-5)
    without = Objective(model, batches, dtype=torch.float64)
    assert pyhessian_top_eigenvalues(without, 0, 1, tol=1e-10, maxiter=2000)[0] != pytest.approx(top, rel=1e-4)
    # the objective's module is untouched (PyHessian ran on a copy) and the global RNG was not advanced
    assert all(p.grad is None for p in obj.module.parameters())
    state = torch.random.get_rng_state()
    pyhessian_top_eigenvalues(obj, 1, 1, tol=1e-3, seed=5)
    assert torch.equal(state, torch.random.get_rng_state())


def test_pyhessian_solver_through_the_spectrum_float32():
    model, batches = tiny_model(), tiny_batches()
    py = max_eigenvalue_spectrum(model, batches, k=1, solver="pyhessian", tol=1e-7, maxiter=1000)
    ours = max_eigenvalue_spectrum(model, batches, k=1, tol=1e-7)
    np.testing.assert_allclose(py.eigenvalues, ours.eigenvalues, rtol=1e-4)
    assert (py.n_matvec == -1).all()


def test_refusals():
    with pytest.raises(LandscapeError, match="stochastic"):
        max_eigenvalue_spectrum(nn.Sequential(nn.Linear(4, 3), Noisy()), tiny_batches(), k=1)
    with pytest.raises(LandscapeError, match="solver"):
        max_eigenvalue_spectrum(tiny_model(), tiny_batches(), k=1, solver="power")
    with pytest.raises(LandscapeError, match="top-k"):
        max_eigenvalue_spectrum(tiny_model(), tiny_batches(), k=63)
