"""Paper A's per-mini-batch "max eigenvalue spectra" (docs/analyses.md, per-mini-batch spectrum).

For every mini-batch ``b`` the top-k eigenvalues of ``H_b + H_R`` (that batch's mean loss plus the
regulariser; BatchNorm in eval mode) are computed; the eigenvalues of all batches are pooled and their
density is plotted. ``which="LM"`` (default) returns the largest-**magnitude** eigenvalues, the semantics of
the power iteration Paper A used, which is why strongly negative values can appear. ``solver="pyhessian"``
runs PyHessian's own power iteration with deflation (``hessian(model, criterion, data=(x, y)).eigenvalues(
top_n=k)``) on a deep copy of the model; its criterion is given the regulariser too (the copy's parameters
enter the loss), so both solvers compute the spectrum of the same matrix. Under ``torchrun`` the batches
are shared among ranks (rank r takes every W-th batch of each round) and gathered on every rank.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
from torch import nn

from landscape.analyses.hessian.flat import FlatOperator
from landscape.analyses.hessian.grouped import GroupChoice, GroupedProducts, WorkerPool, choose_group, shared_costs
from landscape.analyses.hessian.lanczos import drive_together, lanczos_steps
from landscape.analyses.hessian.operator import bn_folded
from landscape.analyses.hessian.operators import curvature_operator, eigenpairs
from landscape.analyses.hessian.products import FINITE_DIFFERENCE, ProductCosts
from landscape.core.criteria import Batch, OutputSelector, batch_loss
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError
from landscape.options.hessian import SOLVERS, check_operator
from landscape.runtime import distributed
from landscape.runtime.progress import Progress


@dataclass
class BatchSpectrum:
    """The top-k eigenvalues (ascending) of one mini-batch, the products spent and convergence flags.

    Attributes:
        index: the batch's index among the objective's batches.
        eigenvalues: its k eigenvalues, ascending, shape ``(k,)``.
        n_matvec: Hessian-vector products spent (-1 for PyHessian, which does not report them).
        converged: per-eigenvalue convergence flags, shape ``(k,)`` (all True for PyHessian).
        symmetry_defect: the largest relative asymmetry of the products Lanczos measured (NaN for PyHessian and
            for batches solved together, whose grouped products are exact).
    """

    index: int
    eigenvalues: np.ndarray
    n_matvec: int
    converged: np.ndarray
    symmetry_defect: float = float("nan")


@dataclass
class MaxEigenvalueSpectrum:
    """Per-mini-batch top-k eigenvalues.

    ``eigenvalues`` (n_batches, k), each row ascending; ``batch_sizes`` (n_batches,); ``n_matvec`` and
    ``converged`` per batch (PyHessian reports neither: -1 products, rows all True).

    Attributes:
        eigenvalues: top-k eigenvalues per batch, ``(n_batches, k)``, rows ascending (NaN: not computed).
        batch_sizes: samples per batch, ``(n_batches,)``.
        n_matvec: Hessian-vector products per batch, ``(n_batches,)``.
        converged: convergence flag per eigenvalue, ``(n_batches, k)``.
        symmetry_defect: the largest relative asymmetry of each batch's products (:class:`BatchSpectrum`),
            ``(n_batches,)``.
        group: the most batches computed together (1: one after another).
        group_choice: how the group size was chosen (:meth:`~landscape.analyses.hessian.grouped.GroupChoice.as_dict`).
        hvp_choice: how the serial products were made, by batch shape (the operators' ``hvp_choice``: the
            seconds measured, the ways that failed, and ``bn_folded``, the BatchNorm layers the products fold).
    """

    eigenvalues: np.ndarray
    batch_sizes: np.ndarray
    n_matvec: np.ndarray
    converged: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    symmetry_defect: np.ndarray = field(default_factory=lambda: np.zeros(0))
    group: int = 1
    group_choice: dict = field(default_factory=dict)
    hvp_choice: dict = field(default_factory=dict)


def pyhessian_top_eigenvalues(
    objective: Objective, index: int, k: int, *, tol: float = 1e-3, maxiter: int = 100, seed: int = 0
) -> np.ndarray:
    """Top-k eigenvalues by PyHessian's power iteration for batch ``index`` of ``objective`` (ascending).

    Runs on a deep copy of the objective's module (eval mode; only the objective's variable parameters
    require gradients, at the objective's point) with the criterion ``data loss + regulariser``. PyHessian
    draws its start vectors from torch's global generator: it is seeded with ``seed`` inside a forked RNG
    state, so the caller's random state is untouched.

    Args:
        objective: the loss; its module, params, regulariser and batches are used.
        index: the batch of ``objective.batches`` whose Hessian is taken.
        k: number of eigenvalues (largest magnitude, by deflation).
        tol: PyHessian's relative change between iterations that stops the power iteration.
        maxiter: power iterations per eigenvalue.
        seed: seeds PyHessian's start vectors.

    Returns:
        The k eigenvalues, float64, ascending, shape ``(k,)``.
    """
    from pyhessian import hessian as PyHessian

    model = copy.deepcopy(objective.module).eval()
    variable = dict(objective.params)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(variable.get(name, objective.fixed.get(name, p)))
            p.requires_grad_(name in variable)
    named = dict(model.named_parameters())
    reg = objective.regularizer

    def criterion(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = batch_loss(logits, targets, objective.criterion)
        return loss + reg({n: named[n] for n in variable}) if reg.active else loss

    x, y = objective.batches[index]
    device = objective.device
    devices = [device] if device.type == "cuda" else []
    default = torch.get_default_dtype()
    with torch.random.fork_rng(devices=devices), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyHessian's backward(create_graph=True) warns about a reference cycle
        torch.manual_seed(seed)
        try:
            torch.set_default_dtype(next(iter(variable.values())).dtype)  # PyHessian's randn uses it
            h = PyHessian(model, criterion, data=(x, y), cuda=device.type == "cuda")
            values, _ = h.eigenvalues(maxIter=maxiter, tol=tol, top_n=k)
        finally:
            torch.set_default_dtype(default)
    return np.sort(np.asarray(values, dtype=np.float64))


def max_eigenvalue_spectrum(
    model: nn.Module,
    batches: Sequence[Batch],
    *,
    k: int = 5,
    which: str = "LM",
    solver: str = "lanczos",
    criterion: str = "cross_entropy",
    regularizer: Regularizer | None = None,
    tol: float = 1e-3,
    ncv: int | None = None,
    maxiter: int | None = None,
    seed: int = 0,
    hvp: str = "auto",
    operator: str = "hessian",
    group: int | str = "auto",
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    allow_stochastic: bool = False,
    output: OutputSelector = None,
    skip: Sequence[int] = (),
    on_batch: Callable[[BatchSpectrum], None] | None = None,
    progress: bool = False,
) -> MaxEigenvalueSpectrum:
    """Top-k Hessian eigenvalues of every mini-batch's loss (+ regulariser), Paper A's protocol (or another operator's).

    ``solver="lanczos"`` uses :func:`~landscape.analyses.hessian.lanczos.lanczos` with ``which``/``tol``/``ncv``/
    ``maxiter`` on :class:`HessianOperator` of the single batch (seed ``seed + index``, products by ``hvp``,
    default ``"auto"``: measured, with the measurements shared by batches of one shape); with ``group`` G > 1,
    G equal-sized batches at a time run their Lanczos recurrences in lockstep on one vectorised product per
    step (:mod:`landscape.analyses.hessian.grouped`: same start vectors, same eigenvalues to rounding); ``"auto"``
    measures whether grouping is faster and how many fit (:func:`~landscape.analyses.hessian.grouped.choose_group`).
    ``"pyhessian"``
    uses :func:`pyhessian_top_eigenvalues` (always largest magnitude; ``tol`` is its relative change
    between iterations, ``maxiter`` its iterations per eigenvalue, default 100). Batches listed in ``skip``
    are not computed (their rows stay NaN: resuming). ``on_batch`` is called on every rank with each
    finished batch, in rounds of ``world_size`` batches. ``output`` selects the logits of a model that returns
    a tuple or dict (:func:`~landscape.core.criteria.select_logits`). ``progress`` shows the progress of the batches on
    rank 0 (:class:`~landscape.runtime.progress.Progress`). The model is never modified.

    Args:
        model: the network.
        batches: the fixed ``(x, y)`` mini-batches; each gets its own spectrum.
        k: eigenvalues per mini-batch, in ``[1, n_params - 1]``.
        which: kind of eigenvalues for ``lanczos``, one of :data:`~landscape.options.hessian.WHICH`.
        solver: ``lanczos`` or ``pyhessian`` (:data:`~landscape.options.hessian.SOLVERS`).
        criterion: the data loss, ``cross_entropy``, ``mse`` or ``soft_cross_entropy`` (soft targets: augmented
            data, :mod:`landscape.data.augment`).
        regularizer: penalty added to each batch's loss; None: none.
        tol: relative residual of a converged pair (lanczos) or relative change between iterations (pyhessian).
        ncv: Lanczos basis size (None: the solver's default; lanczos only).
        maxiter: Lanczos restarts, or PyHessian iterations per eigenvalue (None: the solver's default).
        seed: batch ``index`` uses seed ``seed + index`` for its start vector(s).
        hvp: how products are made (lanczos, one batch at a time), one of
            :data:`~landscape.options.hessian.HVP_MODES`.
        operator: the curvature operator of each mini-batch, one of :data:`~landscape.options.hessian.OPERATORS`
            (:mod:`landscape.analyses.hessian.operators`; K-FAC's eigenvalues come exactly from its factors); an
            operator other than the Hessian runs one batch at a time (``group`` 1).
        group: batches computed together (lanczos, the Hessian), or ``"auto"``.
        device: where the computation runs (None: the model's parameters' device).
        dtype: floating-point type of the computation (None: the model's own).
        allow_stochastic: do not refuse a model whose two forward passes differ.
        output: where the logits are in the model's output.
        skip: indices of batches not to compute (their rows stay NaN).
        on_batch: called on every rank with each finished :class:`BatchSpectrum`.
        progress: show the progress of the batches on rank 0 (a bar on a terminal, lines elsewhere).

    Returns:
        The eigenvalues ``(n_batches, k)`` (rows ascending; NaN for skipped batches), batch sizes, products and
        convergence flags per batch, and how the group size and the products were chosen.

    Raises:
        LandscapeError: an unknown ``solver``, ``k`` out of range, an Objective that cannot be built (see
            :class:`~landscape.core.objective.Objective`), bad Lanczos options or ``hvp``, or a product with NaN or
            Inf entries.
    """
    if solver not in SOLVERS:
        raise LandscapeError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    check_operator(operator, hvp)
    if operator != "hessian" and (solver != "lanczos" or group not in ("auto", 1)):
        raise LandscapeError(f"operator {operator!r} runs one batch at a time by Lanczos: leave solver and group")
    objective = Objective(
        model,
        batches,
        criterion=criterion,
        regularizer=regularizer,
        device=device,
        dtype=dtype,
        allow_stochastic=allow_stochastic,
        output=output,
    )
    n_params = sum(p.numel() for p in objective.params.values())
    if not 1 <= k < n_params:
        raise LandscapeError(f"--top-k must lie in [1, {n_params - 1}] for this model, got {k}")
    sizes = np.array(objective.batches.sizes)
    out = MaxEigenvalueSpectrum(
        np.full((len(sizes), k), np.nan),
        sizes,
        np.zeros(len(sizes), np.int64),
        np.zeros((len(sizes), k), bool),
        np.full(len(sizes), np.nan),
    )
    todo = [i for i in range(len(sizes)) if i not in set(skip)]
    world = distributed.world_size()
    costs: dict[tuple[int, ...], ProductCosts] = {}
    pool = None
    threads = torch.get_num_threads()
    hessian = operator == "hessian"
    if (
        hessian
        and solver == "lanczos"
        and group == "auto"
        and hvp in ("auto", "graph")
        and objective.device.type != "cuda"
    ):
        pool = WorkerPool(objective, min(threads, len(todo))) if threads > 1 and len(todo) > 1 else None

    def serial(obj: Objective, index: int, mode: str = hvp) -> Callable[[torch.Tensor], torch.Tensor]:
        op = _serial_operator(obj, index, mode, costs, operator)
        op.plan_products(ncv or 20)
        return op.matvec

    if solver == "pyhessian":
        choice = GroupChoice(group, 1, "serial", "pyhessian solver")
    elif not hessian:
        choice = GroupChoice(group, 1, "serial", f"operator {operator}")
    elif hvp == FINITE_DIFFERENCE:  # grouped products are exact (vmap of jvp): differences go one batch at a time
        choice = GroupChoice(group, 1, "serial", "finite differences")
    elif not todo:
        choice = GroupChoice(group, 1, "serial", "nothing to do")
    else:
        same = [i for i in todo if objective.batches.shape(i) == objective.batches.shape(todo[0])]
        threaded = partial(serial, mode="graph")  # worker threads use plain autograd only
        choice = distributed.on_main(lambda: choose_group(objective, same, serial, group, pool, threaded))
    out.group, out.group_choice = choice.group, choice.as_dict()
    bar = Progress("spectrum", len(todo), unit="batch", progress=None if progress else False)
    per_round = world * choice.group * (8 if choice.way == "threads" else 1)  # threads take batches as they free
    lanczos_options = {"tol": tol, "ncv": ncv, "maxiter": maxiter, "seed": seed}
    solve = partial(_one_batch, k=k, which=which, solver=solver, hvp=hvp, operator=operator, **lanczos_options)
    for start in range(0, len(todo), per_round):
        mine = distributed.shard(todo[start : start + per_round])  # this rank's share of the round
        if choice.way == "threads" and pool is not None:
            results = pool.map(lambda obj, i: solve(obj, i, costs=costs, hvp="graph"), mine)
        else:
            results = _batches(objective, mine, choice.way, solve, costs)
        for part in distributed.all_gather_objects(results):
            for item in part:
                out.eigenvalues[item.index] = item.eigenvalues
                out.n_matvec[item.index] = item.n_matvec
                out.converged[item.index] = item.converged
                out.symmetry_defect[item.index] = item.symmetry_defect
                if on_batch is not None:
                    on_batch(item)
                bar.update(1)
    bar.close()
    folds = bn_folded(objective, hvp)
    out.hvp_choice = {
        "x".join(map(str, shape)): {"operator": operator, **c.summary(), "bn_folded": folds}
        for shape, c in costs.items()
    }
    if not hessian:  # the operator's own record (its products need no measured choice)
        out.hvp_choice = {"operator": operator, **out.hvp_choice}
    return out


def _serial_operator(
    objective: Objective,
    index: int,
    hvp: str,
    costs: dict[tuple[int, ...], ProductCosts],
    operator: str = "hessian",
) -> FlatOperator:
    shape = objective.batches.shape(index)
    return curvature_operator(objective, operator, batches=[index], mode=hvp, costs=shared_costs(costs, shape))


def _batches(
    objective: Objective,
    indices: Sequence[int],
    way: str,
    solve: Callable[..., BatchSpectrum],
    costs: dict[tuple[int, ...], ProductCosts],
) -> list[BatchSpectrum]:
    """The spectra of ``indices``: one at a time, or (``way="vmap"``) equal-sized ones together in lockstep."""
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i in indices:
        by_shape.setdefault(objective.batches.shape(i), []).append(i)
    done: dict[int, BatchSpectrum] = {}
    for same in by_shape.values():
        if way != "vmap" or len(same) == 1:
            for i in same:
                done[i] = solve(objective, i, costs=costs)
            continue
        products = GroupedProducts(objective, same)
        p0 = next(iter(objective.params.values()))
        kw = solve.keywords
        runs = {
            slot: lanczos_steps(
                products.n,
                p0.dtype,
                p0.device,
                k=kw["k"],
                which=kw["which"],
                ncv=kw["ncv"],
                tol=kw["tol"],
                maxiter=kw["maxiter"],
                seed=kw["seed"] + i,
                return_eigenvectors=False,
            )
            for slot, i in enumerate(same)
        }
        for slot, res in _lockstep(runs, products).items():
            i = same[slot]
            done[i] = BatchSpectrum(i, res.eigenvalues.numpy(), res.n_matvec, res.converged.numpy())
    return [done[i] for i in indices]


def _lockstep(runs: dict, products: GroupedProducts) -> dict:
    """:func:`drive_together` on vectorised products; a model ``vmap`` cannot batch is a one-line error."""
    group = len(products.indices)
    try:
        return drive_together(runs, products)
    except torch.OutOfMemoryError:
        raise LandscapeError(
            f"--group {group}: the vectorised products of {group} batches ran out of device memory; "
            "use a smaller --group, or --group auto (it measures what fits)"
        ) from None
    except (RuntimeError, NotImplementedError) as exc:  # an op of the model that vmap cannot batch
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        raise LandscapeError(
            f"--group {group}: this model's forward cannot run under torch.func.vmap ({type(exc).__name__}: "
            f"{detail}); use --group auto (it falls back to one batch at a time) or --group 1"
        ) from None


def _one_batch(
    objective: Objective,
    index: int,
    *,
    k: int,
    which: str,
    solver: str,
    tol: float,
    ncv: int | None,
    maxiter: int | None,
    seed: int,
    hvp: str,
    costs: dict[tuple[int, ...], ProductCosts],
    operator: str = "hessian",
) -> BatchSpectrum:
    if solver == "pyhessian":
        values = pyhessian_top_eigenvalues(objective, index, k, tol=tol, maxiter=maxiter or 100, seed=seed + index)
        return BatchSpectrum(index, values, -1, np.ones(k, bool))
    op = _serial_operator(objective, index, hvp, costs, operator)
    res = eigenpairs(op, k, which, ncv=ncv, tol=tol, maxiter=maxiter, seed=seed + index, return_eigenvectors=False)
    return BatchSpectrum(index, res.eigenvalues.numpy(), res.n_matvec, res.converged.numpy(), res.symmetry_defect)
