"""``landscape surface --ckpt run.pt [--x MIN:MAX:NUM] [--y MIN:MAX:NUM|none] ...``: a 2D (or 1D) loss surface to HDF5.

Without grid options the surface is the 21 x 21 plane over [-1, 1]^2; ``--y none`` makes it a 1D line.

The options' defaults and choices are those of :class:`~landscape.options.surface.SurfaceOptions`; the command
builds one (every value validated there) and calls :func:`landscape.analyses.surface.run.run_surface` once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

from landscape.cli.options import (
    COUNT,
    SEED,
    augment_options,
    checkpoint_options,
    command_line,
    output_options,
    regularizer_options,
)
from landscape.options.hessian import HVP_MODES, OPERATORS
from landscape.options.surface import (
    BN_MODES,
    COMPILE_MODES,
    DIRECTION_KINDS,
    DIRECTION_STORAGE,
    DIRECTION_WHICH,
    NO_GRID,
    NORMS,
    SurfaceOptions,
)

DEFAULTS = SurfaceOptions.defaults()


@click.command("surface")
@checkpoint_options(split=DEFAULTS["split"])
@regularizer_options
@output_options("surface.h5")
@augment_options
@click.option(
    "--samples", default=DEFAULTS["samples"], show_default=True, type=COUNT, help="Number of samples (fixed, seeded)."
)
@click.option("--batch-size", default=DEFAULTS["batch_size"], show_default=True, type=COUNT)
@click.option(
    "--x",
    "x",
    default=DEFAULTS["x"],
    show_default=True,
    help="x grid MIN:MAX:NUM (inclusive), or its coordinates c0,c1,... (increasing).",
)
@click.option(
    "--y",
    "y",
    default=DEFAULTS["y"],
    show_default=True,
    help=f"y grid MIN:MAX:NUM (inclusive) or c0,c1,..., or {NO_GRID} for a 1D line along x.",
)
@click.option(
    "--norm",
    default=DEFAULTS["norm"],
    show_default=True,
    type=click.Choice(NORMS),
    help="Direction normalisation: filter (Li et al.), dim0 (Paper A's code), layer, weight, none.",
)
@click.option(
    "--seed", default=DEFAULTS["seed"], show_default=True, type=SEED, help="Seed of the directions and the samples."
)
@click.option(
    "--directions",
    default=DEFAULTS["directions"],
    show_default=True,
    type=click.Choice(DIRECTION_KINDS),
    help="random (normalised by --norm), or hessian: x (and y) the top-1 (and top-2) unit eigenvectors of this "
    "objective's Hessian (coordinates are distances in parameter space).",
)
@click.option(
    "--which",
    default=DEFAULTS["which"],
    show_default=True,
    type=click.Choice(DIRECTION_WHICH),
    help="Hessian directions: the largest (LA), smallest (SA) or largest-magnitude (LM) eigenvalues first.",
)
@click.option(
    "--eigen-tol",
    default=DEFAULTS["eigen_tol"],
    show_default=True,
    type=float,
    help="Hessian directions: the Lanczos relative tolerance (tighten it for float64 models).",
)
@click.option(
    "--eigenvectors",
    default=DEFAULTS["eigenvectors"],
    type=click.Path(dir_okay=False),
    help="Hessian directions read from a `landscape hessian --eigenvectors` file of the same checkpoint and "
    "objective (default: computed by Lanczos).",
)
@click.option(
    "--hvp",
    default=DEFAULTS["hvp"],
    show_default=True,
    type=click.Choice(HVP_MODES),
    help="Computed Hessian directions: how the Hessian-vector products are made (see landscape hessian --hvp).",
)
@click.option(
    "--operator",
    default=DEFAULTS["operator"],
    show_default=True,
    type=click.Choice(OPERATORS),
    help="Hessian directions: the eigenvectors of this curvature operator (see landscape hessian --operator).",
)
@click.option(
    "--store-directions",
    default=DEFAULTS["store_directions"],
    show_default=True,
    type=click.Choice(DIRECTION_STORAGE),
    help="How the file keeps the directions: seed (the recipe that draws random directions again, bit for bit; "
    "target, trajectory and Hessian directions are stored in full), half (float16, error recorded) or full.",
)
@click.option(
    "--target",
    default=DEFAULTS["target"],
    type=click.Path(dir_okay=False),
    help="Second checkpoint: x = target - centre (x = 1 lands on it).",
)
@click.option(
    "--trajectory",
    multiple=True,
    default=DEFAULTS["trajectory"],
    type=click.Path(dir_okay=False),
    help="Training snapshots (repeat): PCA directions of the trajectory.",
)
@click.option(
    "--bn",
    default=DEFAULTS["bn"],
    show_default=True,
    type=click.Choice(BN_MODES),
    help="BatchNorm statistics: the centre's (eval) or re-estimated at every point.",
)
@click.option(
    "--keep-1d",
    "ignore_1d",
    is_flag=True,
    flag_value=False,
    default=DEFAULTS["ignore_1d"],
    help="Perturb tensors with ndim < 2 too (default: zero direction).",
)
@click.option(
    "--zero",
    "zero_patterns",
    multiple=True,
    callback=lambda ctx, param, value: tuple(value) or None,
    help="Name patterns with a zero direction (default: position embeddings / relative-position tables).",
)
@click.option(
    "--batch-points",
    default=str(DEFAULTS["batch_points"]),
    show_default=True,
    help="Points per vmap call (1 = loop) or auto.",
)
@click.option(
    "--compile",
    "compile",
    type=click.Choice(COMPILE_MODES),
    default=DEFAULTS["compile"],
    show_default=True,
    is_flag=False,
    flag_value="on",
    help="Compile the per-point loss into a package kept in the cache folder: auto (only when it pays back over "
    "the points left, its set-up bounded by them, built in the background where a core is spare; measured and "
    "recorded), on (eager fallback; --compile alone) "
    "or off.",
)
def command(source: ModelSource, out: str, force: bool, device: str, quiet: bool, **fields: object) -> None:
    """Compute a 1D or 2D loss surface around a checkpoint (resumable; torchrun shares the points)."""
    from landscape.analyses.surface.run import run_surface
    from landscape.runtime import distributed

    options = SurfaceOptions(**fields)  # type: ignore[arg-type]
    result = run_surface(
        source, options, out=out, force=force, device=device, progress=False if quiet else None, command=command_line()
    )
    if distributed.is_main():
        loss = result["loss"]
        ny, nx = loss.shape
        click.echo(
            f"{out}: {'2D' if ny > 1 or result.attrs.get('surface_ndim') == 2 else '1D'} surface "
            f"{nx}x{ny}, loss {loss.min():.4g}..{loss.max():.4g}"
        )
