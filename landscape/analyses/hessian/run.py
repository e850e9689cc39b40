"""Library entry points behind ``landscape hessian`` and ``landscape spectrum``: checkpoint in, HDF5 file out.

Files follow docs/schema.md (hessian, spectrum). ``hessian``: ``eigenvalues`` (k), ``residuals`` (k), ``converged`` (k),
optional ``eigenvectors`` (n_params, k), ``density/grid``, ``density/values``, ``density/nodes``,
``density/weights``, ``trace/samples``; ``spectrum``: ``eigenvalues`` (n_batches, k), ``batch_sizes``,
``done``, ``n_matvec``. Root attributes: :meth:`AnalysisInputs.provenance` plus the options' ``attrs()``
(:class:`~landscape.options.hessian.HessianOptions`, :class:`~landscape.options.hessian.SpectrumOptions`). Only rank 0
writes. A complete file of the same options is returned as is; an incomplete one is resumed (hessian: by
section; spectrum: by batch); one of other options needs ``force``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from typing_extensions import Unpack

from landscape import store
from landscape.analyses.hessian.block_file import hessian_blocks, write_blocks
from landscape.analyses.hessian.blocks import ParameterBlock
from landscape.analyses.hessian.density import require_grid_memory, spectral_density
from landscape.analyses.hessian.flat import FlatOperator
from landscape.analyses.hessian.fsdp import is_fully_sharded
from landscape.analyses.hessian.lanczos import check_request
from landscape.analyses.hessian.linalg import random_unit, require_memory
from landscape.analyses.hessian.operators import curvature_operator, eigen_method, eigenpairs
from landscape.analyses.hessian.probes import require_probe_memory
from landscape.analyses.hessian.spectrum import max_eigenvalue_spectrum
from landscape.analyses.hessian.trace import trace as trace_estimate
from landscape.core.calls import analysis_function
from landscape.core.front import build_objective, prepare, python_call, run_from_python
from landscape.core.objective import Objective
from landscape.core.params import torch_dtype
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError
from landscape.models.external import fused_attention_modules
from landscape.options.common import DTYPES, choice
from landscape.options.hessian import HessianKeywords, HessianOptions, SpectrumKeywords, SpectrumOptions
from landscape.runtime import distributed
from landscape.runtime.devices import fastest
from landscape.runtime.lifecycle import AnalysisFile
from landscape.runtime.progress import Progress

if TYPE_CHECKING:
    from landscape.core.source import ModelSource


def _dtype(name: str | None) -> Any:
    return torch_dtype(None if name is None else choice(name, "--dtype", DTYPES))


def run_hessian(
    source: ModelSource | str | Path,
    options: HessianOptions = HessianOptions(),
    *,
    out: str | Path = "hessian.h5",
    model_name: str | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
) -> store.Result:
    """Hessian of a model's full-data loss on ``options.samples`` images, written to ``out``.

    The curvature operator is ``options.operator`` (the Hessian by default; the Gauss-Newton, the empirical Fisher,
    the residual ``H - G`` or K-FAC: :mod:`landscape.analyses.hessian.operators`). Computes the ``options.top_k``
    eigenpairs of kind ``options.which`` by Lanczos (K-FAC's exactly from its factors; ``top_k=0`` skips
    them), with ``options.density`` the SLQ density (``probes`` x ``steps`` products, broadening ``sigma``),
    with ``options.trace`` the trace estimate (``trace_samples`` products by ``trace_method``).
    ``options.params``: comma-separated name patterns for a per-layer Hessian block. With ``options.per_block``
    the top eigenvalue and the trace of every block's diagonal Hessian block ``H[B, B]`` (the ``blocks/``
    section, resumed block by block: :mod:`~landscape.analyses.hessian.block_file`). The root attributes are
    the provenance plus :meth:`HessianOptions.attrs`.

    Args:
        source: the model: a :class:`~landscape.core.source.ModelSource` or a checkpoint path.
        options: what to compute (validated when built).
        out: the HDF5 result file; a complete one of the same options is returned as is, an incomplete one
            resumed by section.
        model_name: the model's name when ``source`` is a path whose checkpoint does not name it.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: overwrite a file made with other options.
        progress: show what will run and the products on rank 0 (:mod:`landscape.runtime.progress`: a bar on a
            terminal, a line every 30 s elsewhere); False: nothing.
        command: how the run was asked for, recorded as ``command`` (default: this call).
        batches: the data as ``(x, y)`` batches (a ``DataLoader`` or a list), their first ``samples`` images instead of
            ``options.data`` (:func:`~landscape.core.front.prepare`).

    Returns:
        The file, read back.

    Raises:
        LandscapeError: more eigenpairs than parameters, a file of other options without ``force``, or any
            error of loading the model and data or of the solvers.
    """
    o = options
    if not isinstance(o, HessianOptions):
        raise LandscapeError(f"options must be a HessianOptions, got {type(o).__name__}")
    reg = Regularizer.from_options(o.regularizer, o.reg_coef)
    patterns = o.patterns
    call = command or python_call("run_hessian", source, o, out=out, model_name=model_name)
    prepared = prepare(source, o, model_name=model_name, device=device, command=call, batches=batches)
    inputs, batches, attrs = prepared.inputs, prepared.batches, prepared.attrs
    objective = build_objective(
        inputs,
        batches,
        criterion=o.loss_criterion,
        regularizer=reg,
        dtype=_dtype(o.dtype),
        allow_stochastic=o.allow_stochastic,
    )
    attrs["fused_attention_off"] = objective.fused_attention_off
    op = curvature_operator(objective, o.operator, patterns=patterns or None, mode=o.hvp, shard=True)
    if o.top_k > op.shape[0]:
        raise LandscapeError(
            f"--top-k {o.top_k} asks for more eigenvalues than the {op.shape[0]} parameters of "
            "the Hessian have; give at most that many"
        )
    if o.top_k > 0:
        check_request(op.shape[0], o.top_k, o.which, o.ncv)  # a bad --ncv refused before the file is made
    if o.density:  # and a quadrature basis that cannot fit
        steps = min(o.steps, op.shape[0])
        require_memory(
            steps, op.shape[0], op.dtype, op.device, f"a Lanczos quadrature of {steps} steps", "lower --steps"
        )
        require_probe_memory(op.shape[0], o.probes, op.device)
        require_grid_memory(o.grid_points, o.probes * steps)
    blocks = hessian_blocks(objective, o, op.names) if o.per_block else []  # a bad --block: before the file
    products = _planned_products(o, op.shape[0])
    block_products = [_planned_block_products(o, _size(objective, b)) for b in blocks]
    timed = progress is not False  # the estimate is only shown, so only timed, when the run says what it does
    seconds = products * seconds_per_product(op, o.seed) if products and timed else 0.0
    if blocks and timed:  # the first block's products, timed: its backward reaches deepest
        first = curvature_operator(objective, o.operator, patterns=list(blocks[0].names), mode=o.hvp)
        seconds += sum(block_products) * seconds_per_product(first, o.seed)
        first.clear_cache()
    units = products + sum(block_products)
    per_product = seconds / units if units and timed else None
    plan = _plan(o, op.shape[0]) + (f", per block: {len(blocks)} blocks" if blocks else "")
    prepared.announce(plan, units, "product", per_product, progress)  # Lanczos may stop early or restart
    session = AnalysisFile(out, "hessian", attrs, force=force)
    with session as (f, _):
        if _todo(f, "eigenvalues", o.top_k > 0):
            with session.progress("lanczos", None, unit="product", progress=progress) as bar:
                res = eigenpairs(
                    op,
                    o.top_k,
                    o.which,
                    ncv=o.ncv,
                    tol=o.tol,
                    maxiter=o.maxiter,
                    seed=o.seed,
                    return_eigenvectors=o.eigenvectors,
                    callback=lambda n_matvec, *_: bar.to(n_matvec),
                )
            if f is not None:
                if o.eigenvectors:
                    f.write("eigenvectors", res.eigenvectors.cpu().numpy(), axes=["parameter", "pair"])
                f.write("residuals", res.residuals.numpy(), axes=["pair"])
                f.write("converged", res.converged.numpy(), axes=["pair"])
                f.set_attrs(
                    {
                        "n_params": op.shape[0],
                        "parameter_names": op.names,
                        "eigen_n_matvec": res.n_matvec,
                        "eigen_restarts": res.n_restarts,
                        "eigen_method": eigen_method(op),
                        "eigen_symmetry_defect": res.symmetry_defect,
                        "hvp_choice": op.hvp_choice(),
                    }
                )
                f.write("eigenvalues", res.eigenvalues.numpy(), axes=["pair"])
                f.mark_done()
        if _todo(f, "density/values", o.density):
            n_products = o.probes * min(o.steps, op.shape[0])
            with session.progress("density", n_products, unit="product", progress=progress) as bar:
                counted = _Counted(op, bar)
                d = spectral_density(counted, o.probes, o.steps, o.sigma, grid_points=o.grid_points, seed=o.seed)
            if f is not None:
                f.write("density/nodes", d.nodes.numpy(), axes=["probe", "node"])
                f.write("density/weights", d.weights.numpy(), axes=["probe", "node"])
                f.write("density/grid", d.grid.numpy(), axes=["eigenvalue"])
                f.set_attrs({"sigma": d.sigma, "n_matvec": d.n_matvec, "hvp_choice": op.hvp_choice()}, at="density")
                f.write("density/values", d.values.numpy(), axes=["eigenvalue"])
                f.mark_done()
        if _todo(f, "trace/samples", o.trace):
            with session.progress("trace", o.trace_samples, unit="product", progress=progress) as bar:
                t = trace_estimate(_Counted(op, bar), o.trace_samples, o.trace_method, seed=o.seed)
            if f is not None:
                f.set_attrs(
                    {
                        "estimate": t.estimate,
                        "stderr": t.stderr,
                        "method": t.method,
                        "n_matvec": t.n_matvec,
                        "hvp_choice": op.hvp_choice(),
                    },
                    at="trace",
                )
                f.write("trace/samples", t.samples.numpy(), axes=["probe"])  # last: marks the section done
                f.mark_done()
        if blocks and not distributed.broadcast_object(f is not None and f.complete):
            write_blocks(f, objective, blocks, o, progress=progress)
    return session.result


class _Counted:
    """The operator ``op`` with each of its products counted on a :class:`~landscape.runtime.progress.Progress`.

    Every other attribute is ``op``'s own (``shape``, ``dtype``, ``device``, ``plan_products``, ...).
    """

    def __init__(self, op: FlatOperator, bar: Progress) -> None:
        self.op, self.bar = op, bar

    def matvec(self, v: Any) -> Any:
        """``H v`` by ``op``, one more product counted."""
        out = self.op.matvec(v)
        self.bar.update(1)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.op, name)


def seconds_per_product(op: FlatOperator, seed: int) -> float:
    """The measured time of one product ``H v`` of ``op``: the least of two, after one that sets the way up.

    Args:
        op: the operator.
        seed: the seed of the unit vector ``v`` (a private generator).

    Returns:
        Seconds per product.
    """
    v = random_unit(op.shape[0], op.dtype, op.device, torch.Generator().manual_seed(seed))
    seconds, _ = fastest(lambda: op.matvec(v), op.device, 2, warm_up=True)
    return seconds


def _size(objective: Objective, block: ParameterBlock) -> int:
    """The number of parameters of ``block``."""
    return sum(objective.params[n].numel() for n in block.names)


def _planned_block_products(o: HessianOptions, n: int) -> int:
    """The products of one block of ``n`` parameters at least: one Lanczos basis (top 1) and the trace's."""
    basis = min(n, max(3, 20)) if o.ncv is None else min(int(o.ncv), n)
    return basis + o.trace_samples


