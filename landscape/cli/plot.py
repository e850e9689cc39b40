"""``landscape plot FILE.h5 [FILE.h5 ...]``: draw the figures of result files."""

from __future__ import annotations

import click


@click.command("plot")
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False), help="Folder for the figures.")
@click.option("--format", "fmt", default="png", show_default=True, type=click.Choice(["png", "pdf", "svg"]))
def command(paths: tuple[str, ...], out_dir: str | None, fmt: str) -> None:
    """Draw every figure of the given result files (files of one kind are overlaid)."""
    from landscape.plot import plot_files

    for path in plot_files(list(paths), out_dir, fmt):
        click.echo(str(path))
