"""Operations on parameter dicts (``dict[str, Tensor]``) and their flat-vector views.

The insertion order of a params dict defines how it is flattened; every routine here keeps that order.
"""

from __future__ import annotations

from collections.abc import Mapping

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


def dot(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Tensor:
    """Euclidean inner product ``sum_p <a_p, b_p>`` over the names of ``a``."""
    return sum((a[n] * b[n]).sum() for n in a)  # type: ignore[return-value]


def norm(a: Mapping[str, Tensor]) -> Tensor:
    """Euclidean norm ``sqrt(sum_p ||a_p||^2)``."""
    return torch.sqrt(sum((t.double() ** 2).sum() for t in a.values())).to(next(iter(a.values())).dtype)