def _planned_products(o: HessianOptions, n: int) -> int:
    """The products a hessian run makes at least: one Lanczos basis, the density's probes x steps, the trace's."""
    eigen = check_request(n, o.top_k, o.which, o.ncv) if o.top_k > 0 else 0  # one Lanczos basis
    return eigen + (o.probes * min(o.steps, n) if o.density else 0) + (o.trace_samples if o.trace else 0)


def _plan(o: HessianOptions, n: int) -> str:
    """What a hessian run will compute, in words."""
    parts = [f"top {o.top_k} eigenvalues ({o.which}) by Lanczos"] if o.top_k > 0 else []
    if o.density:
        parts.append(f"SLQ density ({o.probes} probes x {min(o.steps, n)} steps)")
    if o.trace:
        parts.append(f"trace ({o.trace_samples} {o.trace_method} samples)")
    what = "hessian" if o.operator == "hessian" else f"{o.operator} operator"
    return f"{what} of {n} parameters: " + (", ".join(parts) or "nothing")


def _todo(f: store.ResultFile | None, name: str, wanted: bool) -> bool:
    """Whether a section is wanted and not yet in the file (every rank agrees; rank 0 holds the file)."""
    present = distributed.broadcast_object(f is not None and (name in f or f.complete))
    return wanted and not present


