"""``landscape info FILE.h5``: print a result file's kind, summary, provenance, options and arrays."""

from __future__ import annotations

import click


@click.command("info")
@click.argument("path", type=click.Path(dir_okay=False))
def command(path: str) -> None:
    """Print the kind, summary, provenance, options and arrays of a result file."""
    from landscape.analyses.registry import summarize
    from landscape.store.read import describe, read_result

    result = read_result(path)
    click.echo(describe(result, summarize(result)))
