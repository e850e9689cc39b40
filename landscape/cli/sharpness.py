"""``landscape sharpness``: average- or worst-case, adaptive or plain m-sharpness of a checkpoint over radii.

Every option's default and choices are :class:`~landscape.options.sharpness.SharpnessOptions`'s; the command
builds one (validating it) and calls :func:`~landscape.analyses.sharpness.run.run_sharpness` once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

from landscape.cli.options import (
    COUNT,
    DTYPE_HELP,
    SEED,
    augment_options,
    checkpoint_options,
    command_line,
    output_options,
    regularizer_options,
)
from landscape.options.common import DTYPES
from landscape.options.sharpness import INITS, MEASURES, NORMS, PERTURB, WORST_STEP_SIZE, SharpnessOptions

D = SharpnessOptions


@click.command("sharpness")
@checkpoint_options(split=D.split)
@regularizer_options
@output_options("sharpness.h5")
@augment_options
@click.option("--samples", default=D.samples, show_default=True, type=COUNT, help="Images used (fixed, seeded).")
@click.option(
    "--batch-size", default=D.batch_size, show_default=True, type=COUNT, help="m: the images of one mini-batch S."
)
@click.option(
    "--seed", default=D.seed, show_default=True, type=SEED, help="Seed of the samples and (+ batch index) the noise."
)
@click.option(
    "--measure",
    default=D.measure,
    show_default=True,
    type=click.Choice(MEASURES),
    help="average: E[L_S(w + delta)] - L_S(w), delta ~ N(0, rho^2 c^2); worst: max over ||delta / c||_p <= rho.",
)
@click.option(
    "--rho",
    default=",".join(f"{r:g}" for r in D.rho),
    show_default=True,
    help="Radii, comma-separated: one run gives the curve over them.",
)
@click.option(
    "--adaptive/--plain",
    default=D.adaptive,
    show_default=True,
    help="Scale the perturbation by c = |w| + eta (invariant to rescaling ReLU layers at eta 0), or c = 1.",
)
@click.option(
    "--eta",
    default=D.eta,
    show_default=True,
    type=float,
    help="Adaptive: c = |w| + eta (ASAM); at 0 a weight that is exactly 0 is never perturbed.",
)
@click.option(
    "--p", "p", default=D.p, show_default=True, metavar="|".join(NORMS), help="The worst case's norm (2 or inf)."
)
@click.option(
    "--steps", default=D.steps, show_default=True, type=COUNT, help="The worst case's ascent iterations per restart."
)
@click.option(
    "--restarts",
    default=D.restarts,
    show_default=True,
    type=COUNT,
    help="The worst case's ascents from different starts (see --init); the best point kept.",
)
@click.option(
    "--step-size",
    default=D.step_size,
    type=float,
    help=f"The worst case's first step / rho, halved when the ascent stalls [default: {WORST_STEP_SIZE:g}].",
)
@click.option(
    "--init",
    default=D.init,
    show_default=True,
    type=click.Choice(INITS),
    help="The worst case's starts: output-diversified alternating with random (output), all random, or the "
    "first at the centre (zero).",
)
@click.option(
    "--draws", default=D.draws, show_default=True, type=COUNT, help="The average case's noise draws per batch."
)
@click.option("--antithetic", is_flag=True, default=D.antithetic, help="Average case: evaluate +delta and -delta.")
@click.option(
    "--params",
    default=D.params,
    help="Comma-separated parameter-name patterns (globs, or a name and what is below it): perturb only those.",
)
@click.option(
    "--perturb",
    default=D.perturb,
    show_default=True,
    type=click.Choice(PERTURB),
    help="all: every parameter --params chooses; surface: the surfaces' rule (tensors of fewer than two dimensions, "
    "position tables and tokens held fixed).",
)
@click.option(
    "--confidence", default=D.confidence, show_default=True, type=float, help="Level of the bootstrap interval."
)
@click.option("--resamples", default=D.resamples, show_default=True, type=COUNT, help="Bootstrap resamples.")
@click.option("--dtype", default=D.dtype, type=click.Choice(DTYPES), help=DTYPE_HELP)
def command(source: ModelSource, out: str, device: str, force: bool, quiet: bool, **options: Any) -> None:
    """Average- or worst-case m-sharpness over radii, with an interval over batches (resumable; torchrun)."""
    from landscape.analyses.registry import summarize
    from landscape.analyses.sharpness.run import run_sharpness
    from landscape.runtime import distributed

    opts = SharpnessOptions(**options)
    result = run_sharpness(
        source, opts, out=out, device=device, force=force, progress=False if quiet else None, command=command_line()
    )
    if distributed.is_main():
        click.echo(f"wrote {out}: {summarize(result)}")
