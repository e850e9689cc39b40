"""Operations on parameter dicts (``dict[str, Tensor]``) and their flat-vector views.

The insertion order of a params dict defines how it is flattened; every routine here keeps that order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

ParamDict = dict[str, Tensor]


def torch_dtype(name: str | None) -> torch.dtype | None:
    """The torch dtype of an option's name (``"float32"``, ``"float64"``); None stays None (the model's own).

    Args:
        name: the name, as :data:`~landscape.options.common.DTYPES` lists them, or None.

    Returns:
        ``getattr(torch, name)``, or None.
    """
    return None if name is None else getattr(torch, name)


def flatten(params: Mapping[str, Tensor]) -> Tensor:
    """Concatenate the tensors of ``params`` (in insertion order) into one 1-D tensor.

    Args:
        params: Names to tensors (of one dtype and device).

    Returns:
        A new 1-D tensor of ``sum_p params[p].numel()`` entries.
    """
    return torch.cat([t.reshape(-1) for t in params.values()])


def unflatten(vector: Tensor, like: Mapping[str, Tensor]) -> ParamDict:
    """Split a flat ``vector`` into a dict shaped like ``like`` (the inverse of :func:`flatten`).

    Args:
        vector: 1-D tensor of ``sum_p like[p].numel()`` entries.
        like: Names to tensors giving the order and shapes.

    Returns:
        A dict with the names of ``like``, each a view of ``vector`` shaped like ``like[name]``.

    Raises:
        ValueError: If ``vector`` has more entries than ``like`` holds.
        RuntimeError: If it has fewer (raised by ``view_as``).
    """
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
    """Euclidean inner product ``sum_p <a_p, b_p>`` over the names of ``a``.

    Args:
        a: Names to tensors.
        b: Names to tensors of the same shapes; must hold every name of ``a``.

    Returns:
        A 0-dim tensor (the int 0 when ``a`` is empty).
    """
    return sum((a[n] * b[n]).sum() for n in a)  # type: ignore[return-value]


def norm(a: Mapping[str, Tensor]) -> Tensor:
    """Euclidean norm ``sqrt(sum_p ||a_p||^2)``.

    Args:
        a: Names to tensors (not empty).

    Returns:
        A 0-dim tensor in the dtype of ``a``'s first tensor (the sum is accumulated in float64).
    """
    return torch.sqrt(sum((t.double() ** 2).sum() for t in a.values())).to(next(iter(a.values())).dtype)


def vector_norm(x: Tensor, dim: int | None = None) -> Tensor:
    """``||x||_2`` (of each slice along ``dim``), its squares summed in float64, returned in ``x``'s dtype.

    torch's own float32 ``vector_norm`` on CPU sums its squares in float32: on the 85.8M weights of torchvision's
    ``vit_b_16`` it came out 0.7-1% low, enough to break the symmetry of a Lanczos basis (its columns are divided by
    these norms). On a device without float64 (Apple's MPS) the squares are summed by ``sum``'s pairwise reduction.

    Args:
        x: a vector (or a matrix with ``dim``).
        dim: the dimension to reduce (None: all).

    Returns:
        The norm(s), in ``x``'s dtype.
    """
    if x.dtype == torch.float64:
        return torch.linalg.vector_norm(x, dim=dim)
    if x.device.type == "mps":
        return (x.pow(2).sum() if dim is None else x.pow(2).sum(dim=dim)).sqrt()
    return torch.linalg.vector_norm(x, dim=dim, dtype=torch.float64).to(x.dtype)


#: rows of a float32 matrix-vector product summed by BLAS in float32 before the partial sums are added in float64
#: (:func:`project`): on millions of entries a float32 BLAS product lost up to 1e-4 of its terms' scale (a Lanczos
#: solve of 3M entries came out 7e-5 off); blocks of 16384 kept it below 1e-7, at a third of BLAS's speed
PROJECT_BLOCK = 16384
#: entries of a float32 dot product summed in float32 before the partial sums are added in float64 (:func:`flat_dot`)
DOT_BLOCK = 256


def project(basis: Tensor, r: Tensor) -> Tensor:
    """``basis^T r``, on the CPU in blocks of :data:`PROJECT_BLOCK` rows whose partial products are added in float64.

    Args:
        basis: an ``(n, j)`` matrix.
        r: a vector of length ``n``, of ``basis``' dtype and device.

    Returns:
        The ``(j,)`` coefficients, in ``r``'s dtype.
    """
    n = basis.shape[0]
    if basis.dtype == torch.float64 or n <= PROJECT_BLOCK or basis.device.type != "cpu":
        return basis.T @ r  # GPU BLAS reduces in a tree: the loss was CPU BLAS's (and a loop of launches would cost)
    # BLAS sums a row-major block in one pass per column: shorter blocks (the solvers store their bases by column)
    block = PROJECT_BLOCK if basis.stride(0) == 1 else PROJECT_BLOCK // 16
    out = torch.zeros(basis.shape[1], dtype=torch.float64)
    for start in range(0, n, block):
        out += (basis[start : start + block].T @ r[start : start + block]).to(out.dtype)
    return out.to(r.dtype)


def flat_dot(a: Tensor, b: Tensor) -> Tensor:
    """``a . b`` of two flat vectors, in blocks of :data:`DOT_BLOCK` entries whose partial sums are added in float64.

    Args:
        a: a vector.
        b: a vector of the same length, dtype and device.

    Returns:
        The 0-dim product, in ``a``'s dtype.
    """
    n = a.numel()
    if a.dtype == torch.float64 or n <= PROJECT_BLOCK:
        return a.reshape(-1) @ b.reshape(-1)
    m = n - n % DOT_BLOCK
    parts = torch.bmm(a.reshape(-1)[:m].reshape(-1, 1, DOT_BLOCK), b.reshape(-1)[:m].reshape(-1, DOT_BLOCK, 1))
    wide = _wide(a)
    rest = a.reshape(-1)[m:].to(wide) @ b.reshape(-1)[m:].to(wide)
    return (parts.to(wide).sum() + rest).to(a.dtype)


def _wide(x: Tensor) -> torch.dtype:
    """The dtype partial sums are added in: float64, except on Apple's MPS, which has none."""
    return torch.float32 if x.device.type == "mps" else torch.float64


def weighted_sum(
    weights: Sequence[float],
    term: Callable[[int], Any],
    *,
    start: Any = None,
    part: int = 0,
    parts: int = 1,
) -> Any:
    """The one weighted batch sum: ``start + sum_b w_b term(b)`` over the batches ``b`` of this part.

    The sample-weighted mean of per-batch quantities (losses, gradients, Hessian-vector products) that every
    analysis uses: ``w_b = N_b / N`` for mean-reduced batch terms, never equal weights, never a plain sum. A
    term may be a number, a tensor, or a params dict (added name by name).

    Args:
        weights: ``w_b`` for each batch.
        term: ``b -> term_b``, called only for the batches of this part.
        start: added to the sum (e.g. the regulariser's term); None for nothing.
        part: the part of the batches this process takes (``b % parts == part``).
        parts: how many parts the batches are split into (torchrun ranks); 1 for all.

    Returns:
        The sum, of the terms' type; ``start`` when this part has no batch.
    """
    total = start
    for b, w in enumerate(weights):
        if b % parts != part:
            continue
        value = term(b)
        scaled = {n: w * t for n, t in value.items()} if isinstance(value, Mapping) else w * value
        if total is None:
            total = scaled
        elif isinstance(scaled, Mapping):
            total = {n: total[n] + scaled[n] for n in scaled}
        else:
            total = total + scaled
    return total
