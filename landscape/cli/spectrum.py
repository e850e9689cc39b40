"""``landscape spectrum``: Paper A's per-mini-batch max-eigenvalue spectra."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.pipeline import ModelSource

from landscape.cli.options import checkpoint_options, output_options, regularizer_options


@click.command("spectrum")
@checkpoint_options()
@regularizer_options
@output_options("spectrum.h5")
@click.option("--batch-size", default=16, show_default=True, type=int, help="Mini-batch size (Paper A: 16).")
@click.option("--fraction", default=0.1, show_default=True, type=float, help="Share of the split used (Paper A: 10%).")
@click.option("--samples", default=None, type=int, help="Number of images instead of --fraction.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the sample choice and start vectors.")
@click.option("--top-k", default=5, show_default=True, type=int, help="Eigenvalues per mini-batch.")
@click.option("--which", default="LM", show_default=True, type=click.Choice(["LA", "SA", "BE", "LM"]),
              help="LM = power iteration's largest magnitude (Paper A); lanczos solver only.")
@click.option("--solver", default="lanczos", show_default=True, type=click.Choice(["lanczos", "pyhessian"]))
@click.option("--tol", default=1e-3, show_default=True, type=float, help="Relative accuracy of the eigenvalues.")
@click.option("--ncv", default=None, type=int, help="Lanczos basis size.")
@click.option("--maxiter", default=None, type=int, help="Lanczos restarts / PyHessian iterations per eigenvalue.")
@click.option("--hvp", default="jvp", show_default=True, type=click.Choice(["auto", "linearize", "jvp"]),
              help="HVPs by jvp(grad) each time, or traced per batch with linearize (pays for large batches).")
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(["float32", "float64"]))
def command(source: ModelSource, out: str, **options: object) -> None:
    """Top-k Hessian eigenvalues of every mini-batch, pooled (Paper A, Fig 1c/4)."""
    from landscape import distributed
    from landscape.hessian.run import run_spectrum

    result = run_spectrum(source, out, **options)  # type: ignore[arg-type]
    if not distributed.is_main():
        return
    eig = result["eigenvalues"]
    click.echo(
        f"wrote {out}: {eig.shape[0]} batches x top-{eig.shape[1]}, eigenvalues from {eig.min():.6g} to "
        f"{eig.max():.6g} ({int((eig < 0).sum())} negative)"
    )
