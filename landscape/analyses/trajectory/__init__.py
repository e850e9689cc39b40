"""Training trajectories: snapshots in polar coordinates around the initial weights (run)."""

from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.analyses.trajectory.summary import trajectory_summary
from landscape.options.trajectory import TrajectoryOptions

TRAJECTORY = register_analysis(
    Analysis(
        kind="trajectory",
        title="Training trajectory",
        description="Training snapshots as distance and angle from the initial weights (Paper A's Fig 1b).",
        summary=trajectory_summary,
        figures="landscape.plot.trajectory",
        options=TrajectoryOptions,
        run="landscape.analyses.trajectory.run:run_trajectory",
        api="landscape.analyses.trajectory.run:trajectory",
        command="trajectory",
        docs="analyses.md#training-trajectories-in-polar-coordinates",
        order=70,
        coords={"snapshot": "snapshots"},
        tables={
            "snapshots": Table(
                "one snapshot, in the order given (the initial weights first)",
                axes=("snapshot",),
                columns=("distance", "angle", "norm", "epoch", "step", "paths"),
            ),
        },
    )
)
