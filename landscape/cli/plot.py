"""``landscape plot FILE.h5 [FILE.h5 ...]``: draw the figures of result files.

Every option is checked by :func:`landscape.plot.check_options` (through :mod:`landscape.options.checks`) and every
file by its kind's schema before the first figure is drawn.
"""

from __future__ import annotations

import click

from landscape.cli.options import WholeNumber
from landscape.plot import FORMATS, LEVEL_SPACINGS, SPECTRUM_STYLES, STYLES


@click.command("plot")
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default=None, type=click.Path(), help="Folder for the figures (created if needed).")
@click.option("--format", "fmt", default="png", show_default=True, type=click.Choice(FORMATS))
@click.option("--log", is_flag=True, help="Surfaces: log loss axis (1D), log-spaced contour levels, log10 z (3D, vtp).")
@click.option(
    "--zmax",
    default=None,
    type=float,
    help="Surfaces: clip the loss (3D paper style: loss - min) here [default: 3D clipped at a robust maximum].",
)
@click.option(
    "--style",
    default="default",
    show_default=True,
    type=click.Choice(STYLES),
    help="paper: surfaces in 3D as Paper A's plasma wireframe of loss - min; Fourier Fig 2a as released "
    "(last block left out, deep blocks yellow).",
)
@click.option(
    "--levels", default=20, show_default=True, type=WholeNumber(2), help="Surfaces: number of contour levels (>= 2)."
)
@click.option(
    "--level-spacing",
    default="auto",
    show_default=True,
    type=click.Choice(LEVEL_SPACINGS),
    help="Surfaces: contour levels; auto = above-min (dense near the minimum) on a skewed surface, else linear.",
)
@click.option("--no-vtp", is_flag=True, help="Surfaces: do not write the ParaView .vtp file.")
@click.option(
    "--spectrum-style",
    default="auto",
    show_default=True,
    type=click.Choice(SPECTRUM_STYLES),
    help="Spectra: kde (kernel density), hist, or auto = kde for files of >= 20 eigenvalues.",
)
@click.option(
    "--name",
    default=None,
    help="Name the figures that draw all files together NAME_<kind> [default: <kind>_<model>_vs_<model>...].",
)
@click.option("--force", is_flag=True, help="Replace files of the figures' names that landscape did not write.")
def command(
    paths: tuple[str, ...],
    out_dir: str | None,
    fmt: str,
    log: bool,
    zmax: float | None,
    style: str,
    levels: int,
    level_spacing: str,
    no_vtp: bool,
    spectrum_style: str,
    name: str | None,
    force: bool,
) -> None:
    """Draw every figure of the given result files (files of one kind are overlaid)."""
    from landscape.plot import plot_files

    options = {
        "log": log,
        "zmax": zmax,
        "style": style,
        "levels": levels,
        "level_spacing": level_spacing,
        "vtp": not no_vtp,
        "spectrum_style": spectrum_style,
        "name": name,
        "force": force,
    }
    from landscape.errors import one_line

    for path in plot_files(list(paths), out_dir, fmt, **options):
        click.echo(one_line(str(path)))
