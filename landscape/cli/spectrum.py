"""``landscape spectrum``: Paper A's per-mini-batch max-eigenvalue spectra.

Every option's default and choices are :class:`~landscape.options.hessian.SpectrumOptions`'s; the command
builds one (validating it) and calls :func:`~landscape.analyses.hessian.run.run_spectrum` once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

from landscape.cli.options import (
    COUNT,
    SEED,
    augment_options,
    checkpoint_options,
    command_line,
    eigen_options,
    output_options,
    regularizer_options,
)
from landscape.options.hessian import SpectrumOptions

D = SpectrumOptions


@click.command("spectrum")
@checkpoint_options(split=D.split)
@regularizer_options
@output_options("spectrum.h5")
@augment_options
@click.option(
    "--batch-size", default=D.batch_size, show_default=True, type=COUNT, help="Mini-batch size (Paper A: 16)."
)
@click.option(
    "--fraction", default=D.fraction, show_default=True, type=float, help="Share of the split used (Paper A: 10%)."
)
@click.option("--samples", default=D.samples, type=COUNT, help="Number of images instead of --fraction.")
@click.option(
    "--seed", default=D.seed, show_default=True, type=SEED, help="Seed of the sample choice and start vectors."
)
@eigen_options(
    D,
    top_k="Eigenvalues per mini-batch.",
    which="LM = power iteration's largest magnitude (Paper A); lanczos solver only.",
    ncv="Lanczos basis size.",
    maxiter="Lanczos restarts / PyHessian iterations per eigenvalue.",
    hvp="Products of a batch: jvp(grad) each time, a kept gradient graph, a kept linearize trace, measured (auto), "
    "or central differences of two gradients (finite-difference: approximate, no double backward).",
    solver=True,
)
@click.option(
    "--group",
    default=str(D.group),
    show_default=True,
    help="Mini-batches computed together (one vmap call per product, Lanczos in lockstep), or auto (measured).",
)
def command(source: ModelSource, out: str, device: str, force: bool, quiet: bool, **options: Any) -> None:
    """Top-k Hessian eigenvalues of every mini-batch, pooled (Paper A, Fig 1c/4)."""
    from landscape.analyses.hessian.run import run_spectrum
    from landscape.analyses.hessian.summary import operator_label
    from landscape.runtime import distributed

    opts = SpectrumOptions(**options)
    result = run_spectrum(
        source, opts, out=out, device=device, force=force, progress=False if quiet else None, command=command_line()
    )
    if not distributed.is_main():
        return
    eig = result["eigenvalues"]
    click.echo(
        f"wrote {out}: {operator_label(result)}{eig.shape[0]} batches x top-{eig.shape[1]}, eigenvalues from "
        f"{eig.min():.6g} to {eig.max():.6g} ({int((eig < 0).sum())} negative)"
    )
