"""The one-line summary of a trajectory file."""

from __future__ import annotations

import math

import numpy as np

from landscape.store.read import Result


def trajectory_summary(result: Result) -> str:
    """``6 snapshots of resnet_mini, final distance 12.3, angle 88.1 deg``.

    Args:
        result: a trajectory file.

    Returns:
        The snapshots, the model, and the last snapshot's distance and angle from the initial weights.
    """
    if "distance" not in result or not len(result["distance"]):
        return "trajectory, no snapshot yet"
    distance, angle = np.asarray(result["distance"], dtype=float), np.asarray(result["angle"], dtype=float)
    return (
        f"{len(distance)} snapshots of {result.attrs.get('model', '?')}, final distance {distance[-1]:.4g}, "
        f"angle {float(angle[-1]) * 180 / math.pi:.4g} deg"
    )
