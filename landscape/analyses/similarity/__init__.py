"""Feature similarity: linear CKA between the blocks of one model or of two (run)."""

from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.analyses.similarity.summary import similarity_summary
from landscape.options.similarity import SimilarityOptions

SIMILARITY = register_analysis(
    Analysis(
        kind="similarity",
        title="Feature similarity",
        description="Linear CKA (minibatch-unbiased HSIC) between the feature maps of every pair of blocks.",
        summary=similarity_summary,
        figures="landscape.plot.similarity",
        options=SimilarityOptions,
        run="landscape.analyses.similarity.run:run_similarity",
        api="landscape.analyses.similarity.run:similarity",
        command="similarity",
        docs="analyses.md#feature-similarity-cka",
        order=60,
        coords={"layer_a": "names_a", "layer_b": "names_b"},
        tables={
            "pairs": Table(
                "one pair of blocks (layer_a of the first model, layer_b of the second)",
                axes=("layer_a", "layer_b"),
                columns=("cka", "hsic_xy"),
            ),
        },
    )
)
