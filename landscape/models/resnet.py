"""ResNet: basic/bottleneck blocks, post- or pre-activation, CIFAR or ImageNet stem, in one class.

Post-activation (He et al. 2016a): block = conv-BN-ReLU ... conv-BN, add shortcut, ReLU; the projection
shortcut is 1x1 conv + BN. Pre-activation (He et al. 2016b, and the official AlterNet code): block =
BN-ReLU-conv ... BN-ReLU-conv, add shortcut; the projection shortcut is a 1x1 conv applied to the
pre-activated input, the stem is the bare convolution (+ max-pool for the ImageNet stem), and a final
BN-ReLU precedes pooling. The head is global average pooling + Linear. Stride sits on the 3x3 conv.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from landscape.errors import LandscapeError
from landscape.models.layers import Feature, conv1x1, conv3x3, conv_bn
from landscape.models.registry import register_model

STEMS = ("cifar", "imagenet")
BLOCKS = ("basic", "bottleneck")


class ResidualBlock(nn.Module):
    """A basic (two 3x3 convs) or bottleneck (1x1, 3x3, 1x1; expansion 4) residual block.

    ``width`` is the block's inner width; it outputs ``width * expansion`` channels. ``kind`` is
    ``"downsample"`` for a strided block and ``"conv"`` otherwise.

    Args:
        in_chans: Channels of the input map.
        width: Inner width; the block outputs ``width * expansion`` channels.
        stride: Stride of the 3x3 convolution (and of the projection shortcut).
        bottleneck: Bottleneck (1x1, 3x3, 1x1; expansion 4) instead of basic (two 3x3) convolutions.
        preact: Pre-activation (BN-ReLU-conv) instead of post-activation (conv-BN-ReLU) ordering.

    Attributes:
        expansion: 4 for a bottleneck block, 1 for a basic one.
        kind: ``"downsample"`` if ``stride != 1`` else ``"conv"``.
        num_convs: Number of convolutions (``conv1 .. conv{num_convs}``, each with ``bn{i}``).
        shortcut: Projection shortcut when the stride or channel count changes, else ``None`` (identity).
    """

    def __init__(
        self, in_chans: int, width: int, stride: int = 1, bottleneck: bool = False, preact: bool = False
    ) -> None:
        super().__init__()
        self.expansion = 4 if bottleneck else 1
        self.preact = preact
        self.kind = "downsample" if stride != 1 else "conv"
        out_chans = width * self.expansion
        if bottleneck:
            convs = [conv1x1(in_chans, width), conv3x3(width, width, stride), conv1x1(width, out_chans)]
        else:
            convs = [conv3x3(in_chans, width, stride), conv3x3(width, out_chans)]
        self.num_convs = len(convs)
        for i, conv in enumerate(convs, start=1):
            setattr(self, f"conv{i}", conv)
            norm_chans = conv.in_channels if preact else conv.out_channels
            setattr(self, f"bn{i}", nn.BatchNorm2d(norm_chans))
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_chans != out_chans:
            self.shortcut = conv1x1(in_chans, out_chans, stride) if preact else conv_bn(in_chans, out_chans, 1, stride)

    def _layer(self, i: int) -> tuple[nn.Module, nn.Module]:
        return getattr(self, f"conv{i}"), getattr(self, f"bn{i}")

    def forward(self, x: Tensor) -> Tensor:
        """Return the block's output: ``relu(F(x) + skip(x))`` (post-activation) or ``F(x) + skip(x)`` (pre-act).

        Args:
            x: Feature map of shape ``(B, in_chans, H, W)``.

        Returns:
            Tensor of shape ``(B, width * expansion, ceil(H / stride), ceil(W / stride))``.
        """
        if self.preact:
            conv, bn = self._layer(1)
            pre = F.relu(bn(x))
            skip = x if self.shortcut is None else self.shortcut(pre)
            out = conv(pre)
            for i in range(2, self.num_convs + 1):
                conv, bn = self._layer(i)
                out = conv(F.relu(bn(out)))
            return out + skip
        out = x
        for i in range(1, self.num_convs + 1):
            conv, bn = self._layer(i)
            out = bn(conv(out))
            if i < self.num_convs:
                out = F.relu(out)
        skip = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + skip)


@dataclass(frozen=True)
class BlockSpec:
    """Where a residual block sits and what it must map: passed to a ResNet ``block_factory``.

    ``map_size`` is the (square) spatial size of the block's output for an ``img_size`` input.

    Attributes:
        stage: Index of the stage, from 0.
        index: Index of the block inside its stage, from 0.
        global_index: Index of the block over all stages, from 0.
        num_blocks: Total number of blocks in the network.
        in_chans: Channels of the block's input.
        width: Inner width of the block (it outputs ``width * 4`` channels if ``bottleneck``).
        stride: Stride of the block (2 for the first block of every stage after the first, else 1).
        map_size: Side of the block's output map for an ``img_size`` input.
        bottleneck: Whether the network uses bottleneck blocks.
        preact: Whether the network uses pre-activation.
    """

    stage: int
    index: int
    global_index: int
    num_blocks: int
    in_chans: int
    width: int
    stride: int
    map_size: int
    bottleneck: bool
    preact: bool


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


BlockFactory = Callable[[BlockSpec], "nn.Module | None"]


class ResNet(nn.Module):
    """A residual network with any number of stages, defined by keyword arguments.

    Stage ``s`` has ``layers[s]`` blocks of inner width ``widths[s]``; every stage after the first starts
    with a stride-2 block. ``stem="cifar"`` is a 3x3 stride-1 conv (no pooling); ``"imagenet"`` a 7x7/2
    conv and a 3x3/2 max-pool. ``img_size`` is only used to size attention windows of subclasses; plain
    ResNets accept any input size. ``block_factory(spec)`` may return a module to use instead of the
    default :class:`ResidualBlock` (it must keep the channel count and carry a ``kind``); returning None
    keeps the default. Blocks are ``layer{s+1}.{i}``.

    Args:
        block: Block type, ``"basic"`` or ``"bottleneck"``.
        layers: Number of blocks per stage (each >= 1).
        widths: Inner width per stage (same length as ``layers``).
        preact: Pre-activation blocks (with a final BN-ReLU before pooling) instead of post-activation.
        stem: ``"cifar"`` (3x3 stride-1 conv) or ``"imagenet"`` (7x7/2 conv + 3x3/2 max-pool).
        in_chans: Number of input channels.
        num_classes: Number of output logits.
        img_size: Input size used to compute each block's ``map_size`` for ``block_factory``.
        stem_width: Output channels of the stem; ``None`` (or 0) means ``widths[0]``.
        block_factory: Optional callable ``BlockSpec -> nn.Module | None`` replacing default blocks.

    Attributes:
        num_stages: Number of stages.
        widths: The width of each stage (before a bottleneck's expansion).
        num_features: Channels of the last block's output (the input width of ``fc``).
        norm: Final BatchNorm for pre-activation networks, else ``None``.

    Raises:
        LandscapeError: If ``block`` or ``stem`` is unknown, or ``layers`` and ``widths`` differ in length,
            are empty, or some stage has fewer than one block.
    """

    def __init__(
        self,
        block: str = "basic",
        layers: Sequence[int] = (2, 2, 2, 2),
        widths: Sequence[int] = (64, 128, 256, 512),
        preact: bool = False,
        stem: str = "cifar",
        in_chans: int = 3,
        num_classes: int = 10,
        img_size: int = 32,
        stem_width: int | None = None,
        block_factory: BlockFactory | None = None,
    ) -> None:
        super().__init__()
        layers, widths = tuple(int(n) for n in layers), tuple(int(w) for w in widths)
        if block not in BLOCKS:
            raise LandscapeError(f"unknown ResNet block {block!r}; use one of {', '.join(BLOCKS)}")
        if stem not in STEMS:
            raise LandscapeError(f"unknown ResNet stem {stem!r}; use one of {', '.join(STEMS)}")
        if len(layers) != len(widths) or not layers or min(layers) < 1:
            raise LandscapeError("ResNet needs one positive block count per stage width (layers and widths)")
        bottleneck = block == "bottleneck"
        self.num_classes = num_classes
        self.preact = preact
        stem_width = stem_width or widths[0]
        self.stem = self._make_stem(stem, in_chans, stem_width, preact)
        size = img_size if stem == "cifar" else _ceil_div(_ceil_div(img_size, 2), 2)

        chans, global_index = stem_width, 0
        for s, (n, width) in enumerate(zip(layers, widths)):
            stage_stride = 1 if s == 0 else 2
            size = _ceil_div(size, stage_stride)
            blocks = []
            for i in range(n):
                spec = BlockSpec(
                    stage=s,
                    index=i,
                    global_index=global_index,
                    num_blocks=sum(layers),
                    in_chans=chans,
                    width=width,
                    stride=stage_stride if i == 0 else 1,
                    map_size=size,
                    bottleneck=bottleneck,
                    preact=preact,
                )
                module = block_factory(spec) if block_factory is not None else None
                if module is None:
                    module = ResidualBlock(chans, width, spec.stride, bottleneck, preact)
                blocks.append(module)
                chans = width * (4 if bottleneck else 1)
                global_index += 1
            self.add_module(f"layer{s + 1}", nn.Sequential(*blocks))
        self.num_stages = len(layers)
        self.widths = widths
        self.num_features = chans
        self.norm = nn.BatchNorm2d(chans) if preact else None
        self.fc = nn.Linear(chans, num_classes)
        self._init_weights()

    @staticmethod
    def _make_stem(stem: str, in_chans: int, width: int, preact: bool) -> nn.Sequential:
        if stem == "cifar":
            parts: list[nn.Module] = [conv3x3(in_chans, width)]
        else:
            parts = [nn.Conv2d(in_chans, width, kernel_size=7, stride=2, padding=3, bias=False)]
        if not preact:
            parts += [nn.BatchNorm2d(width), nn.ReLU()]
        if stem == "imagenet":
            parts.append(nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        return nn.Sequential(*parts)

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def stages(self) -> list[nn.Sequential]:
        """Return the stages ``layer1 .. layerS`` in order.

        Returns:
            A list of ``num_stages`` ``nn.Sequential`` stages.
        """
        return [getattr(self, f"layer{s + 1}") for s in range(self.num_stages)]

    def _forward_blocks(self, x: Tensor, record: list[Feature] | None = None) -> Tensor:
        x = self.stem(x)
        if record is not None:
            record.append(Feature("stem", "stem", x))
        for s, stage in enumerate(self.stages()):
            for i, blk in enumerate(stage):
                x = blk(x)
                if record is not None:
                    record.append(Feature(f"layer{s + 1}.{i}", blk.kind, x))
        return x

    def forward_features(self, x: Tensor) -> Tensor:
        """Return the output of the last block (NCHW), the map the head pools.

        Args:
            x: Images of shape ``(B, in_chans, H, W)``.

        Returns:
            Tensor of shape ``(B, num_features, H', W')``.
        """
        return self._forward_blocks(x)

    def forward_head(self, x: Tensor) -> Tensor:
        """Return logits from the last block's map: [BN-ReLU if pre-activation], global average pool, Linear.

        Args:
            x: Feature map of shape ``(B, num_features, H', W')``.

        Returns:
            Logits of shape ``(B, num_classes)``.
        """
        if self.norm is not None:
            x = F.relu(self.norm(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def forward(self, x: Tensor) -> Tensor:
        """Return logits ``(B, num_classes)`` for images ``x`` (B, in_chans, H, W).

        Args:
            x: Images of shape ``(B, in_chans, H, W)``.

        Returns:
            Logits of shape ``(B, num_classes)``.
        """
        return self.forward_head(self.forward_features(x))

    def block_features(self, x: Tensor) -> list[Feature]:
        """Return the stem output and every block's output, in order, computed as in ``forward``.

        The model runs in its current mode (call ``eval()`` first for analyses); its mode is not changed.

        Args:
            x: Images of shape ``(B, in_chans, H, W)``.

        Returns:
            :class:`Feature` records: ``stem`` (kind ``"stem"``), then ``layer{s+1}.{i}`` per block with the
            block's ``kind`` (``"conv"``, ``"downsample"``, ...), each an NCHW map.
        """
        record: list[Feature] = []
        self._forward_blocks(x, record)
        return record


def _resnet(defaults: dict, num_classes: int, kwargs: dict) -> ResNet:
    return ResNet(**{**defaults, **kwargs}, num_classes=num_classes)


@register_model
def resnet18(num_classes: int = 10, **kwargs) -> ResNet:
    """ResNet-18 (basic blocks, 2-2-2-2, widths 64..512), CIFAR stem by default.

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`ResNet` arguments; they override the defaults above.

    Returns:
        The :class:`ResNet`.

    Raises:
        LandscapeError: As :class:`ResNet` does, for invalid arguments.
    """
    return _resnet({"block": "basic", "layers": (2, 2, 2, 2)}, num_classes, kwargs)


@register_model
def resnet50(num_classes: int = 10, **kwargs) -> ResNet:
    """ResNet-50 (bottleneck blocks, 3-4-6-3, widths 64..512 x4), CIFAR stem by default.

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`ResNet` arguments; they override the defaults above.

    Returns:
        The :class:`ResNet`.

    Raises:
        LandscapeError: As :class:`ResNet` does, for invalid arguments.
    """
    return _resnet({"block": "bottleneck", "layers": (3, 4, 6, 3)}, num_classes, kwargs)


@register_model
def resnet_mini(num_classes: int = 10, **kwargs) -> ResNet:
    """A CPU-sized ResNet: basic blocks, one per stage, widths 16-32-64-96 (about 223k parameters).

    Args:
        num_classes: Number of output logits.
        **kwargs: Further :class:`ResNet` arguments; they override the defaults above.

    Returns:
        The :class:`ResNet`.

    Raises:
        LandscapeError: As :class:`ResNet` does, for invalid arguments.
    """
    return _resnet({"block": "basic", "layers": (1, 1, 1, 1), "widths": (16, 32, 64, 96)}, num_classes, kwargs)
