"""``landscape hessian``: top-k eigenpairs, SLQ density and trace of a checkpoint's loss Hessian."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.pipeline import ModelSource

from landscape.cli.options import checkpoint_options, output_options, regularizer_options


@click.command("hessian")
@checkpoint_options()
@regularizer_options
@output_options("hessian.h5")
@click.option("--samples", default=1024, show_default=True, type=int, help="Images in the loss (the Hessian's data).")
@click.option("--batch-size", default=128, show_default=True, type=int, help="Batch size of the HVP passes.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the samples, start vector and probes.")
@click.option("--top-k", default=5, show_default=True, type=int, help="Eigenpairs to compute (0: none).")
@click.option("--which", default="LA", show_default=True, type=click.Choice(["LA", "SA", "BE", "LM"]),
              help="Largest / smallest algebraic, both ends, largest magnitude.")
@click.option("--tol", default=1e-4, show_default=True, type=float, help="Relative accuracy of the eigenvalues.")
@click.option("--ncv", default=None, type=int, help="Lanczos basis size [default: max(2k+1, 20)].")
@click.option("--maxiter", default=None, type=int, help="Maximum Lanczos restarts.")
@click.option("--eigenvectors", is_flag=True, help="Also store the eigenvectors (n_params x k).")
@click.option("--density", is_flag=True, help="Also compute the SLQ spectral density.")
@click.option("--probes", default=4, show_default=True, type=int, help="SLQ probe vectors.")
@click.option("--steps", default=64, show_default=True, type=int, help="Lanczos steps per SLQ probe.")
@click.option("--sigma", default=None, type=float, help="Gaussian broadening [default: 1% of the node spread].")
@click.option("--trace", is_flag=True, help="Also estimate the trace.")
@click.option("--trace-samples", default=99, show_default=True, type=int, help="HVPs spent on the trace.")
@click.option("--trace-method", default="hutch++", show_default=True, type=click.Choice(["hutchinson", "hutch++"]))
@click.option("--params", default=None, help="Comma-separated parameter-name globs: a per-layer Hessian block.")
@click.option("--hvp", default="auto", show_default=True, type=click.Choice(["auto", "linearize", "jvp"]),
              help="Trace each batch's HVP once (linearize), never (jvp), or after a few products (auto).")
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(["float32", "float64"]))
def command(source: ModelSource, out: str, **options: object) -> None:
    """Hessian eigenvalues (Lanczos), spectral density (SLQ) and trace of a checkpoint's loss."""
    from landscape import distributed
    from landscape.hessian.run import run_hessian

    result = run_hessian(source, out, **options)  # type: ignore[arg-type]
    if not distributed.is_main():
        return
    lines = [f"wrote {out}: {result.attrs.get('n_params', '?')} parameters, {result.attrs['n_samples']} samples"]
    if "eigenvalues" in result:
        values = ", ".join(f"{v:.6g}" for v in result["eigenvalues"])
        flag = "" if result["converged"].all() else " (not all converged: raise --maxiter or --tol)"
        lines.append(f"eigenvalues ({result.attrs['which']}): {values}{flag}")
    if "trace/samples" in result:
        s = result["trace/samples"]
        lines.append(f"trace: {s.mean():.6g} +- {s.std(ddof=1) / len(s) ** 0.5:.2g}")
    if "density/values" in result:
        lines.append(f"density: {result['density/nodes'].shape[0]} probes, grid of {len(result['density/grid'])}")
    click.echo("\n".join(lines))
