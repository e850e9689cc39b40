"""Shared building blocks of the model zoo.

Attention here is written out explicitly (``softmax(q k^T * scale + bias) v``) instead of calling
``F.scaled_dot_product_attention`` so that every ``torch.func`` transform (``grad``, ``jvp``, ``vmap``,
``linearize``) works on it on every device. No block uses in-place operations, so tensors recorded by
``block_features`` are never modified afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from landscape.errors import LandscapeError

FEATURE_KINDS: tuple[str, ...] = ("stem", "conv", "msa", "mlp", "downsample", "embed")


@dataclass
class Feature:
    """The output of one block of a model, as returned by ``block_features``.

    ``name`` is the block's module path (e.g. ``"layer1.0"``, ``"blocks.3.msa"``), ``kind`` one of
    :data:`FEATURE_KINDS`, and ``tensor`` the block's output as an NCHW map (tokens reshaped to their grid).

    Attributes:
        name: Module path of the block inside the model.
        kind: One of :data:`FEATURE_KINDS` (``"stem"``, ``"conv"``, ``"msa"``, ``"mlp"``, ...).
        tensor: The block's output, shape ``(B, C, H, W)``.

    Raises:
        ValueError: If ``kind`` is not one of :data:`FEATURE_KINDS` (checked on construction).
    """

    name: str
    kind: str
    tensor: Tensor

    def __post_init__(self) -> None:
        if self.kind not in FEATURE_KINDS:
            raise ValueError(f"Feature kind {self.kind!r} is not one of {FEATURE_KINDS}")


# --------------------------------------------------------------------------------------------------------
# Convolution helpers


def conv3x3(in_chans: int, out_chans: int, stride: int = 1) -> nn.Conv2d:
    """Return a 3x3 convolution with padding 1 and no bias.

    Args:
        in_chans: Number of input channels.
        out_chans: Number of output channels.
        stride: Stride of the convolution.

    Returns:
        The ``nn.Conv2d(in_chans, out_chans, 3, stride, padding=1, bias=False)`` module.
    """
    return nn.Conv2d(in_chans, out_chans, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_chans: int, out_chans: int, stride: int = 1) -> nn.Conv2d:
    """Return a 1x1 convolution with no bias.

    Args:
        in_chans: Number of input channels.
        out_chans: Number of output channels.
        stride: Stride of the convolution.

    Returns:
        The ``nn.Conv2d(in_chans, out_chans, 1, stride, bias=False)`` module.
    """
    return nn.Conv2d(in_chans, out_chans, kernel_size=1, stride=stride, bias=False)


def conv_bn(in_chans: int, out_chans: int, kernel_size: int = 1, stride: int = 1) -> nn.Sequential:
    """Return ``Sequential(conv (no bias, 'same' padding), BatchNorm2d)``, e.g. a projection shortcut.

    Args:
        in_chans: Number of input channels.
        out_chans: Number of output channels (also the BatchNorm width).
        kernel_size: Kernel size of the convolution; padding is ``kernel_size // 2``.
        stride: Stride of the convolution.

    Returns:
        ``nn.Sequential(conv, nn.BatchNorm2d(out_chans))``.
    """
    conv = nn.Conv2d(in_chans, out_chans, kernel_size, stride=stride, padding=kernel_size // 2, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(out_chans))


# --------------------------------------------------------------------------------------------------------
# MLP and stochastic depth


class Mlp(nn.Module):
    """Two-layer perceptron over the last dimension: ``drop(fc2(drop(act(fc1(x)))))`` with GELU ``act``.

    Args:
        in_features: Width of the input (last dimension).
        hidden_features: Width of the hidden layer (``fc1`` output).
        out_features: Width of the output; ``None`` (or 0) means ``in_features``.
        drop: Dropout probability applied after the activation and after ``fc2``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int | None = None,
        drop: float = 0.0,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.drop = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features or in_features)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the MLP to the last dimension of ``x``.

        Args:
            x: Input of shape ``(..., in_features)``.

        Returns:
            Tensor of shape ``(..., out_features)``.
        """
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class DropPath(nn.Module):
    """Stochastic depth: in training, zero a residual branch per sample with probability ``drop_prob``.

    Kept samples are scaled by ``1 / (1 - drop_prob)``; in eval mode (or with ``drop_prob == 0``) this is
    the identity.

    Args:
        drop_prob: Probability of dropping a sample's branch, in ``[0, 1)``.

    Raises:
        LandscapeError: If ``drop_prob`` is not in ``[0, 1)``.
    """

    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= drop_prob < 1.0:
            raise LandscapeError(f"drop path rate must be in [0, 1), got {drop_prob}")
        self.drop_prob = float(drop_prob)

    def forward(self, x: Tensor) -> Tensor:
        """Return ``x * mask / (1 - drop_prob)`` with a per-sample Bernoulli mask (training only).

        Args:
            x: Residual-branch output of shape ``(B, ...)``; samples are indexed by the first dimension.

        Returns:
            Tensor of the same shape as ``x`` (``x`` itself in eval mode or with ``drop_prob == 0``).
        """
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1.0 - self.drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        """Show the drop probability in the module's repr.

        Returns:
            The string ``"drop_prob=<p>"``.
        """
        return f"drop_prob={self.drop_prob}"


def drop_path_rates(rate: float, n: int) -> list[float]:
    """Return the linear stochastic-depth schedule ``rate * j / (n - 1)`` for blocks ``j = 0 .. n-1``.

    Args:
        rate: Drop-path rate of the last block.
        n: Number of blocks.

    Returns:
        A list of ``n`` rates rising linearly from 0 to ``rate`` (all zeros when ``n <= 1``).
    """
    if n <= 1:
        return [0.0] * n
    return [rate * j / (n - 1) for j in range(n)]


# --------------------------------------------------------------------------------------------------------
# Relative position bias


def grid_positions(rows: int, cols: int, start: int = 0) -> Tensor:
    """Return the ``(rows*cols, 2)`` long tensor of (row, col) positions of a grid, numbered row-major.

    Token ``i`` sits at ``(start + i // cols, start + i % cols)``; ``start`` shifts the grid inside a larger
    one (e.g. the inner grid of a grid padded by a ring of ``start`` tokens).

    Args:
        rows: Number of grid rows.
        cols: Number of grid columns.
        start: Offset added to both coordinates.

    Returns:
        Long tensor of shape ``(rows * cols, 2)`` holding ``(row, col)`` per token.
    """
    ys, xs = torch.meshgrid(torch.arange(rows) + start, torch.arange(cols) + start, indexing="ij")
    return torch.stack([ys.flatten(), xs.flatten()], dim=1)


def _offset_column(dy: Tensor | int, dx: Tensor | int, grid_size: tuple[int, int]) -> Tensor | int:
    """The one formula for the table column of offset ``(dy, dx)`` (row-major over ``(dy, dx)``), unchecked."""
    H, W = grid_size
    return (dy + H - 1) * (2 * W - 1) + (dx + W - 1)


def relative_offset_index(dy: int, dx: int, grid_size: tuple[int, int]) -> int:
    """Return the column of a relative-position table for the offset ``(dy, dx) = pos(k) - pos(q)``.

    On an ``H x W`` grid offsets range over ``[-(H-1), H-1] x [-(W-1), W-1]``; the table has
    ``(2H-1) * (2W-1)`` columns, laid out row-major over ``(dy, dx)``:
    ``column = (dy + H - 1) * (2W - 1) + (dx + W - 1)``.

    Args:
        dy: Row offset ``row(k) - row(q)``.
        dx: Column offset ``col(k) - col(q)``.
        grid_size: ``(H, W)`` of the grid.

    Returns:
        The column index, in ``[0, (2H-1) * (2W-1))``.

    Raises:
        ValueError: If ``(dy, dx)`` lies outside ``(-H, H) x (-W, W)``.
    """
    H, W = grid_size
    if not (-H < dy < H and -W < dx < W):
        raise ValueError(f"offset ({dy}, {dx}) is outside a {H}x{W} grid")
    return int(_offset_column(dy, dx, grid_size))


def relative_position_index(
    grid_size: tuple[int, int], query_pos: Tensor | None = None, key_pos: Tensor | None = None
) -> Tensor:
    """Return a ``(Nq, Nk)`` long tensor whose entry ``[q, k]`` is the table column of pos(k) - pos(q).

    The table is that of an ``H x W`` grid (``grid_size``, see :func:`relative_offset_index`). Positions are
    ``(N, 2)`` (row, col) tensors; by default both are the grid's own positions (:func:`grid_positions`),
    giving an ``(H*W, H*W)`` index. Every offset ``pos(k) - pos(q)`` must lie inside the table's range.

    Args:
        grid_size: ``(H, W)`` of the grid whose table is indexed.
        query_pos: ``(Nq, 2)`` long tensor of query positions; ``None`` means ``grid_positions(H, W)``.
        key_pos: ``(Nk, 2)`` long tensor of key positions; ``None`` means ``grid_positions(H, W)``.

    Returns:
        Long tensor of shape ``(Nq, Nk)`` of table columns.

    Raises:
        ValueError: If some offset ``pos(k) - pos(q)`` lies outside ``(-H, H) x (-W, W)``.
    """
    H, W = grid_size
    query_pos = grid_positions(H, W) if query_pos is None else query_pos
    key_pos = grid_positions(H, W) if key_pos is None else key_pos
    delta = key_pos[None, :, :] - query_pos[:, None, :]  # [q, k] = pos(k) - pos(q)
    dy, dx = delta[..., 0], delta[..., 1]
    if dy.numel() and not (dy.abs().max() < H and dx.abs().max() < W):
        raise ValueError(f"positions have offsets outside a {H}x{W} grid's table")
    return _offset_column(dy, dx, grid_size)


class RelativePositionBias(nn.Module):
    """Learned attention-score bias that depends only on the offset between key and query positions.

    ``table`` has shape ``(num_tables, (2H-1)*(2W-1))``; ``num_tables`` is the number of heads (one bias per
    head) or 1 (one table shared by all heads, as in AlterNet). Column ``relative_offset_index(dy, dx)``
    holds the bias added to the score of a query at ``p`` and a key at ``p + (dy, dx)``.

    With ``num_prefix_tokens == 1`` (a CLS token placed before the grid tokens) the module also learns
    ``cls_bias`` of shape ``(num_tables, 3)``: the bias of [CLS query -> grid key, grid query -> CLS key,
    CLS -> CLS]. Those start at zero, so an untrained model treats CLS like a token at no particular offset.

    Args:
        grid_size: ``(H, W)`` of the token grid.
        num_tables: Number of bias tables (heads, or 1 for a table shared by all heads).
        num_prefix_tokens: Number of prefix (CLS) tokens before the grid tokens, 0 or 1.
        init_std: Standard deviation of the truncated-normal initialisation of ``table``.

    Attributes:
        table: Parameter of shape ``(num_tables, (2H-1)*(2W-1))``.
        cls_bias: Parameter of shape ``(num_tables, 3)`` when ``num_prefix_tokens == 1``, else ``None``.
        index: Non-persistent buffer ``(H*W, H*W)`` from :func:`relative_position_index`.

    Raises:
        ValueError: If ``num_prefix_tokens`` is not 0 or 1.
    """

    def __init__(
        self, grid_size: tuple[int, int], num_tables: int, num_prefix_tokens: int = 0, init_std: float = 0.02
    ) -> None:
        super().__init__()
        if num_prefix_tokens not in (0, 1):
            raise ValueError("RelativePositionBias supports at most one prefix (CLS) token")
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.num_prefix_tokens = num_prefix_tokens
        H, W = self.grid_size
        self.table = nn.Parameter(torch.zeros(num_tables, (2 * H - 1) * (2 * W - 1)))
        nn.init.trunc_normal_(self.table, std=init_std)
        self.cls_bias = nn.Parameter(torch.zeros(num_tables, 3)) if num_prefix_tokens else None
        self.register_buffer("index", relative_position_index(self.grid_size), persistent=False)

    def offset_index(self, dy: int, dx: int) -> int:
        """Return the table column of offset ``(dy, dx) = pos(k) - pos(q)`` on this module's grid.

        Args:
            dy: Row offset ``row(k) - row(q)``.
            dx: Column offset ``col(k) - col(q)``.

        Returns:
            The column of ``table`` holding that offset's bias.

        Raises:
            ValueError: If the offset lies outside this module's grid.
        """
        return relative_offset_index(dy, dx, self.grid_size)

    def extra_repr(self) -> str:
        """Show the grid, the number of tables and of prefix tokens.

        Returns:
            The string ``"grid_size=..., num_tables=..., prefix=..."``.
        """
        return f"grid_size={self.grid_size}, num_tables={self.table.shape[0]}, prefix={self.num_prefix_tokens}"

    def forward(self) -> Tensor:
        """Return the bias ``B[t, q, k] = table[t, index[q, k]]`` (plus the CLS row and column when present).

        Returns:
            Tensor of shape ``(num_tables, N, N)`` with ``N = num_prefix_tokens + H*W``.
        """
        bias = self.table[:, self.index]  # (T, HW, HW)
        if self.cls_bias is None:
            return bias
        T, n = bias.shape[0], bias.shape[-1]
        c = self.cls_bias
        top = torch.cat([c[:, 2].view(T, 1, 1), c[:, 0].view(T, 1, 1).expand(T, 1, n)], dim=2)
        rest = torch.cat([c[:, 1].view(T, 1, 1).expand(T, n, 1), bias], dim=2)
        return torch.cat([top, rest], dim=1)


# --------------------------------------------------------------------------------------------------------
# Attention


def attend(q: Tensor, k: Tensor, v: Tensor, scale: float, bias: Tensor | None = None) -> Tensor:
    """Return ``softmax(q k^T * scale + bias) v`` for ``(B, heads, N, d)`` tensors (bias broadcasts).

    Args:
        q: Queries, shape ``(B, heads, Nq, d)``.
        k: Keys, shape ``(B, heads, Nk, d)``.
        v: Values, shape ``(B, heads, Nk, d_v)``.
        scale: Factor applied to the scores, usually ``d ** -0.5``.
        bias: Optional additive score bias broadcastable to ``(B, heads, Nq, Nk)``.

    Returns:
        Tensor of shape ``(B, heads, Nq, d_v)``.
    """
    scores = (q @ k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    return scores.softmax(dim=-1) @ v


def resolve_head_dim(dim: int, num_heads: int, head_dim: int | None) -> int:
    """Dimension per head: ``head_dim`` when given, else ``dim / num_heads`` (which must divide).

    Args:
        dim: Token width.
        num_heads: Number of attention heads.
        head_dim: Explicit width per head, or ``None``.

    Returns:
        The width per head.

    Raises:
        LandscapeError: If ``head_dim`` is ``None`` and ``dim`` is not divisible by ``num_heads``.
    """
    if head_dim is not None:
        return int(head_dim)
    if dim % num_heads:
        raise LandscapeError(f"width {dim} is not divisible by {num_heads} heads; pass head_dim")
    return dim // num_heads


class Attention(nn.Module):
    """Multi-head self-attention over tokens ``(B, N, dim)``, optionally with relative position bias.

    ``qkv`` is one Linear ``dim -> 3 * num_heads * head_dim``: output rows ``[0, I)`` are W_Q, ``[I, 2I)``
    W_K and ``[2I, 3I)`` W_V (``I = num_heads * head_dim``), head ``h`` owning rows ``h*head_dim ..
    (h+1)*head_dim`` of each. ``proj`` maps the concatenated heads back to ``out_dim`` (W_O).
    With ``grid_size`` set, ``rel_pos`` (a :class:`RelativePositionBias` with one table per head) adds
    ``phi_h(pos(k) - pos(q))`` to the scores; the last ``H*W`` tokens are the grid, row-major, after
    ``num_prefix_tokens`` prefix (CLS) tokens.

    Args:
        dim: Token width of the input.
        num_heads: Number of attention heads.
        head_dim: Width per head; ``None`` means ``dim // num_heads``.
        qkv_bias: Whether ``qkv`` has a bias.
        out_dim: Width of the output; ``None`` (or 0) means ``dim``.
        grid_size: ``(H, W)`` of the token grid for a relative position bias; ``None`` for no bias.
        num_prefix_tokens: Number of prefix (CLS) tokens before the grid tokens (0 or 1 with ``grid_size``).

    Raises:
        LandscapeError: If ``head_dim`` is ``None`` and ``dim`` is not divisible by ``num_heads``.
        ValueError: If ``grid_size`` is set and ``num_prefix_tokens`` is not 0 or 1.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        head_dim: int | None = None,
        qkv_bias: bool = False,
        out_dim: int | None = None,
        grid_size: tuple[int, int] | None = None,
        num_prefix_tokens: int = 0,
    ) -> None:
        super().__init__()
        head_dim = resolve_head_dim(dim, num_heads, head_dim)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        inner = num_heads * head_dim
        self.qkv = nn.Linear(dim, 3 * inner, bias=qkv_bias)
        self.proj = nn.Linear(inner, out_dim or dim)
        self.rel_pos = RelativePositionBias(grid_size, num_heads, num_prefix_tokens) if grid_size is not None else None

    def extra_repr(self) -> str:
        """Show heads and head width.

        Returns:
            The string ``"num_heads=..., head_dim=..."``.
        """
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}"

    def forward(self, x: Tensor) -> Tensor:
        """Return ``proj(concat_h softmax(q_h k_h^T * scale + bias_h) v_h)`` over the tokens of ``x``.

        Args:
            x: Tokens of shape ``(B, N, dim)``; with ``grid_size``, ``N = num_prefix_tokens + H*W``.

        Returns:
            Tensor of shape ``(B, N, out_dim)``.
        """
        B, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        bias = self.rel_pos() if self.rel_pos is not None else None
        out = attend(q, k, v, self.scale, bias)  # (B, heads, N, d)
        return self.proj(out.transpose(1, 2).reshape(B, N, self.num_heads * self.head_dim))


