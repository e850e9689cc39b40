"""Training: a seeded, reproducible loop that writes checkpoints the analyses can rebuild from the file alone.

Optimiser AdamW or SGD; learning rate warmed up linearly per step over ``warmup_epochs`` and then decayed by a
cosine to zero, ``lr_t = lr * t / T_w`` for ``t < T_w`` and ``lr * (1 + cos(pi * (t - T_w) / (T - T_w))) / 2``
after; label smoothing, gradient-norm clipping, weight decay, optional RandAugment and MixUp/CutMix
(``recipe="paper-a"`` applies Paper A's CIFAR-100 recipe). Snapshots (initial, after warm-up, every N epochs)
are saved beside the output so trajectories and warm-up spectra can be analysed later.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from landscape.analyses.sharpness.track_file import sidecar_path, start_tracking
from landscape.analyses.surface.directions import POSITION_PARAMETER_PATTERNS
from landscape.core.source import resolve_preprocess
from landscape.data.augment import batch_mixer, randaugment
from landscape.data.batches import make_loader
from landscape.data.loading import dataset_info, load_dataset
from landscape.errors import LandscapeError, LandscapeWarning
from landscape.models import create_model
from landscape.models.checkpoint import (
    is_landscape_checkpoint,
    load_weights,
    non_finite_weight,
    read_checkpoint,
    require_finite_weights,
    save_checkpoint,
    snapshot_path,
)
from landscape.models.external import calling_forward
from landscape.models.registry import data_kwargs
from landscape.options import checks
from landscape.options.common import choice
from landscape.options.names import matches_any
from landscape.options.train import OPTIMIZERS, TRACK_MODES, momentum_applied
from landscape.runtime.distributed import launched, resolve_device
from landscape.runtime.optimizers import build_optimizer, lr_factor, optimizer_state
from landscape.runtime.progress import Progress
from landscape.runtime.tensorboard import BOARD_TAGS, Board, log_sidecar, step_scalars
from landscape.store.files import (
    check_companion,
    ensure_folder,
    refuse_input_as_output,
    refuse_overlapping_outputs,
    temporary_path,
)

RECIPES = ("paper-a",)


@dataclass
class TrainConfig:
    """Every option of a training run; stored in the checkpoint as ``train_options``.

    Attributes:
        model: zoo name or ``timm:`` / ``torchvision:`` / ``py:`` model spec.
        data: dataset spec (e.g. ``digits``, ``cifar10:PATH``).
        epochs: training epochs (positive).
        batch_size: samples per step (positive).
        optimizer: one of :data:`~landscape.options.train.OPTIMIZERS` (``sgd``: plain SGD; ``sgd-nesterov``,
            ``heavy-ball``: with ``momentum``).
        lr: base (peak) learning rate (positive).
        weight_decay: weight decay (non-negative).
        momentum: SGD momentum, in (0, 1), of ``sgd-nesterov`` and ``heavy-ball``; None: the default there, none
            with the others (:func:`~landscape.options.train.momentum_applied`), recorded as applied.
        warmup_epochs: epochs of linear warm-up, in ``[0, epochs]``.
        label_smoothing: label smoothing of the cross-entropy, in [0, 1].
        clip_grad: gradient-norm clip (non-negative; None: no clipping; 0 turns off a recipe's clipping, and
            without a recipe clips nothing, which is warned of).
        seed: seeds the whole run.
        subset: a fraction in (0, 1] or a count of training images to keep; None keeps all.
        randaugment: apply RandAugment to each training image.
        mixup: MixUp alpha (0: off).
        cutmix: CutMix alpha (0: off).
        drop_path: stochastic depth rate, in [0, 1) (refused for a model that has none; a recipe's is applied
            only to models that take it).
        amp: bfloat16 autocast on CUDA (on another device: warned of, and recorded as not applied).
        device: ``auto``, ``cpu`` or ``cuda``.
        init: a checkpoint whose weights start the run; None: the model's own initialisation.
        model_kwargs: model constructor options (``--model-kw``).
        snapshot_initial: save a snapshot before training (``run.init.pt``).
        snapshot_warmup: save a snapshot after the epoch that ends the warm-up (``run.warmup.pt``).
        snapshot_every: save a snapshot every N epochs (``run.epochNNN.pt``), ``N < epochs``; None: none.
        recipe: the recipe applied (``paper-a``), or None.
        track_sharpness: every N optimiser steps, the sharpness and its stability threshold into ``run.sharpness.h5``
            (:mod:`landscape.analyses.sharpness.track_file`); None: no tracking. The tracked function is the
            tracking batch's cross-entropy plus the coupled weight decay ``sum_g (lambda_g / 2) ||w_g||^2`` of
            ``sgd``, ``heavy-ball``, ``sgd-nesterov`` and ``adam`` (the decayed group's ``weight_decay``; AdamW's
            decoupled decay is no term of it); the sidecar's ``tracked_function`` says it in words.
        track_mode: the BatchNorm mode of the tracked Hessian, one of :data:`~landscape.options.train.TRACK_MODES`
            (None: ``train`` for a model with BatchNorm, else ``eval``; the sidecar records the mode applied).

    Raises:
        LandscapeError: an unknown optimizer or recipe, an option out of range, NaN or infinite, or options that
            would have no effect together (``snapshot_every >= epochs``, ``snapshot_warmup`` without warm-up,
            ``momentum`` with an optimiser that has none).
    """

    model: str
    data: str = "digits"
    epochs: int = 10
    batch_size: int = 64
    optimizer: str = "adamw"
    lr: float = 2e-3
    weight_decay: float = 0.05
    momentum: float | None = None
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.0
    clip_grad: float | None = None
    seed: int = 0
    subset: float | int | None = None
    randaugment: bool = False
    mixup: float = 0.0
    cutmix: float = 0.0
    drop_path: float = 0.0
    amp: bool = False
    device: str = "auto"
    init: str | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    snapshot_initial: bool = False
    snapshot_warmup: bool = False
    snapshot_every: int | None = None
    recipe: str | None = None
    track_sharpness: int | None = None
    track_mode: str | None = None

    def __post_init__(self) -> None:
        """Refuse unknown names and numbers that are out of range, NaN or infinite (one-line errors).

        Raises:
            LandscapeError: naming the option, its rule and the value given.
        """
        if self.recipe is not None:
            choice(self.recipe, "recipe", RECIPES)
        choice(self.optimizer, "--optimizer", OPTIMIZERS)
        checks.positive_int(self.epochs, "--epochs")
        checks.seed(self.seed, "--seed")
        checks.positive_int(self.batch_size, "--batch-size")
        checks.positive(self.lr, "--lr")
        checks.non_negative(self.weight_decay, "--weight-decay")
        self.momentum = momentum_applied(self.optimizer, self.momentum)
        checks.in_range(self.warmup_epochs, f"--warmup-epochs (at most epochs={self.epochs})", 0.0, self.epochs)
        checks.in_range(self.label_smoothing, "--label-smoothing", 0.0, 1.0)
        if self.track_sharpness is not None:
            checks.positive_int(self.track_sharpness, "--track-sharpness")
        if self.track_mode is not None:
            choice(self.track_mode, "--track-mode", TRACK_MODES)
            if self.track_sharpness is None:
                raise LandscapeError(
                    "--track-mode sets how --track-sharpness takes the Hessian: give --track-sharpness N"
                )
        if self.clip_grad is not None:
            checks.non_negative(self.clip_grad, "--clip-grad (0 turns clipping off)")
        checks.non_negative(self.mixup, "mixup alpha (0 turns MixUp off)")
        checks.non_negative(self.cutmix, "cutmix alpha (0 turns CutMix off)")
        checks.in_range(self.drop_path, "drop_path", 0.0, 1.0, high_open=True)
        if self.snapshot_every is not None:
            checks.positive_int(self.snapshot_every, "--snapshot-every")
            if self.snapshot_every >= self.epochs:
                raise LandscapeError(
                    f"--snapshot-every {self.snapshot_every} saves no snapshot in {self.epochs} epoch(s) (they come "
                    f"at epochs N, 2N, ... before the last, which is --out): give N < --epochs"
                )
        if self.snapshot_warmup and self.warmup_epochs == 0:
            raise LandscapeError(
                "--snapshot-warmup saves the weights after the warm-up, and there is none: give "
                "--warmup-epochs > 0 or drop --snapshot-warmup"
            )
        if self.clip_grad == 0 and self.recipe is None:
            advice = "--clip-grad 0 clips nothing, as without --clip-grad (0 only turns off the clipping of a --recipe)"
            warnings.warn(advice, LandscapeWarning, stacklevel=3)

    @classmethod
    def paper_a(cls, model: str, **overrides: Any) -> TrainConfig:
        """Paper A's CIFAR-100 recipe (docs/analyses.md, models and training recipe), with ``overrides`` applied on top.

        AdamW 1.25e-4, wd 0.05, batch 96, 5 warm-up + 300 cosine epochs, RandAugment, MixUp 0.8 / CutMix 1.0,
        label smoothing 0.1, gradient clip 5, stochastic depth 0.1 (applied to the models that have it). With fewer
        epochs than the warm-up, the warm-up is cut to the number of epochs unless ``warmup_epochs`` is given.

        Args:
            model: the model spec.
            **overrides: any other :class:`TrainConfig` options; they replace the recipe's.

        Returns:
            The configuration.

        Raises:
            LandscapeError: an override out of range, or an unknown optimizer (see :class:`TrainConfig`).
            TypeError: an override that is not a :class:`TrainConfig` option.
        """
        base: dict[str, Any] = dict(
            model=model,
            epochs=305,
            batch_size=96,
            optimizer="adamw",
            lr=1.25e-4,
            weight_decay=0.05,
            warmup_epochs=5,
            label_smoothing=0.1,
            clip_grad=5.0,
            randaugment=True,
            mixup=0.8,
            cutmix=1.0,
            drop_path=0.1,
            recipe="paper-a",
        )
        base.update(overrides)
        if "warmup_epochs" not in overrides:
            base["warmup_epochs"] = min(base["warmup_epochs"], base["epochs"])
        return cls(**base)


@dataclass
class TrainResult:
    """Where the checkpoint went, its final metrics and the per-epoch history."""

    checkpoint: Path
    metrics: dict[str, float]
    history: list[dict[str, float]]
    snapshots: list[Path]


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Training's two param groups: with ``weight_decay``, and without it, in the model's parameter order.

    Without decay: biases and norm affine parameters (``ndim < 2``) and position parameters.

    Args:
        model: the model.
        weight_decay: the decay of the first group.

    Returns:
        ``[{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]``.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or matches_any(name, POSITION_PARAMETER_PATTERNS) else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _build_model(config: TrainConfig, num_classes: int, in_chans: int, img_size: int) -> tuple[nn.Module, float]:
    """The model of ``config`` fitted to the data (channels, image size, classes where it takes them).

    A ``num_classes`` among ``config.model_kwargs`` (``--model-kw num_classes=N``) sizes the head instead of
    the data's class count; :func:`_check_head` then refuses a head too small for the labels. Returns the model
    and the stochastic depth applied: ``config.drop_path`` where the model takes ``drop_path_rate``, else 0 for
    a recipe's (with a warning), while a ``drop_path`` asked for without a recipe is refused.
    """
    fitted = data_kwargs(config.model, in_chans=in_chans, img_size=img_size, drop_path=config.drop_path)
    applied = config.drop_path
    if config.drop_path > 0 and "drop_path_rate" not in fitted:
        if config.recipe is None:
            raise LandscapeError(
                f"model {config.model} has no stochastic depth (drop_path_rate): drop_path {config.drop_path:g} is "
                "for models that take it (vit_*, alternet_*, convvit_*, vit_rpe_*, timm models); set drop_path=0"
            )
        warnings.warn(
            f"{config.model} has no stochastic depth: --recipe {config.recipe} is applied without its drop_path "
            f"{config.drop_path:g} (it is for the ViTs and AlterNets)",
            LandscapeWarning,
            stacklevel=4,
        )
        applied = 0.0
    kwargs = {**fitted, **config.model_kwargs}
    num_classes = kwargs.pop("num_classes", num_classes)
    return create_model(config.model, num_classes=num_classes, **kwargs), applied


def _check_head(outputs: int, config: TrainConfig, num_classes: int) -> None:
    """Refuse a model whose head has fewer outputs than the data has classes (labels ``0..num_classes-1``).

    Args:
        outputs: the head's number of outputs (the logits' last dimension).
        config: the run's options (for the message).
        num_classes: the data's number of classes.

    Raises:
        LandscapeError: ``outputs < num_classes``.
    """
    if outputs < num_classes:
        raise LandscapeError(
            f"the labels of {config.data} run 0..{num_classes - 1} ({num_classes} classes) but model "
            f"{config.model}'s head has {outputs} classes; build it with num_classes={num_classes} (drop "
            "--model-kw num_classes, or give a py: factory a num_classes argument)"
        )


def _diverged(config: TrainConfig, epoch: int, optimizer: torch.optim.Optimizer, what: str) -> LandscapeError:
    """The error of a run whose loss or weights stopped being finite, with the epoch and the learning rate."""
    lr = optimizer.param_groups[0]["lr"]
    return LandscapeError(
        f"training diverged in epoch {epoch} of {config.epochs} at learning rate {lr:.3g} (--lr {config.lr:g}): "
        f"{what}; nothing of this epoch was saved: lower --lr (or clip with --clip-grad)"
    )


def _augmentation(config: TrainConfig) -> Callable[[Tensor], Tensor] | None:
    return randaugment() if config.randaugment else None


def _batch_mixer(config: TrainConfig, num_classes: int) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None:
    return batch_mixer(config.mixup, config.cutmix, num_classes)


def _batches(dataset: Any, batch_size: int, generator: torch.Generator) -> Iterator[tuple[Tensor, Tensor]]:
    """Shuffled mini-batches; tensors are sliced directly unless the dataset augments per item."""
    if getattr(dataset, "transform", None) is None:
        x, y = dataset.tensors()
        order = torch.randperm(len(y), generator=generator)
        for i in range(0, len(y), batch_size):
            idx = order[i : i + batch_size]
            yield x[idx], y[idx]
        return

    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    yield from make_loader(dataset, batch_size, shuffle=True, seed=seed)


@torch.no_grad()
def evaluate_model(model: nn.Module, dataset: Any, device: torch.device, batch_size: int = 256) -> dict[str, float]:
    """Mean cross-entropy and accuracy of ``model`` (eval mode) on every sample of ``dataset``.

    The model's training mode is restored afterwards.

    Args:
        model: the classifier.
        dataset: a dataset with ``tensors()`` returning all images ``(N, C, H, W)`` and labels ``(N,)``.
        device: the device the batches are moved to (the model's).
        batch_size: samples per forward pass.

    Returns:
        ``{"loss": mean cross-entropy, "accuracy": fraction correct}`` (0 for both on an empty dataset).
    """
    was_training = model.training
    model.eval()
    x_all, y_all = dataset.tensors()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(y_all), batch_size):
        x, y = x_all[i : i + batch_size].to(device), y_all[i : i + batch_size].to(device)
        out = model(x).float()
        loss_sum += float(F.cross_entropy(out, y, reduction="sum"))
        correct += int((out.argmax(-1) == y).sum())
    model.train(was_training)
    n = max(1, len(y_all))
    return {"loss": loss_sum / n, "accuracy": correct / n}


def snapshot_tags(config: TrainConfig) -> list[str]:
    """The tags of the snapshots a run of ``config`` writes beside its checkpoint, in the order it writes them.

    Args:
        config: the run's configuration.

    Returns:
        ``init`` (with ``snapshot_initial``), ``warmup`` (with ``snapshot_warmup``), then ``epochNNN`` for every
        ``snapshot_every``-th epoch before the last.
    """
    tags = ["init"] if config.snapshot_initial else []
    tags += ["warmup"] if config.snapshot_warmup else []
    if config.snapshot_every:
        tags += [f"epoch{e:03d}" for e in range(config.snapshot_every, config.epochs, config.snapshot_every)]
    return tags


def train_model(
    config: TrainConfig,
    out: str | Path,
    *,
    force: bool = False,
    quiet: bool = False,
    tensorboard: str | Path | None = None,
) -> TrainResult:
    """Train ``config.model`` on ``config.data`` and save the final checkpoint (and snapshots) at ``out``.

    The run is reproducible bit for bit from ``config.seed``: the global CPU generator and the training
    device's CUDA generator are seeded with it inside :func:`torch.random.fork_rng`, so the caller's random
    state is the same after the call as before it (and does not affect the run).

    Args:
        config: every option of the run.
        out: the checkpoint path; snapshots are written beside it (:func:`landscape.models.checkpoint.snapshot_path`).
        force: overwrite an existing ``out``.
        quiet: no progress output.
        tensorboard: a folder for TensorBoard scalars (:data:`BOARD_TAGS`: per optimiser step the mini-batch
            loss and the learning rate, per epoch the training loss and accuracy, at the end the test loss and
            accuracy, with ``config.track_sharpness`` each record's sharpness, threshold and learning rate);
            None: none. It is where the scalars go, not an option of the run: the checkpoint does not record it.

    Returns:
        A :class:`TrainResult`.

    Raises:
        LandscapeError: ``out`` exists without ``force``, a model or data the run cannot use (e.g. a head
            with fewer classes than the labels), an ``--init`` that does not fit or is not finite, a run under
            torchrun with several processes, training that diverged (a loss or weight no longer finite:
            nothing of that epoch is saved), or a ``tensorboard`` folder without the tensorboard package or that
            cannot be written (both checked before training).
    """
    if launched():
        raise LandscapeError(
            "landscape train runs in one process: under torchrun every rank would train the same model and write "
            "the same checkpoint (no data-parallel training); run it without torchrun"
        )
    out = Path(out)
    if out.exists() and not force:
        raise LandscapeError(f"{out} exists; use --force to overwrite it or --out to write elsewhere")
    outputs = [out, *(snapshot_path(out, tag) for tag in snapshot_tags(config))]
    named = [("--out", out), *(("the snapshot", path) for path in outputs[1:])]
    named += [("the sharpness file", sidecar_path(out) if config.track_sharpness else None)]
    refuse_overlapping_outputs([*named, ("--tensorboard", tensorboard)])  # before any work: else what it trains is lost
    for path in outputs:
        refuse_input_as_output(path, [config.init], "--out" if path == out else "the snapshot")
    for path in outputs[1:]:  # a snapshot follows the output's rule, and --force replaces only a checkpoint there
        if not check_companion(path, "a snapshot of this run", ours=is_landscape_checkpoint, force=force):
            raise LandscapeError(
                f"{path} exists (a snapshot of another run with this name); use --force to overwrite it or --out "
                "to write elsewhere"
            )

    temporary_path(ensure_folder(out.parent) / out.name).unlink()  # the folder takes files: checked before training
    board = None if tensorboard is None else Board(tensorboard)  # the package and the folder: checked now too
    device = resolve_device(config.device)
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.default_generator.manual_seed(config.seed)
            if device.type == "cuda":
                with torch.cuda.device(device):
                    torch.cuda.manual_seed(config.seed)  # this device only: the others are not forked
            return _train(config, out, device, quiet, force, board)
    finally:
        if board is not None:  # also after a failure: the scalars up to it stay readable
            board.close()


def _train(
    config: TrainConfig, out: Path, device: torch.device, quiet: bool, force: bool, board: Board | None
) -> TrainResult:
    """The body of :func:`train_model`, run with the global generators already seeded (and forked)."""
    generator = torch.Generator().manual_seed(config.seed)

    info = dataset_info(config.data)
    model, drop_path = _build_model(config, info.num_classes, info.in_chans, info.image_size)
    model = model.to(device)
    preprocess = resolve_preprocess(model, config.data)
    train_set = load_dataset(
        config.data,
        "train",
        subset=config.subset,
        seed=config.seed,
        transform=_augmentation(config),
        preprocess=preprocess,
    )
    test_set = load_dataset(config.data, "test", preprocess=preprocess)
    info = train_set.info
    if config.init is not None:  # the weights alone, loaded into this run's model: a plain state dict will do
        load_weights(
            model, read_checkpoint(config.init).state_dict, f"--init {config.init} does not fit {config.model}"
        )
        require_finite_weights(model, f"--init {config.init}")
    mixer = _batch_mixer(config, info.num_classes)

    optimizer = build_optimizer(config.optimizer, param_groups(model, config.weight_decay), config.lr, config.momentum)
    steps_per_epoch = math.ceil(len(train_set) / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    warmup_steps = round(config.warmup_epochs * steps_per_epoch)

    autocast = device.type == "cuda" and config.amp
    if config.amp and not autocast:
        warnings.warn(
            f"--amp (bfloat16 autocast) works on CUDA only: training on {device} in float32 (recorded as amp: false)",
            LandscapeWarning,
            stacklevel=3,
        )
    options = {**dataclasses.asdict(config), "drop_path": drop_path, "amp": autocast}  # what was applied
    model_name = getattr(model, "model_name", config.model)
    model_kwargs = dict(getattr(model, "model_kwargs", {}))
    head_classes = config.model_kwargs.get("num_classes", info.num_classes)  # as given to create_model
    track = None
    if config.track_sharpness is not None:  # before training: a sidecar of other options is refused now
        track = start_tracking(
            model,
            optimizer,
            every=config.track_sharpness,
            checkpoint=out,
            data=config.data,
            subset=config.subset,
            seed=config.seed,
            preprocess=preprocess,
            bn_mode=config.track_mode,
            total_steps=total_steps,
            attrs={"model": model_name, "train_options": options},
            force=force,
        )
        if track.kept and board is not None:  # a complete sidecar of the same run computes nothing: its records
            log_sidecar(board, track.path)

    run_id = uuid.uuid4().hex  # the snapshots and the checkpoint of this run carry it (trajectory --snapshots-of)

    def save(path: Path, epoch: int, metrics: dict[str, float]) -> Path:
        return save_checkpoint(
            path,
            model,
            model_name=model_name,
            model_kwargs=model_kwargs,
            num_classes=head_classes,
            dataset=config.data,
            epoch=epoch,
            metrics=metrics,
            train_options=options,
            extra={"run": run_id, "optimizer": optimizer_state(optimizer, model)},  # docs/schema.md, checkpoints
            force=force,
        )

    snapshots: list[Path] = []
    if config.snapshot_initial:
        snapshots.append(save(snapshot_path(out, "init"), 0, {}))
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    step = 0
    warmup_saved = False
    for epoch in range(1, config.epochs + 1):
        model.train()
        seen, loss_sum, correct = 0, 0.0, 0
        desc = f"epoch {epoch}/{config.epochs}"
        bar = Progress(desc, steps_per_epoch, unit="step", progress=False if quiet else None, last_line=False)
        for x, y in _batches(train_set, config.batch_size, generator):
            x, y = x.to(device), y.to(device)
            target: Tensor = y
            if mixer is not None:
                x, target = mixer(x, y)
            lr = config.lr * lr_factor(step, total_steps, warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast), calling_forward(model, x):
                logits = model(x)
            if step == 0:  # the head's true width, whatever the model (a py: factory may ignore num_classes)
                _check_head(logits.shape[-1], config, info.num_classes)
            loss = F.cross_entropy(logits.float(), target, label_smoothing=config.label_smoothing)
            if not torch.isfinite(loss):
                raise _diverged(config, epoch, optimizer, f"the loss is {float(loss.detach())}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip_grad:
                nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad)
            optimizer.step()
            step += 1
            tracked = None if track is None else track.after_step(step)
            batch_loss = float(loss.detach())
            if board is not None:
                board.add(step, step_scalars(batch_loss, lr, tracked))
            seen += len(y)
            loss_sum += batch_loss * len(y)
            correct += int((logits.argmax(-1) == y).sum())
            bar.note(f"loss {loss_sum / seen:.3f}")
            bar.update(1)
        bar.close()
        bad = non_finite_weight(model)  # a last step can break the weights with a finite loss: checked each epoch
        if bad is not None:
            raise _diverged(config, epoch, optimizer, bad)
        record = {"epoch": epoch, "train_loss": loss_sum / seen, "train_accuracy": correct / seen}
        history.append(record)
        if board is not None:
            board.add(step, {BOARD_TAGS[f"epoch_{k}"]: record[f"train_{k}"] for k in ("loss", "accuracy")})
        if config.snapshot_warmup and not warmup_saved and step >= warmup_steps:
            snapshots.append(save(snapshot_path(out, "warmup"), epoch, record))
            warmup_saved = True
        if config.snapshot_every and epoch % config.snapshot_every == 0 and epoch < config.epochs:
            snapshots.append(save(snapshot_path(out, f"epoch{epoch:03d}"), epoch, record))
        if not quiet:
            print(f"epoch {epoch}/{config.epochs}: loss {record['train_loss']:.4f}", file=sys.stderr)

    test = evaluate_model(model, test_set, device)
    metrics = {
        "train_loss": history[-1]["train_loss"],
        "train_accuracy": history[-1]["train_accuracy"],
        "test_loss": test["loss"],
        "test_accuracy": test["accuracy"],
        "minutes": (time.perf_counter() - start) / 60.0,
    }
    if board is not None:
        board.add(step, {BOARD_TAGS["test_loss"]: test["loss"], BOARD_TAGS["test_accuracy"]: test["accuracy"]})
    path = save(out, config.epochs, metrics)
    if track is not None:
        track.finish()
    return TrainResult(path, metrics, history, snapshots)
