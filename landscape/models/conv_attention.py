"""Paper B's construction: a multi-head self-attention layer that computes a given convolution exactly.

Li et al., "Can Vision Transformers Perform Convolution?" (arXiv 2111.01353). An image ``(B, C, H, W)`` is
cut into ``P x P`` patch tokens of dimension ``d = C * P * P`` (channel-major, then rows, then columns).
One attention layer with relative position bias computes ``conv(x)`` on those tokens:

- one head per patch offset ``Delta_h`` in ``[-m, m]^2`` with ``m = ceil(floor(K / 2) / P)``: 9 heads for
  every odd kernel ``K <= 2P + 1``, ``K^2`` heads for pixel input (``P = 1``, Cordonnier et al. 2020);
- content term zero (``W_Q = W_K = 0``); position bias ``phi_h(delta) = 0`` at ``delta = Delta_h`` and
  ``-c`` elsewhere (``c`` = ``sharpness``), so the softmax tends to one-hot on the patch at ``Delta_h``;
- ``W_V^h`` = identity on the flattened patch, so head ``h`` returns the neighbour patch at ``Delta_h`` and
  the concatenated heads hold the ``(2m+1)P x (2m+1)P`` neighbourhood;
- ``W_O`` = the matrix of the linear map "neighbourhood -> output patch of the convolution" (the stride
  ``s``, which must divide ``P``, only changes which output pixels ``W_O`` produces: ``P/s x P/s`` of them);
- a ring of ``m`` all-zero key/value tokens around the patch grid, so that a border query whose neighbour
  lies off the grid reads zeros, exactly as zero padding does.

With finite ``c`` each query leaks ``(n - 1) e^{-c} / (1 + (n - 1) e^{-c})`` of its attention to the
``n - 1`` other keys (gap profile); :func:`construction_error` measures that mass and the error against
``F.conv2d``. :func:`head_lower_bound` and :func:`best_fit_fewer_heads` show numerically that fewer heads
cannot represent a generic convolution.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from landscape.errors import LandscapeError
from landscape.models.layers import grid_positions

BIAS_PROFILES = ("gap", "quadratic")


def neighbour_offsets(radius: int) -> list[tuple[int, int]]:
    """Return the offsets ``(dy, dx)`` in ``[-radius, radius]^2``, row-major (head ``h`` gets entry ``h``).

    Args:
        radius: Largest absolute offset ``m`` along each axis.

    Returns:
        A list of ``(2 * radius + 1)^2`` integer pairs ``(dy, dx)``.
    """
    span = range(-radius, radius + 1)
    return [(dy, dx) for dy in span for dx in span]


def _pair(value: int | tuple[int, ...]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _check_conv(conv: nn.Conv2d, patch_size: int) -> None:
    """Raise :class:`LandscapeError` unless ``conv`` is a convolution the construction covers."""
    kh, kw = _pair(conv.kernel_size)
    if patch_size < 1:
        raise LandscapeError(f"patch_size must be a positive integer, got {patch_size}")
    if kh % 2 == 0 or kw % 2 == 0:
        raise LandscapeError(f"kernel {kh}x{kw} is not odd; the construction needs an odd 'same' convolution")
    if conv.groups != 1 or _pair(conv.dilation) != (1, 1):
        raise LandscapeError("the construction covers convolutions with groups=1 and dilation=1 only")
    if conv.padding_mode != "zeros":
        raise LandscapeError(f"padding_mode {conv.padding_mode!r} is not supported; use zero padding")
    same = conv.padding == "same" or (not isinstance(conv.padding, str) and _pair(conv.padding) == (kh // 2, kw // 2))
    if not same:
        raise LandscapeError(
            f"the convolution must use zero 'same' padding ({kh // 2}, {kw // 2}), got {conv.padding!r}"
        )
    for s in _pair(conv.stride):
        if patch_size % s:
            raise LandscapeError(f"stride {s} does not divide the patch size {patch_size}")


def ring_width(kernel_size: int | tuple[int, int], patch_size: int) -> int:
    """Return ``m = ceil(floor(K / 2) / P)``: the patch radius a ``K x K`` kernel reaches (max over axes).

    Args:
        kernel_size: Kernel size ``K`` (an int or an ``(K_y, K_x)`` pair).
        patch_size: Patch side ``P`` in pixels.

    Returns:
        The ring width ``m`` (number of neighbour patches reached on each side).
    """
    return max(math.ceil((k // 2) / patch_size) for k in _pair(kernel_size))


def heads_needed(kernel_size: int | tuple[int, int], patch_size: int) -> int:
    """Return ``(2m + 1)^2``, the number of heads of the construction (9 when ``K <= 2P + 1``).

    Args:
        kernel_size: Kernel size ``K`` (an int or an ``(K_y, K_x)`` pair).
        patch_size: Patch side ``P`` in pixels.

    Returns:
        The number of heads, ``(2 * ring_width(kernel_size, patch_size) + 1)^2``.
    """
    return (2 * ring_width(kernel_size, patch_size) + 1) ** 2


def neighbourhood_blocks(conv: nn.Conv2d, patch_size: int) -> Tensor:
    """Return the blocks ``T_h`` of the convolution as a map from neighbour patches to one output patch.

    Shape ``(heads, C_out * (P/s_y) * (P/s_x), C_in * P * P)``: the output patch of a query is
    ``sum_h T_h x_{q + Delta_h}`` plus the bias, with ``Delta_h = neighbour_offsets(m)[h]``. Entry
    ``T_h[(o, u, v), (c, i, j)] = weight[o, c, a, b]`` where ``a = Delta_y P + i - u s_y + K_y // 2`` and
    ``b = Delta_x P + j - v s_x + K_x // 2`` when those lie in the kernel, else 0. This is ``W_O`` of the
    construction reshaped (``W_O = [T_0, ..., T_{heads-1}]``).

    Args:
        conv: The convolution (weights are read detached).
        patch_size: Patch side ``P`` in pixels.

    Returns:
        Tensor of shape ``(heads, C_out * (P/s_y) * (P/s_x), C_in * P * P)``.

    Raises:
        LandscapeError: If ``conv`` is not covered by the construction (even kernel, groups or dilation
            not 1, non-zero padding mode, padding other than ``K // 2``, stride not dividing ``patch_size``)
            or ``patch_size < 1``.
    """
    _check_conv(conv, patch_size)
    weight = conv.weight.detach()
    c_out, c_in, kh, kw = weight.shape
    sy, sx = _pair(conv.stride)
    P = patch_size
    m = ring_width((kh, kw), P)
    offsets = torch.tensor(neighbour_offsets(m))
    # index grids (head, u, i) for rows and (head, v, j) for columns
    u = torch.arange(P // sy)
    v = torch.arange(P // sx)
    i = torch.arange(P)
    a = offsets[:, 0].view(-1, 1, 1) * P + i.view(1, 1, -1) - u.view(1, -1, 1) * sy + kh // 2  # (h, u, i)
    b = offsets[:, 1].view(-1, 1, 1) * P + i.view(1, 1, -1) - v.view(1, -1, 1) * sx + kw // 2  # (h, v, j)
    ok_a = (a >= 0) & (a < kh)
    ok_b = (b >= 0) & (b < kw)
    # gathered[h, o, c, u, i, v, j] = weight[o, c, a[h, u, i], b[h, v, j]]
    a_c = a.clamp(0, kh - 1)
    b_c = b.clamp(0, kw - 1)
    gathered = weight[:, :, a_c[:, :, :, None, None], b_c[:, None, None, :, :]]  # (o, c, h, u, i, v, j)
    mask = ok_a[:, :, :, None, None] & ok_b[:, None, None, :, :]
    gathered = gathered * mask.to(weight.dtype)
    heads = offsets.shape[0]
    blocks = gathered.permute(2, 0, 3, 5, 1, 4, 6)  # (h, o, u, v, c, i, j)
    return blocks.reshape(heads, c_out * (P // sy) * (P // sx), c_in * P * P).contiguous()


def patchify(x: Tensor, patch_size: int) -> Tensor:
    """Cut NCHW images into ``P x P`` patch tokens: ``(B, H/P, W/P, C*P*P)``, channel-major in a token.

    Args:
        x: Images of shape ``(B, C, H, W)``; ``H`` and ``W`` are assumed to be multiples of ``patch_size``.
        patch_size: Patch side ``P`` in pixels.

    Returns:
        Tensor of shape ``(B, H // P, W // P, C * P * P)``.
    """
    B, C, H, W = x.shape
    P = patch_size
    x = x.reshape(B, C, H // P, P, W // P, P)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(B, H // P, W // P, C * P * P)


def unpatchify(tokens: Tensor, channels: int, patch_hw: tuple[int, int]) -> Tensor:
    """Invert :func:`patchify` for tokens ``(B, gh, gw, C*ph*pw)``: return NCHW ``(B, C, gh*ph, gw*pw)``.

    Args:
        tokens: Patch tokens of shape ``(B, gh, gw, channels * ph * pw)``.
        channels: Number of channels ``C`` per pixel.
        patch_hw: ``(ph, pw)``, the height and width of a patch.

    Returns:
        Tensor of shape ``(B, channels, gh * ph, gw * pw)``.
    """
    B, gh, gw, _ = tokens.shape
    ph, pw = patch_hw
    x = tokens.reshape(B, gh, gw, channels, ph, pw)
    return x.permute(0, 3, 1, 4, 2, 5).reshape(B, channels, gh * ph, gw * pw)


def offset_bias(offsets: Tensor, query_pos: Tensor, key_pos: Tensor, sharpness: float, profile: str = "gap") -> Tensor:
    """Return the relative position bias ``phi_h(pos(k) - pos(q))`` of shape ``(heads, Nq, Nk)``.

    ``profile="gap"``: ``phi_h(delta) = 0`` if ``delta == Delta_h`` else ``-c``. ``profile="quadratic"``
    (Cordonnier et al.): ``phi_h(delta) = -c * ||delta - Delta_h||^2``. ``offsets`` is ``(heads, 2)``,
    positions are ``(N, 2)`` integer (row, col) tensors.

    Args:
        offsets: ``(heads, 2)`` long tensor of the target offsets ``Delta_h``.
        query_pos: ``(Nq, 2)`` integer positions of the queries.
        key_pos: ``(Nk, 2)`` integer positions of the keys.
        sharpness: The margin ``c`` of the bias.
        profile: ``"gap"`` or ``"quadratic"`` (see :data:`BIAS_PROFILES`).

    Returns:
        Tensor of shape ``(heads, Nq, Nk)`` in the default dtype.

    Raises:
        LandscapeError: If ``profile`` is not one of :data:`BIAS_PROFILES`.
    """
    if profile not in BIAS_PROFILES:
        raise LandscapeError(f"unknown bias profile {profile!r}; use one of {', '.join(BIAS_PROFILES)}")
    delta = key_pos[None, :, :] - query_pos[:, None, :]  # (Nq, Nk, 2)
    diff = delta[None] - offsets[:, None, None, :]  # (h, Nq, Nk, 2)
    if profile == "gap":
        return -sharpness * (diff != 0).any(dim=-1).to(torch.get_default_dtype())
    return -sharpness * diff.pow(2).sum(dim=-1).to(torch.get_default_dtype())


class ConvAttention(nn.Module):
    """A multi-head self-attention layer with relative position bias on patch tokens, built to equal a conv.

    Forward: NCHW image ``(B, C_in, H, W)`` (H, W multiples of ``patch_size``) -> patch tokens -> MHSA over
    the token grid plus a ring of ``ring`` zero key/value tokens -> output tokens -> NCHW
    ``(B, C_out, H / s_y, W / s_x)``. Score of head ``h``: ``(W_Q^h x_q) . (W_K^h x_k) / sqrt(d_k) +
    phi_h(pos(k) - pos(q))``; output ``W_O [head_1; ...; head_H] + b_O`` with head ``h`` =
    ``sum_k softmax_k(score) W_V^h x_k``. Built by :func:`conv_to_attention`; all weights are parameters,
    so the layer can also be fitted or fine-tuned.

    Args:
        w_q: Query weights, shape ``(heads, d_k, d)`` with ``d = C_in * P * P``.
        w_k: Key weights, shape ``(heads, d_k, d)``.
        w_v: Value weights, shape ``(heads, d_v, d)``.
        w_o: Output weights, shape ``(d_out, heads * d_v)`` with ``d_out = C_out * out_patch[0] * out_patch[1]``.
        b_o: Output bias, shape ``(d_out,)``.
        offsets: The ``(dy, dx)`` patch offset ``Delta_h`` of each head.
        patch_size: Patch side ``P`` of the input tokens, in pixels.
        out_patch: ``(P / s_y, P / s_x)``, the size of an output patch.
        out_chans: Number of output channels ``C_out``.
        ring: Width ``m`` of the ring of zero key/value tokens around the grid.
        sharpness: The margin ``c`` of the position bias.
        profile: Position-bias profile, ``"gap"`` or ``"quadratic"``.

    Attributes:
        offsets: Non-persistent ``(heads, 2)`` long buffer of the head offsets.
    """

    def __init__(
        self,
        w_q: Tensor,
        w_k: Tensor,
        w_v: Tensor,
        w_o: Tensor,
        b_o: Tensor,
        offsets: list[tuple[int, int]],
        patch_size: int,
        out_patch: tuple[int, int],
        out_chans: int,
        ring: int,
        sharpness: float,
        profile: str = "gap",
    ) -> None:
        super().__init__()
        self.w_q = nn.Parameter(w_q)  # (heads, d_k, d)
        self.w_k = nn.Parameter(w_k)
        self.w_v = nn.Parameter(w_v)  # (heads, d_v, d)
        self.w_o = nn.Parameter(w_o)  # (d_out, heads * d_v)
        self.b_o = nn.Parameter(b_o)  # (d_out,)
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.long).view(-1, 2), persistent=False)
        self.patch_size = patch_size
        self.out_patch = out_patch
        self.out_chans = out_chans
        self.ring = ring
        self.sharpness = float(sharpness)
        self.profile = profile

    @property
    def num_heads(self) -> int:
        """The number of attention heads."""
        return self.w_v.shape[0]

    def attention(self, x: Tensor) -> tuple[Tensor, Tensor, tuple[int, int]]:
        """Return the attention weights ``(B, heads, Nq, Nk)``, the padded key tokens and the grid size.

        Keys are the ``(gh + 2r) x (gw + 2r)`` padded grid (row-major); queries the inner ``gh x gw`` grid.
        The weights are ``softmax_k((W_Q^h x_q) . (W_K^h x_k) / sqrt(d_k) + phi_h(pos(k) - pos(q)))``.

        Args:
            x: Images of shape ``(B, C_in, H, W)``, ``H`` and ``W`` multiples of ``patch_size``.

        Returns:
            ``(attn, keys, (gh, gw))``: attention weights ``(B, heads, gh*gw, (gh+2r)*(gw+2r))``, the padded
            key tokens ``(B, (gh+2r)*(gw+2r), d)`` and the patch-grid size.

        Raises:
            LandscapeError: If ``H`` or ``W`` is not a multiple of ``patch_size``.
        """
        B, _, H, W = x.shape
        P = self.patch_size
        if H % P or W % P:
            raise LandscapeError(f"image size {H}x{W} is not a multiple of the patch size {P}")
        tokens = patchify(x, P)  # (B, gh, gw, d)
        gh, gw = tokens.shape[1:3]
        r = self.ring
        keys = F.pad(tokens, (0, 0, r, r, r, r)).reshape(B, (gh + 2 * r) * (gw + 2 * r), -1)
        queries = tokens.reshape(B, gh * gw, -1)
        q = torch.einsum("bnd,hed->bhne", queries, self.w_q)
        k = torch.einsum("bnd,hed->bhne", keys, self.w_k)
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        bias = offset_bias(
            self.offsets,
            grid_positions(gh, gw, start=r),
            grid_positions(gh + 2 * r, gw + 2 * r),
            self.sharpness,
            self.profile,
        ).to(device=x.device, dtype=scores.dtype)
        return (scores + bias).softmax(dim=-1), keys, (gh, gw)

    def forward(self, x: Tensor) -> Tensor:
        """Return the layer's output as an NCHW map (equal to the convolution as sharpness -> infinity).

        Args:
            x: Images of shape ``(B, C_in, H, W)``, ``H`` and ``W`` multiples of ``patch_size``.

        Returns:
            Tensor of shape ``(B, C_out, H / s_y, W / s_x)``.

        Raises:
            LandscapeError: If ``H`` or ``W`` is not a multiple of ``patch_size``.
        """
        attn, keys, (gh, gw) = self.attention(x)
        values = torch.einsum("bnd,hed->bhne", keys, self.w_v)
        heads = attn @ values  # (B, heads, Nq, d_v)
        B = heads.shape[0]
        out = heads.permute(0, 2, 1, 3).reshape(B, gh * gw, -1) @ self.w_o.T + self.b_o
        return unpatchify(out.reshape(B, gh, gw, -1), self.out_chans, self.out_patch)

    def target_mass(self, attn: Tensor, grid: tuple[int, int]) -> Tensor:
        """Return the attention each head puts on its own offset, ``(B, heads, Nq)``, from ``attention``.

        Args:
            attn: Attention weights ``(B, heads, Nq, Nk)`` as returned by :meth:`attention`.
            grid: ``(gh, gw)``, the patch-grid size returned by :meth:`attention`.

        Returns:
            Tensor of shape ``(B, heads, Nq)``: ``attn[b, h, q, q + Delta_h]``.
        """
        gh, gw = grid
        r = self.ring
        qpos = grid_positions(gh, gw, start=r).to(attn.device)  # (Nq, 2) in padded coordinates
        tpos = qpos[None] + self.offsets.to(attn.device)[:, None, :]  # (h, Nq, 2)
        index = tpos[..., 0] * (gw + 2 * r) + tpos[..., 1]
        return attn.gather(-1, index[None, :, :, None].expand(attn.shape[0], -1, -1, 1)).squeeze(-1)


def conv_to_attention(
    conv: nn.Conv2d,
    patch_size: int,
    sharpness: float = 30.0,
    profile: str = "gap",
    qk_dim: int = 1,
) -> ConvAttention:
    """Build the :class:`ConvAttention` layer that computes ``conv`` on ``patch_size`` patch tokens.

    ``conv``: any ``nn.Conv2d`` with odd kernel, zero "same" padding (``K // 2``), stride dividing
    ``patch_size``, groups 1, dilation 1, with or without bias. ``patch_size = 1`` is pixel input (``K^2``
    heads). ``sharpness`` is the margin ``c`` of the position bias; the output equals the convolution up to
    an error of order ``n e^{-c}`` (gap profile, ``n`` keys). ``W_Q = W_K = 0`` of shape
    ``(heads, qk_dim, d)``. The layer is a copy: later changes to ``conv`` do not affect it.

    Args:
        conv: The convolution to reproduce.
        patch_size: Patch side ``P`` in pixels.
        sharpness: The margin ``c`` of the position bias.
        profile: Position-bias profile, ``"gap"`` or ``"quadratic"``.
        qk_dim: Width ``d_k`` of the (all-zero) query and key projections.

    Returns:
        The :class:`ConvAttention` layer, with ``heads_needed(K, P)`` heads.

    Raises:
        LandscapeError: If ``conv`` is not covered by the construction (even kernel, groups or dilation
            not 1, non-zero padding mode, padding other than ``K // 2``, stride not dividing ``patch_size``)
            or ``patch_size < 1``.
    """
    _check_conv(conv, patch_size)
    weight = conv.weight.detach()
    c_out, c_in, kh, kw = weight.shape
    sy, sx = _pair(conv.stride)
    m = ring_width((kh, kw), patch_size)
    offsets = neighbour_offsets(m)
    heads = len(offsets)
    d = c_in * patch_size * patch_size
    blocks = neighbourhood_blocks(conv, patch_size)  # (heads, d_out, d)
    w_o = blocks.permute(1, 0, 2).reshape(blocks.shape[1], heads * d)
    out_patch = (patch_size // sy, patch_size // sx)
    bias = conv.bias.detach() if conv.bias is not None else weight.new_zeros(c_out)
    b_o = bias.repeat_interleave(out_patch[0] * out_patch[1])
    zeros = weight.new_zeros(heads, qk_dim, d)
    w_v = torch.eye(d, dtype=weight.dtype, device=weight.device).expand(heads, d, d).clone()
    return ConvAttention(
        zeros, zeros.clone(), w_v, w_o, b_o.clone(), offsets, patch_size, out_patch, c_out, m, sharpness, profile
    )


@dataclass
class ConstructionReport:
    """How closely a :class:`ConvAttention` layer reproduces its convolution on a batch.

    ``off_target_mass``: the largest attention weight a head puts off its own offset (max over samples,
    heads and queries); ``predicted_mass``: the closed form ``(n-1) e^{-c} / (1 + (n-1) e^{-c})`` of the gap
    profile with zero content term (``n`` keys); ``max_abs_error``: ``max |attn(x) - conv(x)|``;
    ``max_rel_error``: ``max_abs_error / max |conv(x)|``.

    Attributes:
        heads: Number of heads of the layer.
        sharpness: The margin ``c`` the layer was built with.
        off_target_mass: Largest attention mass put off a head's own offset.
        predicted_mass: Closed-form off-target mass of the gap profile.
        max_abs_error: ``max |attn(x) - conv(x)|``.
        max_rel_error: ``max_abs_error / max |conv(x)|``.
    """

    heads: int
    sharpness: float
    off_target_mass: float
    predicted_mass: float
    max_abs_error: float
    max_rel_error: float


def construction_error(
    conv: nn.Conv2d, patch_size: int, x: Tensor, sharpness: float = 30.0, profile: str = "gap"
) -> ConstructionReport:
    """Build the layer for ``conv`` at ``sharpness`` and measure its attention leak and error on ``x``.

    The reference is ``F.conv2d`` with the convolution's own weights (``conv(x)``).

    Args:
        conv: The convolution to reproduce.
        patch_size: Patch side ``P`` in pixels.
        x: Images of shape ``(B, C_in, H, W)``, ``H`` and ``W`` multiples of ``patch_size``.
        sharpness: The margin ``c`` of the position bias.
        profile: Position-bias profile, ``"gap"`` or ``"quadratic"``.

    Returns:
        A :class:`ConstructionReport` with the off-target mass and the errors against ``conv(x)``.

    Raises:
        LandscapeError: If ``conv`` is not covered by the construction (even kernel, groups or dilation
            not 1, non-zero padding mode, padding other than ``K // 2``, stride not dividing ``patch_size``)
            or ``patch_size < 1``.
    """
    layer = conv_to_attention(conv, patch_size, sharpness, profile).to(x.device)
    with torch.no_grad():
        attn, _, grid = layer.attention(x)
        off = 1.0 - layer.target_mass(attn, grid)
        err = (layer(x) - conv(x)).abs().max()
        ref = conv(x).abs().max().clamp_min(torch.finfo(x.dtype).tiny)
    n = attn.shape[-1]
    leak = (n - 1) * math.exp(-sharpness)
    return ConstructionReport(
        heads=layer.num_heads,
        sharpness=float(sharpness),
        off_target_mass=float(off.max()),
        predicted_mass=leak / (1.0 + leak),
        max_abs_error=float(err),
        max_rel_error=float(err / ref),
    )


# --------------------------------------------------------------------------------------------------------
# The head lower bound


def head_lower_bound(conv: nn.Conv2d, patch_size: int, num_heads: int) -> float:
    """Return a lower bound on the relative error of any ``num_heads``-head position-only attention layer.

    With attention weights ``a_hk`` that do not depend on the content (any relative position bias, any
    sharpness, ``W_Q = W_K = 0``), the layer's output at a query is ``sum_k (sum_h a_hk M_h) x_k`` with
    ``M_h = W_O^h W_V^h``: every per-offset map lies in the span of ``num_heads`` matrices. The convolution's
    per-offset maps are the blocks ``T_h`` of :func:`neighbourhood_blocks`; by Eckart-Young the best such
    approximation leaves ``sum_{i > num_heads} sigma_i^2`` of ``sum_i sigma_i^2``, where ``sigma_i`` are the
    singular values of the matrix whose rows are ``vec(T_h)``. On white-noise input the expected squared
    output error relative to the expected squared output is therefore at least the square of the returned
    value ``sqrt(sum_{i > H} sigma_i^2 / sum_i sigma_i^2)``. It is 0 when ``num_heads >= heads_needed``.

    Args:
        conv: The convolution.
        patch_size: Patch side ``P`` in pixels.
        num_heads: Number of heads ``H`` of the approximating layer.

    Returns:
        The relative-error lower bound in ``[0, 1]`` (0 for an all-zero kernel).

    Raises:
        LandscapeError: If ``conv`` is not covered by the construction (even kernel, groups or dilation
            not 1, non-zero padding mode, padding other than ``K // 2``, stride not dividing ``patch_size``)
            or ``patch_size < 1``.
    """
    blocks = neighbourhood_blocks(conv, patch_size)
    sigma = torch.linalg.svdvals(blocks.reshape(blocks.shape[0], -1).double())
    total = sigma.pow(2).sum()
    if total == 0:
        return 0.0
    return float((sigma[num_heads:].pow(2).sum() / total).sqrt())


def fit_heads(conv: nn.Conv2d, patch_size: int, offsets: list[tuple[int, int]], x: Tensor) -> float:
    """Least-squares fit of ``W_O`` (and bias) for one-hot heads at ``offsets``; return the relative residual.

    The heads attend exactly to the patch at their offset (the limit ``c -> infinity``) with identity values;
    ``W_O`` is the best linear map from those patches to the convolution's output patch over the interior
    queries of ``x`` (those whose whole ``(2m+1) x (2m+1)`` patch neighbourhood lies on the grid, so that no
    zero padding helps a missing head). Returns ``||Y - Y_fit||_F / ||Y - mean(Y)||_F`` (the bias is fitted
    too), computed in float64. Raises :class:`LandscapeError` when ``x`` has fewer interior queries than
    unknowns per output.

    Args:
        conv: The convolution whose output is fitted.
        patch_size: Patch side ``P`` in pixels.
        offsets: The ``(dy, dx)`` patch offsets of the available heads.
        x: Images of shape ``(B, C_in, H, W)``, ``H`` and ``W`` multiples of ``patch_size``.

    Returns:
        The relative residual ``||Y - Y_fit||_F / ||Y - mean(Y)||_F``.

    Raises:
        LandscapeError: If ``conv`` is not covered by the construction (even kernel, groups or dilation
            not 1, non-zero padding mode, padding other than ``K // 2``, stride not dividing ``patch_size``)
            or ``patch_size < 1``.
        LandscapeError: If ``x`` has fewer than twice as many interior queries as unknowns per output.
    """
    _check_conv(conv, patch_size)
    x = x.double()
    with torch.no_grad():
        target = _as_double(conv)(x)
    sy, sx = _pair(conv.stride)
    P = patch_size
    m = ring_width(_pair(conv.kernel_size), P)
    tokens = patchify(x, P)  # (B, gh, gw, d)
    B, gh, gw, d = tokens.shape
    n_rows = B * max(gh - 2 * m, 0) * max(gw - 2 * m, 0)
    n_cols = len(offsets) * d + 1
    if n_rows < 2 * n_cols:
        raise LandscapeError(
            f"{n_rows} interior queries cannot pin down {n_cols} unknowns per output; use at least "
            f"{-(-2 * n_cols // max(n_rows // B, 1))} images of this size"
        )
    ys, xs = slice(m, gh - m), slice(m, gw - m)
    feats = [tokens[:, m + dy : gh - m + dy, m + dx : gw - m + dx] for dy, dx in offsets]
    design = torch.cat(feats + [torch.ones_like(tokens[:, ys, xs, :1])], dim=-1).reshape(n_rows, -1)
    y = target.reshape(B, -1, gh, P // sy, gw, P // sx).permute(0, 2, 4, 1, 3, 5)[:, ys, xs].reshape(n_rows, -1)
    solution = torch.linalg.lstsq(design, y, driver="gelsd").solution
    residual = (design @ solution - y).norm()
    return float(residual / (y - y.mean(dim=0)).norm())


def best_fit_fewer_heads(
    conv: nn.Conv2d, patch_size: int, num_heads: int, x: Tensor
) -> tuple[float, list[tuple[int, int]]]:
    """Return the smallest :func:`fit_heads` residual over every choice of ``num_heads`` neighbour offsets.

    The candidates are the ``(2m+1)^2`` offsets of the construction (for 8 of 9 heads: 9 subsets). Also
    returns the best subset.

    Args:
        conv: The convolution whose output is fitted.
        patch_size: Patch side ``P`` in pixels.
        num_heads: Size of each subset of offsets.
        x: Images of shape ``(B, C_in, H, W)``, ``H`` and ``W`` multiples of ``patch_size``.

    Returns:
        ``(residual, offsets)``: the smallest relative residual and the subset that reaches it.

    Raises:
        LandscapeError: If there are more than 5000 subsets of size ``num_heads``.
        LandscapeError: Any error of :func:`fit_heads` (unsupported ``conv``, too few interior queries).
    """
    m = ring_width(_pair(conv.kernel_size), patch_size)
    candidates = neighbour_offsets(m)
    if math.comb(len(candidates), num_heads) > 5000:
        raise LandscapeError(f"too many head subsets of size {num_heads}; use fewer offsets or head_lower_bound")
    best: tuple[float, list[tuple[int, int]]] = (math.inf, [])
    for subset in itertools.combinations(candidates, num_heads):
        res = fit_heads(conv, patch_size, list(subset), x)
        if res < best[0]:
            best = (res, list(subset))
    return best


def _as_double(conv: nn.Conv2d) -> nn.Conv2d:
    """Return a float64 copy of ``conv`` (the original is left untouched)."""
    kh, kw = _pair(conv.kernel_size)
    copy = nn.Conv2d(
        conv.in_channels, conv.out_channels, (kh, kw), conv.stride, (kh // 2, kw // 2), bias=conv.bias is not None
    ).double()
    with torch.no_grad():
        copy.weight.copy_(conv.weight)
        if conv.bias is not None:
            copy.bias.copy_(conv.bias)
    return copy
