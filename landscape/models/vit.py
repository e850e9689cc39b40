"""Vision Transformer with a CLS token and absolute or relative position encoding, in one class.

Position encoding ``"abs"``: a learned embedding ``pos_embed`` (1, 1 + N, dim) added to CLS + patch tokens.
``"rpe"``: no embedding; every attention layer has its own learned relative position bias per head over the
patch grid (``blocks.i.attn.rel_pos.table``, see :class:`~landscape.models.layers.RelativePositionBias`).
The CLS token then gets three learned biases per head (``rel_pos.cls_bias``: CLS->patch, patch->CLS,
CLS->CLS), initialised to zero, so a converted model can switch the CLS key off for patch queries.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from landscape.errors import LandscapeError
from landscape.models.layers import Attention, DropPath, Feature, Mlp, drop_path_rates, tokens_to_grid
from landscape.models.registry import register_model

POS_EMBEDS = ("abs", "rpe")


def check_image_size(x: Tensor, img_size: int) -> None:
    """Refuse images that are not ``img_size x img_size`` (one call in a graph traced by torch.fx, not traced into).

    Args:
        x: Images of shape ``(B, C, H, W)``.
        img_size: The side the ViT was built for.

    Raises:
        LandscapeError: If ``H`` or ``W`` is not ``img_size``.
    """
    height, width = x.shape[-2:]
    if height != img_size or width != img_size:
        raise LandscapeError(
            f"this ViT was built for {img_size}x{img_size} images, got {height}x{width}; "
            f"build it with img_size={height}"
        )


torch.fx.wrap("check_image_size")


class Block(nn.Module):
    """Pre-norm transformer block: ``x + MSA(LN(x))`` then ``x + MLP(LN(x))``.

    Args:
        dim: Token width.
        num_heads: Number of attention heads.
        head_dim: Width per head; ``None`` means ``dim // num_heads``.
        mlp_ratio: Hidden width of the MLP relative to ``dim``.
        qkv_bias: Whether the qkv projection has a bias.
        drop_path: Stochastic-depth rate of both residual branches.
        grid_size: Patch grid ``(H, W)`` for a relative position bias (with one CLS token); ``None`` for none.

    Raises:
        LandscapeError: If ``head_dim`` is ``None`` and ``dim`` is not divisible by ``num_heads``, or
            ``drop_path`` is not in ``[0, 1)``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        head_dim: int | None,
        mlp_ratio: float,
        qkv_bias: bool,
        drop_path: float,
        grid_size: tuple[int, int] | None,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(
            dim, num_heads, head_dim, qkv_bias, grid_size=grid_size, num_prefix_tokens=1 if grid_size is not None else 0
        )
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.drop_path2 = DropPath(drop_path)

    def forward_parts(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Return the tokens after MSA + skip, ``y = x + MSA(LN(x))``, and after MLP + skip, ``y + MLP(LN(y))``.

        Args:
            x: Tokens of shape ``(B, N, dim)``.

        Returns:
            ``(after_msa, after_mlp)``, both of shape ``(B, N, dim)``.
        """
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return x, x + self.drop_path2(self.mlp(self.norm2(x)))

    def forward(self, x: Tensor) -> Tensor:
        """Return the block's output tokens ``y + MLP(LN(y))`` with ``y = x + MSA(LN(x))``.

        Args:
            x: Tokens of shape ``(B, N, dim)``.

        Returns:
            Tensor of shape ``(B, N, dim)``.
        """
        return self.forward_parts(x)[1]


class ViT(nn.Module):
    """ViT classifying from the CLS token: patch conv, CLS, position encoding, pre-norm blocks, final LN.

    ``head_dim`` defaults to ``embed_dim // num_heads``; set it when the heads do not divide the width
    (e.g. 9 heads for the convolution construction). Blocks are ``blocks.{i}``.

    Args:
        img_size: Side of the square input images, in pixels (inputs of another size are refused).
        patch_size: Side of a square patch; must divide ``img_size``.
        in_chans: Number of input channels.
        embed_dim: Token width.
        depth: Number of transformer blocks.
        num_heads: Number of attention heads per block.
        mlp_ratio: Hidden width of each MLP relative to ``embed_dim``.
        qkv_bias: Whether the qkv projections have a bias.
        pos_embed: Position encoding, ``"abs"`` (learned embedding) or ``"rpe"`` (relative position bias).
        drop_path_rate: Stochastic-depth rate of the last block (linear schedule from 0).
        num_classes: Number of output logits.
        head_dim: Width per head; ``None`` means ``embed_dim // num_heads``.

    Attributes:
        grid_size: ``(img_size // patch_size, img_size // patch_size)``, the patch grid.
        num_prefix_tokens: Number of prefix tokens (1, the CLS token).
        pos_embed: Parameter ``(1, 1 + N, embed_dim)`` for ``"abs"``, ``None`` for ``"rpe"``.

    Raises:
        LandscapeError: If ``pos_embed`` is not one of :data:`POS_EMBEDS`, ``img_size`` is not a multiple of
            ``patch_size``, ``head_dim`` is ``None`` and ``embed_dim`` is not divisible by ``num_heads``, or
            ``drop_path_rate`` is not in ``[0, 1)``.
    """

    def __init__(
        self,
        img_size: int = 32,
        patch_size: int = 2,
        in_chans: int = 3,
        embed_dim: int = 192,
        depth: int = 12,
        num_heads: int = 3,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = False,
        pos_embed: str = "abs",
        drop_path_rate: float = 0.0,
        num_classes: int = 10,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        if pos_embed not in POS_EMBEDS:
            raise LandscapeError(f"unknown position encoding {pos_embed!r}; use one of {', '.join(POS_EMBEDS)}")
        if img_size % patch_size:
            raise LandscapeError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        self.num_classes = num_classes
        self.img_size = img_size
        self.patch_size = patch_size
        self.grid_size = (img_size // patch_size, img_size // patch_size)
        self.num_prefix_tokens = 1
        num_patches = self.grid_size[0] * self.grid_size[1]
        self.patch_embed = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + num_patches, embed_dim)) if pos_embed == "abs" else None
        grid = self.grid_size if pos_embed == "rpe" else None
        self.blocks = nn.Sequential(
            *[
                Block(embed_dim, num_heads, head_dim, mlp_ratio, qkv_bias, rate, grid)
                for rate in drop_path_rates(drop_path_rate, depth)
            ]
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        if self.pos_embed is not None:
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def embed(self, x: Tensor) -> Tensor:
        """Return the input tokens of the first block: CLS + patch tokens (+ absolute position embedding).

        Args:
            x: Images of shape ``(B, in_chans, img_size, img_size)``.

        Returns:
            Tokens of shape ``(B, 1 + N, embed_dim)``, CLS first, patches row-major.

        Raises:
            LandscapeError: If the images are not ``img_size x img_size``.
        """
        check_image_size(x, self.img_size)
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)  # row-major over the patch grid
        x = torch.cat([self.cls_token.expand(tokens.shape[0], -1, -1), tokens], dim=1)
        return x if self.pos_embed is None else x + self.pos_embed

    def to_grid(self, tokens: Tensor) -> Tensor:
        """Drop the CLS token and reshape the patch tokens row-major to an NCHW map.

        Args:
            tokens: Tokens of shape ``(B, 1 + H*W, C)``.

        Returns:
            Tensor of shape ``(B, C, H, W)`` with ``(H, W) = grid_size``.

        Raises:
            ValueError: If the patch tokens do not fill the grid.
        """
        return tokens_to_grid(tokens[:, self.num_prefix_tokens :], self.grid_size)

    def _forward_blocks(self, x: Tensor, record: list[Feature] | None = None) -> Tensor:
        x = self.embed(x)
        if record is not None:
            record.append(Feature("patch_embed", "embed", self.to_grid(x)))
        for i, blk in enumerate(self.blocks):
            after_msa, x = blk.forward_parts(x)
            if record is not None:
                record.append(Feature(f"blocks.{i}.msa", "msa", self.to_grid(after_msa)))
                record.append(Feature(f"blocks.{i}.mlp", "mlp", self.to_grid(x)))
        return x

    def forward_features(self, x: Tensor) -> Tensor:
        """Return the last block's output tokens (B, 1 + N, dim), before the final norm.

        Args:
            x: Images of shape ``(B, in_chans, img_size, img_size)``.

        Returns:
            Tensor of shape ``(B, 1 + N, embed_dim)``.

        Raises:
            LandscapeError: If the images are not ``img_size x img_size``.
        """
        return self._forward_blocks(x)

    def forward_head(self, tokens: Tensor) -> Tensor:
        """Return logits ``head(LN(tokens)[:, 0])`` from the last block's tokens (final LayerNorm, CLS, Linear).

        Args:
            tokens: Tokens of shape ``(B, 1 + N, embed_dim)``.

        Returns:
            Logits of shape ``(B, num_classes)``.
        """
        return self.head(self.norm(tokens)[:, 0])

    def forward(self, x: Tensor) -> Tensor:
        """Return logits ``(B, num_classes)`` for images ``x`` (B, in_chans, img_size, img_size).

        Args:
            x: Images of shape ``(B, in_chans, img_size, img_size)``.

        Returns:
            Logits of shape ``(B, num_classes)``.

        Raises:
            LandscapeError: If the images are not ``img_size x img_size``.
        """
        return self.forward_head(self.forward_features(x))

    def block_features(self, x: Tensor) -> list[Feature]:
        """Return the embedded patch tokens and, per block, the maps after MSA+skip and after MLP+skip.

        Tokens are shown as NCHW maps (CLS dropped, row-major grid). The model runs in its current mode
        (call ``eval()`` first for analyses); its mode is not changed.

        Args:
            x: Images of shape ``(B, in_chans, img_size, img_size)``.

        Returns:
            ``1 + 2 * depth`` :class:`Feature` records: ``patch_embed`` (kind ``"embed"``), then
            ``blocks.{i}.msa`` and ``blocks.{i}.mlp`` per block, each a ``(B, embed_dim, H, W)`` map.

        Raises:
            LandscapeError: If the images are not ``img_size x img_size``.
        """
        record: list[Feature] = []
        self._forward_blocks(x, record)
        return record


def _vit(defaults: dict, num_classes: int, kwargs: dict) -> ViT:
    return ViT(**{**defaults, **kwargs}, num_classes=num_classes)


@register_model
def vit_ti(num_classes: int = 10, **kwargs) -> ViT:
    """ViT-Ti for 32x32 images: patch 2, width 192, depth 12, 3 heads, MLP ratio 4, absolute positions.

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`ViT` arguments; they override the defaults above.

    Returns:
        The :class:`ViT`.

    Raises:
        LandscapeError: As :class:`ViT` does, for invalid arguments.
    """
    return _vit({"img_size": 32, "patch_size": 2, "embed_dim": 192, "depth": 12, "num_heads": 3}, num_classes, kwargs)


@register_model
def vit_mini(num_classes: int = 10, **kwargs) -> ViT:
    """A CPU-sized ViT for 32x32 images: patch 4, width 64, depth 5, 4 heads (about 255k parameters).

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`ViT` arguments; they override the defaults above.

    Returns:
        The :class:`ViT`.

    Raises:
        LandscapeError: As :class:`ViT` does, for invalid arguments.
    """
    return _vit({"img_size": 32, "patch_size": 4, "embed_dim": 64, "depth": 5, "num_heads": 4}, num_classes, kwargs)
