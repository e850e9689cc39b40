"""Permutation alignment of theta_B's hidden units to theta_A's: the spec, the matching, the function check, the file.

:func:`align_models` is the core shared with ``landscape connect --align``: the networks' permutation spec
(:mod:`landscape.analyses.align.spec`), the permutations by weight matching
(:mod:`landscape.analyses.align.weights`) or activation matching (:mod:`landscape.analyses.align.activations`),
theta_B with them applied, and the check that it computes theta_B's function on the data,

    max |f(pi(B))(x) - f(B)(x)| / max |f(B)(x)|  <=  FUNCTION_TOLERANCE (1e-5, in the models' float32),

over every logit of every image; a network that fails it is refused (a spec that does not keep the function is a
bug, never a result). :func:`run_align` (``landscape align``) loads both ends, aligns, and writes the aligned
theta_B as a checkpoint whose metadata (``extra["alignment"]``) holds the method, the permutations, the sweeps, the
objective before and after, each weight-matching descent's start, order and objective (``starts``), and the measured
function error.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from landscape.analyses.align.activations import activation_matching
from landscape.analyses.align.permute import apply
from landscape.analyses.align.spec import PermutationSpec, permutation_spec
from landscape.analyses.align.weights import Matching, weight_matching
from landscape.analyses.connect.path import Endpoint, check_same_architecture
from landscape.core.calls import analysis_function
from landscape.core.criteria import select_logits
from landscape.core.front import eval_model, load_inputs, prepare, python_call, run_from_python
from landscape.errors import LandscapeError
from landscape.models.checkpoint import read_checkpoint, save_checkpoint
from landscape.options.align import FUNCTION_TOLERANCE, AlignKeywords, AlignOptions
from landscape.store.files import check_replaceable

if TYPE_CHECKING:
    from landscape.core.source import ModelSource


@dataclass
class Alignment:
    """theta_B aligned to theta_A, and how.

    Attributes:
        model: the aligned theta_B (a new module; theta_B itself is not changed).
        spec: the permutation spec of the architecture.
        matching: the permutations and how they were found.
        method: one of :data:`~landscape.options.align.ALIGN_METHODS`.
        function_error: ``max |f(pi(B)) - f(B)| / max |f(B)|`` over the checked images.
        n_samples: the images checked (and matched on, for activation matching).
        out: the checkpoint written, or None.
        meta: what the checkpoint records under ``extra["alignment"]``.
    """

    model: nn.Module
    spec: PermutationSpec
    matching: Matching
    method: str
    function_error: float
    n_samples: int
    out: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def permutations(self) -> dict[str, list[int]]:
        """Each permutation as a list (new unit -> theta_B's old unit)."""
        return {k: [int(i) for i in v] for k, v in self.matching.perms.items()}

    def __repr__(self) -> str:
        m = self.matching
        moved = sum(int((v != torch.arange(len(v))).any()) for v in m.perms.values())
        kept = m.kept_start
        best = f" (best of {len(m.starts)} starts: {kept.start}, {kept.order} order)" if kept is not None else ""
        return (
            f"Alignment({self.method}: {len(m.perms)} permutations, {moved} not the identity, {m.sweeps} sweep(s); "
            f"<A, B> {m.objective_before:.6g} -> {m.objective_after:.6g}{best}; function error "
            f"{self.function_error:.2e}" + (f"; wrote {self.out}" if self.out is not None else "") + ")"
        )


@torch.no_grad()
def function_error(
    reference: nn.Module, other: nn.Module, batches: Sequence[Sequence[Tensor]], output: Any = None
) -> float:
    """``max |other(x) - reference(x)| / max |reference(x)|`` over every logit of every batch.

    Args:
        reference: f(B) (eval mode).
        other: f(pi(B)), of the same output shape.
        batches: ``(x, y)`` batches; only ``x`` is used.
        output: where the logits are in the models' output (:func:`~landscape.core.criteria.select_logits`).

    Returns:
        The relative error (NaN when an output of ``other`` is not finite; 0 for outputs that are all zero and
        equal).

    Raises:
        LandscapeError: an output of ``reference`` itself is not finite (theta_B overflows on these images:
            there is no function to keep, whatever the permutation).
    """
    worst = torch.zeros((), dtype=torch.float64)
    scale = torch.zeros((), dtype=torch.float64)
    for i, batch in enumerate(batches):
        x = batch[0]
        f_b = select_logits(reference(x), output).double()
        if not bool(torch.isfinite(f_b).all()):
            raise LandscapeError(
                f"theta_B's outputs on batch {i} are not finite (NaN or Inf) although its weights are: it overflows "
                "on these images; check its checkpoint and the inputs' preprocessing (--mean, --std, --input-size)"
            )
        f_p = select_logits(other(x), output).double()
        worst = torch.maximum(worst, (f_p - f_b).abs().max().cpu())
        scale = torch.maximum(scale, f_b.abs().max().cpu())
    if not bool(torch.isfinite(worst)):
        return float("nan")
    return 0.0 if float(worst) == 0.0 else float(worst / scale)


def align_models(
    model_a: nn.Module,
    model_b: nn.Module,
    batches: Sequence[Sequence[Tensor]],
    *,
    method: str = "weights",
    seed: int = 0,
    max_sweeps: int = 100,
    output: Any = None,
) -> Alignment:
    """theta_B with its hidden units permuted to match theta_A's, checked to compute theta_B's function.

    Args:
        model_a: theta_A (not changed; evaluated in eval mode).
        model_b: theta_B, of the same architecture (not changed; evaluated in eval mode).
        batches: ``(x, y)`` batches on the models' device: the shapes of the traced graph, the data of activation
            matching, and the images of the function check.
        method: ``weights`` or ``activations``.
        seed: seeds weight matching's order of the permutations.
        max_sweeps: weight matching's cap on sweeps.
        output: where the logits are in the models' output.

    Returns:
        The :class:`Alignment` (its ``out`` None).

    Raises:
        LandscapeError: the two networks are not the same architecture (the first mismatch named), the network
            cannot be permuted (the module named), or the permuted network fails the function check.
    """
    check_same_architecture(Endpoint.of(model_a), Endpoint.of(model_b))
    model_a, model_b = eval_model(model_a), eval_model(model_b)  # BatchNorm's running statistics, no dropout
    if not batches:
        raise LandscapeError("alignment needs at least one batch of images to check the aligned network on")
    spec = permutation_spec(model_b, batches[0][0][:2])
    a, b = model_a.state_dict(), model_b.state_dict()
    if method == "weights":
        matching = weight_matching(spec, a, b, seed=seed, max_sweeps=max_sweeps)
    else:
        matching = activation_matching(spec, model_a, model_b, batches, seed=seed, max_sweeps=max_sweeps)
    aligned = copy.deepcopy(model_b).eval()
    aligned.load_state_dict(apply(spec, b, {k: v.to(next(iter(b.values())).device) for k, v in matching.perms.items()}))
    error = function_error(model_b, aligned, batches, output)
    if not error <= FUNCTION_TOLERANCE:
        raise LandscapeError(
            f"the permuted {spec.model} computes another function than theta_B (relative error {error:.3g} > "
            f"{FUNCTION_TOLERANCE:g}); its permutation spec misses a tie: please report it with the model"
        )
    n = sum(int(bt[0].shape[0]) for bt in batches)
    return Alignment(aligned, spec, matching, method, error, n)


# --------------------------------------------------------------------------------------------- the run
def _paths(source: Any) -> list[Path]:
    """The checkpoint file a source reads, as a list (none for a module or a random init)."""
    ckpt = getattr(source, "checkpoint", None) if not isinstance(source, (str, os.PathLike)) else source
    return [] if ckpt is None or isinstance(ckpt, nn.Module) else [Path(ckpt)]


def _check_out(out: Path, sources: Iterable[Any], force: bool) -> None:
    """Refuse an output that is one of the inputs, or that may not be replaced (before anything is loaded)."""
    for path in (p for s in sources for p in _paths(s)):
        same = path.exists() and out.exists() and os.path.samefile(path, out)
        if same or out.resolve() == path.resolve():
            raise LandscapeError(f"--out {out} is an input checkpoint; write the aligned network to another file")
    check_replaceable(out, force=force, kind="checkpoint")


def _carried(source: Any) -> dict[str, Any]:
    """theta_B's checkpoint's training metadata, carried into the aligned checkpoint (it computes the same)."""
    paths = _paths(source)
    if not paths:
        return {}
    meta = read_checkpoint(paths[0]).meta
    return {k: meta.get(k) for k in ("epoch", "metrics", "train_options") if meta.get(k) is not None}


def run_align(
    source_a: ModelSource | str | Path | nn.Module,
    source_b: ModelSource | str | Path | nn.Module,
    options: AlignOptions | None = None,
    *,
    out: str | Path | None = None,
    model_name: str | None = None,
    other_model_name: str | None = None,
    force: bool = False,
    device: str = "auto",
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
) -> Alignment:
    """The ``landscape align`` command: theta_B's units permuted to match theta_A's, written to ``out``.

    Both ends are rebuilt from their sources (:func:`~landscape.core.front.prepare` for theta_A, whose dataset
    and preprocessing both take) and must be the same architecture. The images are ``options.samples`` of the
    split (seeded by ``options.seed``) in fixed batches, or ``batches``.

    Args:
        source_a: theta_A: a checkpoint path, a :class:`~landscape.core.source.ModelSource` or an ``nn.Module``.
        source_b: theta_B, of the same architecture.
        options: the options (validated when they were built); None: the defaults.
        out: the checkpoint to write (never one of the inputs; replaced only when landscape wrote it, or with
            ``force``); None keeps the result in memory.
        model_name: the model of a first checkpoint that does not name it.
        other_model_name: the model of a second checkpoint that does not name it (default: ``model_name``).
        force: replace a file at ``out`` that landscape did not write.
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: print the plan before the work (None: only on a terminal).
        command: how the run was asked for, recorded in the checkpoint (default: this call).
        batches: the data as ``(x, y)`` batches, their first ``samples`` images instead of ``options.data``.

    Returns:
        The :class:`Alignment`; nothing is written when it raises.

    Raises:
        LandscapeError: the options are not an :class:`AlignOptions`, ``out`` is an input or may not be replaced,
            a model or the data cannot be loaded (a weight that is not finite included), the ends are not the same
            architecture, the network cannot be permuted, or the permuted network fails the function check.
    """
    o = AlignOptions() if options is None else options
    if not isinstance(o, AlignOptions):
        raise LandscapeError(f"run_align takes its options as an AlignOptions, got {type(o).__name__}")
    target = None if out is None else Path(out)
    if target is not None:
        _check_out(target, (source_a, source_b), force)
    call = command or python_call("run_align", source_a, source_b, o, out=out, model_name=model_name)
    prepared = prepare(source_a, o, model_name=model_name, device=device, command=call, batches=batches)
    inputs = prepared.inputs
    spec = inputs.dataset_spec if batches is None else (o.data or "digits")
    inputs_b = load_inputs(
        source_b, model_name=other_model_name or model_name, data=spec, split=o.split, device=inputs.device
    )
    if batches is None and inputs_b.preprocess != inputs.preprocess:
        raise LandscapeError(
            f"theta_A and theta_B take differently preprocessed inputs ({inputs.preprocess} and "
            f"{inputs_b.preprocess}); give both the same --mean, --std and --input-size"
        )
    plan = f"align: theta_B's hidden units to theta_A's by {o.method} matching"
    prepared.announce(plan, 1, "pass", 2 * prepared.seconds_per_pass, progress)
    result = align_models(
        inputs.model,
        inputs_b.model,
        prepared.batches,
        method=o.method,
        seed=o.seed,
        max_sweeps=o.max_sweeps,
        output=inputs.source.output,
    )
    m = result.matching
    result.meta = {
        "method": o.method,
        "reference": inputs.checkpoint,
        "reference_sha256": inputs.checkpoint_sha256,
        "aligned": inputs_b.checkpoint,
        "aligned_sha256": inputs_b.checkpoint_sha256,
        "permutations": result.permutations,
        "sweeps": m.sweeps,
        "converged": m.converged,
        "weight_matched": list(m.weight_matched),
        "objective_before": m.objective_before,
        "objective_after": m.objective_after,
        "starts": [d.as_dict() for d in m.starts],
        "function_error": result.function_error,
        "function_tolerance": FUNCTION_TOLERANCE,
        "n_samples": result.n_samples,
        "dataset": prepared.attrs.get("dataset"),
        "options": o.attrs(),
        "command": call,
    }
    if target is None:
        return result
    model = result.model
    outputs = select_logits(model(prepared.batches[0][0][:1]), inputs.source.output).shape[-1]
    save_checkpoint(
        target,
        copy.deepcopy(model).cpu(),
        model_name=inputs_b.model_name,
        model_kwargs=inputs_b.model_kwargs,
        num_classes=int(getattr(model, "num_classes", None) or outputs),
        dataset=inputs_b.dataset_spec if batches is None else None,
        extra={"alignment": result.meta},
        force=force,
        **_carried(inputs_b.source),
    )
    return replace(result, out=target)


@analysis_function(AlignOptions)
def align(
    model_a: Any,
    model_b: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: AlignOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[AlignKeywords],
) -> Alignment:
    """``model_b`` with its hidden units permuted to match ``model_a``'s (``landscape align``).

    Weight matching (``method="weights"``) or activation matching (``method="activations"``); the aligned network
    computes ``model_b``'s function (checked on the data). See :class:`~landscape.options.align.AlignOptions` for
    every keyword.

    Args:
        model_a: theta_A: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        model_b: theta_B, of the same architecture.
        data: a dataset spec, a ``Dataset``, ``DataLoader`` or list of ``(x, y)`` batches (the first ``samples``
            images), or None for the first checkpoint's dataset (else digits).
        out: the checkpoint to write; None keeps the result in memory.
        options: an :class:`~landscape.options.align.AlignOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file at ``out`` that landscape did not write.
        progress: print the plan (None: on a terminal only).
        batch: a function from one batch of ``data`` (a ``Dataset`` or ``DataLoader`` you hold) to ``(inputs,
            labels)``, for batches that are dicts or longer tuples, e.g. ``lambda b: (b["image"], b["label"])``.
        **fields: the options as keywords.

    Returns:
        The :class:`Alignment`: ``.model`` the aligned network, ``.permutations``, ``.function_error``, ...

    Raises:
        LandscapeError: bad options, models or data that cannot be used, ends of different architectures, a
            network that cannot be permuted, or an ``out`` that is an input or may not be replaced.
    """
    return run_from_python(
        run_align,
        "landscape.align",
        AlignOptions,
        model_a,
        data,
        others=(model_b,),
        options=options,
        fields=fields,
        batch=batch,
        out=out,
        device=device,
        force=force,
        progress=progress,
    )
