"""``landscape demo --out DIR``: train three mini models on digits and run every analysis on them."""

from __future__ import annotations

import click


def _seeds(text: str | None) -> tuple[int, ...] | None:
    """``--seeds 3,4,5`` as a tuple of ints (None: the demo's own); a one-line error for anything else."""
    from landscape.errors import LandscapeError

    if text is None:
        return None
    parts = text.replace(",", " ").split()
    if not parts or not all(p.isdigit() for p in parts):
        raise LandscapeError(f"--seeds takes distinct non-negative whole numbers, e.g. 3,4,5 (got {text!r})")
    return tuple(int(p) for p in parts)


@click.command("demo")
@click.option("--out", "out_dir", default="demo", show_default=True, type=click.Path(file_okay=False))
@click.option("--quick", is_flag=True, help="A much smaller run (used by the tests).")
@click.option(
    "--seeds",
    default=None,
    help="Training seeds, comma-separated, e.g. 3,4,5: the same demo on another set of seeds (Paper B's run "
    "too); the first seed's files are in DIR only if it is 0, seed K's in DIR/seedK.  [default: 0,1,2; --quick 0,1]",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--force", is_flag=True, help="Recompute and overwrite every file in DIR.")
@click.option("--quiet", is_flag=True, help="No progress output.")
@click.option(
    "--jobs",
    type=click.IntRange(1, 1024),
    default=None,
    help="Worker processes (of --threads torch threads each) for the independent stages (models, seeds, Paper B); "
    "the files do not depend on it.  [default: the cores this process may use]",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 1024),
    default=1,
    show_default=True,
    help="Torch threads of each worker: more only to check that the verdicts do not depend on them (the last "
    "bits of the numbers do).",
)
def command(
    out_dir: str,
    quick: bool,
    seeds: str | None,
    device: str,
    force: bool,
    quiet: bool,
    jobs: int | None,
    threads: int,
) -> None:
    """Train resnet_mini, vit_mini and alternet_mini on digits; surfaces, spectra, Fourier; summary.md, report.html."""
    from landscape.reproduce.demo import run_demo

    summary = run_demo(
        out_dir, quick=quick, device=device, force=force, quiet=quiet, jobs=jobs, seeds=_seeds(seeds), threads=threads
    )
    click.echo(f"summary: {summary}")
    click.echo(f"report: {summary.with_name('report.html')}")
