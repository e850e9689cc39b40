"""The lesion study: accuracy and NLL with each residual block removed, one at a time (run)."""

from landscape.analyses.lesion.summary import lesion_summary
from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.options.lesion import LesionOptions

LESION = register_analysis(
    Analysis(
        kind="lesion",
        title="Lesion study",
        description="Accuracy and NLL with each residual block's branch removed, one block at a time.",
        summary=lesion_summary,
        figures="landscape.plot.lesion",
        options=LesionOptions,
        run="landscape.analyses.lesion.run:run_lesion",
        api="landscape.analyses.lesion.run:lesion",
        command="lesion",
        docs="analyses.md#lesion-study",
        order=50,
        coords={"block": "block_names"},
        tables={
            "blocks": Table(
                "one lesioned block, in forward order",
                axes=("block",),
                columns=(
                    "block_kinds",
                    "depth",
                    "stage",
                    "projected_shortcut",
                    "accuracy",
                    "nll",
                    "accuracy_drop",
                    "done",
                ),
            ),
        },
    )
)
