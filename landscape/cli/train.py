"""``landscape train``: train a zoo model on a dataset and save a checkpoint."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import click

from landscape.cli.options import COUNT, OUTPUT, SEED, parse_model_kw
from landscape.options.train import DEFAULT_MOMENTUM, OPTIMIZERS, TRACK_MODES

if TYPE_CHECKING:
    from landscape.train import TrainConfig


def _parse_subset(value: str | None) -> float | int | None:
    """``0.25`` is a fraction of the training set, ``500`` a number of samples; anything else is a usage error."""
    if value is None:
        return None
    text = value.strip()
    if text.lstrip("+").isdigit():
        return int(text)
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise click.BadParameter(
            f"{value!r} is neither a fraction of the data (such as 0.1) nor a count of images (such as 500)",
            param_hint="'--subset'",
        )
    return number


def check_tracking(config: TrainConfig) -> None:
    """Refuse ``--track-sharpness N`` that records nothing: ``N`` beyond the run's optimiser steps.

    The run takes ``epochs * ceil(samples / batch_size)`` steps (the training split after ``--subset``) and
    records the sharpness at steps ``N, 2N, ...``.

    Args:
        config: the run's options.

    Raises:
        LandscapeError: ``N`` exceeds the run's steps (one line naming the option and the steps).
    """
    from landscape.data.loading import load_dataset
    from landscape.errors import LandscapeError

    if config.track_sharpness is None:
        return
    samples = len(load_dataset(config.data, "train", subset=config.subset, seed=config.seed))
    per_epoch = math.ceil(samples / config.batch_size)
    steps = per_epoch * config.epochs
    if config.track_sharpness > steps:
        raise LandscapeError(
            f"--track-sharpness {config.track_sharpness} records nothing in a run of {steps} optimiser steps "
            f"({config.epochs} epoch(s) of {per_epoch}): give N <= {steps} or more --epochs"
        )


@click.command("train")
@click.option(
    "--model",
    required=True,
    help="Model: a zoo name (see `landscape models`), timm:NAME, torchvision:NAME or py:module:factory.",
)
@click.option("--data", default="digits", show_default=True, help="Dataset spec: digits, cifar10:PATH, ...")
@click.option("--epochs", default=None, type=COUNT, help="Epochs [default: 10; paper-a: 305].")
@click.option("--batch-size", default=None, type=COUNT, help="Mini-batch size [default: 64].")
@click.option(
    "--optimizer",
    default=None,
    type=click.Choice(OPTIMIZERS),
    help="sgd is plain SGD; sgd-nesterov and heavy-ball use --momentum [default: adamw].",
)
@click.option(
    "--momentum",
    default=None,
    type=float,
    help=f"Momentum of sgd-nesterov and heavy-ball (refused with the others) [default: {DEFAULT_MOMENTUM}].",
)
@click.option("--lr", default=None, type=float, help="Peak learning rate [default: 2e-3].")
@click.option("--weight-decay", default=None, type=float, help="Decoupled weight decay [default: 0.05].")
@click.option("--warmup-epochs", default=None, type=float, help="Linear warm-up epochs [default: 1].")
@click.option("--label-smoothing", default=None, type=float, help="[default: 0]")
@click.option("--clip-grad", default=None, type=float, help="Clip the gradient norm to this value.")
@click.option("--subset", default=None, help="Train on a stratified fraction (0.1) or count (500) of the data.")
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option("--init", default=None, type=click.Path(dir_okay=False), help="Start from this checkpoint's weights.")
@click.option("--model-kw", multiple=True, help="Model constructor option key=value (repeatable).")
@click.option("--recipe", default=None, type=click.Choice(["paper-a"]), help="Paper A's CIFAR-100 recipe.")
@click.option("--snapshot-initial", is_flag=True, help="Also save the initial weights as OUT.init.pt.")
@click.option("--snapshot-warmup", is_flag=True, help="Also save the weights after warm-up as OUT.warmup.pt.")
@click.option("--snapshot-every", default=None, type=COUNT, help="Also save OUT.epochNNN.pt every N epochs.")
@click.option(
    "--track-sharpness",
    default=None,
    type=COUNT,
    metavar="N",
    help="Every N steps, the sharpness and its stability threshold into OUT.sharpness.h5.",
)
@click.option(
    "--track-mode",
    default=None,
    type=click.Choice(TRACK_MODES),
    help="BatchNorm of the tracked Hessian: train (the tracking batch's own statistics, as training) or eval "
    "(running statistics) [default: train for a model with BatchNorm, else eval].",
)
@click.option(
    "--tensorboard",
    default=None,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Also write TensorBoard scalars into DIR: each step's loss and learning rate, each epoch's loss and "
    "accuracy, the test's; with --track-sharpness the sharpness, its threshold and lr (the tensorboard extra).",
)
@click.option("--amp", is_flag=True, help="bf16 autocast on CUDA.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--out", required=True, type=OUTPUT, help="Checkpoint path, e.g. run.pt.")
@click.option("--force", is_flag=True, help="Overwrite an existing checkpoint.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def command(
    model: str,
    data: str,
    subset: str | None,
    model_kw: tuple[str, ...],
    recipe: str | None,
    out: str,
    force: bool,
    quiet: bool,
    tensorboard: str | None,
    **options: object,
) -> None:
    """Train a zoo model and save a checkpoint (with optional snapshots beside it)."""
    from landscape.train import TrainConfig, train_model

    given = {k: v for k, v in options.items() if v is not None and v is not False}
    base = dict(model=model, data=data, subset=_parse_subset(subset), model_kwargs=parse_model_kw(model_kw), **given)
    config = TrainConfig.paper_a(**base) if recipe == "paper-a" else TrainConfig(**base)  # type: ignore[arg-type]
    check_tracking(config)
    result = train_model(config, out, force=force, quiet=quiet, tensorboard=tensorboard)
    m = result.metrics
    click.echo(
        f"saved {result.checkpoint}: test accuracy {m['test_accuracy']:.4f}, "
        f"train loss {m['train_loss']:.4f}, {m['minutes']:.2f} min"
    )
    for snap in result.snapshots:
        click.echo(f"snapshot {snap}")
    if config.track_sharpness is not None:
        from landscape.analyses.sharpness.track_file import sidecar_path

        click.echo(f"sharpness {sidecar_path(result.checkpoint)}")
    if tensorboard is not None:
        click.echo(f"tensorboard {tensorboard}")
