"""Grouped per-mini-batch spectra: vectorised products against dense per-batch Hessians, lockstep Lanczos
against the serial loop, and the choice of the group size."""

import time

import numpy as np
import pytest
import torch
from torch import nn

from analyses.hessian.test_operator import dense_hessian, tiny_batches, tiny_model
from landscape.analyses.hessian.grouped import GAIN, GroupChoice, GroupedProducts, WorkerPool, choose_group
from landscape.analyses.hessian.lanczos import drive_together, lanczos, lanczos_steps
from landscape.analyses.hessian.linalg import DenseOperator
from landscape.analyses.hessian.spectrum import max_eigenvalue_spectrum
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError

SIZES = (6, 6, 6, 6, 6, 4)  # five equal batches and a smaller last one, as a split cut into batches gives


def test_grouped_products_are_each_batchs_own_hessian_times_its_own_vector():
    reg = Regularizer("norm-sum", 0.05)
    obj = Objective(tiny_model(), tiny_batches(SIZES), dtype=torch.float64, regularizer=reg)
    products = GroupedProducts(obj, [0, 2, 3])
    V = torch.randn(2, 63, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out = products([2, 0], V)  # slots: batch 3 then batch 0
    torch.testing.assert_close(out[0], dense_hessian(obj, batches=[3]) @ V[0], rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(out[1], dense_hessian(obj, batches=[0]) @ V[1], rtol=1e-12, atol=1e-13)
    assert products.n_products == 2
    with pytest.raises(ValueError, match="one shape"):
        GroupedProducts(obj, [4, 5])


def test_lockstep_runs_equal_separate_runs_and_finished_runs_leave_the_group():
    g = torch.Generator().manual_seed(3)
    mats = []
    for spread in (1.0, 5.0, 50.0):  # converge after different numbers of products
        q, _ = torch.linalg.qr(torch.randn(80, 80, generator=g, dtype=torch.float64))
        mats.append(q @ torch.diag(torch.linspace(-1, spread, 80, dtype=torch.float64)) @ q.T)
    alone = [lanczos(DenseOperator(a), k=3, which="LM", tol=1e-10, seed=i) for i, a in enumerate(mats)]
    rows = []

    def products(keys, V):
        rows.append(len(keys))
        return torch.stack([mats[key] @ v for key, v in zip(keys, V)])

    runs = {i: lanczos_steps(80, torch.float64, "cpu", k=3, which="LM", tol=1e-10, seed=i) for i in range(3)}
    together = drive_together(runs, products)
    for i in range(3):
        assert torch.equal(together[i].eigenvalues, alone[i].eigenvalues)  # the same generator, bit for bit
        assert together[i].n_matvec == alone[i].n_matvec
    counts = sorted(r.n_matvec for r in alone)
    assert len(set(counts)) > 1 and rows[0] == 3 and rows[-1] == 1 and len(rows) == counts[-1]


@pytest.mark.parametrize(
    ("dtype", "rtol", "tol"), [(torch.float64, 1e-10, 1e-6), (torch.float32, 1e-5, 1e-4)], ids=["f64", "f32"]
)
def test_grouped_spectrum_equals_the_serial_loop_on_the_same_batches_and_start_vectors(dtype, rtol, tol):
    model, batches = tiny_model(), tiny_batches(SIZES)
    reg = Regularizer("l2", 0.1)
    # a residual of 1e-6 |lambda| is at float32's rounding: some pairs would (rightly) be flagged not converged
    kw = {"k": 3, "regularizer": reg, "tol": tol, "dtype": dtype, "seed": 4}
    serial = max_eigenvalue_spectrum(model, batches, group=1, hvp="jvp", **kw)
    seen = []
    grouped = max_eigenvalue_spectrum(model, batches, group=4, on_batch=lambda item: seen.append(item.index), **kw)
    assert serial.group == 1 and grouped.group == 4 and grouped.group_choice["reason"] == "given"
    np.testing.assert_allclose(grouped.eigenvalues, serial.eigenvalues, rtol=rtol)
    assert sorted(seen) == list(range(6)) and grouped.converged.all()
    np.testing.assert_array_equal(grouped.n_matvec, serial.n_matvec)
    if dtype == torch.float64:  # and both are the dense Hessians' eigenvalues
        obj = Objective(model, batches, dtype=dtype, regularizer=reg)
        for i in (0, 5):
            ev = torch.linalg.eigvalsh(dense_hessian(obj, batches=[i])).numpy()
            top = np.sort(ev[np.argsort(-np.abs(ev))[:3]])
            np.testing.assert_allclose(grouped.eigenvalues[i], top, rtol=1e-5)


def test_skipped_batches_stay_nan_in_a_grouped_run():
    model, batches = tiny_model(), tiny_batches(SIZES)
    out = max_eigenvalue_spectrum(model, batches, k=2, group=3, skip=[1, 5], dtype=torch.float64, tol=1e-8)
    assert np.isnan(out.eigenvalues[[1, 5]]).all() and np.isfinite(out.eigenvalues[[0, 2, 3, 4]]).all()


class ItemBranch(nn.Module):
    """A model whose forward reads a tensor's value into Python: it cannot run under vmap."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x) * (2.0 if float(x.sum()) > 1e9 else 1.0)


def dense_serial(obj, index):
    H = dense_hessian(obj, batches=[index])
    return lambda v: H @ v


def dense_threaded(obj):
    """A serial way that threads can run: the dense Hessians computed beforehand (torch.func is not thread-safe)."""
    Hs = {i: dense_hessian(obj, batches=[i]) for i in range(len(obj.batches))}
    return lambda o, index: lambda v: Hs[index] @ v


def test_a_given_group_is_vmap_capped_at_the_batches_there_are():
    obj = Objective(tiny_model(), tiny_batches(SIZES), dtype=torch.float64)
    given = choose_group(obj, [0, 1, 2], dense_serial, 7)
    assert (given.group, given.way, given.reason) == (3, "vmap", "given")
    assert choose_group(obj, [0, 1, 2], dense_serial, 1).way == "serial"
    assert choose_group(obj, [0], dense_serial, "auto").group == 1


def test_auto_takes_the_way_measured_fastest_per_batch():
    obj = Objective(tiny_model(), tiny_batches(SIZES), dtype=torch.float64)
    auto = choose_group(obj, [0, 1, 2, 3], dense_serial, "auto")
    assert set(auto.seconds) == {"serial", "vmap"} and auto.way in ("serial", "vmap")
    assert (auto.way == "vmap") == (auto.seconds["vmap"] < GAIN * auto.seconds["serial"])
    threaded = choose_group(obj, [0, 1, 2, 3], dense_serial, "auto", WorkerPool(obj, 2), dense_threaded(obj))
    assert set(threaded.seconds) == {"serial", "vmap", "threads"}
    best = min(threaded.seconds, key=lambda w: threaded.seconds[w] / (1 if w == "serial" else GAIN))
    assert threaded.way == best and threaded.group == {"serial": 1, "vmap": 4, "threads": 2}[best]


def test_a_model_that_cannot_run_under_vmap_is_never_vmapped():
    torch.manual_seed(0)
    bad = Objective(ItemBranch(), tiny_batches(SIZES), dtype=torch.float64)
    choice = choose_group(bad, [0, 1, 2], dense_serial, "auto")
    assert choice.way == "serial" and "vmap failed on a trial group: RuntimeError" in choice.reason
    assert "vmap" not in choice.seconds
    out = max_eigenvalue_spectrum(ItemBranch(), tiny_batches((6, 6)), k=2, dtype=torch.float64, tol=1e-8)
    assert out.group_choice["way"] != "vmap" and np.isfinite(out.eigenvalues).all()
    with pytest.raises(LandscapeError, match=r"--group 2: this model's forward cannot run under torch.func.vmap"):
        max_eigenvalue_spectrum(ItemBranch(), tiny_batches((6, 6)), k=2, dtype=torch.float64, group=2)


def test_worker_threads_give_the_serial_loops_eigenvalues_and_restore_the_thread_count(monkeypatch):
    from landscape.analyses.hessian import spectrum

    model, batches = tiny_model(), tiny_batches(SIZES)
    kw = {"k": 3, "tol": 1e-8, "dtype": torch.float64, "seed": 2}
    serial = max_eigenvalue_spectrum(model, batches, group=1, **kw)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # a pool is made only with 2+ threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    calls = []
    monkeypatch.setattr(spectrum, "choose_group", lambda *a: GroupChoice("auto", 2, "threads", "test"))
    seen = []
    threaded = max_eigenvalue_spectrum(model, batches, on_batch=lambda item: seen.append(item.index), **kw)
    np.testing.assert_allclose(threaded.eigenvalues, serial.eigenvalues, rtol=1e-10)
    assert threaded.group_choice["way"] == "threads" and sorted(seen) == list(range(6))
    assert calls and calls[0] == 1 and calls[-1] == 2  # one intra-op thread inside, the old count after


def test_worker_pool_models_are_copies_and_errors_reach_the_caller():
    obj = Objective(tiny_model(), tiny_batches(SIZES), dtype=torch.float64)
    pool = WorkerPool(obj, 3)
    assert pool.objectives[0] is obj and len({id(o.module) for o in pool.objectives}) == 3
    # each worker's fold for second derivatives is its own and made before any thread runs (fx tracing patches
    # torch process-wide: a trace inside a worker broke another worker's forward)
    assert len({id(o.second_order_fold) for o in pool.objectives}) == 3
    assert all(o.second_order_fold.tried for o in pool.objectives)
    assert pool.map(lambda o, i: i * 2, [3, 1, 2]) == [6, 2, 4]

    started = []

    def fail(o, i):
        started.append(i)
        if i == 0:
            raise ValueError(f"batch {i}")
        time.sleep(0.05)  # the other worker is busy while batch 0 fails

    with pytest.raises(ValueError, match="batch 0"):
        pool.map(fail, list(range(20)))
    assert len(started) < 20  # the queue was dropped: not every item ran
