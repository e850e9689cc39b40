"""``landscape connect --ckpt A.pt --ckpt B.pt [--curve bezier] ...``: loss and barriers between two networks.

The options' defaults and choices are those of :class:`~landscape.options.connect.ConnectOptions`; the command
builds one (every value validated there), calls :func:`landscape.analyses.connect.run.run_connect` once and prints
the barriers of each path on each split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

from landscape.cli.options import COUNT, SEED, checkpoint_options, command_line, output_options, regularizer_options
from landscape.options.align import CONNECT_ALIGN
from landscape.options.connect import BN_MODES, CONNECT_SPLITS, CURVES, ConnectOptions

DEFAULTS = ConnectOptions.defaults()


@click.command("connect")
@checkpoint_options(split=DEFAULTS["split"], splits=CONNECT_SPLITS, endpoints=2)
@regularizer_options
@output_options("connect.h5")
@click.option(
    "--samples",
    default=DEFAULTS["samples"],
    show_default=True,
    type=COUNT,
    help="Images of each split (fixed, seeded).",
)
@click.option("--batch-size", default=DEFAULTS["batch_size"], show_default=True, type=COUNT)
@click.option(
    "--seed", default=DEFAULTS["seed"], show_default=True, type=SEED, help="Seed of the samples and of the bend."
)
@click.option(
    "--steps",
    default=DEFAULTS["steps"],
    show_default=True,
    type=COUNT,
    help="Evenly spaced points on the line (and the curve), both ends included.",
)
@click.option(
    "--bn",
    default=DEFAULTS["bn"],
    show_default=True,
    type=click.Choice(BN_MODES),
    help="BatchNorm statistics at each point between the ends: re-estimated from the training samples "
    "(recompute), or the ends' interpolated (eval); the ends keep their own.",
)
@click.option(
    "--curve",
    default=DEFAULTS["curve"],
    show_default=True,
    type=click.Choice(CURVES),
    help="Also train a quadratic Bezier curve between the ends (Garipov et al. 2018), and the plane of the three "
    "points.",
)
@click.option(
    "--align",
    default=DEFAULTS["align"],
    show_default=True,
    type=click.Choice(CONNECT_ALIGN),
    help="First permute theta_B's hidden units to match theta_A's (landscape align's methods); the line to the "
    "unaligned theta_B is measured too.",
)
@click.option(
    "--repair",
    is_flag=True,
    help="REPAIR the line(s) (Jordan et al. 2023): at every point rescale and shift each permuted layer's output "
    "channels to the ends' interpolated means and standard deviations on the training samples.",
)
@click.option(
    "--curvature",
    is_flag=True,
    help="Also the top Hessian eigenvalue (Lanczos) and the adaptive average-case sharpness at every point of the "
    "line(s) and the curve.",
)
@click.option(
    "--curvature-rho",
    default=DEFAULTS["curvature_rho"],
    show_default=True,
    type=float,
    help="The average-case sharpness' radius, relative to |w| (--curvature).",
)
@click.option(
    "--curvature-samples",
    default=DEFAULTS["curvature_samples"],
    show_default=True,
    type=COUNT,
    help="Noise draws per batch of the average-case sharpness (--curvature).",
)
@click.option(
    "--bend-epochs", default=DEFAULTS["bend_epochs"], show_default=True, type=COUNT, help="Epochs of the bend."
)
@click.option("--bend-lr", default=DEFAULTS["bend_lr"], show_default=True, type=float, help="The bend's SGD rate.")
@click.option("--bend-momentum", default=DEFAULTS["bend_momentum"], show_default=True, type=float)
@click.option("--bend-weight-decay", default=DEFAULTS["bend_weight_decay"], show_default=True, type=float)
@click.option(
    "--bend-samples",
    default=DEFAULTS["bend_samples"],
    type=COUNT,
    help="Training images the bend is trained on (fixed, seeded by --seed)  [default: every image of the training "
    "split]",
)
@click.option(
    "--plane-steps",
    default=DEFAULTS["plane_steps"],
    show_default=True,
    type=COUNT,
    help="Grid points along each axis of the plane through the ends and the bend (--curve bezier).",
)
def command(
    sources: tuple[ModelSource, ModelSource], out: str, force: bool, device: str, quiet: bool, **fields: object
) -> None:
    """Loss, accuracy and barriers between two networks on the line (and a trained curve); resumable, torchrun."""
    from landscape.analyses.connect.run import run_connect
    from landscape.analyses.connect.summary import ALL_PATHS, path_barriers
    from landscape.runtime import distributed

    options = ConnectOptions(**fields)  # type: ignore[arg-type]
    result = run_connect(
        *sources,
        options,
        out=out,
        force=force,
        device=device,
        progress=False if quiet else None,
        command=command_line(),
    )
    if not distributed.is_main():
        return
    click.echo(f"wrote {out}")
    for group, coord in ALL_PATHS:
        for split, b in (path_barriers(result, group) or {}).items():
            click.echo(
                f"{group} ({split}): loss barrier {b.loss:.4g} at {coord}={b.loss_at:.3g}, "
                f"error barrier {b.error:.4g} at {coord}={b.error_at:.3g}"
            )
