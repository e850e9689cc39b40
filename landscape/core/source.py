"""Where the analysed model comes from, and the model with its data and provenance.

:class:`ModelSource` names the weights; :class:`AnalysisInputs` is the model rebuilt on its device.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from landscape.data.loading import dataset_info
from landscape.data.preprocess import Preprocess
from landscape.data.specs import parse_spec
from landscape.errors import LandscapeError, calling
from landscape.models import create_model
from landscape.models.checkpoint import load_model, weights_sha256
from landscape.models.external import model_preprocess
from landscape.models.registry import data_kwargs
from landscape.options import checks
from landscape.runtime.machine import machine


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
        module: a model held in memory (the Python API's ``nn.Module``); it is copied, never changed, and
            identified by the SHA-256 of its weights.

    Raises:
        LandscapeError: not exactly one source of weights (``checkpoint``, ``pretrained``, ``random_init``,
            ``module``), or ``pretrained`` / ``random_init`` without a ``model`` name.
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
    module: nn.Module | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        given = [
            name
            for name, on in (
                ("--ckpt", self.checkpoint is not None),
                ("--pretrained", self.pretrained),
                ("--random-init", self.random_init),
                ("a model", self.module is not None),
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
        if self.checkpoint is None and self.model is None and self.module is None:
            raise LandscapeError(
                f"{given[0]} needs --model NAME (a zoo name, timm:NAME, torchvision:NAME or py:module:factory)"
            )
        if "num_classes" in self.model_kwargs:  # the class count is one option, whichever way it is given
            kwargs = dict(self.model_kwargs)
            count = checks.positive_int(kwargs.pop("num_classes"), "--model-kw num_classes")
            if self.num_classes is not None and self.num_classes != count:
                raise LandscapeError(
                    f"--model-kw num_classes={count} and --num-classes {self.num_classes} disagree: give one of them"
                )
            object.__setattr__(self, "model_kwargs", kwargs)
            object.__setattr__(self, "num_classes", count)

    @classmethod
    def of(cls, source: ModelSource | str | Path | nn.Module, model: str | None = None) -> ModelSource:
        """``source`` itself, a checkpoint path (with an optional model name), or a model in memory, as a source.

        Args:
            source: a :class:`ModelSource` (returned unchanged), the path of a checkpoint file, or an
                ``nn.Module``.
            model: model name for a checkpoint path (see ``model`` above); ignored otherwise.

        Returns:
            The model source.
        """
        if isinstance(source, ModelSource):
            return source
        if isinstance(source, nn.Module):
            return cls(module=source)
        return cls(checkpoint=str(source), model=model)

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
            ForeignError: a ``py:`` factory or a library's constructor raised, or a module cannot be copied.
        """
        if self.module is not None:
            with calling(f"copying your model ({type(self.module).__name__}) with copy.deepcopy", "make it copyable"):
                model = copy.deepcopy(self.module)
            model = model.cpu().eval()
            meta = {
                "model_name": getattr(self.module, "model_name", None) or type(self.module).__name__,
                "model_kwargs": dict(getattr(self.module, "model_kwargs", {}) or {}),
                "sha256": weights_sha256(model),
                "dataset": None,
            }
            return model, meta
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
        """The checkpoint path, ``pretrained``, ``random-init (seed N)`` or ``module (ClassName)``.

        Returns:
            A one-line description of the source of the weights.
        """
        if self.module is not None:
            return f"module ({type(self.module).__name__})"
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

    def provenance(self, n_samples: int, seed: int, *, command: str = "", **options: Any) -> dict[str, Any]:
        """Root attributes of a result file (docs/schema.md, shared root attributes) plus the analysis ``options``.

        Args:
            n_samples: number of data samples the analysis used.
            seed: the analysis' seed.
            command: how the run was asked for: the command line (the CLI passes it) or the Python call.
            **options: analysis-specific attributes, added last (they override the shared ones of the same name).

        Returns:
            A dict of JSON-ready attributes: command line, model, checkpoint and its sha256, dataset, split,
            preprocessing, ``n_samples``, ``seed``, and what it computed on (torch version, CPU capability,
            threads, device: :func:`landscape.runtime.machine.machine`), then ``options``.
        """
        return {
            "command": command,
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
            **machine(self.device),
            **options,
        }

    def other_provenance(self) -> dict[str, Any]:
        """This model's provenance as the second model of a run: the ``other_*`` root attributes.

        Returns:
            ``other_model``, ``other_model_kwargs``, ``other_checkpoint``, ``other_checkpoint_sha256``,
            ``other_pretrained``, ``other_num_classes`` and ``other_preprocess`` (docs/schema.md).
        """
        return {
            "other_model": self.model_name,
            "other_model_kwargs": self.model_kwargs,
            "other_checkpoint": self.checkpoint,
            "other_checkpoint_sha256": self.checkpoint_sha256,
            "other_pretrained": bool(self.source.pretrained),
            "other_num_classes": getattr(self.model, "num_classes", None),
            "other_preprocess": None if self.preprocess is None else self.preprocess.as_dict(),
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
