"""``landscape demo --out DIR``: train three mini models on digits and run every analysis on them."""

from __future__ import annotations

import click


@click.command("demo")
@click.option("--out", "out_dir", default="demo", show_default=True, type=click.Path(file_okay=False))
@click.option("--quick", is_flag=True, help="A much smaller run (used by the tests).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--force", is_flag=True, help="Recompute and overwrite every file in DIR.")
@click.option("--quiet", is_flag=True, help="No progress output.")
@click.option(
    "--jobs",
    type=click.IntRange(1, 1024),
    default=None,
    help="Worker processes of one torch thread each for the independent stages (models, seeds, Paper B); "
    "the files do not depend on it.  [default: the cores this process may use]",
)
def command(out_dir: str, quick: bool, device: str, force: bool, quiet: bool, jobs: int | None) -> None:
    """Train resnet_mini, vit_mini and alternet_mini on digits; surfaces, spectra, Fourier; summary.md, report.html."""
    from landscape.reproduce.demo import run_demo

    summary = run_demo(out_dir, quick=quick, device=device, force=force, quiet=quiet, jobs=jobs)
    click.echo(f"summary: {summary}")
    click.echo(f"report: {summary.with_name('report.html')}")