def run_spectrum(
    source: ModelSource | str | Path,
    options: SpectrumOptions = SpectrumOptions(),
    *,
    out: str | Path = "spectrum.h5",
    model_name: str | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
) -> store.Result:
    """Paper A's per-mini-batch max-eigenvalue spectrum of a model, written to ``out`` batch by batch.

    The data are ``options.fraction`` of the split (or ``options.samples`` images when given), in a
    ``seed``-ed order, cut into batches of ``options.batch_size`` (the last may be smaller); see
    :func:`~landscape.analyses.hessian.spectrum.max_eigenvalue_spectrum`. The root attributes are the provenance plus
    :meth:`SpectrumOptions.attrs`.

    Args:
        source: the model: a :class:`~landscape.core.source.ModelSource` or a checkpoint path.
        options: what to compute (validated when built).
        out: the HDF5 result file; a complete one of the same options is returned as is, an incomplete one
            resumed batch by batch.
        model_name: the model's name when ``source`` is a path whose checkpoint does not name it.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: overwrite a file made with other options.
        progress: show what will run and the batches on rank 0 (:mod:`landscape.runtime.progress`: a bar on a
            terminal, a line every 30 s elsewhere); False: nothing.
        command: how the run was asked for, recorded as ``command`` (default: this call).
        batches: the data as ``(x, y)`` batches (a ``DataLoader`` or a list), their first ``samples`` images instead of
            ``options.data`` (:func:`~landscape.core.front.prepare`).

    Returns:
        The file, read back.

    Raises:
        LandscapeError: a file of other options without ``force``, or any error of loading the model and data
            or of the solver.
    """
    o = options
    if not isinstance(o, SpectrumOptions):
        raise LandscapeError(f"options must be a SpectrumOptions, got {type(o).__name__}")
    reg = Regularizer.from_options(o.regularizer, o.reg_coef)
    call = command or python_call("run_spectrum", source, o, out=out, model_name=model_name)
    prepared = prepare(
        source, o, model_name=model_name, device=device, command=call, fraction=o.fraction, batches=batches
    )
    inputs, batches, attrs = prepared.inputs, prepared.batches, prepared.attrs
    top_k = o.top_k
    n_params = sum(p.numel() for p in inputs.model.parameters())
    if not 1 <= top_k < n_params:  # as max_eigenvalue_spectrum, but before the file is made
        raise LandscapeError(f"--top-k must lie in [1, {n_params - 1}] for this model, got {top_k}")
    attrs["fused_attention_off"] = len(fused_attention_modules(inputs.model))

    def resume(f: store.ResultFile) -> list[int]:
        """Rank 0: allocate the arrays of a new file; the batches already done."""
        n = len(batches)
        if not f.complete:
            f.allocate("eigenvalues", (n, top_k), "f8", fill=np.nan, axes=["batch", "rank"])
            f.allocate("done", (n,), bool, fill=False, axes=["batch"])
            f.allocate("n_matvec", (n,), "i8", fill=0, axes=["batch"])
            f.allocate("symmetry_defect", (n,), "f8", fill=np.nan, axes=["batch"])
            if "batch_sizes" not in f:
                f.write("batch_sizes", np.array(batches.sizes), axes=["batch"])
        return [int(i) for i in np.flatnonzero(f.read("done"))]

    per_batch = None  # a batch's products: at least one Lanczos basis (PyHessian's iterations are not known)
    if o.solver == "lanczos":
        basis = check_request(n_params, top_k, o.which, o.ncv)
    if o.solver == "lanczos" and progress is not False:  # shown, so timed
        first = build_objective(  # one batch's own products, timed
            inputs,
            batches[:1],
            criterion=o.loss_criterion,
            regularizer=reg,
            dtype=_dtype(o.dtype),
            allow_stochastic=o.allow_stochastic,
        )
        per_batch = basis * seconds_per_product(curvature_operator(first, o.operator, mode=o.hvp), o.seed)
    plan = f"spectrum: top {top_k} Hessian eigenvalues ({o.which}) of each of {len(batches)} batches by {o.solver}"
    prepared.announce(plan, len(batches), "batch", per_batch, progress)  # Lanczos may stop early or restart
    session = AnalysisFile(out, "spectrum", attrs, force=force, resume=resume)
    with session as (f, skip):
        assert skip is not None

        def write(item: Any) -> None:
            if f is not None:
                f.write_at("eigenvalues", item.index, item.eigenvalues)
                f.write_at("n_matvec", item.index, item.n_matvec)
                f.write_at("symmetry_defect", item.index, item.symmetry_defect)
                f.mark_done("done", item.index)
            bar.update(1)

        if len(skip) < len(batches):
            with session.progress("spectrum", len(batches), unit="batch", done=len(skip), progress=progress) as bar:
                spectrum = max_eigenvalue_spectrum(
                    inputs.model,
                    batches,
                    k=top_k,
                    which=o.which,
                    solver=o.solver,
                    criterion=o.loss_criterion,
                    regularizer=reg,
                    tol=o.tol,
                    ncv=o.ncv,
                    maxiter=o.maxiter,
                    seed=o.seed,
                    hvp=o.hvp,
                    operator=o.operator,
                    group=o.group,
                    device=inputs.device,
                    dtype=_dtype(o.dtype),
                    allow_stochastic=o.allow_stochastic,
                    output=inputs.source.output,
                    skip=skip,
                    on_batch=write,
                )
            if f is not None:  # how this (last) run made its products; not part of the file's identity
                f.set_attrs(
                    {
                        "group": spectrum.group,
                        "group_option": str(o.group),
                        "group_choice": spectrum.group_choice,
                        "hvp_choice": spectrum.hvp_choice,
                    }
                )
    return session.result


