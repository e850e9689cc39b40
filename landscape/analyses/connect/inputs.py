"""The inputs of a connect run: both ends, each split's objective, the bend's data, REPAIR, the file's attributes.

:func:`load_connect_inputs` loads and checks everything :func:`landscape.analyses.connect.run.run_connect` works
with before any file is opened (every check made here; a bad input is a one-line error), and says what will run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from landscape.analyses.align.run import Alignment, align_models
from landscape.analyses.connect.curvature import CurvatureSettings
from landscape.analyses.connect.evaluate import prepare_path
from landscape.analyses.connect.path import Endpoint, linear_point
from landscape.analyses.connect.points import SplitEvaluator
from landscape.analyses.connect.repair import Repair
from landscape.analyses.connect.summary import UNALIGNED
from landscape.core.front import batches_for, build_objective, load_inputs, prepare
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError
from landscape.options.connect import BOTH, ConnectOptions

if TYPE_CHECKING:
    from landscape.core.source import AnalysisInputs, ModelSource


@dataclass
class Inputs:
    """Everything a connect run works with, checked before any file is opened.

    Attributes:
        inputs: theta_A's model with its data, device and provenance.
        a: theta_A.
        b: theta_B (same architecture).
        splits: the splits measured, in order.
        evaluator: evaluates a point on every split.
        train: the training objective (bend training, BatchNorm statistics), or None when none is needed.
        attrs: the file's root attributes.
        unaligned: with ``align``: theta_B as given (``b`` is then theta_B aligned to theta_A); else None.
        alignment: with ``align``: how theta_B was aligned; else None.
        bend: with ``curve="bezier"``: the objective the bend is trained on (``bend_samples`` training images, all
            of them by default, or the given batches); else None.
        repairs: with ``repair``: REPAIR of each line (``line``, and ``unaligned_line`` with ``align``).
    """

    inputs: AnalysisInputs
    a: Endpoint
    b: Endpoint
    splits: tuple[str, ...]
    evaluator: SplitEvaluator
    train: Objective | None
    attrs: dict[str, Any]
    unaligned: Endpoint | None = None
    alignment: Alignment | None = None
    bend: Objective | None = None
    repairs: dict[str, Repair] = field(default_factory=dict)

    @property
    def objective(self) -> Objective:
        """The first split's objective (its device and dtype are every point's)."""
        return self.evaluator.objectives[0]


def _bn_statistics(o: ConnectOptions, has_batchnorm: bool, source: str) -> str:
    """How a point's BatchNorm statistics are set, in words (recorded as ``bn_statistics``)."""
    if not has_batchnorm:
        return "none: the model has no BatchNorm layer with running statistics"
    if o.bn == "eval":
        return "the endpoints' running statistics interpolated with the point (--bn eval), not re-estimated"
    return (
        f"re-estimated at every point between the ends from the {source} samples (cumulative average over their "
        "batches); the ends, the networks as given, keep their own"
    )


