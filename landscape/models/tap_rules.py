"""Where the blocks of known model families are, and how their outputs are read as NCHW maps.

Readers for NCHW, NHWC, window-stream and token outputs; the plans for timm ViT, Swin and ConvNeXt, ResNets and
torchvision ViTs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch
from torch import Tensor, nn


class Call(NamedTuple):
    """What a reader may need besides the value: the input image size and the enclosing block's input shape."""

    image_size: tuple[int, int]
    block_shape: torch.Size | None


Reader = Callable[[Tensor, Call], Tensor | None]


def square_grid(tokens: Tensor) -> Tensor | None:
    """Lay ``(B, N, C)`` tokens on an ``s x s`` grid (a view), dropping one leading token if ``N - 1 = s^2``."""
    n = tokens.shape[1]
    for drop in (0, 1):
        s = math.isqrt(max(n - drop, 0))
        if s > 0 and s * s == n - drop:
            return tokens[:, drop:].unflatten(1, (s, s)).permute(0, 3, 1, 2)
    return None


def read_any(
    value: Tensor, call: Call, grid: Callable[[tuple[int, int]], tuple[int, int] | None] | None = None
) -> Tensor | None:
    """A user tap: NCHW passes; tokens go on the model's patch grid (``grid``), else on a square grid.

    With the model's grid ``(h, w)`` the ``N - h*w`` leading (prefix) tokens are dropped and the rest laid out
    row-major, so CLS + a 3 x 5 grid (16 tokens) is read as 3 x 5, never as 4 x 4. NHWC is not guessed.
    """
    if value.dim() == 4:
        return value
    if value.dim() != 3:
        return None
    size = grid(call.image_size) if grid is not None else None
    if size is not None:
        prefix = value.shape[1] - size[0] * size[1]
        return _read_tokens(value, call, prefix=prefix, grid=lambda _: size) if prefix >= 0 else None
    return square_grid(value)


def model_grid(model: nn.Module) -> Callable[[tuple[int, int]], tuple[int, int] | None] | None:
    """The patch grid of a timm or torchvision ViT-like model for an input size, or None when it has none."""
    embed = getattr(model, "patch_embed", None)
    if isinstance(embed, nn.Module) and (hasattr(embed, "grid_size") or hasattr(embed, "dynamic_feat_size")):
        return partial(_timm_grid, embed)
    patch = getattr(model, "patch_size", None)
    if isinstance(patch, int) and (_has(model, "conv_proj") or isinstance(getattr(model, "grid_size", None), tuple)):
        return partial(_patch_grid, patch)  # torchvision's ViT, the zoo's ViT
    return None


def _read_nchw(value: Tensor, call: Call) -> Tensor | None:
    """An NCHW map as it is."""
    return value if value.dim() == 4 else None


def _read_nhwc(value: Tensor, call: Call) -> Tensor | None:
    """An NHWC map as an NCHW view."""
    return value.permute(0, 3, 1, 2) if value.dim() == 4 else None


def _read_window_stream(value: Tensor, call: Call) -> Tensor | None:
    """``(B, H*W, C)`` tokens of a Swin block whose input was ``(B, H, W, C)``, as an NCHW view."""
    shape = call.block_shape
    if value.dim() != 3 or shape is None or len(shape) != 4 or value.shape[1] != shape[1] * shape[2]:
        return None
    return value.unflatten(1, (shape[1], shape[2])).permute(0, 3, 1, 2)


def _read_tokens(
    value: Tensor, call: Call, *, prefix: int, grid: Callable[[tuple[int, int]], tuple[int, int] | None]
) -> Tensor | None:
    """``(B, prefix + h*w, C)`` tokens without their prefix tokens, row-major on the ``grid(image_size)``."""
    size = grid(call.image_size)
    if value.dim() != 3 or size is None or value.shape[1] != prefix + size[0] * size[1]:
        return None
    return value[:, prefix:].unflatten(1, size).permute(0, 3, 1, 2)


def _timm_grid(patch_embed: nn.Module, image_size: tuple[int, int]) -> tuple[int, int] | None:
    """The patch grid of a timm patch embedding for an input of ``image_size`` (padding and dynamic sizes)."""
    if callable(getattr(patch_embed, "dynamic_feat_size", None)):
        h, w = patch_embed.dynamic_feat_size(image_size)
        return int(h), int(w)
    size = getattr(patch_embed, "grid_size", None)
    return (int(size[0]), int(size[1])) if size is not None else None


def _patch_grid(patch_size: int, image_size: tuple[int, int]) -> tuple[int, int]:
    """The grid of non-overlapping ``patch_size`` patches: ``image_size // patch_size``."""
    return image_size[0] // patch_size, image_size[1] // patch_size


@dataclass(frozen=True)
class Site:
    """One place a map is read: a module's output (``at="output"``) or first positional input (``"input"``).

    With ``block`` set (an input site), only the first such site to run in each call of ``block`` records.
    """

    module: nn.Module
    name: str
    kind: str
    read: Reader
    at: str = "output"
    block: nn.Module | None = None


@dataclass(frozen=True)
class Plan:
    """The sites of a rule, and whether captured tensors are copied (user taps: their later in-place edits)."""

    sites: list[Site]
    copy: bool = False


def _is_container(module: object) -> bool:
    return isinstance(module, (nn.Sequential, nn.ModuleList)) and len(module) > 0


def _has(module: nn.Module, *names: str) -> bool:
    return all(isinstance(getattr(module, n, None), nn.Module) for n in names)


