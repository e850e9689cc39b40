"""``landscape report DIR``: one self-contained HTML page of every result file in DIR."""

from __future__ import annotations

import click

from landscape.cli.options import OUTPUT
from landscape.plot.report import REPORT_FORMATS


@click.command("report")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--out", default=None, type=OUTPUT, help="The page to write [default: DIR/report.html].")
@click.option("--format", "fmt", default="png", show_default=True, type=click.Choice(REPORT_FORMATS))
@click.option(
    "--interactive/--no-interactive",
    default=None,
    help="Rotatable 3D views of 2D surfaces (plotly) [default: when plotly is installed].",
)
@click.option("--force", is_flag=True, help="Replace an --out page that landscape did not write (or a link there).")
@click.option(
    "--jobs",
    type=click.IntRange(1, 1024),
    default=None,
    help="Worker processes that draw the figures.  [default: the cores this process may use]",
)
def command(folder: str, out: str | None, fmt: str, interactive: bool | None, force: bool, jobs: int | None) -> None:
    """Write DIR/report.html: the summary table, every figure embedded, provenance; no network needed."""
    from landscape.errors import one_line
    from landscape.plot.report import write_report
    from landscape.runtime.workers import usable_cores

    jobs = usable_cores() if jobs is None else jobs
    page = write_report(folder, out=out, fmt=fmt, interactive=interactive, force=force, jobs=jobs)
    click.echo(one_line(str(page)))
