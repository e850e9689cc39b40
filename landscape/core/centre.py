"""What every analysis checks and says before its work: the preprocessing, and the centre's loss and accuracy.

A model analysed on inputs preprocessed unlike its training inputs (images in [0, 1] standardised by the
dataset's mean and std, a wrong size) still gives numbers, but of a model that is far from its minimum: the
loss surface, the Hessian and the spectra are then those of another problem. :func:`check_centre` measures the
centre (the model's own weights) on the chosen samples once, times that pass, and words a warning when the
accuracy is near chance or the loss far above that of a uniform guess; :func:`preprocess_sources` says where
each preprocessing value came from. :func:`announcement` is what the front half prints before the work.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from landscape.core.objective import Evaluation, Objective
from landscape.core.source import AnalysisInputs
from landscape.data.loading import dataset_info
from landscape.models.external import calling_forward, model_preprocess
from landscape.runtime.progress import duration

#: a centre accuracy at most this many times chance (1 / classes) is "near chance"
NEAR_CHANCE = 1.5
#: a centre loss above this many times log(classes) (a uniform guess) is "far above" it
FAR_ABOVE_UNIFORM = 2.0
#: a first pass over the samples shorter than this is timed a second time
WARM_PASS_SECONDS = 2.0
#: where a preprocessing value came from (the values of ``preprocess_source``)
SOURCES = {"user": "yours", "model": "the model's own", "dataset": "the dataset's defaults", "batches": "as given"}
#: the preprocessing fields a user sets, with the option that sets each
FIELDS = {"image_size": "--input-size", "mean": "--mean", "std": "--std"}


@dataclass(frozen=True)
class CentreCheck:
    """The model's own weights measured once on the analysis's samples.

    Attributes:
        loss: the data loss at the centre, ``sum_b (N_b / N) L_b(theta_0)``.
        accuracy: the fraction of samples whose arg-max logit is the label (NaN: a logit not finite).
        classes: the model's number of outputs.
        seconds: the time of that one pass over the samples (forward only).
    """

    loss: float
    accuracy: float
    classes: int
    seconds: float

    def warning(self) -> str:
        """A one-line warning when the centre looks untrained on these inputs, else ``""``.

        Near chance: ``accuracy <= 1.5 / classes``; far above a uniform guess: ``loss > 2 log(classes)``.

        Returns:
            The warning naming ``--mean``, ``--std`` and ``--input-size`` as the likely cause, or ``""``.
        """
        if self.classes < 2:
            return ""
        uniform = math.log(self.classes)
        near_chance = self.accuracy <= NEAR_CHANCE / self.classes
        far_above = self.loss > FAR_ABOVE_UNIFORM * uniform
        if not (near_chance or far_above) and math.isfinite(self.loss):
            return ""
        what = (
            f"the centre's accuracy {self.accuracy:.3g} is near chance (1/{self.classes})"
            if near_chance
            else f"the centre's loss {self.loss:.3g} is far above log({self.classes}) = {uniform:.3g}"
        )
        return (
            f"warning: {what}: unless the model is untrained, its inputs are likely not preprocessed as in its "
            "training; check --mean, --std and --input-size"
        )


def check_centre(inputs: AnalysisInputs, batches: Sequence[tuple[Tensor, Tensor]], criterion: str) -> CentreCheck:
    """Loss and accuracy of the model's own weights on ``batches``, and the time of that one pass.

    The :class:`~landscape.core.objective.Objective` of every analysis evaluates them (sample-weighted over
    the batches), without its checks, under a forked random state (the caller's is untouched); an exception of
    the model's forward is the model's one-line error naming the batch it was given
    (:func:`~landscape.models.external.calling_forward`). A first pass
    shorter than :data:`WARM_PASS_SECONDS` is timed again (the first pays for warming up), the shorter kept.

    Args:
        inputs: the analysis inputs (model, device, logits selector).
        batches: the analysis's fixed ``(x, y)`` batches.
        criterion: the data loss (``cross_entropy`` or ``soft_cross_entropy``).

    Returns:
        The :class:`CentreCheck`.
    """
    objective = Objective(inputs.model, batches, criterion=criterion, output=inputs.source.output, check=False)
    devices = [objective.device] if objective.device.type == "cuda" else []
    one = objective.batches[0][0][:1]
    # a model that draws in eval mode leaves the caller's state alone; what a forward raises is named as the
    # model's with the batch it was given (Objective.evaluate), what the loss raises is not
    with torch.random.fork_rng(devices=devices):
        with torch.no_grad(), calling_forward(inputs.model, one):
            classes = int(objective.logits(objective.params, one).shape[-1])
        evaluation, seconds = _timed(objective)
        if seconds < WARM_PASS_SECONDS:  # the first pass pays for warming up: time a second, cheap one
            seconds = min(seconds, _timed(objective)[1])
    return CentreCheck(evaluation.data_loss, evaluation.accuracy, classes, seconds)


def _timed(objective: Objective) -> tuple[Evaluation, float]:
    """The objective evaluated at its centre, and the seconds that took."""
    start = time.perf_counter()
    evaluation = objective.evaluate()
    if objective.device.type == "cuda":
        torch.cuda.synchronize(objective.device)
    return evaluation, time.perf_counter() - start


def preprocess_sources(inputs: AnalysisInputs, given: bool) -> dict[str, str]:
    """Where each preprocessing value of the run came from: ``user``, ``model``, ``dataset`` or ``batches``.

    The user's ``--input-size`` / ``--mean`` / ``--std`` win over the model's own (a timm / torchvision
    model with published weights, or for ``imagefolder`` data) over the dataset's defaults
    (:func:`~landscape.core.source.resolve_preprocess`).

    Args:
        inputs: the analysis inputs.
        given: the data was given as batches (its preprocessing is the caller's).

    Returns:
        ``{"image_size": ..., "mean": ..., "std": ...}``; every value ``batches`` for data given as batches.
    """
    if given:
        return dict.fromkeys(FIELDS, "batches")
    user = inputs.source.preprocess
    own = model_preprocess(inputs.model)
    chosen = inputs.preprocess
    sources = {}
    for name in FIELDS:
        value = None if chosen is None else getattr(chosen, name)
        if value is not None and user is not None and getattr(user, name) is not None:
            sources[name] = "user"
        elif value is not None and own is not None and getattr(own, name) == value:
            sources[name] = "model"
        else:
            sources[name] = "dataset"
    return sources


def preprocess_values(inputs: AnalysisInputs, batches: Sequence[tuple[Tensor, Tensor]], given: bool) -> dict[str, Any]:
    """The preprocessing the run's images went through: image size ``[H, W]``, mean and std per channel.

    Args:
        inputs: the analysis inputs.
        batches: its batches (the image size is read from them).
        given: the data was given as batches (its mean and std are the caller's, unknown here).

    Returns:
        ``{"image_size": [H, W], "mean": [...] or None, "std": [...] or None}``.
    """
    h, w = (int(s) for s in batches[0][0].shape[-2:])
    if given:
        return {"image_size": [h, w], "mean": None, "std": None}
    info = dataset_info(inputs.dataset_spec, inputs.preprocess)
    return {"image_size": [h, w], "mean": list(info.mean), "std": list(info.std)}


def centre_attrs(check: CentreCheck, sources: dict[str, str], values: dict[str, Any]) -> dict[str, Any]:
    """The result file's attributes of the check (docs/schema.md): where the preprocessing came from, the centre.

    Args:
        check: the centre's measurement.
        sources: :func:`preprocess_sources`.
        values: :func:`preprocess_values`.

    Returns:
        ``preprocess_source``, ``preprocess_image_size``, ``preprocess_mean``, ``preprocess_std``,
        ``centre_loss`` and ``centre_accuracy``.
    """
    return {
        "preprocess_source": sources,
        "preprocess_image_size": values["image_size"],
        "preprocess_mean": values["mean"],
        "preprocess_std": values["std"],
        "centre_loss": check.loss,
        "centre_accuracy": check.accuracy,
    }


def announcement(
    plan: str,
    data: str,
    n_samples: int,
    check: CentreCheck,
    sources: dict[str, str],
    values: dict[str, Any],
    estimate: str,
    setup: float | None = None,
) -> list[str]:
    """The lines printed before the work: what will run, its set-up, the preprocessing, the centre (and a warning).

    Args:
        plan: what will run, e.g. ``surface: 21 x 21 grid over [-1, 1] x [-1, 1] (441 points)``.
        data: the data it runs on, e.g. ``digits (train)``.
        n_samples: the samples it runs on.
        check: the centre's measurement.
        sources: :func:`preprocess_sources`.
        values: :func:`preprocess_values`.
        estimate: the estimated time in words (:func:`landscape.runtime.progress.estimate`), or ``""``.
        setup: the seconds the run spent before its work (the set-up stage, said on a line of its own), or None.

    Returns:
        The lines.
    """

    def numbers(v: list[float] | None) -> str:
        return "as given" if v is None else "(" + ", ".join(f"{x:.4g}" for x in v) + ")"

    h, w = values["image_size"]
    said = {name: SOURCES[source] for name, source in sources.items()}
    origin = (
        next(iter(said.values()))
        if len(set(said.values())) == 1
        else ", ".join(f"{name} {where}" for name, where in said.items())
    )
    stage = [f"set-up: {duration(setup)} (the model, the data, the centre's pass, the checks)"] if setup else []
    lines = [
        f"{plan} on {n_samples} samples of {data}" + (f", {estimate}" if estimate else ""),
        *stage,
        f"preprocessing: {h} x {w} px, mean {numbers(values['mean'])}, std {numbers(values['std'])} ({origin})",
        f"centre: loss {check.loss:.4g}, accuracy {check.accuracy:.4g} on these samples",
    ]
    warning = check.warning()
    return lines + ([warning] if warning else [])