def window_partition(x: Tensor, window: int) -> Tensor:
    """Split an NCHW map into non-overlapping ``window x window`` windows: ``(B*nH*nW, window**2, C)``.

    Windows are ordered row-major over the map and tokens row-major inside a window.

    Args:
        x: Feature map of shape ``(B, C, H, W)``; ``H`` and ``W`` are assumed to be multiples of ``window``.
        window: Side of a square window.

    Returns:
        Tensor of shape ``(B * (H // window) * (W // window), window**2, C)``.
    """
    B, C, H, W = x.shape
    x = x.reshape(B, C, H // window, window, W // window, window)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(-1, window * window, C)


def window_merge(x: Tensor, window: int, height: int, width: int) -> Tensor:
    """Invert :func:`window_partition`: ``(B*nH*nW, window**2, C)`` -> NCHW ``(B, C, height, width)``.

    Args:
        x: Window tokens of shape ``(B * nH * nW, window**2, C)``.
        window: Side of a square window.
        height: Height of the merged map (``nH = height // window``).
        width: Width of the merged map (``nW = width // window``).

    Returns:
        Tensor of shape ``(B, C, height, width)``.
    """
    nH, nW = height // window, width // window
    C = x.shape[-1]
    x = x.reshape(-1, nH, nW, window, window, C)
    return x.permute(0, 5, 1, 3, 2, 4).reshape(-1, C, height, width)


class WindowAttention(nn.Module):
    """Multi-head self-attention inside non-overlapping windows of an NCHW map (AlterNet's MSA).

    q, k, v come from one 1x1 convolution without bias (``qkv``, same row layout as :class:`Attention`),
    the heads are merged by a 1x1 convolution with bias (``proj``). ``rel_pos`` adds a learned relative
    position bias over the ``window x window`` grid: one table shared by all heads (``rel_pos_per_head=
    False``, as in the official AlterNet) or one per head. The map's height and width must be multiples of
    ``window``.

    Args:
        dim: Channels of the input map.
        out_dim: Channels of the output map.
        num_heads: Number of attention heads.
        head_dim: Width per head.
        window: Side of the square attention window.
        rel_pos_per_head: One relative-position table per head (True) or one shared table (False).
    """

    def __init__(
        self,
        dim: int,
        out_dim: int,
        num_heads: int,
        head_dim: int,
        window: int,
        rel_pos_per_head: bool = False,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.window = window
        self.scale = head_dim**-0.5
        inner = num_heads * head_dim
        self.qkv = nn.Conv2d(dim, 3 * inner, kernel_size=1, bias=False)
        self.proj = nn.Conv2d(inner, out_dim, kernel_size=1)
        self.rel_pos = RelativePositionBias((window, window), num_heads if rel_pos_per_head else 1)

    def extra_repr(self) -> str:
        """Show heads, head width and window.

        Returns:
            The string ``"num_heads=..., head_dim=..., window=..."``.
        """
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, window={self.window}"

    def forward(self, x: Tensor) -> Tensor:
        """Attend within each window of ``x``: ``proj(merge(softmax(q k^T * scale + bias) v))`` per window.

        Args:
            x: Feature map of shape ``(B, dim, H, W)``, ``H`` and ``W`` multiples of ``window``.

        Returns:
            Tensor of shape ``(B, out_dim, H, W)``.

        Raises:
            LandscapeError: If ``H`` or ``W`` is not a multiple of ``window``.
        """
        _, _, H, W = x.shape
        w = self.window
        if H % w or W % w:
            raise LandscapeError(
                f"a {H}x{W} feature map does not split into {w}x{w} attention windows; "
                "build the model with the img_size you feed it"
            )
        tokens = window_partition(self.qkv(x), w)  # (B', N, 3*inner)
        Bw, N, _ = tokens.shape
        q, k, v = tokens.reshape(Bw, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        out = attend(q, k, v, self.scale, self.rel_pos())  # (B', heads, N, d)
        out = out.transpose(1, 2).reshape(Bw, N, self.num_heads * self.head_dim)
        return self.proj(window_merge(out, w, H, W))


def tokens_to_grid(tokens: Tensor, grid_size: tuple[int, int]) -> Tensor:
    """Reshape grid tokens ``(B, H*W, C)`` to an NCHW map: token ``i`` goes to row ``i // W``, col ``i % W``.

    Args:
        tokens: Grid tokens of shape ``(B, H*W, C)`` (prefix tokens already removed).
        grid_size: ``(H, W)`` of the grid.

    Returns:
        Tensor of shape ``(B, C, H, W)``.

    Raises:
        ValueError: If the number of tokens is not ``H * W``.
    """
    B, N, C = tokens.shape
    H, W = grid_size
    if N != H * W:
        raise ValueError(f"{N} tokens do not fill a {H}x{W} grid")
    return tokens.transpose(1, 2).reshape(B, C, H, W)
