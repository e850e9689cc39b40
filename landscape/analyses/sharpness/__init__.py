"""Sharpness: average- and worst-case measures (measures), the run (run), edge-of-stability tracking (tracking).

- :func:`~landscape.analyses.sharpness.measures.average_sharpness`,
  :func:`~landscape.analyses.sharpness.measures.worst_sharpness`: adaptive or plain m-sharpness of an objective.
- :func:`~landscape.analyses.sharpness.run.run_sharpness`: a model source in, an HDF5 result out, batch by batch.
- :class:`~landscape.analyses.sharpness.tracking.SharpnessTracker`: the top Hessian eigenvalue (Adam:
  preconditioned) of a training run every N steps; :mod:`~landscape.analyses.sharpness.track_file` writes its
  records beside the checkpoint (``landscape train --track-sharpness``, kind ``sharpness_track``).
"""

from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.analyses.sharpness.summary import sharpness_numbers, sharpness_summary, track_numbers, track_summary
from landscape.options.sharpness import SharpnessOptions

SHARPNESS = register_analysis(
    Analysis(
        kind="sharpness",
        title="Sharpness",
        description="Average- or worst-case, adaptive or plain m-sharpness over radii, with an interval over batches.",
        summary=sharpness_summary,
        numbers=sharpness_numbers,
        figures="landscape.plot.sharpness",
        options=SharpnessOptions,
        run="landscape.analyses.sharpness.run:run_sharpness",
        api="landscape.analyses.sharpness.run:sharpness",
        command="sharpness",
        docs="analyses.md#sharpness",
        order=35,
        coords={"radius": "rho"},
        tables={
            "radii": Table(
                "one radius rho: the mean over batches and its bootstrap interval",
                axes=("radius",),
                columns=("mean", "low", "high"),
            ),
            "batches": Table(
                "one mini-batch at one radius",
                axes=("batch", "radius"),
                columns=(
                    "values",
                    "stderr",
                    "best_iteration",
                    "final_step",
                    "halvings",
                    "base_loss",
                    "batch_sizes",
                    "done",
                ),
            ),
        },
    )
)
SHARPNESS_TRACK = register_analysis(
    Analysis(
        kind="sharpness_track",
        title="Sharpness during training",
        description="The top Hessian eigenvalue every N optimiser steps against the optimiser's stability threshold.",
        summary=track_summary,
        numbers=track_numbers,
        figures="landscape.plot.sharpness",
        docs="analyses.md#sharpness-during-training",
        order=75,
        tables={
            "records": Table(
                "one record of the training run (every N optimiser steps)",
                axes=("record",),
                columns=("step", "lr", "sharpness", "threshold", "residual", "n_products", "converged", "warm", "done"),
            ),
        },
    )
)
