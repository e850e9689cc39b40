"""``landscape info FILE.h5``: print a result file's kind, provenance, options and arrays."""

from __future__ import annotations

import click


@click.command("info")
@click.argument("path", type=click.Path(dir_okay=False))
def command(path: str) -> None:
    """Print the kind, provenance, options and arrays of a result file."""
    from landscape.store.read import describe

    click.echo(describe(path))
