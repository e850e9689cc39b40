"""Image operations of the datasets: reading a file as timm evaluates, resizing an in-memory tensor."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from landscape.data.info import DatasetInfo
from landscape.errors import LandscapeError
from landscape.runtime.devices import require_memory


def _uncropped(side: int, crop_pct: float) -> int:
    """floor(side / crop_pct), forgiving the rounding error of a crop_pct given as crop / resize (224 / 232)."""
    return math.floor(side / crop_pct + 1e-6)


def read_image(path: str, info: DatasetInfo) -> Tensor:
    """One image file as float32 (3, H, W) in [0, 1]: RGB, resized to cover H x W / crop_pct, centre crop."""
    from PIL import Image
    from torchvision.datasets.folder import pil_loader

    try:
        img = pil_loader(path)
    except Exception as e:  # any failure (OSError, PIL's own errors, ...) means an unreadable image
        raise LandscapeError(
            f"imagefolder: cannot read image {path} ({type(e).__name__}); remove or replace the file"
        ) from None
    (h, w), crop_pct = info.hw, info.crop_pct or 1.0
    cover_w, cover_h = _uncropped(w, crop_pct), _uncropped(h, crop_pct)
    iw, ih = img.size
    scale = max(cover_w / iw, cover_h / ih)
    nw, nh = max(cover_w, round(iw * scale)), max(cover_h, round(ih * scale))
    if (nw, nh) != (iw, ih):
        filters = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}
        img = img.resize((nw, nh), filters[info.interpolation or "bilinear"])
    if (nw, nh) != (w, h):
        left, top = (nw - w) // 2, (nh - h) // 2
        img = img.crop((left, top, left + w, top + h))
    return torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).float().div_(255)


def resize(x: Tensor, hw: tuple[int, int], interpolation: str | None) -> Tensor:
    """In-memory images (n, C, h, w) in [0, 1] resized to ``hw`` (the module docstring's rule); as is if equal.

    Raises:
        LandscapeError: the resized images (``n x C x H x W`` float32) need more than the memory of the CPU
            (checked before they are allocated).
    """
    if tuple(x.shape[-2:]) == hw:
        return x
    what = f"{x.shape[0]:,} images of {x.shape[1]} x {hw[0]} x {hw[1]}"
    require_memory(int(x.shape[0]), int(x.shape[1]) * hw[0] * hw[1], x.dtype, x.device, what, "lower --input-size")
    mode = interpolation or "bilinear"
    if mode == "nearest":
        out = torch.nn.functional.interpolate(x, size=hw, mode="nearest")
    else:
        shrink = hw[0] < x.shape[-2] or hw[1] < x.shape[-1]
        out = torch.nn.functional.interpolate(x, size=hw, mode=mode, align_corners=False, antialias=shrink)
    return out.clamp_(0, 1)
