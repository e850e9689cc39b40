"""The analyses, one folder each, each registered once (:mod:`landscape.analyses.registry`).

surface, connect, align, hessian (and spectrum), curvature, sharpness (and training's sharpness tracking), fourier,
lesion, similarity, trajectory. Importing this package registers them all; none of their ``__init__`` modules imports
torch.
"""

from landscape.analyses import (  # noqa: F401 (registers)
    align,
    connect,
    curvature,
    fourier,
    hessian,
    lesion,
    sharpness,
    similarity,
    surface,
    trajectory,
)
from landscape.analyses.registry import Analysis, Table, analyses, analysis_of, kinds, register_analysis

__all__ = ["Analysis", "Table", "analyses", "analysis_of", "kinds", "register_analysis"]
