"""Permutation alignment: theta_B's hidden units reordered to match theta_A's, theta_B's function unchanged.

The permutation spec traced from the module graph (spec), permutations applied and the weight-matching objective
(permute), weight matching (weights), activation matching (activations), the function check and the run (run).
Its output is a checkpoint, not a result file: the registry lists it among the analyses, not among the result kinds.
"""

from landscape.analyses.registry import Analysis, register_analysis
from landscape.options.align import AlignOptions

ALIGN = register_analysis(
    Analysis(
        kind="align",
        title="Permutation alignment",
        description="theta_B's hidden units permuted to match theta_A's (weight or activation matching), "
        "its function checked unchanged; writes a checkpoint.",
        output="a checkpoint (theta_B aligned, its record under extra['alignment'])",
        options=AlignOptions,
        run="landscape.analyses.align.run:run_align",
        api="landscape.analyses.align.run:align",
        command="align",
        docs="analyses.md#permutation-alignment",
        order=16,
    )
)
