"""Paper B's two-stage pipeline, stage 2: turn a trained CNN counterpart into an initialised ViT.

A ``convvit_*`` model (every MSA a fixed one-hot shift attention over the 9 neighbour offsets) becomes the
``vit_rpe_*`` model with the same options. Every parameter is copied except in the attention layers, where

- ``qkv`` rows ``[2I, 3I)`` (W_V) = the shift layer's ``v``; W_K (rows ``[I, 2I)``) is drawn from
  ``N(0, k_std^2)`` and W_Q (rows ``[0, I)``) from ``N(0, q_std^2)``. The default ``q_std = 0`` keeps the
  content term exactly zero (so the conversion error is the position-bias leak alone) while the gradient
  with respect to W_Q, ``dscore/dW_Q = (W_K x_k) x_q^T``, is not zero: content attention can learn. With
  both random (``q_std > 0``) the CLS query, whose attention over the patches is flat, picks up an error of
  order ``q_std * k_std * dim`` that no sharpness removes;
- the position bias of head ``h`` is ``0`` at its offset ``Delta_h`` and ``-c`` at every other offset
  (``c`` = ``sharpness``), including the zero ring; patch queries get ``-c`` on the CLS key; the CLS query
  gets ``0`` on every patch and ``-c`` on itself (the shift layer's CLS reads the mean patch value);
- ``proj`` (W_O) is copied.

As ``c -> infinity`` with ``q_std = 0`` the two networks compute the same logits (up to rounding); at a
finite ``c`` each query leaks about ``n e^{-c}`` of its attention (``n`` keys). The conversion measures and
reports the largest logit difference on data. A moderate ``c`` keeps a gradient through the softmax for
fine-tuning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from landscape.data.batches import fixed_batches
from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import load_model, require_finite_weights, save_checkpoint
from landscape.models.vit_rpe import ConvViT, RingAttention, ShiftAttention
from landscape.options import checks

DEFAULT_SHARPNESS = 10.0
DEFAULT_K_STD = 0.02
SOURCE_PREFIX, TARGET_PREFIX = "convvit_", "vit_rpe_"


def target_model_name(name: str) -> str:
    """Return the ``vit_rpe_*`` name of a ``convvit_*`` model name, or raise :class:`LandscapeError`.

    Args:
        name: A registered model name, e.g. ``"convvit_mini"``.

    Returns:
        The target name, e.g. ``"vit_rpe_mini"``.

    Raises:
        LandscapeError: If ``name`` does not start with ``convvit_``.
    """
    if not name.startswith(SOURCE_PREFIX):
        raise LandscapeError(
            f"model {name!r} is not a CNN counterpart; convert a checkpoint of a convvit_* model "
            "(train one with `landscape train --model convvit_mini`)"
        )
    return TARGET_PREFIX + name[len(SOURCE_PREFIX) :]


def check_options(sharpness: float, k_std: float, q_std: float) -> tuple[float, float, float]:
    """Return ``(sharpness, k_std, q_std)`` as floats; a one-line error unless each is finite and ``>= 0``.

    Args:
        sharpness: The position-bias margin ``c``.
        k_std: Standard deviation of the random W_K.
        q_std: Standard deviation of the random W_Q.

    Returns:
        ``(sharpness, k_std, q_std)`` as floats.

    Raises:
        LandscapeError: naming the option (``--sharpness``, ``--k-std``, ``--q-std``) and the value given.
    """
    return (
        checks.non_negative(sharpness, "--sharpness"),
        checks.non_negative(k_std, "--k-std"),
        checks.non_negative(q_std, "--q-std"),
    )


def convert_model(
    cnn: nn.Module,
    sharpness: float = DEFAULT_SHARPNESS,
    k_std: float = DEFAULT_K_STD,
    q_std: float = 0.0,
    seed: int = 0,
) -> nn.Module:
    """Return a new ``vit_rpe_*`` model initialised from the ``convvit_*`` model ``cnn`` (left unchanged).

    ``cnn`` must carry ``model_name``/``model_kwargs``/``num_classes`` (any model from ``create_model`` or
    ``load_model`` does). ``seed`` fixes the random W_K (and W_Q). The result is in eval mode, on ``cnn``'s device
    and dtype.

    Args:
        cnn: The trained :class:`~landscape.models.vit_rpe.ConvViT`.
        sharpness: The margin ``c``: each head's bias is 0 at its offset and ``-c`` elsewhere.
        k_std: Standard deviation of the random W_K rows of ``qkv``.
        q_std: Standard deviation of the random W_Q rows of ``qkv`` (0 keeps the content term zero).
        seed: Seeds the draw of W_K and W_Q.

    Returns:
        The :class:`~landscape.models.vit_rpe.RingViT`, in eval mode, carrying ``model_name``, ``num_classes``
        and ``model_kwargs``.

    Raises:
        LandscapeError: if ``cnn`` is no ``convvit_*`` model, a weight of it is not finite, or an option is
            negative, NaN or infinite.
    """
    if not isinstance(cnn, ConvViT):
        raise LandscapeError(f"{type(cnn).__name__} is not a convvit_* model; only those convert exactly")
    require_finite_weights(cnn, getattr(cnn, "model_name", "the model"))
    sharpness, k_std, q_std = check_options(sharpness, k_std, q_std)
    name = target_model_name(getattr(cnn, "model_name", "convvit_?"))
    ref = next(cnn.parameters())
    vit = create_model(name, num_classes=cnn.num_classes, **dict(cnn.model_kwargs)).to(ref.device, ref.dtype)
    source = cnn.state_dict()
    state = vit.state_dict()
    generator = torch.Generator().manual_seed(seed)
    for i, (shift, attn) in enumerate(zip((b.attn for b in cnn.blocks), (b.attn for b in vit.blocks))):
        if not (isinstance(shift, ShiftAttention) and isinstance(attn, RingAttention)):
            raise LandscapeError(f"block {i} of {cnn.model_name} and {name} do not match; rebuild both from the zoo")
        prefix = f"blocks.{i}.attn."
        inner = shift.num_heads * shift.head_dim
        qk = torch.randn(2 * inner, attn.qkv.in_features, generator=generator, dtype=torch.float64)
        qk[:inner] *= q_std
        qk[inner:] *= k_std
        state[prefix + "qkv.weight"] = torch.cat([qk.to(ref), source[prefix + "v.weight"]], dim=0)
        if attn.qkv.bias is not None:
            state[prefix + "qkv.bias"] = torch.cat([torch.zeros(2 * inner).to(ref), source[prefix + "v.bias"]])
        table = torch.full_like(state[prefix + "rel_pos.table"], -float(sharpness))
        for h, (dy, dx) in enumerate(shift.offsets):
            table[h, attn.rel_pos.offset_index(dy, dx)] = 0.0
        state[prefix + "rel_pos.table"] = table
        cls_bias = torch.zeros_like(state[prefix + "rel_pos.cls_bias"])
        cls_bias[:, 1:] = -float(sharpness)  # [CLS -> patch, patch -> CLS, CLS -> CLS]
        state[prefix + "rel_pos.cls_bias"] = cls_bias
    for key, value in source.items():
        if ".attn.v." not in key:
            state[key] = value.clone()
    vit.load_state_dict(state, strict=True)
    vit.train(False)
    return vit


@torch.no_grad()
def max_logit_difference(a: nn.Module, b: nn.Module, batches: list[tuple[Tensor, Tensor]]) -> float:
    """Return ``max |a(x) - b(x)|`` over all samples and classes of ``batches`` (both models in eval mode).

    Each model's training mode is restored afterwards; no gradients are recorded.

    Args:
        a: First model.
        b: Second model, with the same output shape.
        batches: ``(x, y)`` batches; only ``x`` is used.

    Returns:
        The largest absolute logit difference (0.0 for no batches; NaN when a logit is NaN).
    """
    modes = (a.training, b.training)
    a.eval()
    b.eval()
    worst = torch.zeros(())
    for x, _ in batches:
        worst = torch.maximum(worst, (a(x) - b(x)).abs().max().cpu())  # NaN, where a logit is, propagates
    a.train(modes[0])
    b.train(modes[1])
    return float(worst)


@dataclass
class ConvertResult:
    """What :func:`convert_checkpoint` wrote and measured.

    Attributes:
        out: Path of the checkpoint written.
        model: Name of the converted model (``vit_rpe_*``).
        source_model: Name of the source model (``convvit_*``).
        sharpness: The position-bias margin ``c`` used.
        k_std: Standard deviation of W_K used.
        q_std: Standard deviation of W_Q used.
        max_logit_difference: ``max |cnn(x) - vit(x)|`` over the compared images.
        n_samples: Number of images compared.
        dataset: Spec of the dataset compared on.
    """

    out: Path
    model: str
    source_model: str
    sharpness: float
    k_std: float
    q_std: float
    max_logit_difference: float
    n_samples: int
    dataset: str


def convert_checkpoint(
    ckpt: str | Path,
    out: str | Path,
    *,
    sharpness: float = DEFAULT_SHARPNESS,
    k_std: float = DEFAULT_K_STD,
    q_std: float = 0.0,
    data: str | None = None,
    samples: int = 512,
    seed: int = 0,
    force: bool = False,
) -> ConvertResult:
    """Convert the ``convvit_*`` checkpoint ``ckpt`` into a ``vit_rpe_*`` checkpoint at ``out``.

    The logits of both models are compared on ``samples`` training images of ``data`` (default: the
    checkpoint's dataset, else digits), and the largest absolute difference is printed by the CLI and stored
    in the new checkpoint's ``metrics["max_logit_difference"]`` (options under ``extra["conversion"]``).

    Args:
        ckpt: The ``convvit_*`` checkpoint to read.
        out: Path of the ``vit_rpe_*`` checkpoint to write.
        sharpness: The position-bias margin ``c``.
        k_std: Standard deviation of the random W_K.
        q_std: Standard deviation of the random W_Q.
        data: Dataset spec to compare logits on; None means the checkpoint's dataset, else ``digits``.
        samples: Number of training images to compare on (at most the split's size).
        seed: Seeds W_K/W_Q and the choice of images.
        force: Overwrite an existing ``out``.

    Returns:
        A :class:`ConvertResult` with the path written and the measured logit difference.

    Raises:
        LandscapeError: for a negative, NaN or infinite option (before anything is read), ``samples < 1``, an
            existing ``out`` without ``force``, a checkpoint of another model or with a weight that is not finite
            (NaN or Inf), or data of another image size.
    """
    sharpness, k_std, q_std = check_options(sharpness, k_std, q_std)
    samples = checks.positive_int(samples, "--samples")
    out = Path(out)
    if out.exists() and not force:
        raise LandscapeError(f"{out} exists; use --force to overwrite it or --out to write elsewhere")
    cnn, meta = load_model(ckpt)
    target_model_name(meta.model_name or "")
    spec = data or meta.meta.get("dataset") or "digits"
    dataset = load_dataset(spec, "train")
    info = dataset.info
    expected = (cnn.patch_embed.in_channels, cnn.img_size)
    if (info.in_chans, info.image_size) != expected:
        raise LandscapeError(
            f"{spec} has {info.in_chans}x{info.image_size}x{info.image_size} images but the model takes "
            f"{expected[0]}x{expected[1]}x{expected[1]}; pass the --data it was trained on"
        )
    vit = convert_model(cnn, sharpness, k_std, q_std, seed)
    batches = fixed_batches(dataset, 128, min(samples, len(dataset)), seed=seed)
    diff = max_logit_difference(cnn, vit, batches)
    n = sum(len(y) for _, y in batches)
    save_checkpoint(
        out,
        vit,
        model_name=vit.model_name,
        model_kwargs=vit.model_kwargs,
        num_classes=vit.num_classes,
        dataset=spec,
        epoch=0,
        metrics={"max_logit_difference": diff},
        extra={
            "conversion": {
                "source": str(ckpt),
                "source_sha256": meta.sha256,
                "source_model": meta.model_name,
                "sharpness": float(sharpness),
                "k_std": float(k_std),
                "q_std": float(q_std),
                "seed": seed,
                "n_samples": n,
            }
        },
        force=force,
    )
    return ConvertResult(
        out, vit.model_name, str(meta.model_name), float(sharpness), float(k_std), float(q_std), diff, n, spec
    )
