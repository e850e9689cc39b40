"""Paper B's models: a ViT with relative position bias and a zero-token ring, and its CNN counterpart.

``vit_rpe_*`` (:class:`RingViT`): the zoo's :class:`~landscape.models.vit.ViT` with ``pos_embed="rpe"`` and at
least 9 heads, whose attention (:class:`RingAttention`) also sees a ring of all-zero key/value tokens around
the patch grid (the patch-level analogue of zero padding, so a converted convolution is exact at the border).

``convvit_*`` (:class:`ConvViT`): the same network with every MSA replaced by :class:`ShiftAttention`, a
fixed one-hot attention over the 9 neighbour offsets: head ``h`` of a patch query reads the value of the
patch at offset ``Delta_h`` (zero off the grid), the CLS query reads the mean value of the patches. With
the same ``W_V`` and ``W_O`` shapes, it is a 3x3 convolution on the token grid whose per-offset kernel
``W_O^h W_V^h`` has rank <= head_dim; it trains as a CNN and converts exactly into ``vit_rpe_*``
(:mod:`landscape.models.convert`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from landscape.errors import LandscapeError
from landscape.models.conv_attention import neighbour_offsets
from landscape.models.layers import (
    Attention,
    Feature,
    RelativePositionBias,
    attend,
    grid_positions,
    relative_position_index,
    resolve_head_dim,
)
from landscape.models.registry import register_model
from landscape.models.vit import ViT


def _pad_grid_tokens(t: Tensor, grid_size: tuple[int, int], ring: int) -> Tensor:
    """Pad the grid part of ``t`` (B, heads, 1 + H*W, d) with a ring of zero tokens: (B, heads, 1 + H'W', d)."""
    B, h, _, d = t.shape
    H, W = grid_size
    grid = t[:, :, 1:].reshape(B, h, H, W, d)
    grid = F.pad(grid, (0, 0, ring, ring, ring, ring)).reshape(B, h, (H + 2 * ring) * (W + 2 * ring), d)
    return torch.cat([t[:, :, :1], grid], dim=2)


class RingPositionBias(RelativePositionBias):
    """Relative position bias for grid queries over the grid padded by ``ring`` zero tokens, plus CLS.

    ``table`` has one column per offset in ``[-(H-1+r), H-1+r] x [-(W-1+r), W-1+r]`` (the layout of
    :class:`RelativePositionBias` on an ``(H+r) x (W+r)`` grid: column ``offset_index(dy, dx)``).
    ``cls_bias[:, 0/1/2]`` = CLS query -> grid key, grid query -> CLS key, CLS -> CLS. The CLS query never
    sees the ring (bias ``-inf``). Keys are ordered [CLS, padded grid row-major].

    Args:
        grid_size: ``(H, W)`` of the inner (unpadded) patch grid.
        num_tables: Number of bias tables (one per head, or 1 shared).
        ring: Width ``r`` of the ring of zero tokens around the grid.
        init_std: Standard deviation of the truncated-normal initialisation of ``table``.

    Attributes:
        inner_size: ``(H, W)`` of the inner grid.
        ring: Width of the ring.
        index: ``(H*W, (H+2r)*(W+2r))`` table columns for grid queries and padded-grid keys.
        ring_mask: Non-persistent bool buffer ``((H+2r)*(W+2r),)``, True on ring positions.
    """

    def __init__(self, grid_size: tuple[int, int], num_tables: int, ring: int = 1, init_std: float = 0.02) -> None:
        H, W = int(grid_size[0]), int(grid_size[1])
        super().__init__((H + ring, W + ring), num_tables, num_prefix_tokens=1, init_std=init_std)
        self.inner_size = (H, W)
        self.ring = ring
        self.index = relative_position_index(  # (HW, H'W'): grid queries, padded-grid keys
            self.grid_size, grid_positions(H, W, start=ring), grid_positions(H + 2 * ring, W + 2 * ring)
        )
        is_ring = torch.ones(H + 2 * ring, W + 2 * ring, dtype=torch.bool)
        is_ring[ring : ring + H, ring : ring + W] = False
        self.register_buffer("ring_mask", is_ring.flatten(), persistent=False)

    def forward(self) -> Tensor:
        """Return the bias ``(num_tables, 1 + H*W, 1 + (H+2r)*(W+2r))`` for [CLS, grid] x [CLS, padded grid].

        Returns:
            Tensor of shape ``(num_tables, 1 + H*W, 1 + (H+2r)*(W+2r))``; CLS-query entries on ring keys are
            ``-inf``.
        """
        bias = self.table[:, self.index]  # (T, HW, H'W')
        T, n_k = bias.shape[0], bias.shape[-1]
        c = self.cls_bias
        cls_to_grid = c[:, 0].view(T, 1, 1).expand(T, 1, n_k).masked_fill(self.ring_mask, -math.inf)
        top = torch.cat([c[:, 2].view(T, 1, 1), cls_to_grid], dim=2)
        rest = torch.cat([c[:, 1].view(T, 1, 1).expand(T, bias.shape[1], 1), bias], dim=2)
        return torch.cat([top, rest], dim=1)


class RingAttention(Attention):
    """The zoo's :class:`~landscape.models.layers.Attention` whose keys/values include a zero-token ring.

    Parameters are those of ``Attention`` (``qkv``, ``proj``) plus ``rel_pos`` (a :class:`RingPositionBias`).
    Queries are CLS + the grid; keys and values are CLS + the grid padded with ``ring`` rings of zero
    key/value vectors (their score is the position bias alone).

    Args:
        dim: Token width.
        num_heads: Number of attention heads.
        head_dim: Width per head; ``None`` means ``dim // num_heads``.
        qkv_bias: Whether ``qkv`` has a bias.
        grid_size: ``(H, W)`` of the patch grid (after one CLS token).
        ring: Width of the ring of zero key/value tokens.

    Raises:
        LandscapeError: If ``head_dim`` is ``None`` and ``dim`` is not divisible by ``num_heads``.
    """

    def __init__(
        self, dim: int, num_heads: int, head_dim: int | None, qkv_bias: bool, grid_size: tuple[int, int], ring: int = 1
    ) -> None:
        super().__init__(dim, num_heads, head_dim, qkv_bias)
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.ring = ring
        self.rel_pos = RingPositionBias(self.grid_size, num_heads, ring)

    def forward(self, x: Tensor) -> Tensor:
        """Attend over CLS + grid tokens ``x`` (B, 1 + H*W, dim) and the zero ring; return (B, 1 + H*W, dim).

        Args:
            x: Tokens of shape ``(B, 1 + H*W, dim)``, CLS first, grid row-major.

        Returns:
            Tensor of shape ``(B, 1 + H*W, dim)``: ``proj(softmax(q k_pad^T * scale + bias) v_pad)``.
        """
        B, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        k = _pad_grid_tokens(k, self.grid_size, self.ring)
        v = _pad_grid_tokens(v, self.grid_size, self.ring)
        out = attend(q, k, v, self.scale, self.rel_pos())
        return self.proj(out.transpose(1, 2).reshape(B, N, self.num_heads * self.head_dim))


class ShiftAttention(nn.Module):
    """Fixed one-hot attention over the ``(2m+1)^2`` neighbour offsets: a convolution on the token grid.

    ``v`` (W_V, ``dim -> heads * head_dim``) and ``proj`` (W_O) have the shapes of the attention they stand
    for. Head ``h`` of the grid query at ``p`` returns ``v_h(p + Delta_h)`` (zero off the grid) with
    ``Delta_h = neighbour_offsets(m)[h]``; the CLS query returns the mean of ``v_h`` over the grid.

    Args:
        dim: Token width.
        num_heads: Number of heads, ``(2m+1)^2`` (9, 25, ...).
        head_dim: Width per head; ``None`` means ``dim // num_heads``.
        qkv_bias: Whether ``v`` has a bias.
        grid_size: ``(H, W)`` of the patch grid (after one CLS token).

    Attributes:
        radius: The neighbourhood radius ``m``.
        offsets: The ``(dy, dx)`` offset of each head.
        shift_kernel: Non-persistent one-hot depthwise kernel ``(heads * head_dim, 1, 2m+1, 2m+1)``.

    Raises:
        LandscapeError: If ``num_heads`` is not an odd square, or ``head_dim`` is ``None`` and ``dim`` is not
            divisible by ``num_heads``.
    """

    def __init__(
        self, dim: int, num_heads: int, head_dim: int | None, qkv_bias: bool, grid_size: tuple[int, int]
    ) -> None:
        super().__init__()
        radius = (math.isqrt(num_heads) - 1) // 2
        if (2 * radius + 1) ** 2 != num_heads:
            raise LandscapeError(f"a shift attention needs (2m+1)^2 heads (9, 25, ...), got {num_heads}")
        head_dim = resolve_head_dim(dim, num_heads, head_dim)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.radius = radius
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.offsets = neighbour_offsets(radius)
        self.v = nn.Linear(dim, num_heads * head_dim, bias=qkv_bias)
        self.proj = nn.Linear(num_heads * head_dim, dim)
        # the shift as a fixed depthwise convolution: channel (h, j) has a one-hot kernel at Delta_h + radius
        kernel = torch.zeros(num_heads, head_dim, 1, 2 * radius + 1, 2 * radius + 1)
        for h, (dy, dx) in enumerate(self.offsets):
            kernel[h, :, 0, dy + radius, dx + radius] = 1.0
        self.register_buffer(
            "shift_kernel", kernel.reshape(num_heads * head_dim, 1, 2 * radius + 1, -1), persistent=False
        )

    def forward(self, x: Tensor) -> Tensor:
        """Return ``proj`` of the shifted values for CLS + grid tokens ``x`` (B, 1 + H*W, dim).

        Args:
            x: Tokens of shape ``(B, 1 + H*W, dim)``, CLS first, grid row-major.

        Returns:
            Tensor of shape ``(B, 1 + H*W, dim)``.
        """
        B, N, _ = x.shape
        H, W = self.grid_size
        v = self.v(x)  # (B, N, heads * d), channels ordered (head, d)
        cls = v[:, 1:].mean(dim=1, keepdim=True)
        grid = v[:, 1:].transpose(1, 2).reshape(B, -1, H, W)
        kernel = self.shift_kernel.to(grid.dtype)
        shifted = F.conv2d(grid, kernel, padding=self.radius, groups=kernel.shape[0])  # zero padding
        out = torch.cat([cls, shifted.flatten(2).transpose(1, 2)], dim=1)
        return self.proj(out)


def _check_kwargs(kwargs: dict) -> None:
    if kwargs.get("pos_embed", "rpe") != "rpe":
        raise LandscapeError("vit_rpe_* and convvit_* models always use relative position encoding; drop pos_embed")
    kwargs.pop("pos_embed", None)


class RingViT(ViT):
    """ViT with relative position bias per head and a ring of ``ring`` zero key/value tokens per attention.

    Built as the zoo's ``ViT(pos_embed="rpe", ...)`` whose blocks' ``attn`` are :class:`RingAttention`.

    Args:
        ring: Width of the ring of zero key/value tokens (>= 0).
        **kwargs: :class:`~landscape.models.vit.ViT` arguments (``pos_embed``, if given, must be ``"rpe"``).

    Raises:
        LandscapeError: If ``pos_embed`` is not ``"rpe"``, ``ring < 0``, or as ``ViT`` does for invalid
            arguments.
    """

    def __init__(self, ring: int = 1, **kwargs) -> None:
        _check_kwargs(kwargs)
        super().__init__(pos_embed="rpe", **kwargs)
        if ring < 0:
            raise LandscapeError(f"ring must be >= 0, got {ring}")
        self.ring = ring
        for blk in self.blocks:
            old = blk.attn
            blk.attn = RingAttention(
                old.qkv.in_features, old.num_heads, old.head_dim, old.qkv.bias is not None, self.grid_size, ring
            )
        self._init_weights()


class ConvViT(ViT):
    """The CNN counterpart of :class:`RingViT`: every MSA is a :class:`ShiftAttention` (a token-grid conv).

    Identical to ``RingViT`` in every other module, parameter name and shape, except that ``attn.qkv``
    (W_Q, W_K, W_V) becomes ``attn.v`` (W_V) and there is no position bias. ``block_features``
    labels the shift layers ``conv``.

    Args:
        **kwargs: :class:`~landscape.models.vit.ViT` arguments (``pos_embed``, if given, must be ``"rpe"``);
            ``num_heads`` must be ``(2m+1)^2``.

    Raises:
        LandscapeError: If ``pos_embed`` is not ``"rpe"``, ``num_heads`` is not an odd square, or as ``ViT``
            does for invalid arguments.
    """

    def __init__(self, **kwargs) -> None:
        _check_kwargs(kwargs)
        super().__init__(pos_embed="rpe", **kwargs)
        for blk in self.blocks:
            old = blk.attn
            blk.attn = ShiftAttention(
                old.qkv.in_features, old.num_heads, old.head_dim, old.qkv.bias is not None, self.grid_size
            )
        self._init_weights()

    def block_features(self, x: Tensor) -> list[Feature]:
        """As :meth:`ViT.block_features`, with the shift-attention outputs labelled ``conv``.

        Args:
            x: Images of shape ``(B, in_chans, img_size, img_size)``.

        Returns:
            :class:`Feature` records: ``patch_embed``, then per block ``blocks.{i}.msa`` (kind ``"conv"``)
            and ``blocks.{i}.mlp``.

        Raises:
            LandscapeError: If the images are not ``img_size x img_size``.
        """
        return [Feature(f.name, "conv", f.tensor) if f.kind == "msa" else f for f in super().block_features(x)]


_MINI = {"img_size": 32, "patch_size": 4, "embed_dim": 72, "depth": 4, "num_heads": 9, "head_dim": 8}
_TI = {"img_size": 32, "patch_size": 2, "embed_dim": 192, "depth": 12, "num_heads": 9, "head_dim": 24}


@register_model
def vit_rpe_mini(num_classes: int = 10, **kwargs) -> RingViT:
    """CPU-sized ViT, relative position bias + zero ring: patch 4, width 72, depth 4, 9 heads of 8 (~264k).

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`RingViT` arguments; they override the defaults above.

    Returns:
        The :class:`RingViT`.

    Raises:
        LandscapeError: If ``pos_embed`` other than ``"rpe"`` is passed, or as :class:`RingViT` does for invalid
            arguments.
    """
    return RingViT(**{**_MINI, **kwargs}, num_classes=num_classes)


@register_model
def vit_rpe_ti(num_classes: int = 10, **kwargs) -> RingViT:
    """ViT-Ti-sized, relative position bias + zero ring: patch 2, width 192, depth 12, 9 heads of 24.

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`RingViT` arguments; they override the defaults above.

    Returns:
        The :class:`RingViT`.

    Raises:
        LandscapeError: If ``pos_embed`` other than ``"rpe"`` is passed, or as :class:`RingViT` does for invalid
            arguments.
    """
    return RingViT(**{**_TI, **kwargs}, num_classes=num_classes)


@register_model
def convvit_mini(num_classes: int = 10, **kwargs) -> ConvViT:
    """CNN counterpart of ``vit_rpe_mini`` (each MSA a fixed 3x3 shift attention); converts exactly.

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`ConvViT` arguments; they override the defaults above.

    Returns:
        The :class:`ConvViT`.

    Raises:
        LandscapeError: If ``pos_embed`` other than ``"rpe"`` is passed, or as :class:`ConvViT` does for invalid
            arguments.
    """
    return ConvViT(**{**_MINI, **kwargs}, num_classes=num_classes)


@register_model
def convvit_ti(num_classes: int = 10, **kwargs) -> ConvViT:
    """CNN counterpart of ``vit_rpe_ti`` (each MSA a fixed 3x3 shift attention); converts exactly.

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`ConvViT` arguments; they override the defaults above.

    Returns:
        The :class:`ConvViT`.

    Raises:
        LandscapeError: If ``pos_embed`` other than ``"rpe"`` is passed, or as :class:`ConvViT` does for invalid
            arguments.
    """
    return ConvViT(**{**_TI, **kwargs}, num_classes=num_classes)