@analysis_function(HessianOptions)
def hessian(
    model: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: HessianOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[HessianKeywords],
) -> store.Result:
    """The Hessian of ``model``'s loss on ``data``: top eigenpairs, spectral density, trace (``landscape hessian``).

    ``top_k`` eigenpairs of kind ``which`` by thick-restart Lanczos, with ``density`` the SLQ density, with
    ``trace`` the Hutch++ trace; see :class:`~landscape.options.hessian.HessianOptions` for every keyword.

    Args:
        model: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...), a ``Dataset``, ``DataLoader`` or list of
            ``(x, y)`` batches (the first ``samples`` images, in order), or None for the checkpoint's dataset (else
            digits).
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.hessian.HessianOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file of other options at ``out``.
        progress: what will run and the progress on rank 0 (a bar on a terminal, lines elsewhere); False:
            nothing (:mod:`landscape.runtime.progress`).
        batch: a function from one batch of ``data`` (a ``Dataset`` or ``DataLoader`` you hold) to ``(inputs,
            labels)``, for batches that are dicts or longer tuples, e.g. ``lambda b: (b["image"], b["label"])``.
        **fields: the options as keywords (the fields of the options class).

    Returns:
        The result (:class:`~landscape.store.Result`): its ``attrs`` and arrays.

    Raises:
        LandscapeError: bad options, a model or data that cannot be used (a model sharded with ``fully_shard``:
            :func:`~landscape.analyses.hessian.fsdp.fsdp_lanczos` takes it), or a file of other options at ``out``.
    """
    if is_fully_sharded(model):
        raise LandscapeError(
            "landscape.hessian copies the model whole, which a model sharded with fully_shard is not; call "
            "landscape.analyses.hessian.fsdp.fsdp_lanczos(model, batches, k=...) on every rank (docs/analyses.md)"
        )
    return run_from_python(
        run_hessian,
        "landscape.hessian",
        HessianOptions,
        model,
        data,
        options=options,
        fields=fields,
        batch=batch,
        out=out,
        device=device,
        force=force,
        progress=progress,
    )


