"""``landscape sharpness``: m-sharpness of a model over mini-batches and radii, written to HDF5 batch by batch.

Each of the fixed batches (``--batch-size`` = m images) is one draw of ``S``; the measure of each batch is
:func:`~landscape.analyses.sharpness.measures.average_sharpness` or
:func:`~landscape.analyses.sharpness.measures.worst_sharpness` on that batch alone, with the seed ``seed + b``
(so a batch's numbers depend on its index only, not on which rank or which run computes it). The file
(docs/schema.md, sharpness) holds ``rho`` (R), ``batch_sizes``, ``base_loss`` and ``done`` (B), ``values`` (B, R)
(and ``stderr`` for the average case; ``best_iteration``, ``final_step`` and ``halvings``, how each ascent ended,
for the worst case), each row flushed and marked done as it finishes, so a killed run resumes at the next batch
with the same numbers; once every batch is done the mean over batches and its percentile bootstrap interval,
``mean``, ``low`` and ``high`` (R), are written (NaN bounds, and the attribute ``interval`` saying why, below
:data:`~landscape.options.sharpness.MIN_INTERVAL_BATCHES` batches). Every value written is finite: a non-finite
loss stops the run with one error line. Under torchrun the batches are shared among ranks and only rank 0 writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from typing_extensions import Unpack

from landscape import store
from landscape.analyses.sharpness.measures import (
    SharpnessEstimate,
    average_sharpness,
    bootstrap_interval,
    perturbed_counts,
    perturbed_names,
    worst_sharpness,
)
from landscape.analyses.sharpness.summary import interval_note
from landscape.core.calls import analysis_function
from landscape.core.forward import EvalForward
from landscape.core.front import build_objective, prepare, python_call, run_from_python
from landscape.core.objective import Objective
from landscape.core.params import torch_dtype
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError
from landscape.options.sharpness import MIN_INTERVAL_BATCHES, SharpnessKeywords, SharpnessOptions
from landscape.runtime import distributed as D
from landscape.runtime.devices import fastest
from landscape.runtime.lifecycle import AnalysisFile

if TYPE_CHECKING:
    from landscape.core.source import ModelSource


def measure_batch(
    objective: Objective, options: SharpnessOptions, index: int, forward: EvalForward | None = None
) -> SharpnessEstimate:
    """The measure of ``options`` on batch ``index`` of ``objective`` alone, seeded by ``options.seed + index``.

    Args:
        objective: the loss over the fixed batches (its params are ``w``; never changed).
        options: the measure, its radii and settings.
        index: the batch.
        forward: the average case's losses by this tuned forward of ``objective``
            (:func:`~landscape.analyses.sharpness.measures.average_sharpness`); default the plain forward.

    Returns:
        The :class:`~landscape.analyses.sharpness.measures.SharpnessEstimate` of the one batch (``values`` of
        shape ``(1, R)``).
    """
    o = options
    common: dict[str, Any] = {
        "adaptive": o.adaptive,
        "eta": o.eta,
        "patterns": o.patterns or None,
        "perturb": o.perturb,
        "batches": [index],
        "include_regularizer": objective.regularizer.active,
        "seed": o.seed + index,
        "confidence": o.confidence,
        "resamples": o.resamples,
    }
    if o.measure == "average":
        return average_sharpness(objective, o.rho, samples=o.draws, antithetic=o.antithetic, forward=forward, **common)
    return worst_sharpness(
        objective, o.rho, p=o.p, steps=o.steps, restarts=o.restarts, step_size=o.step_size, init=o.init, **common
    )


#: the worst case's record of how each ascent ended: array, dtype, value until done
ASCENT_ARRAYS = (("best_iteration", "i8", -1), ("final_step", "f8", np.nan), ("halvings", "i8", -1))


def _allocate(f: store.ResultFile, options: SharpnessOptions, batch_sizes: list[int]) -> list[int]:
    """Rank 0: the arrays of a new file (kept when resuming); the batches already done."""
    n, radii = len(batch_sizes), len(options.rho)
    if "rho" not in f:
        f.write("rho", np.asarray(options.rho, dtype=np.float64), axes=["radius"])
        f.write("batch_sizes", np.asarray(batch_sizes, dtype=np.int64), axes=["batch"])
    f.allocate("values", (n, radii), "f8", fill=np.nan, axes=["batch", "radius"])
    if options.measure == "average":
        f.allocate("stderr", (n, radii), "f8", fill=np.nan, axes=["batch", "radius"])
    else:
        for name, dtype, fill in ASCENT_ARRAYS:
            f.allocate(name, (n, radii), dtype, fill=fill, axes=["batch", "radius"])
    f.allocate("base_loss", (n,), "f8", fill=np.nan, axes=["batch"])
    f.allocate("done", (n,), bool, fill=False, axes=["batch"])
    return _finite_rows(f, [int(i) for i in np.flatnonzero(f.read("done"))])


def _finite_rows(f: store.ResultFile, done: list[int]) -> list[int]:
    """``done`` when the file's rows ``done`` of ``values`` and ``base_loss`` are finite; else an error."""
    for name in ("values", "base_loss"):
        if not np.isfinite(np.asarray(f.read(name))[done]).all():
            raise LandscapeError(
                f"{f.path}: the done batches hold non-finite {name} (an older version wrote them); "
                "remove the file (or write elsewhere with --out) to compute them again"
            )
    return done


