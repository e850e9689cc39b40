"""``landscape trajectory``: training snapshots in polar coordinates around the initial weights (Paper A Fig 1b)."""

from __future__ import annotations

import click

from landscape.cli.options import OUTPUT, command_line, parse_model_kw


@click.command("trajectory")
@click.option(
    "--ckpt",
    "ckpts",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Checkpoints in training order (repeat); the first is the initial weights theta_0.",
)
@click.option(
    "--snapshots-of",
    default=None,
    type=click.Path(dir_okay=False),
    help="A `landscape train` checkpoint RUN.pt: use RUN.init.pt, RUN.warmup.pt, RUN.epochNNN.pt and RUN.pt.",
)
@click.option(
    "--exclude",
    multiple=True,
    help="Leave out parameters matching this pattern (fnmatch glob or substring; repeat).",
)
@click.option("--model", default=None, help="Model of a first checkpoint that names none (zoo name or spec).")
@click.option("--model-kw", multiple=True, help="Model constructor option key=value (repeatable).")
@click.option("--out", default="trajectory.h5", show_default=True, type=OUTPUT)
@click.option("--force", is_flag=True, help="Overwrite an existing result file of other options.")
def command(
    ckpts: tuple[str, ...],
    snapshots_of: str | None,
    exclude: tuple[str, ...],
    model: str | None,
    model_kw: tuple[str, ...],
    out: str,
    force: bool,
) -> None:
    """Distance ||theta_t - theta_0|| and angle to theta_0 of each training snapshot, over named_parameters()."""
    from landscape.analyses.trajectory.run import run_trajectory
    from landscape.analyses.trajectory.run import snapshots_of as find_snapshots
    from landscape.errors import LandscapeError
    from landscape.options.trajectory import TrajectoryOptions

    if bool(ckpts) == (snapshots_of is not None):
        raise LandscapeError("give either --ckpt INIT --ckpt SNAPSHOT ... or --snapshots-of RUN.pt (one of the two)")
    options = TrajectoryOptions(exclude=tuple(exclude))
    paths = list(ckpts) if ckpts else find_snapshots(snapshots_of)
    result = run_trajectory(
        paths,
        options,
        out=out,
        model_name=model,
        model_kwargs=parse_model_kw(model_kw),
        force=force,
        command=command_line(),
    )
    distance, angle = result["distance"], result["angle"]
    click.echo(
        f"wrote {result.path}: {len(distance)} snapshots of {result.attrs['model']}, final distance "
        f"{distance[-1]:.4g}, angle {float(angle[-1]) * 180 / 3.141592653589793:.4g} deg"
    )
