"""``landscape curvature``: the Hessian beside its Gauss-Newton, empirical Fisher, residual and K-FAC.

Every option's default and choices are :class:`~landscape.options.curvature.CurvatureOptions`'s; the command
builds one (validating it) and calls :func:`~landscape.analyses.curvature.run.run_curvature` once.
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
from landscape.options.curvature import APPROXIMATIONS, CurvatureOptions
from landscape.options.hessian import HVP_MODES

D = CurvatureOptions


@click.command("curvature")
@checkpoint_options(split=D.split)
@regularizer_options
@output_options("curvature.h5")
@augment_options
@click.option("--samples", default=D.samples, show_default=True, type=COUNT, help="Images in the loss.")
@click.option("--batch-size", default=D.batch_size, show_default=True, type=COUNT, help="Batch size of the passes.")
@click.option(
    "--seed", default=D.seed, show_default=True, type=SEED, help="Seed of the samples, start vectors and probes."
)
@click.option(
    "--operators",
    default=",".join(D.operators),
    show_default=True,
    help=f"The operators compared with the Hessian, comma-separated: some of {', '.join(APPROXIMATIONS)}.",
)
@click.option("--top-k", default=D.top_k, show_default=True, type=COUNT, help="Top eigenpairs of every operator.")
@click.option(
    "--tol",
    default=D.tol,
    show_default=True,
    type=float,
    help="A pair converges when its residual ||A y - lambda y|| <= TOL |lambda| (eigenpairs and spectral norms).",
)
@click.option("--ncv", default=D.ncv, type=COUNT, help="Lanczos basis size [default: max(2k+1, 20)].")
@click.option("--maxiter", default=D.maxiter, type=COUNT, help="Maximum Lanczos restarts.")
@click.option("--probes", default=D.probes, show_default=True, type=COUNT, help="SLQ probes of each density.")
@click.option("--steps", default=D.steps, show_default=True, type=COUNT, help="Lanczos steps per SLQ probe.")
@click.option("--sigma", default=D.sigma, type=float, help="Broadening of every density [default: 1% of the span].")
@click.option("--grid-points", default=D.grid_points, show_default=True, type=COUNT, help="Points of the shared grid.")
@click.option(
    "--distance-samples",
    default=D.distance_samples,
    show_default=True,
    type=COUNT,
    help="Hutchinson probes of each Frobenius distance.",
)
@click.option(
    "--per-block/--no-per-block",
    default=D.per_block,
    show_default=True,
    help="Also the distances of every block's diagonal block (the blocks of the feature taps).",
)
@click.option("--block", multiple=True, metavar="NAME=PATTERN[,PATTERN]", help="A block by parameter-name patterns.")
@click.option("--taps", multiple=True, help="PATTERN=KIND: a module whose output is a block, for models no rule knows.")
@click.option("--params", default=D.params, help="Comma-separated parameter-name globs: compare this block only.")
@click.option(
    "--hvp",
    default=D.hvp,
    show_default=True,
    type=click.Choice(HVP_MODES),
    help="How the Hessian's products are made (see landscape hessian --hvp).",
)
@click.option("--dtype", default=D.dtype, type=click.Choice(DTYPES), help=DTYPE_HELP)
def command(source: ModelSource, out: str, device: str, force: bool, quiet: bool, **options: Any) -> None:
    """The Hessian beside its approximations: top eigenpairs, densities, angles, distances (resumable)."""
    from landscape.analyses.curvature.run import run_curvature
    from landscape.analyses.registry import summarize
    from landscape.runtime import distributed

    opts = CurvatureOptions(**{**options, "block": tuple(options["block"]), "taps": tuple(options["taps"])})
    result = run_curvature(
        source, opts, out=out, device=device, force=force, progress=False if quiet else None, command=command_line()
    )
    if distributed.is_main():
        click.echo(f"wrote {out}: {summarize(result)}")
