"""Random probe vectors shared by the stochastic estimators (SLQ density, Hutchinson / Hutch++ trace)."""

from __future__ import annotations

import torch
from torch import Tensor

from landscape.errors import LandscapeError

DISTRIBUTIONS = ("rademacher", "gaussian")


def probe_vectors(
    n: int,
    count: int,
    *,
    seed: int | None = None,
    distribution: str = "rademacher",
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
) -> Tensor:
    """An (n, count) matrix of independent probes with E[z z^T] = I.

    ``rademacher``: entries +-1 with equal probability; ``gaussian``: standard normal. Drawn on the CPU from
    a generator seeded with ``seed`` (so results do not depend on the device), then moved.
    """
    if distribution not in DISTRIBUTIONS:
        raise LandscapeError(f"unknown probe distribution {distribution!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    gen = torch.Generator().manual_seed(int(seed) if seed is not None else torch.seed() % 2**63)
    if distribution == "gaussian":
        z = torch.randn(n, count, generator=gen, dtype=torch.float64)
    else:
        z = torch.randint(0, 2, (n, count), generator=gen).to(torch.float64) * 2 - 1
    return z.to(device=device, dtype=dtype)
