"""``landscape align --ckpt A.pt --ckpt B.pt --method weights --out B_aligned.pt``: permute B's units to match A's.

The options' defaults and choices are those of :class:`~landscape.options.align.AlignOptions`; the command builds
one (every value validated there), calls :func:`landscape.analyses.align.run.run_align` once and prints what it
found and wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

from landscape.cli.options import COUNT, OUTPUT, SEED, checkpoint_options, command_line
from landscape.options.align import ALIGN_METHODS, AlignOptions

DEFAULTS = AlignOptions.defaults()


@click.command("align")
@checkpoint_options(split=DEFAULTS["split"], endpoints=2)
@click.option(
    "--out",
    required=True,
    type=OUTPUT,
    help="The aligned theta_B's checkpoint (never one of the inputs).",
)
@click.option(
    "--method",
    default=DEFAULTS["method"],
    show_default=True,
    type=click.Choice(ALIGN_METHODS),
    help="weights: coordinate descent of linear assignments on the weights' inner products (Git Re-Basin); "
    "activations: units paired by the correlation of their activations on --samples images.",
)
@click.option(
    "--samples",
    default=DEFAULTS["samples"],
    show_default=True,
    type=COUNT,
    help="Images that activations are matched on and the aligned network is checked on.",
)
@click.option("--batch-size", default=DEFAULTS["batch_size"], show_default=True, type=COUNT)
@click.option(
    "--seed",
    default=DEFAULTS["seed"],
    show_default=True,
    type=SEED,
    help="Seed of the samples and of weight matching's order of the permutations.",
)
@click.option(
    "--max-sweeps",
    default=DEFAULTS["max_sweeps"],
    show_default=True,
    type=COUNT,
    help="Weight matching stops after this many sweeps even if a permutation still changes.",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--force", is_flag=True, help="Replace a file at --out that landscape did not write.")
@click.option("--quiet", is_flag=True, help="No plan before the work.")
def command(
    sources: tuple[ModelSource, ModelSource], out: str, force: bool, device: str, quiet: bool, **fields: object
) -> None:
    """Permute theta_B's hidden units to match theta_A's (its function unchanged) and save it as a checkpoint."""
    from landscape.analyses.align.run import run_align

    options = AlignOptions(**fields)  # type: ignore[arg-type]
    r = run_align(
        *sources,
        options,
        out=out,
        force=force,
        device=device,
        progress=False if quiet else None,
        command=command_line(),
    )
    m = r.matching
    moved = sum(int((p != p.new_tensor(range(len(p)))).any()) for p in m.perms.values())
    kept = m.kept_start
    best = "" if kept is None else f" (the best of {len(m.starts)} descents: {kept.start}, {kept.order} order)"
    click.echo(
        f"wrote {out}: {len(m.perms)} permutations ({moved} not the identity) by {r.method} matching"
        + (f" in {m.sweeps} sweep(s)" + ("" if m.converged else ", not converged") if r.method == "weights" else "")
        + f"; <A, B> {m.objective_before:.6g} -> {m.objective_after:.6g}{best}; function error {r.function_error:.2e}"
    )
