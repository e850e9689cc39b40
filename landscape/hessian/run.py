"""Library entry points behind ``landscape hessian`` and ``landscape spectrum``: checkpoint in, HDF5 file out.

Files follow docs/schema.md (hessian, spectrum). ``hessian``: ``eigenvalues`` (k), ``residuals`` (k), ``converged`` (k),
optional ``eigenvectors`` (n_params, k), ``density/grid``, ``density/values``, ``density/nodes``,
``density/weights``, ``trace/samples``; ``spectrum``: ``eigenvalues`` (n_batches, k), ``batch_sizes``,
``done``, ``n_matvec``. Root attributes: :meth:`AnalysisInputs.provenance` plus every option. Only rank 0
writes. A complete file of the same options is returned as is; an incomplete one is resumed (hessian: by
section; spectrum: by batch); one of other options needs ``force``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from landscape import distributed, store
from landscape.errors import LandscapeError

if TYPE_CHECKING:
    from landscape.pipeline import ModelSource


def _show(quiet: bool) -> bool:
    return not quiet and distributed.is_main() and sys.stderr.isatty()


def _dtype(name: str) -> Any:
    import torch

    if name not in ("float32", "float64"):
        raise LandscapeError(f"unknown dtype {name!r}; use float32 or float64")
    return getattr(torch, name)


def run_hessian(
    checkpoint: ModelSource | str | Path,
    out: str | Path = "hessian.h5",
    *,
    model_name: str | None = None,
    data: str | None = None,
    split: str = "train",
    samples: int | None = 1024,
    batch_size: int = 128,
    seed: int = 0,
    top_k: int = 5,
    which: str = "LA",
    tol: float = 1e-4,
    ncv: int | None = None,
    maxiter: int | None = None,
    eigenvectors: bool = False,
    density: bool = False,
    probes: int = 4,
    steps: int = 64,
    sigma: float | None = None,
    grid_points: int = 1000,
    trace: bool = False,
    trace_samples: int = 99,
    trace_method: str = "hutch++",
    params: str | None = None,
    criterion: str = "cross_entropy",
    regularizer: str = "none",
    reg_coef: float | None = None,
    hvp: str = "auto",
    dtype: str = "float32",
    device: str = "auto",
    allow_stochastic: bool = False,
    force: bool = False,
    quiet: bool = False,
) -> store.Result:
    """Hessian of a checkpoint's full-data loss on ``samples`` training images, written to ``out``.

    Computes the ``top_k`` eigenpairs of kind ``which`` by Lanczos (``top_k=0`` skips them), with
    ``density`` the SLQ density (``probes`` x ``steps`` products, broadening ``sigma``), with ``trace`` the
    trace estimate (``trace_samples`` products by ``trace_method``). ``params``: comma-separated name
    patterns for a per-layer Hessian block. Returns the file, read back.
    """
    from landscape.hessian.density import spectral_density
    from landscape.hessian.lanczos import lanczos
    from landscape.hessian.operator import HessianOperator
    from landscape.hessian.trace import trace as trace_estimate
    from landscape.objective import Regularizer
    from landscape.pipeline import batches_for, build_objective, load_inputs, parse_patterns

    if top_k < 0 or (top_k == 0 and not density and not trace):
        raise LandscapeError("nothing to compute: give --top-k >= 1, --density or --trace")
    reg = Regularizer.from_options(regularizer, reg_coef)
    patterns = parse_patterns(params)
    dev = distributed.start(device)
    inputs = load_inputs(checkpoint, model_name=model_name, data=data, split=split, device=dev)
    batches = batches_for(inputs, batch_size=batch_size, n_samples=samples, seed=seed)
    options = {
        "batch_size": batch_size, "top_k": top_k, "which": which, "tol": tol, "ncv": ncv, "maxiter": maxiter,
        "eigenvectors": bool(eigenvectors), "density": bool(density), "probes": probes, "steps": steps,
        "sigma": sigma, "grid_points": grid_points, "trace": bool(trace), "trace_samples": trace_samples,
        "trace_method": trace_method, "params": patterns, "criterion": criterion, "regularizer": reg.describe(),
        "hvp": hvp, "dtype": dtype, "bn_mode": "eval", "allow_stochastic": bool(allow_stochastic),
    }
    attrs = inputs.provenance(sum(int(y.shape[0]) for _, y in batches), seed, **options)
    objective = build_objective(inputs, batches, criterion=criterion, regularizer=reg, dtype=_dtype(dtype),
                                allow_stochastic=allow_stochastic)
    attrs["fused_attention_off"] = objective.fused_attention_off
    op = HessianOperator(objective, patterns=patterns or None, mode=hvp, shard=True)
    if top_k > op.shape[0]:
        raise LandscapeError(f"--top-k {top_k} asks for more eigenvalues than the {op.shape[0]} parameters of the "
                             "Hessian have; give at most that many")
    f = _open(out, "hessian", attrs, force)
    try:
        if _todo(f, "eigenvalues", top_k > 0):
            res = lanczos(op, k=top_k, which=which, ncv=ncv, tol=tol, maxiter=maxiter, seed=seed,
                          return_eigenvectors=eigenvectors)
            if f is not None:
                if eigenvectors:
                    f.write("eigenvectors", res.eigenvectors.cpu().numpy(), axes=["parameter", "pair"])
                f.write("residuals", res.residuals.numpy(), axes=["pair"])
                f.write("converged", res.converged.numpy(), axes=["pair"])
                f.set_attrs({"n_params": op.shape[0], "parameter_names": op.names,
                             "eigen_n_matvec": res.n_matvec, "eigen_restarts": res.n_restarts})
                f.write("eigenvalues", res.eigenvalues.numpy(), axes=["pair"])
                f.mark_done()
        if _todo(f, "density/values", density):
            d = spectral_density(op, probes, steps, sigma, grid_points=grid_points, seed=seed)
            if f is not None:
                f.write("density/nodes", d.nodes.numpy(), axes=["probe", "node"])
                f.write("density/weights", d.weights.numpy(), axes=["probe", "node"])
                f.write("density/grid", d.grid.numpy(), axes=["eigenvalue"])
                f.set_attrs({"sigma": d.sigma, "n_matvec": d.n_matvec}, at="density")
                f.write("density/values", d.values.numpy(), axes=["eigenvalue"])
                f.mark_done()
        if _todo(f, "trace/samples", trace):
            t = trace_estimate(op, trace_samples, trace_method, seed=seed)
            if f is not None:
                f.write("trace/samples", t.samples.numpy(), axes=["probe"])
                f.set_attrs({"estimate": t.estimate, "stderr": t.stderr, "method": t.method,
                             "n_matvec": t.n_matvec}, at="trace")
                f.mark_done()
        if f is not None:
            f.mark_complete()
    finally:
        if f is not None:
            f.close()
    distributed.barrier()
    return store.read_result(out)


def _open(out: str | Path, kind: str, attrs: dict[str, Any], force: bool) -> store.ResultFile | None:
    """Rank 0 opens (or resumes) the file; other ranks get None. Errors reach every rank."""
    opened: list[store.ResultFile] = []
    distributed.on_main(lambda: opened.append(store.open_result(out, kind, attrs, force=force)))
    return opened[0] if opened else None


def _todo(f: store.ResultFile | None, name: str, wanted: bool) -> bool:
    """Whether a section is wanted and not yet in the file (every rank agrees; rank 0 holds the file)."""
    present = distributed.broadcast_object(f is not None and (name in f or f.complete))
    return wanted and not present


def run_spectrum(
    checkpoint: ModelSource | str | Path,
    out: str | Path = "spectrum.h5",
    *,
    model_name: str | None = None,
    data: str | None = None,
    split: str = "train",
    batch_size: int = 16,
    fraction: float | None = 0.1,
    samples: int | None = None,
    seed: int = 0,
    top_k: int = 5,
    which: str = "LM",
    solver: str = "lanczos",
    tol: float = 1e-3,
    ncv: int | None = None,
    maxiter: int | None = None,
    criterion: str = "cross_entropy",
    regularizer: str = "none",
    reg_coef: float | None = None,
    hvp: str = "jvp",
    dtype: str = "float32",
    device: str = "auto",
    allow_stochastic: bool = False,
    force: bool = False,
    quiet: bool = False,
) -> store.Result:
    """Paper A's per-mini-batch max-eigenvalue spectrum of a checkpoint, written to ``out`` batch by batch.

    The data are ``fraction`` of the split (or ``samples`` images when given), in a ``seed``-ed order, cut
    into batches of ``batch_size`` (the last may be smaller); see
    :func:`~landscape.hessian.spectrum.max_eigenvalue_spectrum`. Returns the file, read back.
    """
    from landscape.data import fixed_batches, load_dataset
    from landscape.hessian.spectrum import max_eigenvalue_spectrum
    from landscape.objective import Regularizer, fused_attention_modules
    from landscape.pipeline import load_inputs

    reg = Regularizer.from_options(regularizer, reg_coef)
    dev = distributed.start(device)
    inputs = load_inputs(checkpoint, model_name=model_name, data=data, split=split, device=dev)
    dataset = load_dataset(inputs.dataset_spec, split, preprocess=inputs.preprocess)
    if samples is None:
        if fraction is None or not 0 < fraction <= 1:
            raise LandscapeError(f"--fraction must lie in (0, 1], got {fraction}")
        samples = max(1, round(fraction * len(dataset)))
    batches = fixed_batches(dataset, batch_size, samples, seed=seed, device=inputs.device)
    options = {
        "batch_size": batch_size, "fraction": fraction, "top_k": top_k, "which": which, "solver": solver,
        "tol": tol, "ncv": ncv, "maxiter": maxiter, "criterion": criterion, "regularizer": reg.describe(),
        "hvp": hvp, "dtype": dtype, "bn_mode": "eval", "allow_stochastic": bool(allow_stochastic),
    }
    attrs = inputs.provenance(samples, seed, **options)
    attrs["fused_attention_off"] = len(fused_attention_modules(inputs.model))
    f = _open(out, "spectrum", attrs, force)
    skip: list[int] = []
    try:
        if f is not None:
            n = len(batches)
            if not f.complete:
                f.allocate("eigenvalues", (n, top_k), "f8", fill=np.nan, axes=["batch", "rank"])
                f.allocate("done", (n,), bool, fill=False, axes=["batch"])
                f.allocate("n_matvec", (n,), "i8", fill=0, axes=["batch"])
                if "batch_sizes" not in f:
                    f.write("batch_sizes", np.array([int(y.shape[0]) for _, y in batches]), axes=["batch"])
            skip = [int(i) for i in np.flatnonzero(f.read("done"))]
        skip = distributed.broadcast_object(skip)

        def write(item: Any) -> None:
            if f is not None:
                f.write_at("eigenvalues", item.index, item.eigenvalues)
                f.write_at("n_matvec", item.index, item.n_matvec)
                f.mark_done("done", item.index)

        if len(skip) < len(batches):
            max_eigenvalue_spectrum(
                inputs.model, batches, k=top_k, which=which, solver=solver, criterion=criterion, regularizer=reg,
                tol=tol, ncv=ncv, maxiter=maxiter, seed=seed, hvp=hvp, device=inputs.device, dtype=_dtype(dtype),
                allow_stochastic=allow_stochastic, output=inputs.source.output, skip=skip, on_batch=write,
                progress=_show(quiet),
            )
        if f is not None:
            f.mark_complete()
    finally:
        if f is not None:
            f.close()
    distributed.barrier()
    return store.read_result(out)
