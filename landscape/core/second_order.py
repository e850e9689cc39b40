"""Kernels for second derivatives: eval-mode BatchNorm as the per-channel affine map it is.

In eval mode a BatchNorm layer with running statistics ``mu``, ``sigma^2``, weight ``gamma``, bias ``beta`` and
``eps`` is the affine map, per channel ``c``,

    y = x * s_c + t_c,    s_c = gamma_c / sqrt(sigma_c^2 + eps),    t_c = beta_c - mu_c * s_c

(``gamma = 1`` and ``beta = 0`` when the layer has none). torch's fused kernel computes the same values, but the
derivative of its backward (``batchnorm_double_backward``) is the general batch-statistics formula, many
elementwise passes; written as a multiply and an add, the second derivatives are those of two elementwise
operations (a kept graph's product on the ResNet of benchmarks/hessian.py took about 7% less: docs/measured.md).
The values agree with the fused kernel to rounding (the same formula in another order); first
derivatives alone are cheaper with the fused kernel, so :class:`AffineBatchNorm` is used only where second
derivatives are taken (:meth:`landscape.core.objective.Objective.batch_loss_fn` with ``second_order=True``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode


def affine_batch_norm(
    input: Tensor,  # noqa: A002  (F.batch_norm's own argument names)
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """``F.batch_norm`` with its arguments; in eval mode with running statistics, ``x * s + t`` per channel.

    ``s = gamma / sqrt(sigma^2 + eps)`` and ``t = beta - mu * s`` (the module's docstring); in training mode or
    without running statistics (batch statistics are used) it is ``F.batch_norm`` itself.

    Args:
        input: ``(N, C, ...)``.
        running_mean: ``mu``, shape ``(C,)``, or None.
        running_var: ``sigma^2``, shape ``(C,)``, or None.
        weight: ``gamma``, shape ``(C,)``, or None.
        bias: ``beta``, shape ``(C,)``, or None.
        training: whether batch statistics are used (and running statistics updated).
        momentum: the running statistics' momentum (training mode only).
        eps: added to the variance.

    Returns:
        The normalised ``input``, its shape.
    """
    if training or running_mean is None or running_var is None:
        return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
    scale = torch.rsqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    shape = (1, -1) + (1,) * (input.dim() - 2)
    return input * scale.reshape(shape) + shift.reshape(shape)


class AffineBatchNorm(TorchFunctionMode):
    """Within it, every ``F.batch_norm`` call (torch's BatchNorm modules, timm's) is :func:`affine_batch_norm`.

    Every other torch function runs unchanged.
    """

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:  # noqa: ANN401  (whatever the function returns)
        """Run ``func``, or :func:`affine_batch_norm` in place of ``F.batch_norm``."""
        if func is F.batch_norm:
            return affine_batch_norm(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))
