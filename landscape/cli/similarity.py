"""``landscape similarity``: linear CKA between the feature maps of every pair of blocks, of one model or two.

The options' defaults are those of :class:`~landscape.options.similarity.SimilarityOptions`; the command builds
one (every value validated there) and calls :func:`landscape.analyses.similarity.run.run_similarity` once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

from landscape.cli.options import COUNT, SEED, checkpoint_options, command_line, other_model_options, output_options
from landscape.options.similarity import SimilarityOptions

DEFAULTS = SimilarityOptions.defaults()


@click.command("similarity")
@checkpoint_options(split=DEFAULTS["split"])
@other_model_options
@output_options("similarity.h5")
@click.option(
    "--samples", default=DEFAULTS["samples"], show_default=True, type=COUNT, help="Number of images analysed."
)
@click.option(
    "--batch-size",
    default=DEFAULTS["batch_size"],
    show_default=True,
    type=COUNT,
    help="Images per minibatch of the unbiased HSIC (at least 4).",
)
@click.option("--seed", default=DEFAULTS["seed"], show_default=True, type=SEED, help="Seed of the sample choice.")
@click.option(
    "--taps",
    multiple=True,
    help="PATTERN=KIND: a module (glob on names) whose output is a block map, for models no rule knows.",
)
@click.option("--other-taps", multiple=True, help="PATTERN=KIND for the second model (as --taps).")
def command(
    source: ModelSource,
    other: ModelSource | None,
    out: str,
    force: bool,
    device: str,
    quiet: bool,
    taps: tuple[str, ...],
    other_taps: tuple[str, ...],
    **options: object,
) -> None:
    """Linear CKA (minibatch-unbiased) between the blocks of a model, or of --ckpt and --other."""
    import numpy as np

    from landscape.analyses.similarity.run import run_similarity

    opts = SimilarityOptions(taps=tuple(taps) or None, other_taps=tuple(other_taps) or None, **options)  # type: ignore[arg-type]
    result = run_similarity(
        source,
        opts,
        other=other,
        out=out,
        force=force,
        device=device,
        progress=False if quiet else None,
        command=command_line(),
    )
    cka = result["cka"]
    within = result.attrs.get("comparison") == "within"
    off = cka[~np.eye(*cka.shape, dtype=bool)] if within else cka.ravel()
    off = off[np.isfinite(off)]
    spread = f"{off.min():.3f} .. {off.max():.3f}" if off.size else "n/a"
    click.echo(
        f"wrote {out}: CKA of {cka.shape[0]} x {cka.shape[1]} blocks over {result.attrs['n_samples']} samples "
        f"({int(result['n_batches'])} minibatches); {'off-diagonal ' if within else ''}values {spread}"
    )
