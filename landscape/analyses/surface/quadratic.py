"""The quadratic model of the loss along unit Hessian eigenvectors, in numpy alone (the figures draw it).

Along unit eigenvectors ``v_1``, ``v_2`` of the Hessian at the centre, with eigenvalues ``lambda_1``, ``lambda_2``,
the second-order Taylor model of the loss at ``theta + a v_1 + b v_2`` is ``L(0) + (lambda_1 a^2 + lambda_2 b^2) / 2``
(the gradient term is left out: at a minimum it is zero, and it is odd in ``a`` and ``b``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def quadratic_model(
    loss0: float, eigenvalues: Sequence[float], a: np.ndarray | Sequence[float], b: np.ndarray | None = None
) -> np.ndarray:
    """The quadratic model ``L(0) + (lambda_1 a^2 + lambda_2 b^2) / 2`` along unit eigenvectors.

    Args:
        loss0: the loss at the centre, ``L(0)``.
        eigenvalues: ``lambda_1`` (and ``lambda_2`` with ``b``).
        a: the x coordinates (distances along ``v_1``).
        b: the y coordinates (distances along ``v_2``), broadcast against ``a``; None for a line.

    Returns:
        The model's values, float64, of the broadcast shape of ``a`` and ``b``.
    """
    a = np.asarray(a, dtype=np.float64)
    out = loss0 + 0.5 * float(eigenvalues[0]) * a**2
    if b is not None:
        out = out + 0.5 * float(eigenvalues[1]) * np.asarray(b, dtype=np.float64) ** 2
    return out
