"""Mode connectivity between two networks: the line and the Bezier curve, their loss, accuracy and barriers.

Paths (path), their evaluation and barrier (evaluate, barrier), the bend's training (bezier) and checkpoint
(bendfile), the plane of the three points (plane), the run (points, run).
"""

from landscape.analyses.connect.summary import barrier_rows, connect_numbers, connect_summary
from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.options.connect import ConnectOptions

CONNECT = register_analysis(
    Analysis(
        kind="connect",
        title="Mode connectivity",
        description="Loss, accuracy and barriers between two networks on the line, and on a trained Bezier curve.",
        summary=connect_summary,
        numbers=connect_numbers,
        figures="landscape.plot.connect",
        options=ConnectOptions,
        run="landscape.analyses.connect.run:run_connect",
        api="landscape.analyses.connect.run:connect",
        command="connect",
        docs="analyses.md#mode-connectivity",
        order=15,
        coords={
            "split": "splits",
            "point": "line/coords",
            "curve_point": "curve/coords",
            "x": "plane/x",
            "y": "plane/y",
        },
        tables={
            "line": Table(
                "one point of the line on one split (alpha = its coordinate)",
                axes=("split", "point"),
                columns=("line/loss", "line/data_loss", "line/accuracy", "line/done"),
            ),
            "curve": Table(
                "one point of the Bezier curve on one split (t = its coordinate)",
                axes=("split", "curve_point"),
                columns=("curve/loss", "curve/data_loss", "curve/accuracy", "curve/done"),
            ),
            "barriers": Table(
                "the loss and error barriers of one path on one split (written at the run's end)",
                rows=barrier_rows,
                index=("path", "split"),
            ),
        },
    )
)
