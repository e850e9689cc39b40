"""First derivatives of a loss over a params dict, by the cheaper route where one is open.

``torch.func.grad`` runs its backward pass with ``create_graph=True`` (so that it composes with other transforms):
it records a graph of the backward and takes the backward formulas that allow one, which costs more. On the
ResNet of ``benchmarks/hessian.py`` a gradient through it took 1.23-1.48 of a plain ``torch.autograd.grad`` in
three paired runs, and the same gradient by :func:`value_and_gradient` 0.94 (docs/measured.md). Outside every
``torch.func`` transform, :func:`value_and_gradient` takes the plain route, with the same values (the same
backward formulas); inside one (``vmap``, ``grad``, ``jvp`` on the stack) it is ``torch.func.grad_and_value``,
so that it still composes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor
from torch._C._functorch import peek_interpreter_stack
from torch.func import grad_and_value

from landscape.core.params import ParamDict


def under_transform() -> bool:
    """Whether a ``torch.func`` transform (``vmap``, ``grad``, ``jvp``, ...) is running around this call.

    Returns:
        True inside a transform.
    """
    return peek_interpreter_stack() is not None


def value_and_gradient(loss: Callable[[ParamDict], Tensor], params: Mapping[str, Tensor]) -> tuple[ParamDict, Tensor]:
    """``(grad L(params), L(params))`` by name, as ``torch.func.grad_and_value(loss)(params)`` returns them.

    Args:
        loss: a function of a params dict returning a 0-dim tensor.
        params: the point (not changed; its tensors need not require gradients).

    Returns:
        The gradient by parameter name (zeros where the loss does not depend on a parameter) and the loss.
    """
    if under_transform():
        return grad_and_value(loss)(dict(params))
    names = list(params)
    leaves = {n: params[n].detach().requires_grad_(True) for n in names}
    with torch.enable_grad():
        value = loss(leaves)
        grads = torch.autograd.grad(value, list(leaves.values()), allow_unused=True, materialize_grads=True)
    return dict(zip(names, grads)), value.detach()


def gradient_of(loss: Callable[[ParamDict], Tensor]) -> Callable[[ParamDict], ParamDict]:
    """The function ``params -> grad L(params)`` by name (:func:`value_and_gradient`'s route), like ``grad(loss)``.

    Args:
        loss: a function of a params dict returning a 0-dim tensor.

    Returns:
        The gradient function.
    """
    return lambda params: value_and_gradient(loss, params)[0]
