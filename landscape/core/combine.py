"""Points of parameter space as linear combinations ``sum_i c_i T_i (* S_i)``, fresh or in one reused buffer.

Every analysis that moves away from a centre builds its points the same way: a surface's
``theta + a dx + b dy``, a sharpness draw's ``w + (rho eps) * c``, a line's ``(1 - alpha) theta_A + alpha theta_B``,
a Bezier curve's ``(1-t)^2 theta_A + 2t(1-t) theta_c + t^2 theta_B``. :func:`combine` is that one formula, a left
fold over the terms, name by name:

    point[n] = term_0[n] + term_1[n] + ... ,   term_i[n] = (c_i * T_i[n]) * S_i[n]

(``c_i`` a number or a 0-d tensor, ``None`` for ``T_i[n]`` itself; ``S_i`` an optional elementwise factor), each
``+`` and ``*`` one rounding, in this order. A ``(k,)`` tensor ``c_i`` stacks ``k`` points (``(k, *shape)`` each,
for ``torch.func.vmap``; without a buffer only). Without a buffer it returns new tensors (differentiable: the worst-case
ascent and the bend's training use it so). With a :class:`PointBuffer` it writes the same numbers, bit for bit,
into tensors allocated once and reused for every point (``torch.mul(..., out=)``, ``add_``), so that evaluating
many points holds one copy of the parameters, not one per point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from landscape.core.params import ParamDict

#: one term ``(c, T)`` or ``(c, T, S)``: ``(c * T[n]) * S[n]`` for every name ``n`` (``c`` None: ``T[n]`` itself)
Term = (
    tuple[float | Tensor | None, Mapping[str, Tensor]]
    | tuple[float | Tensor | None, Mapping[str, Tensor], Mapping[str, Tensor]]
)


class PointBuffer:
    """Tensors shaped like a params dict, allocated once, that :func:`combine` rewrites for every point.

    Holds one tensor per name (the point, in the layout of ``like``'s tensor) and, per dtype and device, one flat
    scratch tensor of the largest parameter's size (a term is formed there before it is added). The tensors are
    ordinary (not inference) tensors even when created under ``torch.inference_mode``, so that they can be
    rewritten in and outside it.

    Args:
        like: the names, shapes, dtypes and devices of the points (e.g. the objective's params).

    Attributes:
        tensors: the point, name -> tensor (the same tensors after every write).
    """

    def __init__(self, like: Mapping[str, Tensor]) -> None:
        with torch.inference_mode(False):
            self.tensors: ParamDict = {n: torch.empty_like(t) for n, t in like.items()}
            largest: dict[tuple[torch.dtype, torch.device], int] = {}
            for t in like.values():
                key = (t.dtype, t.device)
                largest[key] = max(largest.get(key, 0), t.numel())
            self._scratch = {k: torch.empty(n, dtype=k[0], device=k[1]) for k, n in largest.items()}

    def scratch(self, like: Tensor) -> Tensor:
        """A view of the scratch tensor shaped like ``like`` (overwritten by the next term).

        Args:
            like: a tensor of the buffer's names' dtypes and devices.

        Returns:
            The view, of ``like``'s shape.
        """
        return self._scratch[(like.dtype, like.device)][: like.numel()].view(like.shape)


def _term(term: Term, name: str, out: Tensor | None) -> Tensor:
    """``(c * T[name]) * S[name]`` (into ``out`` when given, else a new tensor; ``T[name]`` itself when it is all)."""
    coef, tensors = term[0], term[1]
    scale = term[2][name] if len(term) == 3 else None  # type: ignore[misc]
    value = tensors[name]
    if coef is not None:
        if isinstance(coef, Tensor) and coef.ndim == 1:  # k stacked points
            coef = coef.reshape((-1,) + (1,) * value.ndim)
        value = torch.mul(value, coef) if out is None else torch.mul(value, coef, out=out)
    if scale is not None:
        if out is None:
            value = value * scale
        elif value is out:
            value = out.mul_(scale)
        else:
            value = torch.mul(value, scale, out=out)
    return value


def combine(terms: Sequence[Term], buffer: PointBuffer | None = None) -> ParamDict:
    """``sum_i (c_i * T_i) * S_i`` name by name, left to right (see the module doc), fresh or into ``buffer``.

    Args:
        terms: the terms, in the order they are added; the names are those of the first term's ``T``.
        buffer: write into this buffer's tensors (no graph: under ``torch.no_grad``) and return them; None: new
            tensors, differentiable in every input (a term that is ``T[n]`` alone may be returned as it is).

    Returns:
        The point, name -> tensor: ``buffer.tensors`` (rewritten) or a new dict.

    Raises:
        ValueError: no terms.
    """
    if not terms:
        raise ValueError("combine needs at least one term")
    names = list(terms[0][1])
    if buffer is None:
        out: ParamDict = {}
        for n in names:
            total = _term(terms[0], n, None)
            for term in terms[1:]:
                total = total + _term(term, n, None)
            out[n] = total
        return out
    with torch.no_grad():
        for n in names:
            total = buffer.tensors[n]
            first = _term(terms[0], n, total)
            if first is not total:  # the first term is T[n] itself
                total.copy_(first)
            for term in terms[1:]:
                total.add_(_term(term, n, buffer.scratch(total)))
    return buffer.tensors