def load_connect_inputs(
    source_a: ModelSource | str | Path,
    source_b: ModelSource | str | Path,
    o: ConnectOptions,
    *,
    model_name: str | None,
    other_model_name: str | None,
    device: str,
    command: str,
    batches: Iterable[Any] | None,
    progress: bool | None = None,
) -> Inputs:
    """Both ends, the data of every split, the objectives and the attributes; every check made here.

    Before it returns, it says what will run (:meth:`~landscape.core.front.Prepared.announce`): the points, the
    samples, the estimated time, the preprocessing and theta_A's loss and accuracy.

    Raises:
        LandscapeError: a model or the data cannot be loaded, the ends are not the same architecture (the first
            mismatch named), they take differently preprocessed inputs, or ``both`` splits with given batches.
    """
    if batches is not None and o.split == BOTH:
        raise LandscapeError("data given as batches are one split; use split='train' (or 'test'), not 'both'")
    prepared = prepare(
        source_a, replace(o, split=o.splits[0]), model_name=model_name, device=device, command=command, batches=batches
    )
    inputs = prepared.inputs
    reg = Regularizer.from_options(o.regularizer, o.reg_coef)

    def objective(held: list[Any]) -> Objective:
        return build_objective(
            inputs, held, criterion=prepared.criterion, regularizer=reg, allow_stochastic=o.allow_stochastic
        )

    objectives = [objective(prepared.batches)]
    for split in o.splits[1:]:
        held = batches_for(replace(inputs, split=split), batch_size=o.batch_size, n_samples=o.samples, seed=o.seed)
        objectives.append(objective(held))
    first = objectives[0]
    needs_train = o.repair or (o.bn == "recompute" and first.has_batchnorm()) or o.align == "activations"
    if batches is not None or o.splits[0] == "train":
        train: Objective | None = first
    elif needs_train:
        held = batches_for(replace(inputs, split="train"), batch_size=o.batch_size, n_samples=o.samples, seed=o.seed)
        train = objective(held)
    else:
        train = None
    spec = inputs.dataset_spec if batches is None else (o.data or "digits")
    bend = _bend_objective(o, inputs, batches, train, objective) if o.curve == "bezier" else None
    inputs_b = load_inputs(source_b, model_name=other_model_name, data=spec, split=o.splits[0], device=inputs.device)
    if batches is None and inputs_b.preprocess != inputs.preprocess:
        raise LandscapeError(
            f"theta_A and theta_B take differently preprocessed inputs ({inputs.preprocess} and "
            f"{inputs_b.preprocess}); give both the same --mean, --std and --input-size"
        )
    a, b = Endpoint.of(inputs.model), Endpoint.of(inputs_b.model)
    prepare_path(first, a, b)  # the same architecture (one line naming the first mismatch), finite weights
    unaligned, alignment = None, None
    if o.align != "none":  # theta_B's units matched to theta_A's on the training samples, its function checked
        held = (train if train is not None else first).batches
        alignment = align_models(
            inputs.model, inputs_b.model, held, method=o.align, seed=o.seed, output=inputs.source.output
        )
        unaligned, b = b, Endpoint.of(alignment.model)
    repairs = _repairs(train if train is not None else first, a, b, unaligned, o.bn) if o.repair else {}
    attrs = prepared.attrs
    attrs.update({k: v for k, v in o.attrs().items() if k not in ("seed", "batch_size")})  # prepare's: the data's
    attrs.update(inputs_b.other_provenance())
    bn_source = "given" if batches is not None else "train split's"
    attrs.update(
        criterion=prepared.criterion,
        regularizer=reg.describe(),
        split_samples={s: int(obj.n_samples) for s, obj in zip(o.splits, objectives)},
        has_batchnorm=first.has_batchnorm(),
        bn_statistics=_bn_statistics(o, first.has_batchnorm(), bn_source),
        fused_attention_off=first.fused_attention_off,
    )
    if repairs:
        line = repairs["line"]
        attrs["repair_layers"], attrs["repair_channels"] = len(line.sites), line.channels
        attrs["repair_statistics"] = (
            f"REPAIR: the output channels of {len(line.sites)} layers ({line.channels} channels) rescaled and shifted "
            f"at every point of the line{' and the unaligned line' if unaligned is not None else ''} to the ends' "
            f"interpolated means and standard deviations on the {bn_source} samples (the curve and the plane are "
            "not repaired)"
        )
    if bend is not None:
        attrs["bend_data"] = (
            f"the given batches ({bend.n_samples} images)"
            if batches is not None
            else f"{bend.n_samples} images of the train split" + (" (all)" if o.bend_samples is None else "")
        )
    if batches is not None:
        attrs["split"], attrs["splits"] = o.splits[0], list(o.splits)
    curvature = CurvatureSettings(o.curvature_rho, o.curvature_samples, int(o.seed)) if o.curvature else None
    evaluator = SplitEvaluator(objectives, train if train is not None else first, o.bn, curvature)
    evaluator.tune_curvature()
    lines = 2 if o.align != "none" else 1
    points = o.steps * (lines + (1 if o.curve == "bezier" else 0)) + (o.plane_steps**2 if o.curve == "bezier" else 0)
    passes = len(o.splits) + (1 if o.bn == "recompute" and first.has_batchnorm() else 0)  # + the re-estimation
    plan = (
        f"connect: the line of {o.steps} points"
        + (f" to theta_B aligned by {o.align} matching and to theta_B" if o.align != "none" else "")
        + (
            f", the Bezier curve (bend trained {o.bend_epochs} epochs) of {o.steps} points and the "
            f"{o.plane_steps} x {o.plane_steps} plane"
            if o.curve == "bezier"
            else ""
        )
    )
    plan += f" on {' and '.join(o.splits)}"
    plan += ", REPAIRed" if o.repair else ""
    plan += ", with the top Hessian eigenvalue and sharpness at every path point" if o.curvature else ""
    per_point = passes * prepared.seconds_per_pass
    if progress is not False:  # shown, so timed: one point between the ends as the line makes it (not kept)
        pa, pb, _ = prepare_path(first, a, b)
        start = time.perf_counter()
        evaluator(linear_point(pa, pb, 0.5), curvature=o.curvature)
        per_point = time.perf_counter() - start
    prepared.announce(plan, points, "point", per_point, progress, at_least=True)
    return Inputs(inputs, a, b, o.splits, evaluator, train, attrs, unaligned, alignment, bend, repairs)


def _repairs(objective: Objective, a: Endpoint, b: Endpoint, unaligned: Endpoint | None, bn: str) -> dict[str, Repair]:
    """REPAIR of the line (and of the line to the unaligned theta_B): the ends' statistics on ``objective``."""
    pa, pb, _ = prepare_path(objective, a, b)
    out = {"line": Repair(objective, pa, pb, bn)}
    if unaligned is not None:
        out[UNALIGNED] = Repair(objective, pa, prepare_path(objective, a, unaligned)[1], bn, out["line"].sites)
    return out


def _bend_objective(
    o: ConnectOptions,
    inputs: AnalysisInputs,
    batches: Iterable[Any] | None,
    train: Objective | None,
    objective: Callable[[list[Any]], Objective],
) -> Objective:
    """The objective the bend is trained on: the given batches, else ``bend_samples`` training images (all)."""
    if batches is not None:
        if o.bend_samples is not None:
            raise LandscapeError(
                "bend_samples chooses images of a dataset spec; data given as batches train the bend on all of "
                "them: leave bend_samples out"
            )
        assert train is not None
        return train
    if train is not None and o.splits[0] == "train" and o.samples == o.bend_samples:
        return train  # the same seeded images
    held = batches_for(replace(inputs, split="train"), batch_size=o.batch_size, n_samples=o.bend_samples, seed=o.seed)
    return objective(held)
