"""``landscape fourier``: Fourier profiles, high-frequency amplitude and variance of every block's feature map.

The options' defaults and choices are those of :class:`~landscape.options.fourier.FourierOptions`; the command
builds one (every value validated there) and calls :func:`landscape.analyses.fourier.run.run_fourier` once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

from landscape.cli.options import COUNT, SEED, checkpoint_options, command_line, output_options
from landscape.options.fourier import FREQUENCY_AXES, NOISE_CONSTRUCTIONS, PROFILES, FourierOptions

DEFAULTS = FourierOptions.defaults()


def parse_bands(text: str) -> tuple[float, ...]:
    """Comma- or space-separated band centres, e.g. ``0.1,0.5,0.9``, as floats (checked by FourierOptions)."""
    from landscape.errors import LandscapeError

    try:
        return tuple(float(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise LandscapeError(
            f"--bands takes comma-separated numbers in [0, 1], e.g. 0.1,0.5,0.9 (got {text!r})"
        ) from None


@click.command("fourier")
@checkpoint_options(split=DEFAULTS["split"])
@output_options("fourier.h5")
@click.option(
    "--samples", default=DEFAULTS["samples"], show_default=True, type=COUNT, help="Number of images analysed."
)
@click.option(
    "--first-samples",
    is_flag=True,
    default=DEFAULTS["first_samples"],
    help="Take the first --samples images of the split in file order (Paper A's first test batch), not a seeded "
    "choice.",
)
@click.option("--batch-size", default=DEFAULTS["batch_size"], show_default=True, type=COUNT)
@click.option(
    "--seed", default=DEFAULTS["seed"], show_default=True, type=SEED, help="Seed of the sample choice and the noise."
)
@click.option(
    "--profile",
    default=DEFAULTS["profile"],
    show_default=True,
    type=click.Choice(PROFILES),
    help="Half diagonal of the spectrum (Paper A) or the radial average.",
)
@click.option(
    "--frequency-axis",
    default=DEFAULTS["frequency_axis"],
    show_default=True,
    type=click.Choice(FREQUENCY_AXES),
    help="Common axis of the layers: each curve spans [0, 1] (Paper A), or units of pi (NaN-padded).",
)
@click.option(
    "--maps", is_flag=True, default=DEFAULTS["maps"], help="Also store each layer's 2D mean log-amplitude map."
)
@click.option(
    "--noise-bands",
    is_flag=True,
    default=DEFAULTS["noise_bands"],
    help="Also measure the accuracy drop under band-limited noise.",
)
@click.option(
    "--bands",
    default=",".join(f"{b:g}" for b in DEFAULTS["bands"]),
    show_default=True,
    help="Centres of the noise bands, in units of pi, each in [0, 1].",
)
@click.option(
    "--noise-width",
    default=DEFAULTS["noise_width"],
    show_default=True,
    type=float,
    help="Width of each noise band, in units of pi.",
)
@click.option(
    "--noise-strength",
    default=DEFAULTS["noise_strength"],
    show_default=True,
    type=float,
    help="Root-mean-square of the noise per image, in normalised input units (annulus construction).",
)
@click.option(
    "--noise-construction",
    default=DEFAULTS["noise_construction"],
    show_default=True,
    type=click.Choice(NOISE_CONSTRUCTIONS),
    help="Our symmetric square annulus renormalised to --noise-strength, or Paper A's released FreqAttack "
    "(centred squares, signs of amplitude --noise-eps, no renormalisation).",
)
@click.option(
    "--noise-eps",
    default=DEFAULTS["noise_eps"],
    show_default=True,
    type=float,
    help="Amplitude eps of the signs of the official construction, in normalised input units "
    "(default: the released Random attack's).",
)
@click.option(
    "--taps",
    multiple=True,
    help="PATTERN=KIND: a module (glob on names) whose output is a block map, for models no rule knows.",
)
def command(
    source: ModelSource,
    out: str,
    force: bool,
    device: str,
    quiet: bool,
    bands: str,
    taps: tuple[str, ...],
    **options: object,
) -> None:
    """Fourier analysis of feature maps (Paper A, Fig 2a/8/9 and, with --noise-bands, Fig 2b)."""
    from landscape.analyses.fourier.run import run_fourier
    from landscape.analyses.fourier.summary import fourier_summary

    opts = FourierOptions(bands=parse_bands(bands), taps=tuple(taps) or None, **options)  # type: ignore[arg-type]
    result = run_fourier(
        source, opts, out=out, force=force, device=device, progress=False if quiet else None, command=command_line()
    )
    click.echo(f"wrote {out}: {fourier_summary(result)}")  # the one summary, small maps named
    if "noise/accuracy_drop" in result:
        click.echo(f"clean accuracy {float(result['noise/accuracy'][0] + result['noise/accuracy_drop'][0]):.4f}")
