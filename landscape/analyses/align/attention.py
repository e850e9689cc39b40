"""Multi-head self-attention in a permutation spec: the module is a tracer leaf with a rule of its own.

For an attention module with a fused ``qkv`` Linear (rows ``[0, I)`` the queries, ``[I, 2I)`` the keys,
``[2I, 3I)`` the values, head ``h`` owning rows ``h d .. (h+1) d`` of each, ``I = H d``) and an output ``proj``
Linear, ``softmax(q_h k_h^T / sqrt(d)) v_h`` per head keeps the function when

- the stream's permutation moves ``qkv``'s input columns, and ``proj``'s output rows start a new permutation (joined
  with the stream by the residual add);
- the heads are reordered as whole units, one order for the module;
- within each head the query and key rows move together (``q_h k_h^T`` is a sum over their shared index), and the
  value rows and ``proj``'s input columns move together.

The walk's rule (:meth:`~landscape.analyses.align.walk.Walk.attention`) makes two permutations of ``I``
units in ``H`` heads (:attr:`~.axes.Permutation.heads`): ``<module>.qk`` and ``<module>.vo``, sharing the head
order (:attr:`~.axes.Permutation.heads_of`). One permutation over all ``I``
concatenated head dimensions would mix units of different heads, which changes the function
(docs/analyses.md, permutation alignment).

Covered: landscape's :class:`~landscape.models.layers.Attention` without a relative position bias (the ViT with
``pos_embed="abs"``) and timm's ``Attention`` (VisionTransformer blocks) without q/k normalisation, scale norm or gate.
"""

from __future__ import annotations

from torch import nn

from landscape.models.layers import Attention

#: where timm defines the VisionTransformer's ``Attention`` (its other models' attention classes are not covered)
_TIMM_ATTENTION = ("timm.layers.attention", "timm.models.vision_transformer")


def _timm_attention(m: nn.Module) -> bool:
    return type(m).__name__ == "Attention" and type(m).__module__ in _TIMM_ATTENTION


def attention_layout(m: nn.Module) -> tuple[int, int] | str | None:
    """How an attention module's units are laid out: ``(heads, head_dim)``, why it is not covered, or None.

    Args:
        m: a module.

    Returns:
        ``(H, d)`` for a covered attention module; a reason (a phrase) for an attention module that is not
        covered; None for a module that is not one of the attention classes known here.
    """
    if isinstance(m, Attention):
        if m.rel_pos is not None:
            return "has a relative position bias per head (not covered)"
    elif _timm_attention(m):
        extras = [name for name in ("q_norm", "k_norm", "norm") if not isinstance(getattr(m, name, None), nn.Identity)]
        if getattr(m, "gate", None) is not None:
            extras.append("gate")
        if extras:
            return f"has {', '.join(extras)} inside the attention (not covered)"
    else:
        return None
    heads, head_dim = int(m.num_heads), int(m.head_dim)
    qkv, proj = getattr(m, "qkv", None), getattr(m, "proj", None)
    if not (isinstance(qkv, nn.Linear) and isinstance(proj, nn.Linear)) or qkv.out_features != 3 * heads * head_dim:
        return "is not a fused qkv Linear of 3 x heads x head_dim rows and a proj Linear"
    return heads, head_dim
