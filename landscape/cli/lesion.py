"""``landscape lesion``: accuracy and NLL with each residual branch removed, one block at a time (Paper A, Sec 4).

The options' defaults are those of :class:`~landscape.options.lesion.LesionOptions`; the command builds one
(every value validated there), calls :func:`landscape.analyses.lesion.run.run_lesion` once and prints the
accuracy drop of every MSA block and, per stage, whether its last MSA has the largest drop of the stage (Paper A:
MSAs at the end of a stage matter most).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.core.source import ModelSource
    from landscape.store.read import Result

from landscape.cli.options import COUNT, SEED, checkpoint_options, command_line, output_options
from landscape.options.lesion import LesionOptions

DEFAULTS = LesionOptions.defaults()


def summary_lines(result: Result) -> list[str]:
    """The lines the command prints about a lesion file: intact scores, MSA drops, the claim per stage.

    Args:
        result: a complete ``lesion`` result.

    Returns:
        The lines, without trailing newlines.
    """
    from landscape.analyses.lesion.run import stage_claims

    names = [str(n) for n in result["block_names"]]
    kinds = [str(k) for k in result["block_kinds"]]
    stages, drops = result["stage"], result["accuracy_drop"]
    lines = []
    msa = [i for i, k in enumerate(kinds) if k == "msa"]
    if not msa:
        lines.append("no MSA blocks: the claim that MSAs at the end of a stage matter most does not apply")
        return lines
    lines.append("accuracy drop of each MSA block: " + ", ".join(f"{names[i]} {drops[i]:+.4f}" for i in msa))
    for c in stage_claims(names, kinds, stages, drops):
        verdict = "yes" if c.holds else f"no ({c.top_block} {c.top_drop:+.4f})"
        lines.append(
            f"stage {c.stage}: last MSA {c.last_msa} drop {c.last_msa_drop:+.4f}; largest drop in its stage: {verdict}"
        )
    return lines


@click.command("lesion")
@checkpoint_options(split=DEFAULTS["split"])
@output_options("lesion.h5")
@click.option(
    "--samples", default=DEFAULTS["samples"], show_default=True, type=COUNT, help="Number of images evaluated."
)
@click.option("--batch-size", default=DEFAULTS["batch_size"], show_default=True, type=COUNT)
@click.option("--seed", default=DEFAULTS["seed"], show_default=True, type=SEED, help="Seed of the sample choice.")
def command(source: ModelSource, out: str, force: bool, device: str, quiet: bool, **options: object) -> None:
    """Lesion study: test accuracy and NLL with each residual branch skipped (shortcut kept), one at a time."""
    from landscape.analyses.lesion.run import run_lesion

    opts = LesionOptions(**options)  # type: ignore[arg-type]
    result = run_lesion(
        source, opts, out=out, force=force, device=device, progress=False if quiet else None, command=command_line()
    )
    attrs = result.attrs
    click.echo(
        f"wrote {out}: {len(result['block_names'])} blocks, {attrs['n_samples']} samples; intact accuracy "
        f"{attrs['intact_accuracy']:.4f}, NLL {attrs['intact_nll']:.4f}"
    )
    for line in summary_lines(result):
        click.echo(line)
