"""``landscape curvature``: the Hessian beside its approximations on one model and data, and their distances.

For the Hessian ``H`` and each operator ``A`` of ``options.operators`` (:mod:`landscape.analyses.hessian.operators`)
the run writes (docs/schema.md, curvature): every operator's top-k eigenpairs (``eigenvalues``, ``residuals``,
``converged``; K-FAC's exactly from its factors), its SLQ nodes and weights, then their densities on one shared
grid (``density/values``, one row per operator); for each ``A`` the principal angles between the top-k eigenspaces
of ``H`` and ``A`` (``angles``) and the relative distances ``||H - A|| / ||H||`` in the spectral and Frobenius norms
(``distance/*``, :mod:`landscape.analyses.curvature.distances`); with ``per_block`` the same distances of every
block's diagonal block (``blocks/*``). Each operator's row, each distance and each block is written and flushed as it
is done, so a killed run resumes where it stopped with the same numbers (every start vector and probe comes from the
seed). Under torchrun the products are shared among ranks and rank 0 writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from typing_extensions import Unpack

from landscape import store
from landscape.analyses.curvature.distances import (
    DifferenceOperator,
    frobenius_distance,
    hessian_probes,
    principal_angles,
    relative,
    rounding_distance,
    spectral_norm,
)
from landscape.analyses.hessian.block_file import hessian_blocks
from landscape.analyses.hessian.blocks import ParameterBlock
from landscape.analyses.hessian.density import broadened_density, spectral_density
from landscape.analyses.hessian.flat import FlatOperator
from landscape.analyses.hessian.lanczos import check_request
from landscape.analyses.hessian.operators import curvature_operator, eigen_method, eigenpairs
from landscape.analyses.hessian.products import ProductCosts
from landscape.core.calls import analysis_function
from landscape.core.front import build_objective, prepare, python_call, run_from_python
from landscape.core.objective import Objective
from landscape.core.params import torch_dtype
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError
from landscape.options.common import DTYPES, choice
from landscape.options.curvature import CurvatureKeywords, CurvatureOptions
from landscape.options.hessian import SECOND_ORDER_OPERATORS
from landscape.runtime.lifecycle import AnalysisFile

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

#: the distances of an approximation from the Hessian, by array name under ``distance/`` and ``blocks/``
DISTANCES = ("spectral", "spectral_converged", "frobenius", "frobenius_stderr")


class _Operators:
    """The operators of one comparison on one set of parameters (the whole model or a block), made when first used."""

    def __init__(self, objective: Objective, options: CurvatureOptions, patterns: Sequence[str] | None) -> None:
        self.objective, self.options, self.patterns = objective, options, patterns
        self.costs = ProductCosts()  # the Hessian's measured ways, shared by the Hessian and the residual
        self._made: dict[str, FlatOperator] = {}

    def __getitem__(self, name: str) -> FlatOperator:
        if name not in self._made:
            mode = self.options.hvp if name in SECOND_ORDER_OPERATORS else "auto"
            self._made[name] = curvature_operator(
                self.objective, name, patterns=self.patterns, mode=mode, costs=self.costs, shard=True
            )
        return self._made[name]

    def clear(self) -> None:
        """Drop every operator's kept graphs and traces."""
        for op in self._made.values():
            op.clear_cache()


def _top(op: FlatOperator, o: CurvatureOptions) -> Any:
    """The operator's top-k pairs (largest algebraic) with eigenvectors."""
    return eigenpairs(op, o.top_k, "LA", ncv=o.ncv, tol=o.tol, maxiter=o.maxiter, seed=o.seed)


