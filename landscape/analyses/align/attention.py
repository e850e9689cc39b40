"""Multi-head self-attention in a permutation spec: the module is a tracer leaf with a rule of its own.

For an attention module with a fused ``qkv`` projection (rows ``[0, I)`` the queries, ``[I, 2I)`` the keys,
``[2I, 3I)`` the values, head ``h`` owning rows ``h d .. (h+1) d`` of each, ``I = H d``) and an output ``proj``,
``softmax(q_h k_h^T / sqrt(d) + b_h) v_h`` per head keeps the function when

- the stream's permutation moves ``qkv``'s input columns, and ``proj``'s output rows start a new permutation (joined
  with the stream by the residual add);
- the heads are reordered as whole units, one order for the module, and a relative position bias with one table
  per head (``b_h``) has its rows reordered by that head order (nothing inside a head moves it); a table shared by
  all heads moves with nothing;
- within each head the query and key rows move together (``q_h k_h^T`` is a sum over their shared index), and the
  value rows and ``proj``'s input columns move together.

The walk's rule (:meth:`~landscape.analyses.align.walk.Walk.attention`) makes two permutations of ``I``
units in ``H`` heads (:attr:`~.axes.Permutation.heads`): ``<module>.qk`` and ``<module>.vo``, sharing the head
order (:attr:`~.axes.Permutation.heads_of`); a per-head table is an axis that ``<module>.qk`` moves by its head
order only (:attr:`~.axes.Axis.per_head`). One permutation over all ``I`` concatenated head dimensions would mix
units of different heads, which changes the function (docs/analyses.md, permutation alignment).

Windowed attention (AlterNet's): ``qkv`` and ``proj`` are 1x1 convolutions of an NCHW map, the units on axis 1.
Splitting the map into windows and merging them back reorders the tokens (positions), never the channels, and each
window is attended alone with the same weights and bias, so the same rule keeps the function.

A shift attention (ConvViT's): head ``h`` reads the value at its own fixed neighbour offset (a one-hot attention
that is no parameter), so the heads keep their places (:attr:`~.axes.Permutation.fixed_heads`) and only the units
within a head move: one permutation ``<module>.vo`` of ``v``'s rows and ``proj``'s input columns.

Covered: landscape's :class:`~landscape.models.layers.Attention` (the ViT, ``pos_embed`` ``"abs"`` or ``"rpe"``),
:class:`~landscape.models.vit_rpe.RingAttention` (``vit_rpe_*``), :class:`~landscape.models.vit_rpe.ShiftAttention`
(``convvit_*``), :class:`~landscape.models.layers.WindowAttention` (``alternet*``, a table shared by the heads or
one per head), and timm's ``Attention`` (VisionTransformer blocks) without q/k normalisation, scale norm or gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from landscape.models.layers import Attention, WindowAttention
from landscape.models.vit_rpe import RingAttention, ShiftAttention

#: where timm defines the VisionTransformer's ``Attention`` (its other models' attention classes are not covered)
_TIMM_ATTENTION = ("timm.layers.attention", "timm.models.vision_transformer")


@dataclass(frozen=True)
class Layout:
    """How a covered attention module's units are laid out.

    Attributes:
        heads: ``H``.
        head_dim: ``d``.
        qkv: the submodule that makes the heads' inputs: ``"qkv"`` (query, key and value rows) or ``"v"`` (values
            only: a fixed attention pattern).
        channel_dim: the axis of the module's input and output that holds the units (-1: tokens, 1: NCHW maps).
        per_head: tensors (relative to the module) with one row per head, moved by the head order only.
        fixed_heads: the heads keep their places (each has a fixed role); only the units within a head move.
    """

    heads: int
    head_dim: int
    qkv: str = "qkv"
    channel_dim: int = -1
    per_head: tuple[str, ...] = ()
    fixed_heads: bool = False


def _timm_attention(m: nn.Module) -> bool:
    return type(m).__name__ == "Attention" and type(m).__module__ in _TIMM_ATTENTION


def _pointwise(m: nn.Module | None) -> bool:
    """A Linear, or a 1x1 convolution of stride 1 without padding or groups (a Linear on each position)."""
    if isinstance(m, nn.Linear):
        return True
    return (
        isinstance(m, nn.Conv2d)
        and m.kernel_size == (1, 1)
        and m.stride == (1, 1)
        and m.padding in ((0, 0), "valid")
        and m.dilation == (1, 1)
        and m.groups == 1
    )


def _outputs(m: nn.Module) -> int:
    """A Linear's or a convolution's number of outputs (read from its attributes: tracing proxies its weight)."""
    return int(m.out_features if isinstance(m, nn.Linear) else m.out_channels)


def _tables(m: nn.Module, heads: int) -> tuple[str, ...] | str:
    """The per-head tensors of a module's relative position bias (none when shared by the heads), or a reason."""
    rel_pos = getattr(m, "rel_pos", None)
    if rel_pos is None:
        return ()
    tables = dict(rel_pos.named_parameters(recurse=False))
    rows = {int(t.shape[0]) for t in tables.values()}
    if rows == {1}:
        return ()  # one table shared by all heads: the same for any head order
    if rows == {heads}:
        return tuple(f"rel_pos.{name}" for name in tables)
    return f"has a relative position bias of {sorted(rows)} tables for {heads} heads (not covered)"


def attention_layout(m: nn.Module) -> Layout | str | None:
    """How an attention module's units are laid out, why it is not covered, or None.

    Args:
        m: a module.

    Returns:
        The :class:`Layout` of a covered attention module; a reason (a phrase) for an attention module that is not
        covered; None for a module that is not one of the attention classes known here.
    """
    kind = type(m)
    if kind in (Attention, RingAttention, WindowAttention):
        per_head = _tables(m, int(m.num_heads))
        if isinstance(per_head, str):
            return per_head
        maps = kind is WindowAttention
        layout = Layout(int(m.num_heads), int(m.head_dim), "qkv", 1 if maps else -1, per_head)
    elif kind is ShiftAttention:
        layout = Layout(int(m.num_heads), int(m.head_dim), "v", fixed_heads=True)
    elif isinstance(m, (Attention, WindowAttention, ShiftAttention)):
        return f"is a subclass of {kind.__mro__[1].__name__} whose forward is not known (not covered)"
    elif _timm_attention(m):
        extras = [name for name in ("q_norm", "k_norm", "norm") if not isinstance(getattr(m, name, None), nn.Identity)]
        if getattr(m, "gate", None) is not None:
            extras.append("gate")
        if extras:
            return f"has {', '.join(extras)} inside the attention (not covered)"
        layout = Layout(int(m.num_heads), int(m.head_dim))
    else:
        return None
    qkv, proj = getattr(m, layout.qkv, None), getattr(m, "proj", None)
    rows = (3 if layout.qkv == "qkv" else 1) * layout.heads * layout.head_dim
    if not (_pointwise(qkv) and _pointwise(proj) and type(qkv) is type(proj)) or _outputs(qkv) != rows:
        return f"is not a fused {layout.qkv} projection of {rows} rows and a proj of the same kind (not covered)"
    return layout
