"""``landscape info FILE.h5 ...``: print each result file's kind, summary, provenance, options and arrays.

On a file a running analysis is writing it prints what the writer records: its pid, the run and its progress.
With ``--json`` each file is one line of JSON (:mod:`landscape.store.json_view`), for scripts.
"""

from __future__ import annotations

import click


@click.command("info")
@click.argument("paths", metavar="FILE...", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One line of JSON per file (JSON Lines): kind, summary, numbers, provenance, attributes, arrays; "
    'NaN as null, infinities as "inf" / "-inf".',
)
def command(paths: tuple[str, ...], as_json: bool) -> None:
    """Print the kind, summary, provenance, options and arrays of result files (of a running one: its progress)."""
    import time

    from landscape.analyses.registry import numbers_of, summarize
    from landscape.runtime.progress import live_report
    from landscape.store.json_view import dumps, live_json, result_json
    from landscape.store.locks import live_record
    from landscape.store.read import describe, read_result

    for i, path in enumerate(paths):
        record = live_record(path)
        if record is not None:  # read from the writer's lock sidecar: the writer is not disturbed
            text = dumps(live_json(path, record)) if as_json else live_report(path, record, now=time.time())
        else:
            result = read_result(path)
            summary = summarize(result)
            if as_json:
                text = dumps(result_json(result, summary=summary, numbers=numbers_of(result)))
            else:
                text = describe(result, summary)
        click.echo(text if as_json or i == 0 else f"\n{text}")
