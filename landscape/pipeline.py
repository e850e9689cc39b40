"""The shared front half of every analysis: checkpoint -> model, dataset -> fixed batches, provenance.

``checkpoint -> create_model + state -> Objective(...) -> analysis -> store -> plot`` (see DESIGN.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from landscape.errors import LandscapeError


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else CPU; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise LandscapeError(f"unknown device {name!r}; use auto, cpu or cuda") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LandscapeError("--device cuda was asked for but no CUDA GPU is available; use --device cpu")
    return device


@dataclass
class AnalysisInputs:
    """A model rebuilt from a checkpoint, the dataset it is analysed on and the provenance of both."""

    model: nn.Module
    model_name: str
    model_kwargs: dict[str, Any]
    checkpoint: str
    checkpoint_sha256: str
    dataset_spec: str
    split: str
    device: torch.device

    def provenance(self, n_samples: int, seed: int, **options: Any) -> dict[str, Any]:
        """Root attributes of a result file (DESIGN.md's schema) plus the analysis ``options``."""
        return {
            "command": " ".join(["landscape", *sys.argv[1:]]) if sys.argv else "",
            "model": self.model_name,
            "model_kwargs": self.model_kwargs,
            "checkpoint": self.checkpoint,
            "checkpoint_sha256": self.checkpoint_sha256,
            "dataset": self.dataset_spec,
            "split": self.split,
            "n_samples": int(n_samples),
            "seed": int(seed),
            "device": str(self.device),
            "torch_version": str(torch.__version__),
            **options,
        }


def load_inputs(
    checkpoint: str | Path,
    *,
    model_name: str | None = None,
    data: str | None = None,
    split: str = "train",
    device: str = "auto",
) -> AnalysisInputs:
    """Rebuild the model of ``checkpoint`` (eval mode, on the device) and name the dataset to use.

    The dataset defaults to the one recorded in the checkpoint, else ``digits``.
    """
    from landscape.checkpoint import load_model

    dev = resolve_device(device)
    model, ckpt = load_model(checkpoint, model_name)
    model = model.to(dev).eval()
    spec = data or ckpt.meta.get("dataset") or "digits"
    return AnalysisInputs(
        model=model,
        model_name=ckpt.model_name or str(model_name),
        model_kwargs=dict(ckpt.model_kwargs),
        checkpoint=str(checkpoint),
        checkpoint_sha256=ckpt.sha256,
        dataset_spec=spec,
        split=split,
        device=dev,
    )


def batches_for(
    inputs: AnalysisInputs, *, batch_size: int, n_samples: int | None, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed batches (no augmentation, fixed seeded order) of the inputs' dataset, on the inputs' device."""
    from landscape.data import fixed_batches, load_dataset

    if batch_size <= 0:
        raise LandscapeError(f"--batch-size must be positive, got {batch_size}")
    if n_samples is not None and n_samples <= 0:
        raise LandscapeError(f"--samples must be positive, got {n_samples}")
    dataset = load_dataset(inputs.dataset_spec, inputs.split)
    return fixed_batches(dataset, batch_size, n_samples, seed=seed, device=inputs.device)


def parse_patterns(patterns: Sequence[str] | str | None) -> list[str]:
    """Split comma-separated name patterns into a list (empty for None)."""
    if patterns is None:
        return []
    if isinstance(patterns, str):
        patterns = [patterns]
    return [p.strip() for item in patterns for p in item.split(",") if p.strip()]