def _distances(ops: _Operators, names: Sequence[str], o: CurvatureOptions) -> dict[str, dict[str, float]]:
    """Each approximation's relative spectral and Frobenius distance from the Hessian (the module's numbers)."""
    hessian = ops["hessian"]
    norm = spectral_norm(hessian, tol=o.tol, ncv=o.ncv, maxiter=o.maxiter, seed=o.seed)
    probes = hessian_probes(hessian, o.distance_samples, o.seed)
    out = {
        "hessian": {"spectral_norm": norm.value, "spectral_converged": norm.converged, "frobenius_norm": probes.norm}
    }
    for name in names:
        frob = frobenius_distance(probes, ops[name])
        out[name] = {"frobenius": frob.relative, "frobenius_stderr": frob.stderr}
        if frob.relative <= rounding_distance(hessian.dtype):  # H - A is rounding noise: no Lanczos on it
            out[name].update(spectral=frob.relative, spectral_converged=False)
            continue
        difference = DifferenceOperator(hessian, ops[name])
        gap = spectral_norm(difference, tol=o.tol, ncv=o.ncv, maxiter=o.maxiter, seed=o.seed)
        out[name].update(spectral=relative(gap.value, norm.value), spectral_converged=gap.converged and norm.converged)
    return out


def run_curvature(
    source: ModelSource | str | Path,
    options: CurvatureOptions = CurvatureOptions(),
    *,
    out: str | Path | None = "curvature.h5",
    model_name: str | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
) -> store.Result:
    """The Hessian and ``options.operators`` side by side on a model's loss, written to ``out`` (module doc).

    Args:
        source: the model: a :class:`~landscape.core.source.ModelSource` or a checkpoint path.
        options: what to compute (validated when built).
        out: the HDF5 result file (resumed when it holds the same run); None keeps the result in memory.
        model_name: the model's name when ``source`` is a path whose checkpoint does not name it.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: overwrite a file made with other options.
        progress: show what will run on rank 0; False: nothing.
        command: how the run was asked for, recorded as ``command`` (default: this call).
        batches: the data as ``(x, y)`` batches, their first ``samples`` images instead of ``options.data``.

    Returns:
        The file, read back.

    Raises:
        LandscapeError: options of another class, more eigenpairs than parameters, a file of other options without
            ``force``, or any error of loading the model and data, of the operators or of the solvers.
    """
    o = options
    if not isinstance(o, CurvatureOptions):
        raise LandscapeError(f"options must be a CurvatureOptions, got {type(o).__name__}")
    call = command or python_call("run_curvature", source, o, out=out, model_name=model_name)
    prepared = prepare(source, o, model_name=model_name, device=device, command=call, batches=batches)
    objective = build_objective(
        prepared.inputs,
        prepared.batches,
        criterion=o.loss_criterion,
        regularizer=Regularizer.from_options(o.regularizer, o.reg_coef),
        dtype=torch_dtype(None if o.dtype is None else choice(o.dtype, "--dtype", DTYPES)),
        allow_stochastic=o.allow_stochastic,
    )
    attrs = {**prepared.attrs, "fused_attention_off": objective.fused_attention_off}
    ops = _Operators(objective, o, o.patterns or None)
    hessian = ops["hessian"]
    n = hessian.shape[0]
    blocks = hessian_blocks(objective, o, hessian.names) if o.per_block else []  # a bad --block: before the file
    names = ["hessian", *o.operators]
    steps = min(o.steps, n)
    plan = (
        f"curvature of {n} parameters: H and {', '.join(o.operators)}: top {o.top_k} eigenpairs, densities "
        f"({o.probes} probes x {steps} steps), angles, distances ({o.distance_samples} Frobenius probes)"
        + (f", per block: {len(blocks)} blocks" if blocks else "")
    )
    basis = check_request(n, o.top_k, "LA", o.ncv)
    per_set = 2 * basis + o.distance_samples + len(o.operators) * (2 * basis + o.distance_samples)
    units = len(names) * (basis + o.probes * steps) + per_set * (1 + len(blocks))
    prepared.announce(plan, units, "product", None, progress, at_least=True)
    sizes = (len(names), o.top_k, o.probes, steps)
    entries = [sum(objective.params[p].numel() for p in b.names) for b in blocks]
    session = AnalysisFile(
        out, "curvature", attrs, force=force, resume=lambda f: _allocate(f, names, blocks, entries, sizes)
    )
    with session as (f, done):
        assert done is not None
        _spectra(f, done, ops, names, o)
        _whole(f, done, ops, names, o)
        for i, block in enumerate(blocks):
            if done["blocks"][i]:
                continue
            row = _distances(_Operators(objective, o, list(block.names)), names[1:], o)
            if f is not None:
                for col in DISTANCES:
                    f.write_at(f"blocks/{col}", i, [row[a][col] for a in names[1:]])
                f.write_at("blocks/hessian_spectral_norm", i, row["hessian"]["spectral_norm"])
                f.mark_done("blocks/done", i)
        if f is not None and "density/values" not in f:  # K-FAC's factors need no other rank
            f.set_attrs({"n_params": n, "parameter_names": hessian.names, "uncovered": _uncovered(ops, names)})
            _shared_density(f, o)  # the density's values last: they mark the section done
            f.mark_done()
    return session.result


