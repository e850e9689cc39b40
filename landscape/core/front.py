"""The shared front half of every analysis: model source -> model, dataset -> fixed batches, provenance.

``ModelSource -> create_model + weights -> Objective(...) -> analysis -> store -> plot``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from landscape.core.criteria import select_logits
from landscape.core.objective import Objective
from landscape.data.augment import augmented_batches
from landscape.data.batches import fixed_batches
from landscape.data.loading import dataset_info, load_dataset
from landscape.data.preprocess import Preprocess
from landscape.data.specs import parse_spec
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import load_model
from landscape.models.external import data_kwargs, model_preprocess
from landscape.runtime.distributed import resolve_device

if TYPE_CHECKING:
    from landscape.core.objective import Objective
    from landscape.data.preprocess import Preprocess


@dataclass(frozen=True)
class ModelSource:
    """Where the analysed model comes from: a checkpoint, published weights, or a seeded random init.

    Attributes:
        checkpoint: a landscape checkpoint, a plain state dict, a ``{"state_dict": ...}`` file or ``.safetensors``.
        model: zoo name or ``timm:NAME`` / ``torchvision:NAME`` / ``py:module:factory``; needed when the
            checkpoint names no model, or without a checkpoint.
        model_kwargs: constructor options (``--model-kw``); they override the checkpoint's.
        num_classes: output classes; default: the checkpoint's, the library's (pretrained) or the data's.
        pretrained: the library's published weights (timm / torchvision); needs a network.
        random_init: the model's initialisation, seeded by ``seed`` (for analyses at initialisation).
        seed: seed of the random initialisation (a private generator state; the caller's is restored).
        output: where the logits are in the model's output (see `landscape.core.criteria.select_logits`).
        preprocess: input preprocessing overrides (``--input-size``, ``--mean``, ``--std``).

    Raises:
        LandscapeError: not exactly one source of weights (``checkpoint``, ``pretrained``, ``random_init``), or
            ``pretrained`` / ``random_init`` without a ``model`` name.
    """

    checkpoint: str | None = None
    model: str | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    num_classes: int | None = None
    pretrained: bool = False
    random_init: bool = False
    seed: int = 0
    output: str | int | None = None
    preprocess: Preprocess | None = None

    def __post_init__(self) -> None:
        given = [
            name
            for name, on in (
                ("--ckpt", self.checkpoint is not None),
                ("--pretrained", self.pretrained),
                ("--random-init", self.random_init),
            )
            if on
        ]
        if len(given) > 1:
            raise LandscapeError(f"give one source of weights, not {' and '.join(given)}")
        if not given:
            raise LandscapeError(
                "no weights to analyse: pass --ckpt FILE, or --model NAME with --pretrained "
                "(published weights) or --random-init"
            )
        if self.checkpoint is None and self.model is None:
            raise LandscapeError(
                f"{given[0]} needs --model NAME (a zoo name, timm:NAME, torchvision:NAME or py:module:factory)"
            )

    @classmethod
    def of(cls, source: ModelSource | str | Path, model: str | None = None) -> ModelSource:
        """``source`` itself, or a checkpoint path (with an optional model name) as a source.

        Args:
            source: a :class:`ModelSource` (returned unchanged) or the path of a checkpoint file.
            model: model name for a checkpoint path (see ``model`` above); ignored when ``source`` is a
                :class:`ModelSource`.

        Returns:
            The model source.
        """
        return source if isinstance(source, ModelSource) else cls(checkpoint=str(source), model=model)

    def build(self, data_spec: str) -> tuple[nn.Module, dict[str, Any]]:
        """The model on CPU in eval mode, and what the checkpoint file said (``{}`` without one).

        Without a checkpoint the model is fitted to ``data_spec`` as ``landscape train`` fits it (channels,
        image size and classes, where the model takes them); ``--model-kw`` wins over those.

        Args:
            data_spec: the dataset spec the model is analysed on (e.g. ``digits``); read only for ``random_init``.

        Returns:
            The model (CPU, eval mode) and a dict with ``model_name``, ``model_kwargs``, ``sha256`` and ``dataset``
            of the checkpoint (``{}`` without a checkpoint).

        Raises:
            LandscapeError: an unreadable checkpoint, weights that do not fit the model, an unknown model name or
                bad options (`models.checkpoint.load_model`, `models.registry.create_model`), or a bad
                ``data_spec`` (with ``random_init``).
        """
        if self.checkpoint is not None:
            model, ckpt = load_model(self.checkpoint, self.model, self.num_classes, **self.model_kwargs)
            meta = {
                "model_name": ckpt.model_name,
                "model_kwargs": dict(ckpt.model_kwargs),
                "sha256": ckpt.sha256,
                "dataset": ckpt.meta.get("dataset"),
            }
            return model, meta
        assert self.model is not None
        kwargs = dict(self.model_kwargs)
        num_classes = self.num_classes
        if self.random_init:
            info = dataset_info(data_spec)
            kwargs = {**data_kwargs(self.model, in_chans=info.in_chans, img_size=info.image_size), **kwargs}
            num_classes = info.num_classes if num_classes is None else num_classes
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                model = create_model(self.model, num_classes=num_classes, **kwargs)
        else:
            model = create_model(self.model, num_classes=num_classes, pretrained=True, **kwargs)
        return model.eval(), {}

    def describe(self) -> str:
        """The checkpoint path, or ``pretrained`` / ``random-init (seed N)``.

        Returns:
            A one-line description of the source of the weights.
        """
        if self.checkpoint is not None:
            return self.checkpoint
        return "pretrained" if self.pretrained else f"random-init (seed {self.seed})"


@dataclass
class AnalysisInputs:
    """A model rebuilt from its source, the dataset it is analysed on and the provenance of both."""

    model: nn.Module
    model_name: str
    model_kwargs: dict[str, Any]
    checkpoint: str
    checkpoint_sha256: str
    dataset_spec: str
    split: str
    device: torch.device
    source: ModelSource
    preprocess: Preprocess | None

    def provenance(self, n_samples: int, seed: int, **options: Any) -> dict[str, Any]:
        """Root attributes of a result file (docs/schema.md, shared root attributes) plus the analysis ``options``.

        Args:
            n_samples: number of data samples the analysis used.
            seed: the analysis' seed.
            **options: analysis-specific attributes, added last (they override the shared ones of the same name).

        Returns:
            A dict of JSON-ready attributes: command line, model, checkpoint and its sha256, dataset, split,
            preprocessing, ``n_samples``, ``seed``, device, torch version, and ``options``.
        """
        return {
            "command": " ".join(["landscape", *sys.argv[1:]]) if sys.argv else "",
            "model": self.model_name,
            "model_kwargs": self.model_kwargs,
            "checkpoint": self.checkpoint,
            "checkpoint_sha256": self.checkpoint_sha256,
            "pretrained": bool(self.source.pretrained),
            "num_classes": getattr(self.model, "num_classes", None),
            "model_output": self.source.output,
            "dataset": self.dataset_spec,
            "split": self.split,
            "preprocess": None if self.preprocess is None else self.preprocess.as_dict(),
            "n_samples": int(n_samples),
            "seed": int(seed),
            "device": str(self.device),
            "torch_version": str(torch.__version__),
            **options,
        }


def resolve_preprocess(
    model: nn.Module, data_spec: str, *, pretrained: bool = False, overrides: Preprocess | None = None
) -> Preprocess | None:
    """The preprocessing of the data for ``model``: the user's overrides over the model's over the data's own.

    A timm / torchvision model's own preprocessing (`landscape.models.external.model_preprocess`) applies with
    published weights (``pretrained``: its mean and std; for ``imagefolder`` data also its size, crop and
    interpolation) and for ``imagefolder`` data, which has no statistics of its own. Otherwise the dataset's
    own normalisation holds (digits, CIFAR and synthetic data at their native size), as in ``landscape train``.

    Args:
        model: the model to be analysed (a timm / torchvision model may carry its own preprocessing).
        data_spec: the dataset spec, e.g. ``digits`` or ``imagefolder:PATH``.
        pretrained: the model carries published weights (then its own mean and std apply).
        overrides: the user's preprocessing overrides; they win over the model's.

    Returns:
        The merged preprocessing, or None when nothing overrides the dataset's defaults.
    """
    imagefolder = parse_spec(data_spec)[0] == "imagefolder"
    own = model_preprocess(model) if (pretrained or imagefolder) else None
    if own is not None and not imagefolder:
        own = Preprocess(mean=own.mean, std=own.std)
    overrides = overrides or Preprocess()
    merged = overrides if own is None else overrides.merged(own)
    return None if merged == Preprocess() else merged


def load_inputs(
    checkpoint: ModelSource | str | Path,
    *,
    model_name: str | None = None,
    data: str | None = None,
    split: str = "train",
    device: str | torch.device = "auto",
) -> AnalysisInputs:
    """Build the model of ``checkpoint`` (a path or a :class:`ModelSource`; eval mode, on the device).

    The dataset defaults to the one recorded in the checkpoint, else ``digits``; its preprocessing follows
    :func:`resolve_preprocess`.

    Args:
        checkpoint: a :class:`ModelSource`, or the path of a checkpoint file.
        model_name: model name for a checkpoint path (see :class:`ModelSource`).
        data: dataset spec; None takes the checkpoint's, else ``digits``.
        split: dataset split to analyse (``train`` or ``test``).
        device: ``"auto"``, a device string or a ``torch.device`` (see `landscape.runtime.distributed.resolve_device`).

    Returns:
        The model (eval mode, on the device) with its name, options, checkpoint identity, dataset, split, device,
        source and preprocessing.

    Raises:
        LandscapeError: an unknown device, or the model cannot be built (see :meth:`ModelSource.build`).
    """
    source = ModelSource.of(checkpoint, model_name)
    dev = resolve_device(device)
    model, meta = source.build(data or "digits")
    model = model.to(dev).eval()
    spec = data or meta.get("dataset") or "digits"
    return AnalysisInputs(
        model=model,
        model_name=getattr(model, "model_name", None) or meta.get("model_name") or str(source.model),
        model_kwargs=dict(getattr(model, "model_kwargs", meta.get("model_kwargs", {}))),
        checkpoint=source.describe(),
        checkpoint_sha256=meta.get("sha256", ""),
        dataset_spec=spec,
        split=split,
        device=dev,
        source=source,
        preprocess=resolve_preprocess(model, spec, pretrained=source.pretrained, overrides=source.preprocess),
    )


def batches_for(
    inputs: AnalysisInputs, *, batch_size: int, n_samples: int | None, seed: int = 0, first_samples: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed batches (no augmentation, fixed seeded order) of the inputs' dataset, on the inputs' device.

    Args:
        inputs: the analysis inputs (dataset spec, split, preprocessing and device).
        batch_size: samples per batch (positive).
        n_samples: number of samples to take (positive); None takes the whole split.
        seed: seeds the order of the samples.
        first_samples: take the first ``n_samples`` of the split in file order, unshuffled (``seed`` unused).

    Returns:
        A list of ``(x, y)`` batches: float32 ``(b, C, H, W)`` images and int64 ``(b,)`` labels.

    Raises:
        LandscapeError: a non-positive ``batch_size`` or ``n_samples``, more samples than the split holds, or a
            dataset that cannot be loaded (`landscape.data.load_dataset`, `landscape.data.fixed_batches`).
    """
    _check_sizes(batch_size, n_samples)
    dataset = load_dataset(inputs.dataset_spec, inputs.split, preprocess=inputs.preprocess)
    return fixed_batches(dataset, batch_size, n_samples, seed=seed, device=inputs.device, first_samples=first_samples)


def _check_sizes(batch_size: int, n_samples: int | None) -> None:
    """An error unless ``batch_size`` and ``n_samples`` (when given) are positive."""
    if batch_size <= 0:
        raise LandscapeError(f"--batch-size must be positive, got {batch_size}")
    if n_samples is not None and n_samples <= 0:
        raise LandscapeError(f"--samples must be positive, got {n_samples}")


def _cannot_run(inputs: AnalysisInputs, exc: RuntimeError) -> LandscapeError:
    """The error for a model that fails on the inputs' data: the first line of the original message kept."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return LandscapeError(f"the model cannot run on {inputs.dataset_spec}: {first}")


def augmented_batches_for(
    inputs: AnalysisInputs,
    *,
    batch_size: int,
    n_samples: int | None,
    seed: int = 0,
    copies: int = 1,
    first_samples: bool = False,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Paper A's augmented batches (``--augment paper-a``) of the inputs' dataset, drawn once, on its device.

    The samples are those :func:`batches_for` takes; each is augmented ``copies`` times and every batch mixed
    within itself, with targets over the model's outputs (see :mod:`landscape.data.augment`). The caller's random
    state is untouched.

    Args:
        inputs: the analysis inputs (model, dataset spec, split, preprocessing, device, logits selector).
        batch_size: images per batch (positive).
        n_samples: number of distinct samples (positive); None takes the whole split.
        seed: seeds the samples and the augmentation.
        copies: augmented copies of each sample (positive).
        first_samples: the first ``n_samples`` of the split in file order, as in :func:`batches_for`.

    Returns:
        A list of ``(x, t)`` batches: float32 ``(b, C, H, W)`` images and float32 ``(b, n_outputs)`` label
        distributions.

    Raises:
        LandscapeError: a non-positive ``batch_size``, ``n_samples`` or ``copies``, more samples than the split
            holds, a model with fewer outputs than the data's classes, or a dataset that cannot be loaded.
    """
    _check_sizes(batch_size, n_samples)
    dataset = load_dataset(inputs.dataset_spec, inputs.split, preprocess=inputs.preprocess)
    one = dataset.images(torch.arange(1)).to(inputs.device)
    try:  # the width of the targets is the model's: one un-augmented image through it
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            outputs = int(select_logits(inputs.model(one), inputs.source.output).shape[-1])
    except RuntimeError as exc:
        raise _cannot_run(inputs, exc) from exc
    return augmented_batches(
        dataset,
        batch_size,
        n_samples,
        seed=seed,
        copies=copies,
        num_classes=outputs,
        device=inputs.device,
        first_samples=first_samples,
    )


def parse_patterns(patterns: Sequence[str] | str | None) -> list[str]:
    """Split comma-separated name patterns into a list (empty for None).

    Args:
        patterns: one comma-separated string, a sequence of them, or None.

    Returns:
        The stripped, non-empty patterns in order.
    """
    if patterns is None:
        return []
    if isinstance(patterns, str):
        patterns = [patterns]
    return [p.strip() for item in patterns for p in item.split(",") if p.strip()]


def build_objective(
    inputs: AnalysisInputs, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], **options: Any
) -> Objective:
    """The :class:`~landscape.core.objective.Objective` of ``inputs.model`` over ``batches`` on ``inputs.device``.

    ``options`` are passed to the Objective (criterion, regularizer, dtype, allow_stochastic, ...); the
    logits selector is the source's ``--model-output``.

    Args:
        inputs: the analysis inputs (model, device, dataset spec and logits selector).
        batches: the fixed ``(x, y)`` batches the objective averages over.
        **options: keyword options of the Objective.

    Returns:
        The objective.

    Raises:
        LandscapeError: the device ran out of memory (with the batch size to lower), or the model cannot run
            on the data (the original message kept, with the dataset named).
    """
    try:
        return Objective(inputs.model, batches, device=inputs.device, output=inputs.source.output, **options)
    except torch.OutOfMemoryError as exc:
        size = int(batches[0][1].shape[0]) if batches else 0
        raise LandscapeError(
            f"out of memory on {inputs.device} with batches of {size} samples; lower --batch-size (or --samples)"
        ) from exc
    except RuntimeError as exc:
        raise _cannot_run(inputs, exc) from exc