def _residual_sites(path: str, block: nn.Module, norm: str, read_msa: Reader, read_out: Reader) -> list[Site]:
    """A transformer block's stream after the MSA half (first input of ``norm`` or ``mlp``) and its output."""
    firsts = [
        Site(getattr(block, n), f"{path}.msa", "msa", read_msa, at="input", block=block)
        for n in (norm, "mlp")
        if _has(block, n)
    ]
    return [*firsts, Site(block, f"{path}.mlp", "mlp", read_out)]


def timm_vit(model: nn.Module) -> Plan | None:
    """Sites of a timm VisionTransformer (DeiT, EVA, ...): embedded tokens, then per block the MSA and MLP streams."""
    blocks, embed = getattr(model, "blocks", None), getattr(model, "patch_embed", None)
    if not (_is_container(blocks) and isinstance(embed, nn.Module) and all(_has(b, "attn", "mlp") for b in blocks)):
        return None
    prefix = getattr(model, "num_prefix_tokens", int(getattr(model, "cls_token", None) is not None))
    read = partial(_read_tokens, prefix=int(prefix), grid=partial(_timm_grid, embed))
    sites = [Site(blocks[0], "patch_embed", "embed", read, at="input")]
    for name, block in blocks.named_children():
        sites += _residual_sites(f"blocks.{name}", block, "norm2", read, read)
    return Plan(sites)


def timm_swin(model: nn.Module) -> Plan | None:
    """Sites of a timm Swin (V1, V2; NHWC): embedded patches, patch merging, per block the MSA and MLP streams."""
    layers, embed = getattr(model, "layers", None), getattr(model, "patch_embed", None)
    nhwc = str(getattr(embed, "output_fmt", "")).endswith("NHWC")
    if not (_is_container(layers) and nhwc and all(_has(s, "downsample", "blocks") for s in layers)):
        return None
    if not all(_is_container(s.blocks) and all(_has(b, "attn", "mlp") for b in s.blocks) for s in layers):
        return None
    sites = [Site(layers[0], "patch_embed", "embed", _read_nhwc, at="input")]
    for i, stage in layers.named_children():
        if not isinstance(stage.downsample, nn.Identity):
            sites.append(Site(stage.downsample, f"layers.{i}.downsample", "downsample", _read_nhwc))
        for j, block in stage.blocks.named_children():
            sites += _residual_sites(f"layers.{i}.blocks.{j}", block, "norm2", _read_window_stream, _read_nhwc)
    return Plan(sites)


def timm_convnext(model: nn.Module) -> Plan | None:
    """Sites of a timm ConvNeXt: stem, every non-identity stage downsample and every block output."""
    stem, stages = getattr(model, "stem", None), getattr(model, "stages", None)
    if not (isinstance(stem, nn.Module) and _is_container(stages)):
        return None
    if not all(_has(s, "downsample", "blocks") for s in stages):
        return None
    if not all(_is_container(s.blocks) and all(_has(b, "conv_dw", "mlp") for b in s.blocks) for s in stages):
        return None
    sites = [Site(stem, "stem", "stem", _read_nchw)]
    for i, stage in stages.named_children():
        if not isinstance(stage.downsample, nn.Identity):
            sites.append(Site(stage.downsample, f"stages.{i}.downsample", "downsample", _read_nchw))
        sites += [Site(b, f"stages.{i}.blocks.{j}", "conv", _read_nchw) for j, b in stage.blocks.named_children()]
    return Plan(sites)


def _resnet_stages(model: nn.Module) -> list[tuple[str, nn.Module]]:
    stages = []
    while _is_container(getattr(model, f"layer{len(stages) + 1}", None)):
        name = f"layer{len(stages) + 1}"
        stages.append((name, getattr(model, name)))
    return stages


def _stem_name(model: nn.Module) -> str:
    """The last non-identity child registered before ``layer1`` (``maxpool``, or e.g. ``act1`` without one)."""
    name = "stem"
    for child, module in model.named_children():
        if child == "layer1":
            break
        if not isinstance(module, nn.Identity):
            name = child
    return name


def _resnet_kind(block: nn.Module) -> str:
    """``downsample`` for a block with a projection shortcut or a stride, else ``conv``."""
    stride = getattr(block, "stride", 1)
    strided = any(s != 1 for s in stride) if isinstance(stride, (tuple, list)) else stride != 1
    return "downsample" if getattr(block, "downsample", None) is not None or strided else "conv"


def resnet_plan(model: nn.Module) -> Plan | None:
    """Sites of a timm or torchvision ResNet: the stem output (input of ``layer1``), every block output."""
    stages = _resnet_stages(model)
    blocks = [(f"{s}.{n}", b) for s, stage in stages for n, b in stage.named_children()]
    if not (stages and _has(model, "conv1") and all(_has(b, "conv1", "conv2") for _, b in blocks)):
        return None
    sites = [Site(stages[0][1], _stem_name(model), "stem", _read_nchw, at="input")]
    sites += [Site(b, path, _resnet_kind(b), _read_nchw) for path, b in blocks]
    return Plan(sites)


def torchvision_vit(model: nn.Module) -> Plan | None:
    """Sites of a torchvision VisionTransformer: embedded tokens, then per encoder block the MSA and MLP streams."""
    layers = getattr(getattr(model, "encoder", None), "layers", None)
    patch = getattr(model, "patch_size", None)
    if not (_is_container(layers) and _has(model, "conv_proj") and isinstance(patch, int)):
        return None
    if not all(_has(b, "self_attention", "ln_2", "mlp") for b in layers):
        return None
    read = partial(_read_tokens, prefix=1, grid=partial(_patch_grid, patch))
    sites = [Site(layers[0], "conv_proj", "embed", read, at="input")]
    for name, block in layers.named_children():
        sites += _residual_sites(f"encoder.layers.{name}", block, "ln_2", read, read)
    return Plan(sites)
