"""The demo's negative-curvature row: how much of the residual's most negative curvature the Hessian keeps.

For a loss convex in the logits ``H = G + R`` with the Gauss-Newton ``G`` positive semi-definite, so
``lambda_min(H) >= lambda_min(R)`` (docs/analyses.md, curvature operators): every negative eigenvalue of ``H`` is the
residual's, the network's second derivatives. The demo's negative-curvature stage writes, for ViT and ResNet and
every seed, the most negative eigenvalue of every mini-batch's ``H_b`` and ``R_b`` (:data:`NEGATIVE_FILE` in
:data:`NEGATIVE_DIR`, one
``landscape spectrum --which SA --top-k 1`` file per operator, on the spectrum's mini-batches). The statistic is

    sum_b lambda_min(H_b) / sum_b lambda_min(R_b)

over the mini-batches (a ratio of means, at most 1): near 1 when ``G`` leaves the residual's most negative direction
standing, near 0 or below when it cancels it; its interval is the findings' interval over the training seeds
(:func:`landscape.reproduce.table.one_model`: a delete-one-seed jackknife with a t quantile of seeds - 1 degrees of
freedom).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from landscape.reproduce.inputs import read_spectrum, seeds_text, stack_seeds
from landscape.reproduce.statistics import Interval
from landscape.reproduce.table import one_model

#: the stage's folder in each seed's folder (apart from the models' own spectra, which the report overlays)
NEGATIVE_DIR = "negative_curvature"
#: the stage's file of one model and operator (``hessian`` or ``residual``), in :data:`NEGATIVE_DIR`
NEGATIVE_FILE = "{model}_negative_{operator}.h5"
#: the operators of the stage
NEGATIVE_OPERATORS = ("hessian", "residual")
#: Lanczos' tolerance of the stage: each most negative eigenvalue within 1% (measured on the full demo's trained
#: models: within 1e-4 of tol 1e-3's, 12-25% fewer products)
NEGATIVE_TOL = 1e-2
#: the share of the residual's most negative curvature the Hessian keeps, above which "it is R's, standing" holds
NEGATIVE_SHARE = 0.5
#: the claim of the row (``{model}``: the model's name)
CLAIM = "The negative curvature is the network's own: R = H - G, which G leaves standing ({model})"
#: what the row measures
STATISTIC = (
    f"lambda_min(H) / lambda_min(R) over mini-batches (ratio of the means; at most 1 as G >= 0; threshold "
    f"{NEGATIVE_SHARE:g})"
)


@dataclass(frozen=True)
class NegativeCurvature:
    """The row's number for one model.

    Attributes:
        model: the model's name.
        estimate: the value and its interval over seeds, or None when no seed has both files.
        units: ``(mini-batches, seeds)``.
        where: the files it comes from.
    """

    model: str
    estimate: Interval | None
    units: tuple[int, int]
    where: str


def negative_curvature(folders: dict[int, Path], model: str) -> NegativeCurvature:
    """The share of ``R``'s most negative eigenvalue that ``H`` keeps, for ``model`` over the seeds' folders.

    A seed counts when both its files hold the same number of done mini-batches (the same batches: one seeded order).

    Args:
        folders: seed -> its folder.
        model: the model's name.

    Returns:
        The estimate and its interval, or an estimate of None when not measured.
    """
    pairs = {}
    for seed, folder in folders.items():
        h, r = (
            read_spectrum(folder / NEGATIVE_DIR / NEGATIVE_FILE.format(model=model, operator=op))
            for op in NEGATIVE_OPERATORS
        )
        if h is not None and r is not None and len(h) == len(r):
            pairs[seed] = np.concatenate([h[:, :1], r[:, :1]], axis=1)
    grouped = stack_seeds(pairs)
    name = f"{NEGATIVE_DIR}/" + NEGATIVE_FILE.format(model=model, operator="{hessian,residual}")
    if grouped is None:
        return NegativeCurvature(model, None, (0, 0), name)
    estimate = one_model(grouped, lambda hr, w: (w @ hr[:, 0]) / (w @ hr[:, 1]))
    where = f"{name} of {seeds_text(grouped.seeds)}; mini-batches"
    return NegativeCurvature(model, estimate, (int(sum(grouped.sizes)), len(grouped.sizes)), where)