def _uncovered(ops: _Operators, names: Sequence[str]) -> list[str]:
    """The parameters K-FAC does not cover (empty without K-FAC)."""
    return list(getattr(ops["kfac"], "uncovered", [])) if "kfac" in names else []


def _spectra(f: store.ResultFile | None, done: dict, ops: _Operators, names: list[str], o: CurvatureOptions) -> None:
    """Every operator's top-k pairs, angles with the Hessian's and SLQ nodes: one row each, written when done."""
    if all(done["spectra"]):
        return
    top = _top(ops["hessian"], o)
    for i, name in enumerate(names):
        if done["spectra"][i]:
            continue
        res = top if i == 0 else _top(ops[name], o)
        angles = principal_angles(top.eigenvectors, res.eigenvectors).numpy()
        density = spectral_density(ops[name], o.probes, o.steps, o.sigma, grid_points=o.grid_points, seed=o.seed)
        if f is not None:
            f.write_at("spectra/eigenvalues", i, res.eigenvalues.numpy())
            f.write_at("spectra/residuals", i, res.residuals.numpy())
            f.write_at("spectra/converged", i, res.converged.numpy())
            f.write_at("spectra/angles", i, angles)
            f.write_at("spectra/nodes", i, density.nodes.numpy())
            f.write_at("spectra/weights", i, density.weights.numpy())
            f.set_attrs({"hvp_choice": ops[name].hvp_choice(), "eigen_method": eigen_method(ops[name])}, at=name)
            f.mark_done("spectra/done", i)
        if i == 0:
            ops.clear()


def _whole(f: store.ResultFile | None, done: dict, ops: _Operators, names: list[str], o: CurvatureOptions) -> None:
    """The distances of the whole model's operators, each approximation's row written when done."""
    if all(done["distance"]):
        return
    row = _distances(ops, names[1:], o)
    if f is None:
        return
    f.set_attrs(row["hessian"], at="distance")
    for i, name in enumerate(names[1:]):
        for col in DISTANCES:
            f.write_at(f"distance/{col}", i, row[name][col])
        f.mark_done("distance/done", i)


def _shared_density(f: store.ResultFile, o: CurvatureOptions) -> None:
    """Every operator's density on one grid: one broadening ``sigma`` and one span over all nodes (rank 0)."""
    nodes, weights = f.read("spectra/nodes"), f.read("spectra/weights")
    lo, hi = float(np.min(nodes)), float(np.max(nodes))
    rows = []
    grid, sigma = None, o.sigma
    for node, weight in zip(nodes, weights):
        grid, values, sigma = broadened_density(
            torch.as_tensor(node), torch.as_tensor(weight), sigma, o.grid_points, span=(lo, hi)
        )
        rows.append(values.numpy())
    f.set_attrs({"sigma": sigma}, at="density")
    f.write("density/grid", grid.numpy(), axes=["eigenvalue"])
    f.write("density/values", np.stack(rows), axes=["operator", "eigenvalue"])


