"""Loss surfaces: directions (directions), the point evaluator (evaluator), the grid's file (file), the run (run)."""

from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.analyses.surface.summary import surface_numbers, surface_summary
from landscape.options.surface import SurfaceOptions

SURFACE = register_analysis(
    Analysis(
        kind="surface",
        title="Loss surface",
        description="The loss and accuracy on a 1D line or 2D plane of parameter space around a model.",
        summary=surface_summary,
        numbers=surface_numbers,
        figures="landscape.plot.surface",
        options=SurfaceOptions,
        run="landscape.analyses.surface.run:run_surface",
        api="landscape.analyses.surface.run:surface",
        command="surface",
        docs="analyses.md#loss-surfaces",
        order=10,
        coords={"x": "xcoordinates", "y": "ycoordinates"},
        tables={
            "grid": Table(
                "one point of the grid (y, x)",
                axes=("y", "x"),
                columns=("loss", "data_loss", "accuracy", "done"),
            ),
        },
    )
)
