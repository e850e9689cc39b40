"""``landscape fourier``: Fourier profiles, high-frequency amplitude and variance of every block's feature map."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.pipeline import ModelSource

from landscape.cli.options import checkpoint_options, output_options


@click.command("fourier")
@checkpoint_options(split="test")
@output_options("fourier.h5")
@click.option("--samples", default=256, show_default=True, type=int, help="Number of images analysed.")
@click.option("--batch-size", default=64, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the sample choice and the noise.")
@click.option("--profile", default="diagonal", show_default=True, type=click.Choice(["diagonal", "radial"]),
              help="Half diagonal of the spectrum (Paper A) or the radial average.")
@click.option("--frequency-axis", default="normalised", show_default=True,
              type=click.Choice(["normalised", "physical"]),
              help="Common axis of the layers: each curve spans [0, 1] (Paper A), or units of pi (NaN-padded).")
@click.option("--maps", is_flag=True, help="Also store each layer's 2D mean log-amplitude map.")
@click.option("--noise-bands", is_flag=True, help="Also measure the accuracy drop under band-limited noise.")
@click.option("--noise-strength", default=0.5, show_default=True, type=float,
              help="Root-mean-square of the noise per image, in normalised input units.")
@click.option("--taps", multiple=True,
              help="PATTERN=KIND: a module (glob on names) whose output is a block map, for models no rule knows.")
def command(source: ModelSource, out: str, **options: object) -> None:
    """Fourier analysis of feature maps (Paper A, Fig 2a/8/9 and, with --noise-bands, Fig 2b)."""
    from landscape.fourier import run_fourier

    result = run_fourier(source, out, **options)  # type: ignore[arg-type]
    hf = result["high_frequency"]
    click.echo(
        f"wrote {out}: {len(hf)} layers, {result.attrs['n_samples']} samples, high-frequency Delta log amplitude "
        f"{hf[0]:.3f} (first) .. {hf[-1]:.3f} (last)"
    )
    if "noise/accuracy_drop" in result:
        drops = ", ".join(f"{f:.1f}pi {d:+.3f}" for f, d in zip(result["noise/frequencies"],
                                                             result["noise/accuracy_drop"]))
        clean = float(result["noise/accuracy"][0] + result["noise/accuracy_drop"][0])
        click.echo(f"clean accuracy {clean:.4f}; accuracy drop per band: {drops}")
