"""AlterNet (Park & Kim 2022): a pre-activation ResNet whose stages end with alternating Conv/MSA blocks.

In a stage of ``n1`` blocks with ``n2`` MSA blocks the pattern is ``[Conv] * (n1 - 2*n2) + [Conv, MSA] * n2``;
the first block of a stage is a Conv and carries the stride. Conv blocks are the pre-activation blocks of
:class:`~landscape.models.resnet.ResNet`. An MSA block (as in the official code) is

    x + DropPath(proj(WindowAttention(BN(conv1x1(GELU(BN(x)))))))

with the 1x1 conv reducing the channels to ``channels / expansion`` (the stage's inner width), q, k, v by
1x1 convs without bias, ``heads[s]`` heads of ``dim_head`` dims, a window of ``min(window, map size)``,
one learned relative-position bias table per block (shared by its heads unless ``rel_pos_per_head``), a
1x1 output conv and an identity skip. There is no MLP inside the block.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from landscape.errors import LandscapeError
from landscape.models.layers import DropPath, WindowAttention, conv1x1, drop_path_rates
from landscape.models.registry import register_model
from landscape.models.resnet import BlockSpec, ResNet


class MSABlock(nn.Module):
    """AlterNet's pre-activation windowed multi-head self-attention block (``kind == "msa"``).

    Computes ``x + DropPath(WindowAttention(BN(conv1x1(GELU(BN(x))))))``.

    Args:
        channels: Channels of the input and output map.
        width: Channels after the 1x1 reduction (the attention's input width).
        num_heads: Number of attention heads.
        dim_head: Width per head.
        window: Side of the square attention window.
        drop_path: Stochastic-depth rate of the attention branch.
        rel_pos_per_head: One relative-position table per head instead of one shared table.

    Raises:
        LandscapeError: If ``drop_path`` is not in ``[0, 1)``.
    """

    def __init__(
        self,
        channels: int,
        width: int,
        num_heads: int,
        dim_head: int,
        window: int,
        drop_path: float = 0.0,
        rel_pos_per_head: bool = False,
    ) -> None:
        super().__init__()
        self.kind = "msa"
        self.norm1 = nn.BatchNorm2d(channels)
        self.act = nn.GELU()
        self.conv = conv1x1(channels, width)
        self.norm2 = nn.BatchNorm2d(width)
        self.attn = WindowAttention(width, channels, num_heads, dim_head, window, rel_pos_per_head)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: Tensor) -> Tensor:
        """Return ``x`` plus the attention branch (same shape as ``x``).

        Args:
            x: Feature map of shape ``(B, channels, H, W)``, ``H`` and ``W`` multiples of ``window``.

        Returns:
            Tensor of shape ``(B, channels, H, W)``.

        Raises:
            LandscapeError: If ``H`` or ``W`` is not a multiple of the window.
        """
        return x + self.drop_path(self.attn(self.norm2(self.conv(self.act(self.norm1(x))))))


def msa_pattern(num_blocks: int, num_msa: int) -> list[bool]:
    """Return, per block of a stage, whether it is an MSA block: ``[F]*(n1-2*n2) + [F, T]*n2``.

    Args:
        num_blocks: Number of blocks ``n1`` in the stage.
        num_msa: Number of MSA blocks ``n2`` in the stage.

    Returns:
        A list of ``num_blocks`` booleans, True for MSA blocks.

    Raises:
        LandscapeError: If ``num_msa < 0`` or ``2 * num_msa > num_blocks``.
    """
    if num_msa < 0 or 2 * num_msa > num_blocks:
        raise LandscapeError(
            f"a stage of {num_blocks} blocks holds at most {num_blocks // 2} MSA blocks, got {num_msa}; "
            "lower msa_blocks or raise layers"
        )
    return [False] * (num_blocks - 2 * num_msa) + [False, True] * num_msa


class AlterNet(ResNet):
    """AlterNet: pre-activation (bottleneck by default) ResNet with MSA blocks at the end of stages.

    ``msa_blocks[s]`` MSA blocks go into stage ``s`` following :func:`msa_pattern`. ``heads[s]`` heads of
    ``dim_head`` dims attend in windows of ``min(window, map size)`` (4 for CIFAR, 7 for ImageNet inputs);
    ``img_size`` fixes the map sizes. ``drop_path_rate`` is the stochastic depth of the last block, rising
    linearly over all blocks (only MSA blocks have a droppable branch, as in the official code).

    Args:
        layers: Number of blocks per stage.
        msa_blocks: Number of MSA blocks per stage (at most half the stage's blocks).
        widths: Inner width per stage.
        heads: Number of attention heads per stage.
        dim_head: Width per attention head.
        window: Largest attention window side (capped at each stage's map size).
        rel_pos_per_head: One relative-position table per head instead of one per block.
        drop_path_rate: Stochastic-depth rate of the last block (linear schedule over all blocks).
        block: ResNet block type, ``"basic"`` or ``"bottleneck"``.
        stem: ``"cifar"`` or ``"imagenet"`` stem.
        in_chans: Number of input channels.
        num_classes: Number of output logits.
        img_size: Input image size, which fixes the map sizes and windows.

    Attributes:
        msa_blocks: The number of MSA blocks per stage, as a tuple.

    Raises:
        LandscapeError: If ``layers``, ``msa_blocks`` and ``heads`` differ in length, a stage holds too many
            MSA blocks, ``drop_path_rate`` is not in ``[0, 1)``, or as :class:`ResNet` does for invalid
            arguments.
    """

    def __init__(
        self,
        layers: Sequence[int] = (3, 4, 6, 4),
        msa_blocks: Sequence[int] = (0, 1, 1, 2),
        widths: Sequence[int] = (64, 128, 256, 512),
        heads: Sequence[int] = (3, 6, 12, 24),
        dim_head: int = 64,
        window: int = 4,
        rel_pos_per_head: bool = False,
        drop_path_rate: float = 0.0,
        block: str = "bottleneck",
        stem: str = "cifar",
        in_chans: int = 3,
        num_classes: int = 10,
        img_size: int = 32,
    ) -> None:
        layers, msa_blocks, heads = tuple(layers), tuple(msa_blocks), tuple(heads)
        if not len(layers) == len(msa_blocks) == len(heads):
            raise LandscapeError("AlterNet needs one entry per stage in layers, msa_blocks and heads")
        patterns = [msa_pattern(n1, n2) for n1, n2 in zip(layers, msa_blocks)]
        rates = drop_path_rates(drop_path_rate, sum(layers))

        def factory(spec: BlockSpec) -> nn.Module | None:
            if not patterns[spec.stage][spec.index]:
                return None
            return MSABlock(
                channels=spec.in_chans,
                width=spec.in_chans // (4 if spec.bottleneck else 1),
                num_heads=heads[spec.stage],
                dim_head=dim_head,
                window=min(window, spec.map_size),
                drop_path=rates[spec.global_index],
                rel_pos_per_head=rel_pos_per_head,
            )

        super().__init__(
            block=block,
            layers=layers,
            widths=widths,
            preact=True,
            stem=stem,
            in_chans=in_chans,
            num_classes=num_classes,
            img_size=img_size,
            block_factory=factory,
        )
        self.msa_blocks = msa_blocks


def _alternet(defaults: dict, num_classes: int, kwargs: dict) -> AlterNet:
    return AlterNet(**{**defaults, **kwargs}, num_classes=num_classes)


@register_model
def alternet50(num_classes: int = 10, **kwargs) -> AlterNet:
    """Alter-ResNet-50 for CIFAR: bottleneck stages 3-4-6-4 with (0, 1, 1, 2) MSA blocks, window 4.

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`AlterNet` arguments; they override the defaults above.

    Returns:
        The :class:`AlterNet`.

    Raises:
        LandscapeError: As :class:`AlterNet` does, for invalid arguments.
    """
    return _alternet({}, num_classes, kwargs)


@register_model
def alternet_mini(num_classes: int = 10, **kwargs) -> AlterNet:
    """A CPU-sized AlterNet: bottleneck stages 1-2-2-2, widths 8-16-32-64, MSAs (0, 1, 1, 1), 16 dims/head.

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`AlterNet` arguments; they override the defaults above.

    Returns:
        The :class:`AlterNet`.

    Raises:
        LandscapeError: As :class:`AlterNet` does, for invalid arguments.
    """
    defaults = {
        "layers": (1, 2, 2, 2),
        "msa_blocks": (0, 1, 1, 1),
        "widths": (8, 16, 32, 64),
        "heads": (1, 2, 2, 4),
        "dim_head": 16,
    }
    return _alternet(defaults, num_classes, kwargs)
