"""Mode connectivity between two networks: the line and the Bezier curve, their loss, accuracy and barriers.

Paths (path), their evaluation and barrier (evaluate, barrier), the bend's training (bezier) and checkpoint
(bendfile), the plane of the three points (plane), the run (points, run).
"""

from landscape.analyses.connect.summary import connect_numbers, connect_summary
from landscape.analyses.registry import Analysis, register_analysis
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
    )
)
