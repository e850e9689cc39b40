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

Better still, a BatchNorm that follows a convolution is folded into it (:class:`SecondOrderFold`, with
:func:`landscape.models.bn_fold.fold_batchnorm`): ``W' = W * s``, ``b' = (b - mu) * s + beta``, computed from the
point's own parameters and buffers inside the differentiated function, so that the derivatives are still those
of the original parameters (``gamma`` and ``beta`` included: the chain rule runs through the fold) and no pass
over the activations is left of the BatchNorm at all. A kept graph's product on the ResNet of
benchmarks/hessian.py took 0.84 of the affine form's time (1.93 against 2.31 gradients, paired: docs/measured.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules import module as module_globals
from torch.overrides import TorchFunctionMode

from landscape.models.bn_fold import FoldedModel, fold_batchnorm
from landscape.options.common import FOLD_RTOL, FOLD_RTOL_FLOAT64
from landscape.runtime.devices import close


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


def folded_loss_agrees(got: Tensor, want: Tensor) -> bool:
    """Whether a folded model's loss ``got`` is the unfolded loss ``want`` (relative FOLD_RTOL, FOLD_RTOL_FLOAT64).

    Args:
        got: the folded model's loss (0-dim).
        want: the unfolded model's loss (0-dim).

    Returns:
        True when they agree to the dtype's tolerance (:data:`landscape.options.common.FOLD_RTOL`).
    """
    return close(float(got), float(want), FOLD_RTOL_FLOAT64 if want.dtype == torch.float64 else FOLD_RTOL)


def has_hooks(module: nn.Module) -> bool:
    """Whether a forward or backward hook would run in ``module``: one of its submodules' or a global one.

    Args:
        module: the model.

    Returns:
        True when any submodule has a forward, forward-pre, backward or backward-pre hook, or torch has a global
        module hook.
    """
    if any(
        getattr(module_globals, name, None)
        for name in (
            "_global_forward_hooks",
            "_global_forward_pre_hooks",
            "_global_backward_hooks",
            "_global_backward_pre_hooks",
        )
    ):
        return True
    kinds = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    return any(getattr(m, kind, None) for m in module.modules() for kind in kinds)


class SecondOrderFold:
    """A model's eval-mode conv -> BatchNorm pairs folded for second derivatives: built on first use, then kept.

    Shared by the shallow copies of an objective (its other points), so that a run folds once. The fold is used
    only while the model has no hooks (a hook on a convolution or a BatchNorm would see the folded layers: REPAIR's
    corrections, a user's taps) and only when its loss agreed with the unfolded one at the point it was built at.

    Attributes:
        folded: the folded model (None before it is built, or when nothing could be folded or the check failed).
        tried: whether it was built.
        notes: why BatchNorm layers were left unfolded.
    """

    def __init__(self) -> None:
        self.folded: FoldedModel | None = None
        self.tried = False
        self.notes: list[str] = []

    def get(self, module: nn.Module, agrees: Callable[[FoldedModel], bool]) -> FoldedModel | None:
        """The folded model to take second derivatives through, or None for ``module`` itself.

        Args:
            module: the objective's model (its hooks are checked at every call).
            agrees: at the first call, whether a fold's loss agrees with the unfolded loss (else it is not used).

        Returns:
            The :class:`~landscape.models.bn_fold.FoldedModel`, or None.
        """
        if has_hooks(module):
            return None
        if not self.tried:
            self.tried = True
            self.folded = self._build(module, agrees)
        return self.folded

    def _build(self, module: nn.Module, agrees: Callable[[FoldedModel], bool]) -> FoldedModel | None:
        """The checked fold of ``module``, or None (:attr:`notes` says why)."""
        try:
            folded = fold_batchnorm(module)
            self.notes = list(folded.notes)
            if not folded.n_folded:
                return None
            if agrees(folded):
                return folded
            self.notes.append("the folded loss differs from the unfolded one; unfolded")
        except Exception as exc:  # an unforeseen module structure, or a use of a folded layer the trace did not show
            self.notes.append(f"folding failed ({type(exc).__name__}); unfolded")
        return None
