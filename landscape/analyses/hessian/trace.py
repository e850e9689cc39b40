"""Stochastic trace estimators with a standard error: Hutchinson and Hutch++.

Hutchinson: ``tr(A) ~ (1/s) sum_i z_i^T A z_i`` for probes with ``E[z z^T] = I``; standard error
``std(z_i^T A z_i) / sqrt(s)``. Hutch++ (Meyer, Musco, Musco & Woodruff 2021) spends a third of the products
on a sketch ``Q = orth(A S)``, a third on the exact ``tr(Q^T A Q)`` and the rest on Hutchinson for the
deflated ``(I - QQ^T) A (I - QQ^T)``; its per-probe values are ``tr(Q^T A Q) + g^T (I-QQ^T) A (I-QQ^T) g``.
With ``samples`` products both methods cost the same; Hutch++ is exact once the sketch spans the space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from landscape.analyses.hessian.linalg import Operator, announce, remedy_of, require_finite
from landscape.analyses.hessian.probes import probe_vectors
from landscape.errors import LandscapeError
from landscape.options.hessian import TRACE_METHODS


@dataclass
class TraceEstimate:
    """A trace estimate.

    ``estimate`` of tr(A), its ``stderr``, the per-probe ``samples`` (their mean is the estimate), the
    ``method`` and the operator products used (``n_matvec``).

    Attributes:
        estimate: the estimate of tr(A), the mean of ``samples``.
        stderr: ``std(samples) / sqrt(len(samples))`` (unbiased std; ``inf`` for a single sample).
        samples: the per-probe values, shape ``(s,)``, float64 on the CPU.
        method: ``"hutchinson"`` or ``"hutch++"``.
        n_matvec: the number of operator products used.
    """

    estimate: float
    stderr: float
    samples: Tensor
    method: str
    n_matvec: int


def _product(op: Operator, v: Tensor, counter: list[int]) -> Tensor:
    """``A v`` flattened, refused when it holds NaN or Inf; ``counter[0]`` counts the products made."""
    counter[0] += 1
    return require_finite(op.matvec(v).reshape(-1), counter[0], remedy_of(op)("non-finite"))


def _apply(op: Operator, V: Tensor, counter: list[int]) -> Tensor:
    return torch.stack([_product(op, V[:, j], counter) for j in range(V.shape[1])], dim=1)


def _quadratic_forms(op: Operator, Z: Tensor, counter: list[int]) -> Tensor:
    return torch.stack([torch.dot(Z[:, j], _product(op, Z[:, j], counter)) for j in range(Z.shape[1])])


def trace(
    op: Operator,
    samples: int = 100,
    method: str = "hutchinson",
    *,
    seed: int | None = None,
    distribution: str = "rademacher",
) -> TraceEstimate:
    """Estimate ``tr(A)`` with ``samples`` operator products by Hutchinson or Hutch++ (see the module docs).

    Hutchinson: ``tr(A) ~ (1/s) sum_i z_i^T A z_i``; Hutch++: ``tr(Q^T A Q) + (1/s') sum_i g_i^T P A P g_i``
    with ``Q = orth(A S)`` and ``P = I - Q Q^T``.

    Args:
        op: the symmetric operator.
        samples: operator products to spend (Hutchinson >= 2, Hutch++ >= 6).
        method: ``"hutchinson"`` or ``"hutch++"``.
        seed: seed of the probes' private generator; None draws fresh entropy (the caller's global random
            state is never touched).
        distribution: ``"rademacher"`` or ``"gaussian"`` probes.

    Returns:
        A :class:`TraceEstimate`.

    Raises:
        LandscapeError: unknown method or distribution, too few samples, or a product with NaN or Inf entries.
    """
    if method not in TRACE_METHODS:
        raise LandscapeError(f"unknown trace method {method!r}; choose one of {', '.join(TRACE_METHODS)}")
    n = op.shape[0]
    kw = {"distribution": distribution, "dtype": op.dtype, "device": op.device}
    counter = [0]
    announce(op, samples)
    if method == "hutchinson":
        if samples < 2:
            raise LandscapeError(f"Hutchinson needs at least 2 samples for a standard error, got {samples}")
        values = _quadratic_forms(op, probe_vectors(n, samples, seed=seed, **kw), counter)
        exact = 0.0
    else:
        if samples < 6:
            raise LandscapeError(f"Hutch++ needs at least 6 products (sketch, exact part, probes), got {samples}")
        sketch = samples // 3
        gen_seed = None if seed is None else int(seed)
        S = probe_vectors(n, sketch, seed=gen_seed, **kw)
        Q, _ = torch.linalg.qr(_apply(op, S, counter))
        exact = float(torch.trace(Q.T @ _apply(op, Q, counter)))
        G = probe_vectors(n, samples - 2 * sketch, seed=None if seed is None else gen_seed + 1, **kw)
        G = G - Q @ (Q.T @ G)
        values = _quadratic_forms(op, G, counter)
        samples = 2 * Q.shape[1] + G.shape[1]
    values = values.to("cpu", torch.float64) + exact
    stderr = float(values.std(unbiased=True)) / math.sqrt(values.numel()) if values.numel() > 1 else math.inf
    return TraceEstimate(float(values.mean()), stderr, values, method, int(samples))
