"""Random probe vectors shared by the stochastic estimators (SLQ density, Hutchinson / Hutch++ trace)."""

from __future__ import annotations

import torch
from torch import Tensor

from landscape.errors import LandscapeError
from landscape.runtime.devices import require_memory

DISTRIBUTIONS = ("rademacher", "gaussian")


def local_generator(seed: int | None) -> torch.Generator:
    """A private CPU generator: seeded with ``seed``, or with fresh OS entropy when ``seed`` is None.

    The caller's global generators (``torch.manual_seed``, CUDA) are never read or re-seeded.

    Args:
        seed: the seed, or None for a non-reproducible draw.

    Returns:
        A new ``torch.Generator`` on the CPU.
    """
    gen = torch.Generator()
    if seed is None:
        gen.seed()  # fresh entropy for this generator only (torch.seed() would re-seed the global ones)
    else:
        gen.manual_seed(int(seed))
    return gen


def require_probe_memory(n: int, count: int, device: torch.device | str = "cpu") -> None:
    """Refuse, before they are drawn, ``count`` probes of ``n`` entries (float64) that the memory cannot hold.

    They are drawn on the CPU and then moved to ``device``: both must hold ``8 n count`` bytes.

    Args:
        n: length of each probe.
        count: number of probes.
        device: where they are used.

    Raises:
        LandscapeError: the CPU or ``device`` has less memory than the probes need.
    """
    for where in dict.fromkeys((torch.device("cpu"), torch.device(device))):
        require_memory(
            count, n, torch.float64, where, f"{count:,} probe vectors", "lower --probes (or --trace-samples)"
        )


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
    a private generator seeded with ``seed`` (so results do not depend on the device), then moved; the
    caller's global random state is never touched.

    Args:
        n: length of each probe.
        count: number of probes (columns).
        seed: seed of the private generator; None draws fresh entropy (not reproducible).
        distribution: ``"rademacher"`` or ``"gaussian"``.
        dtype: dtype of the result.
        device: device of the result.

    Returns:
        The (n, count) probe matrix.

    Raises:
        LandscapeError: unknown ``distribution``, or ``count`` probes of ``n`` float64 entries need more than the
            memory of the CPU (where they are drawn) or of ``device`` (checked before they are drawn).
    """
    if distribution not in DISTRIBUTIONS:
        raise LandscapeError(f"unknown probe distribution {distribution!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    require_probe_memory(n, count, device)
    gen = local_generator(seed)
    if distribution == "gaussian":
        z = torch.randn(n, count, generator=gen, dtype=torch.float64)
    else:
        z = torch.randint(0, 2, (n, count), generator=gen).to(torch.float64) * 2 - 1
    return z.to(device=device, dtype=dtype)
