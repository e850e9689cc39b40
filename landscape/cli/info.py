"""``landscape info FILE.h5``: print a result file's kind, summary, provenance, options and arrays.

On a file a running analysis is writing it prints what the writer records: its pid, the run and its progress.
"""

from __future__ import annotations

import click


@click.command("info")
@click.argument("path", type=click.Path(dir_okay=False))
def command(path: str) -> None:
    """Print the kind, summary, provenance, options and arrays of a result file (of a running one: its progress)."""
    import time

    from landscape.analyses.registry import summarize
    from landscape.runtime.progress import live_report
    from landscape.store.files import live_record
    from landscape.store.read import describe, read_result

    record = live_record(path)
    if record is not None:  # read from the writer's lock sidecar: the writer is not disturbed
        click.echo(live_report(path, record, now=time.time()))
        return

    result = read_result(path)
    click.echo(describe(result, summarize(result)))
