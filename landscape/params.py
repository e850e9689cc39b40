"""Operations on parameter dicts (``dict[str, Tensor]``) and their flat-vector views.

The insertion order of a params dict defines how it is flattened; every routine here keeps that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor

ParamDict = dict[str, Tensor]


def flatten(params: Mapping[str, Tensor]) -> Tensor:
    """Concatenate the tensors of ``params`` (in insertion order) into one 1-D tensor."""
    return torch.cat([t.reshape(-1) for t in params.values()])


def unflatten(vector: Tensor, like: Mapping[str, Tensor]) -> ParamDict:
    """Split a flat ``vector`` into a dict shaped like ``like`` (the inverse of :func:`flatten`)."""
    out: ParamDict = {}
    offset = 0
    for name, ref in like.items():
        n = ref.numel()
        out[name] = vector[offset : offset + n].view_as(ref)
        offset += n
    if offset != vector.numel():
        raise ValueError(f"vector has {vector.numel()} entries, the params dict {offset}")
    return out


def numel(params: Mapping[str, Tensor]) -> int:
    """Total number of entries over all tensors of ``params``."""
    return sum(t.numel() for t in params.values())


def combine(base: Mapping[str, Tensor], terms: Iterable[tuple[float, Mapping[str, Tensor]]]) -> ParamDict:
    """Return ``base + sum_i c_i * d_i`` for ``terms = [(c_i, d_i), ...]``; names missing from a d_i count as 0."""
    out = {name: t.clone() for name, t in base.items()}
    for coef, direction in terms:
        if coef == 0:
            continue
        for name, d in direction.items():
            out[name].add_(d.to(out[name].dtype), alpha=coef)
    return out


def dot(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Tensor:
    """Euclidean inner product ``sum_p <a_p, b_p>`` over the names of ``a``."""
    return sum((a[n] * b[n]).sum() for n in a)  # type: ignore[return-value]


def norm(a: Mapping[str, Tensor]) -> Tensor:
    """Euclidean norm ``sqrt(sum_p ||a_p||^2)``."""
    return torch.sqrt(sum((t.double() ** 2).sum() for t in a.values())).to(next(iter(a.values())).dtype)


def to(
    params: Mapping[str, Tensor], device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> ParamDict:
    """Move/cast every floating tensor of ``params``; integer tensors keep their dtype."""
    out: ParamDict = {}
    for name, t in params.items():
        out[name] = t.to(device=device, dtype=dtype if (dtype is not None and t.is_floating_point()) else None)
    return out
