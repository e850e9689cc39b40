"""``landscape hessian``: top-k eigenpairs, SLQ density and trace of a checkpoint's loss Hessian.

Every option's default and choices are :class:`~landscape.options.hessian.HessianOptions`'s; the command
builds one (validating it) and calls :func:`~landscape.analyses.hessian.run.run_hessian` once.
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
from landscape.options.hessian import TRACE_METHODS, HessianOptions

D = HessianOptions


@click.command("hessian")
@checkpoint_options(split=D.split)
@regularizer_options
@output_options("hessian.h5")
@augment_options
@click.option(
    "--samples", default=D.samples, show_default=True, type=COUNT, help="Images in the loss (the Hessian's data)."
)
@click.option("--batch-size", default=D.batch_size, show_default=True, type=COUNT, help="Batch size of the HVP passes.")
@click.option(
    "--seed", default=D.seed, show_default=True, type=SEED, help="Seed of the samples, start vector and probes."
)
@eigen_options(
    D,
    top_k="Eigenpairs to compute (0: none).",
    which="Largest / smallest algebraic, both ends, largest magnitude.",
    ncv="Lanczos basis size [default: max(2k+1, 20)].",
    maxiter="Maximum Lanczos restarts.",
    hvp="Products per batch: jvp(grad) each time, a kept gradient graph, a kept linearize trace, measured (auto), "
    "or central differences of two gradients (finite-difference: approximate, no double backward).",
)
@click.option(
    "--eigenvectors", is_flag=True, default=D.eigenvectors, help="Also store the eigenvectors (n_params x k)."
)
@click.option("--density", is_flag=True, default=D.density, help="Also compute the SLQ spectral density.")
@click.option("--probes", default=D.probes, show_default=True, type=COUNT, help="SLQ probe vectors.")
@click.option("--steps", default=D.steps, show_default=True, type=COUNT, help="Lanczos steps per SLQ probe.")
@click.option("--sigma", default=D.sigma, type=float, help="Gaussian broadening [default: 1% of the node spread].")
@click.option("--trace", is_flag=True, default=D.trace, help="Also estimate the trace.")
@click.option(
    "--trace-samples", default=D.trace_samples, show_default=True, type=COUNT, help="HVPs spent on the trace."
)
@click.option("--trace-method", default=D.trace_method, show_default=True, type=click.Choice(TRACE_METHODS))
@click.option("--params", default=D.params, help="Comma-separated parameter-name globs: a per-layer Hessian block.")
@click.option(
    "--per-block",
    is_flag=True,
    default=D.per_block,
    help="Also the top eigenvalue and trace of every block's diagonal Hessian block (blocks of the feature taps).",
)
@click.option(
    "--block",
    multiple=True,
    metavar="NAME=PATTERN[,PATTERN]",
    help="A block of --per-block by parameter-name patterns (repeatable; instead of the taps' blocks).",
)
@click.option(
    "--taps",
    multiple=True,
    help="PATTERN=KIND: a module (glob on names) whose output is a block of --per-block, for models no rule knows.",
)
def command(source: ModelSource, out: str, device: str, force: bool, quiet: bool, **options: Any) -> None:
    """Hessian eigenvalues (Lanczos), spectral density (SLQ) and trace of a checkpoint's loss (or of --operator)."""
    from landscape.analyses.hessian.run import run_hessian
    from landscape.analyses.hessian.summary import block_summary, operator_label
    from landscape.runtime import distributed

    opts = HessianOptions(**{**options, "block": tuple(options["block"]), "taps": tuple(options["taps"])})
    result = run_hessian(
        source, opts, out=out, device=device, force=force, progress=False if quiet else None, command=command_line()
    )
    if not distributed.is_main():
        return
    size = f"{result.attrs.get('n_params', '?')} parameters, {result.attrs['n_samples']} samples"
    lines = [f"wrote {out}: {operator_label(result)}{size}"]
    if "eigenvalues" in result:
        values = ", ".join(f"{v:.6g}" for v in result["eigenvalues"])
        flag = "" if result["converged"].all() else " (not all converged: raise --maxiter or --tol)"
        lines.append(f"eigenvalues ({result.attrs['which']}): {values}{flag}")
    if "trace/samples" in result:
        s = result["trace/samples"]
        lines.append(f"trace: {s.mean():.6g} +- {s.std(ddof=1) / len(s) ** 0.5:.2g}")
    if "density/values" in result:
        lines.append(f"density: {result['density/nodes'].shape[0]} probes, grid of {len(result['density/grid'])}")
    if "blocks/done" in result:
        lines.append(block_summary(result))
    click.echo("\n".join(lines))
