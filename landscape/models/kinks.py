"""Piecewise-linear operations in a model's forward pass: where the loss has kinks and no Hessian tells its shape.

A network built of ReLU, LeakyReLU, Hardtanh, max pooling, ``abs``, ``clamp`` or elementwise ``max``/``min`` is
piecewise smooth in its parameters: the Hessian at a point is the curvature of the piece the point lies on, and a
second difference across a kink is larger than any eigenvalue and grows as the step shrinks. :func:`kinked_operations`
names such operations from one forward pass (modules and functional calls alike, recorded with a
``TorchFunctionMode``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: names of torch functions (and Tensor methods) that are piecewise linear in their input
KINKED_NAMES = frozenset(
    {
        "relu",
        "relu_",
        "relu6",
        "leaky_relu",
        "leaky_relu_",
        "prelu",
        "rrelu",
        "hardtanh",
        "hardtanh_",
        "hardsigmoid",
        "hardswish",
        "hardshrink",
        "softshrink",
        "threshold",
        "abs",
        "clamp",
        "clamp_",
        "clip",
        "maximum",
        "minimum",
        "max",
        "min",
        "amax",
        "amin",
    }
)
#: name fragments of piecewise-linear pooling functions (every max pooling variant)
KINKED_FRAGMENTS = ("max_pool", "maxpool", "max_unpool")


def is_kinked(name: str) -> bool:
    """Whether the torch function named ``name`` is piecewise linear (has kinks) in its input.

    Args:
        name: a function's ``__name__``, e.g. ``relu`` or ``max_pool2d``.

    Returns:
        True for the names of :data:`KINKED_NAMES` and any max pooling.
    """
    lowered = name.lower().lstrip("_")
    return lowered in KINKED_NAMES or any(fragment in lowered for fragment in KINKED_FRAGMENTS)


class _Recorder(TorchFunctionMode):
    """Records the names of the piecewise-linear torch functions called while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(getattr(func, "__name__", ""))
        if is_kinked(name) and any(_on_parameters(a) for a in (*args, *(kwargs or {}).values())):
            self.names.add(name.lstrip("_"))
        return func(*args, **(kwargs or {}))


def _on_parameters(value: Any) -> bool:
    """Whether ``value`` (or a tensor in a list of them) is a floating tensor that depends on the parameters."""
    if isinstance(value, (list, tuple)):
        return any(_on_parameters(v) for v in value)
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.requires_grad


def kinked_operations(forward: Callable[[], Any]) -> list[str]:
    """The piecewise-linear operations that one call of ``forward`` applies to tensors that depend on the parameters.

    An operation counts when one of its tensor arguments requires a gradient (so index arithmetic, or a check of
    the input, does not); no gradient is taken.

    Args:
        forward: runs the model once with parameters that require a gradient, e.g. ``lambda: model(x[:2])``.

    Returns:
        Their names, sorted (e.g. ``["max_pool2d", "relu"]``); empty for a smooth network (GELU, tanh, softmax).
    """
    recorder = _Recorder()
    with torch.enable_grad(), recorder:
        forward()
    return sorted(recorder.names)