def _allocate(
    f: store.ResultFile,
    names: list[str],
    blocks: Sequence[ParameterBlock],
    entries: Sequence[int],
    sizes: tuple[int, ...],
) -> dict[str, list[bool]]:
    """Rank 0: the arrays of a new file (kept when resuming); which rows are done."""
    count, k, probes, steps = sizes
    approx = names[1:]
    if not f.complete and "operators" not in f:
        f.write("operators", np.asarray(names, dtype=str), axes=["operator"])
        f.write("approximations", np.asarray(approx, dtype=str), axes=["approximation"])
        for name, dtype, fill in (
            ("spectra/eigenvalues", "f8", np.nan),
            ("spectra/residuals", "f8", np.nan),
            ("spectra/converged", "?", False),
        ):
            f.allocate(name, (count, k), dtype, fill=fill, axes=["operator", "pair"])
        f.allocate("spectra/angles", (count, k), "f8", fill=np.nan, axes=["operator", "pair"])
        for name in ("spectra/nodes", "spectra/weights"):
            f.allocate(name, (count, probes, steps), "f8", fill=np.nan, axes=["operator", "probe", "node"])
        f.allocate("spectra/done", (count,), bool, fill=False, axes=["operator"])
        for col in DISTANCES:
            dtype = "?" if col == "spectral_converged" else "f8"
            f.allocate(
                f"distance/{col}", (len(approx),), dtype, fill=False if dtype == "?" else np.nan, axes=["approximation"]
            )
        f.allocate("distance/done", (len(approx),), bool, fill=False, axes=["approximation"])
        if blocks:
            f.write("blocks/names", np.asarray([b.name for b in blocks], dtype=str), axes=["block"])
            f.write("blocks/kinds", np.asarray([b.kind for b in blocks], dtype=str), axes=["block"])
            f.write("blocks/size", np.asarray(entries, dtype=np.int64), axes=["block"])
            f.set_attrs({"parameters": {b.name: list(b.names) for b in blocks}}, at="blocks")
            for col in DISTANCES:
                dtype = "?" if col == "spectral_converged" else "f8"
                fill = False if dtype == "?" else np.nan
                f.allocate(
                    f"blocks/{col}", (len(blocks), len(approx)), dtype, fill=fill, axes=["block", "approximation"]
                )
            f.allocate("blocks/hessian_spectral_norm", (len(blocks),), "f8", fill=np.nan, axes=["block"])
            f.allocate("blocks/done", (len(blocks),), bool, fill=False, axes=["block"])
    held = (
        [x.decode() if isinstance(x, bytes) else str(x) for x in f.read("blocks/names")] if "blocks/names" in f else []
    )
    if held and held != [b.name for b in blocks]:
        raise LandscapeError(f"the blocks of {f.path} are not this model's; recompute it with --force")

    def read(name: str, size: int) -> list[bool]:  # a complete file holds every row
        return [bool(x) for x in f.read(name)] if name in f else [True] * size

    return {
        "spectra": read("spectra/done", count),
        "distance": read("distance/done", len(approx)),
        "blocks": read("blocks/done", len(blocks)) if blocks else [],
    }


@analysis_function(CurvatureOptions)
def curvature(
    model: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: CurvatureOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[CurvatureKeywords],
) -> store.Result:
    """The Hessian beside its approximations: top eigenpairs, densities, angles and distances (``landscape curvature``).

    See :class:`~landscape.options.curvature.CurvatureOptions` for every keyword (``operators``, ``top_k``, ...).

    Args:
        model: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec, a ``Dataset``, ``DataLoader`` or list of ``(x, y)`` batches, or None for the
            checkpoint's dataset (else digits).
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.curvature.CurvatureOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file of other options at ``out``.
        progress: what will run on rank 0; False: nothing.
        batch: a function from one batch of ``data`` to ``(inputs, labels)``.
        **fields: the options as keywords (the fields of the options class).

    Returns:
        The result (:class:`~landscape.store.Result`): its ``attrs``, arrays and tables.

    Raises:
        LandscapeError: bad options, a model or data that cannot be used, or a file of other options at ``out``.
    """
    return run_from_python(
        run_curvature,
        "landscape.curvature",
        CurvatureOptions,
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