@analysis_function(SpectrumOptions)
def spectrum(
    model: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: SpectrumOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[SpectrumKeywords],
) -> store.Result:
    """The top-k Hessian eigenvalues of every mini-batch of ``data``, pooled (Paper A's spectra).

    Per mini-batch of ``batch_size`` samples, the ``top_k`` eigenvalues of kind ``which`` of that batch's loss
    Hessian; see :class:`~landscape.options.hessian.SpectrumOptions` for every keyword.

    Args:
        model: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...), a ``Dataset``, ``DataLoader`` or list of
            ``(x, y)`` batches (the first ``samples`` images, in order), or None for the checkpoint's dataset (else
            digits).
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.hessian.SpectrumOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file of other options at ``out``.
        progress: what will run and the progress on rank 0 (a bar on a terminal, lines elsewhere); False:
            nothing (:mod:`landscape.runtime.progress`).
        batch: a function from one batch of ``data`` (a ``Dataset`` or ``DataLoader`` you hold) to ``(inputs,
            labels)``, for batches that are dicts or longer tuples, e.g. ``lambda b: (b["image"], b["label"])``.
        **fields: the options as keywords (the fields of the options class).

    Returns:
        The result (:class:`~landscape.store.Result`): its ``attrs`` and arrays.

    Raises:
        LandscapeError: bad options, a model or data that cannot be used, or a file of other options at ``out``.
    """
    return run_from_python(
        run_spectrum,
        "landscape.spectrum",
        SpectrumOptions,
        model,
        data,
        options=options,
        fields=fields,
        batch=batch,
        out=out,
        device=device,
        force=force,
        progress=progress,
    )
