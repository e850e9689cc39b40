"""Training runs of the demo that a rerun reuses: a checkpoint of the same model and options is not trained again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from landscape.errors import LandscapeError
from landscape.models.checkpoint import read_checkpoint
from landscape.train import TrainConfig, train_model

#: options that do not change what is trained: where it runs, and the path of a checkpoint that starts it (the
#: starting checkpoint is itself a stage that is reused or not)
IGNORED = ("device", "init")


def _plain(value: Any) -> Any:
    """``value`` as the checkpoint stores it (tuples become lists)."""
    return json.loads(json.dumps(value))


def same_options(config: TrainConfig, stored: dict[str, Any]) -> bool:
    """Whether a checkpoint's ``train_options`` are those of ``config`` (:data:`IGNORED` left out).

    A key the checkpoint lacks (written before the option existed) matches the option's default.

    Args:
        config: the run wanted.
        stored: the checkpoint's ``train_options``.

    Returns:
        True when every other option is equal.
    """
    for f in dataclasses.fields(config):
        if f.name in IGNORED:
            continue
        wanted = _plain(getattr(config, f.name))
        if f.name not in stored:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if wanted != _plain(default):
                return False
        elif _plain(stored[f.name]) != wanted:
            return False
    return True


def train_or_reuse(config: TrainConfig, out: Path, *, force: bool = False, quiet: bool = False) -> Path:
    """Train ``config`` into ``out`` unless ``out`` holds a checkpoint of the same model and options.

    Args:
        config: the run.
        out: the checkpoint path.
        force: train again whatever is there.
        quiet: no progress output.

    Returns:
        ``out``.

    Raises:
        LandscapeError: ``out`` holds a checkpoint of another model or other options (and not ``force``).
    """
    if out.exists() and not force:
        ckpt = read_checkpoint(out)
        if ckpt.model_name != config.model or not same_options(config, ckpt.meta.get("train_options") or {}):
            raise LandscapeError(f"{out} holds a checkpoint from other options; use --force or another --out")
        return out
    train_model(config, out, force=True, quiet=quiet)
    return out


def train_on_digits(
    model: str, options: dict[str, Any], out: Path, *, seed: int, device: str, force: bool, quiet: bool
) -> Path:
    """Train zoo ``model`` on digits with ``seed`` and the training ``options`` into ``out``, or reuse it there.

    Args:
        model: the zoo model's name.
        options: :class:`~landscape.train.TrainConfig` fields (epochs, batch size, ``subset``, ``model_kwargs``...).
        out: the checkpoint path.
        seed: the training seed.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: train again whatever is there.
        quiet: no progress output.

    Returns:
        ``out``.

    Raises:
        LandscapeError: as :func:`train_or_reuse`.
    """
    config = TrainConfig(model=model, data="digits", seed=seed, device=device, **options)
    return train_or_reuse(config, out, force=force, quiet=quiet)