def _write_interval(f: store.ResultFile, options: SharpnessOptions) -> None:
    """Rank 0, every batch done: the mean over batches, its bootstrap interval and what the interval is.

    The bounds are NaN below :data:`MIN_INTERVAL_BATCHES` batches; the attribute ``interval`` says which.
    """
    values = torch.from_numpy(f.read("values"))
    low, high = bootstrap_interval(
        values,
        confidence=options.confidence,
        resamples=options.resamples,
        seed=options.seed,
        minimum=MIN_INTERVAL_BATCHES,
    )
    f.set_attrs({"interval": interval_note(options.confidence, values.shape[0])})
    f.write("low", low.numpy(), axes=["radius"])
    f.write("high", high.numpy(), axes=["radius"])
    f.write("mean", values.mean(dim=0).numpy(), axes=["radius"])  # last: marks the interval written
    f.mark_done()


def run_sharpness(
    source: ModelSource | str | Path,
    options: SharpnessOptions = SharpnessOptions(),
    *,
    out: str | Path | None = "sharpness.h5",
    model_name: str | None = None,
    force: bool = False,
    device: str = "auto",
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> store.Result:
    """Average- or worst-case m-sharpness of a model at every radius of ``options.rho``, written to ``out``.

    ``options.samples`` images of ``options.data`` (``options.split``) in a ``seed``-ed order, cut into batches of
    ``options.batch_size`` (the last may be smaller), each one draw of ``S``; the model in eval mode (BatchNorm's
    running statistics); with an active ``options.regularizer`` the loss ``L_S`` includes it. See
    :mod:`landscape.analyses.sharpness.measures` for the measures. Works in one process or under torchrun (the
    batches shared among ranks, only rank 0 writes).

    Args:
        source: the model: a checkpoint path, a :class:`~landscape.core.source.ModelSource` or an ``nn.Module``.
        options: what to compute (validated when built); its :meth:`SharpnessOptions.attrs` are recorded.
        out: the HDF5 result file (a complete one of the same options is returned as is, an incomplete one
            resumed batch by batch); None keeps the result in memory.
        model_name: the model's name when ``source`` is a path whose checkpoint does not name it.
        force: overwrite a file made with other options.
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: a bar of the batches on rank 0 (None: only when stderr is a terminal).
        command: how the run was asked for, recorded as ``command`` (default: this call).
        batches: the data as ``(x, y)`` batches (a ``DataLoader`` or a list), their first ``samples`` images instead of
            ``options.data`` (:func:`~landscape.core.front.prepare`): each given batch is one ``S``.
        on_batch: called on every rank with a batch's index once its row is written (progress reports, tests).

    Returns:
        The file read back (:class:`landscape.store.read.Result`), on every rank.

    Raises:
        LandscapeError: the options are not a :class:`SharpnessOptions`, ``--params`` matches no parameter, the
            model or data cannot be loaded, the file belongs to other options (without ``force``) or holds
            non-finite values, or a loss is non-finite (at ``w``: the model or data; perturbed: ``--rho``; an
            ascent's iterate: ``--step-size``).
    """
    if not isinstance(options, SharpnessOptions):
        raise LandscapeError(f"run_sharpness takes its options as a SharpnessOptions, got {type(options).__name__}")
    o = options
    reg = Regularizer.from_options(o.regularizer, o.reg_coef)
    call = command or python_call("run_sharpness", source, o, out=out, model_name=model_name)
    prepared = prepare(source, o, model_name=model_name, device=device, command=call, batches=batches)
    objective = build_objective(
        prepared.inputs,
        prepared.batches,
        criterion=o.loss_criterion,
        regularizer=reg,
        dtype=torch_dtype(o.dtype),
        allow_stochastic=o.allow_stochastic,
    )
    attrs = prepared.attrs
    attrs["fused_attention_off"] = objective.fused_attention_off
    perturbed = perturbed_names(objective.params, o.patterns or None, o.perturb)  # refused before the file
    counts = perturbed_counts({n: objective.params[n] for n in perturbed})
    attrs.update(perturbed_tensors=counts["tensors"], perturbed_parameters=counts["parameters"])
    sizes = objective.batches.sizes

    def resume(f: store.ResultFile) -> dict[str, Any]:
        if f.complete:
            return {"complete": True, "done": _finite_rows(f, list(range(len(sizes)))), "interval": True}
        return {"complete": False, "done": _allocate(f, o, sizes), "interval": "mean" in f}

    plan = f"sharpness: {o.measure}-case, {'adaptive' if o.adaptive else 'plain'}"
    plan += f", c = |w| + {o.eta:g}" if o.adaptive and o.eta else ""
    plan += f" (p = {o.p}, {o.steps} steps x {o.restarts} starts)" if o.measure == "worst" else f" ({o.draws} draws)"
    plan += f", rho {', '.join(f'{r:g}' for r in o.rho)}, {len(sizes)} mini-batches of {max(sizes)}"
    plan += f", perturbing {counts['tensors']} of {len(objective.params)} tensors ({counts['parameters']:,} numbers"
    rule = [f"--params {o.params}"] * bool(o.params) + [f"--perturb {o.perturb}"] * (o.perturb != "all")
    plan += f"; {', '.join(rule)})" if rule else ")"
    session = AnalysisFile(out, "sharpness", attrs, force=force, resume=resume)
    with session as (f, state):
        assert state is not None
        todo = [b for b in range(len(sizes)) if b not in set(state["done"])]
        forward = _tuned_forward(objective, f) if todo and o.measure == "average" else None
        # the batches left, at the time of the first batch's own measure (kept: it is that batch's row)
        first = fastest(lambda: measure_batch(objective, o, todo[0], forward), objective.device, 1) if todo else None
        prepared.announce(plan, max(len(todo) - 1, 0), "batch", None if first is None else first[0], progress)
        with session.progress(
            "sharpness", len(sizes), unit="batch", done=len(sizes) - len(todo), progress=progress
        ) as bar:
            step = D.world_size()
            for start in range(0, len(todo), step):
                mine = D.shard(todo[start : start + step])
                rows = [
                    (b, first[1] if first and b == todo[0] else measure_batch(objective, o, b, forward)) for b in mine
                ]
                shared = [
                    (
                        b,
                        e.values[0].numpy(),
                        None if e.stderr is None else e.stderr[0].numpy(),
                        float(e.base_loss[0]),
                        {} if e.ascent is None else {k: v[0].numpy() for k, v in e.ascent.items()},
                    )
                    for b, e in rows
                ]
                gathered = sorted(
                    (row for part in D.all_gather_objects(shared) for row in part), key=lambda row: row[0]
                )
                for b, values, stderr, base, ascent in gathered:
                    if f is not None:
                        f.write_at("values", b, values)
                        if stderr is not None:
                            f.write_at("stderr", b, stderr)
                        for name, array in ascent.items():
                            f.write_at(name, b, array)
                        f.write_at("base_loss", b, base)
                        f.mark_done("done", b)
                    bar.update(1)
                    if on_batch is not None:
                        on_batch(b)
        if f is not None and not state["interval"]:
            _write_interval(f, o)
    return session.result


def _tuned_forward(objective: Objective, f: store.ResultFile | None) -> EvalForward:
    """The average case's forward, tuned once (:meth:`~landscape.core.forward.EvalForward.tune`); recorded in ``f``.

    The file's ``bn_folded``, ``bn_fold_notes`` and ``channels_last`` say what was chosen; a resumed file's
    ``channels_last`` is taken again (its batches left are then computed as its first were).
    """
    forward = EvalForward(objective)
    forward.tune(channels_last=f.attr("channels_last") if f is not None and f.resumed else None)  # a resumed file's
    if f is not None:
        f.set_attrs(forward.attrs())
        f.flush()
    return forward


@analysis_function(SharpnessOptions)
def sharpness(
    model: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: SharpnessOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[SharpnessKeywords],
) -> store.Result:
    """Average- or worst-case m-sharpness of ``model`` on ``data`` at each radius (``landscape sharpness``).

    Per mini-batch ``S`` of ``batch_size`` images, ``E_delta[L_S(w + delta) - L_S(w)]`` with ``delta ~ N(0, rho^2
    diag(c^2))`` (``measure="average"``) or ``max_{||delta / c||_p <= rho} L_S(w + delta) - L_S(w)``
    (``measure="worst"``), ``c = |w|`` (``adaptive``) or 1; the mean over batches with a bootstrap interval. See
    :class:`~landscape.options.sharpness.SharpnessOptions` for every keyword.

    Args:
        model: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...), a ``Dataset``, ``DataLoader`` or list of
            ``(x, y)`` batches (the first ``samples`` images, in order, each batch one ``S``), or None for the
            checkpoint's dataset (else digits).
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.sharpness.SharpnessOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file of other options at ``out``.
        progress: a progress display (None: on a terminal only).
        batch: a function from one batch of ``data`` (a ``Dataset`` or ``DataLoader`` you hold) to ``(inputs,
            labels)``, for batches that are dicts or longer tuples, e.g. ``lambda b: (b["image"], b["label"])``.
        **fields: the options as keywords (the fields of the options class).

    Returns:
        The result (:class:`~landscape.store.Result`): its ``attrs`` and arrays (``mean``, ``low``, ``high`` per
        radius; ``values`` per batch and radius).

    Raises:
        LandscapeError: bad options, a model or data that cannot be used, or a file of other options at ``out``.
    """
    return run_from_python(
        run_sharpness,
        "landscape.sharpness",
        SharpnessOptions,
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
