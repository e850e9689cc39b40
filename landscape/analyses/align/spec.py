"""Permutation specs: which axes of which tensors share a permutation of hidden units, traced with torch.fx.

A network's hidden units can be reordered without changing its function when every tensor tied to a unit moves
with it: a layer's output axis, the next layer's input axis, its bias, the BatchNorm weight, bias and running
statistics, the LayerNorm over the stream, and every layer that writes into or reads from a residual stream
(docs/analyses.md, permutation alignment). :func:`permutation_spec` derives these ties by tracing the module
graph (``torch.fx.symbolic_trace``) and following the permuted axis through every node:

- a ``Linear`` (last axis) or ``Conv`` (``groups=1``, axis 1) ties its input axis to the permutation its input
  carries and starts a new permutation on its output axis (weight axis 0 and the bias); a depthwise conv passes
  its input's permutation on, tying its weight and bias to it;
- ``BatchNorm`` and a ``LayerNorm`` over the permuted (last) axis pass it on and tie their affine parameters
  and running statistics to it; elementwise activations, dropout, pooling and reductions over other axes pass
  it on;
- an add (a residual connection) or an elementwise product joins its operands' permutations into one, so a
  whole residual stream shares one; an add of a parameter (a position embedding) ties the parameter's axis;
- ``flatten`` of an ``(N, C, H, W)`` map gives the next ``Linear`` ``C`` blocks of ``H * W`` inputs (an axis
  with a *repeat*, index ``c * r + j``);
- a transpose or permute moves the units' axis; a concatenation along another axis joins its operands as an add
  does (the CLS token, a parameter, is tied like a position embedding); indexing by integers and slices that
  takes the units' axis whole (``tokens[:, 0]``) passes them on; ``F.layer_norm`` (a LayerNorm subclass traced
  into) acts as ``LayerNorm``;
- an attention module (a ViT's with or without a relative position bias, timm's, AlterNet's windowed attention,
  ConvViT's shift attention) is a leaf of the traced graph with its own rule, head-aware permutations of its inner
  units, a per-head position table moved by their head order (:mod:`landscape.analyses.align.attention`);
- the network's inputs are never permuted, and what reaches its output is not permuted either (the classifier's
  output axis): a permutation joined with them is dropped.

Any other node that receives a permuted tensor (attention not covered, a reshape that splits the permuted axis, a
concatenation along it, a module the tracer cannot see into) is refused in one line naming the module, so a spec
never yields a network that computes another function. The graph is walked by
:class:`~landscape.analyses.align.walk.Walk`; the spec's data are in :mod:`landscape.analyses.align.axes`.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, fx, nn

from landscape.analyses.align.attention import attention_layout
from landscape.analyses.align.axes import Axis, Permutation, PermutationSpec, Site, iter_axes
from landscape.analyses.align.walk import Walk
from landscape.errors import LandscapeError

__all__ = ["Axis", "Permutation", "PermutationSpec", "Site", "iter_axes", "permutation_spec", "trace"]


class _Tracer(fx.Tracer):
    """``torch.fx.Tracer`` that remembers which module it is inside, to name it when tracing fails."""

    def __init__(self) -> None:
        super().__init__()
        self.inside: list[tuple[str, str]] = []
        self.failed_in: tuple[str, str] | None = None  # the innermost module being traced when tracing failed

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        """torch.nn's modules and the attention modules (a rule of their own) are not traced into."""
        return attention_layout(m) is not None or super().is_leaf_module(m, module_qualified_name)

    def call_module(self, m: nn.Module, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        self.inside.append((self.path_of_module(m), type(m).__name__))
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed_in is None:
                self.failed_in = self.inside[-1]
            raise
        finally:
            self.inside.pop()


def trace(model: nn.Module) -> fx.GraphModule:
    """The model's graph, traced by ``torch.fx`` (its leaves are torch.nn's own modules).

    Args:
        model: the network.

    Returns:
        A GraphModule sharing the model's submodules and tensors.

    Raises:
        LandscapeError: the forward cannot be traced (control flow on tensor values, ...), naming the innermost
            module being traced.
    """
    tracer = _Tracer()
    try:
        graph = tracer.trace(model)
    except Exception as exc:  # torch.fx raises TraceError, TypeError, ... from the model's own code
        where = tracer.failed_in or ("", type(model).__name__)
        name = f"{where[0]} ({where[1]})" if where[0] else where[1]
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LandscapeError(
            f"cannot trace module {name} with torch.fx ({first}); landscape align needs a traceable network "
            "(data-dependent control flow is not supported)"
        ) from exc
    return fx.GraphModule(model, graph, class_name=type(model).__name__)


def _shapes(gm: fx.GraphModule, example: Tensor) -> dict[str, tuple[int, ...] | None]:
    """Each node's output shape on ``example`` (None for what is not a tensor)."""
    shapes: dict[str, tuple[int, ...] | None] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            out = super().run_node(n)
            shapes[n.name] = tuple(out.shape) if isinstance(out, Tensor) else None
            return out

    with torch.no_grad():
        Recorder(gm).run(example)
    return shapes


def permutation_spec(model: nn.Module, example: Tensor) -> PermutationSpec:
    """The permutations of ``model``'s hidden units that leave its function unchanged (module doc).

    Args:
        model: the network (eval mode; not changed).
        example: a batch of inputs on the model's device (a sample or two is enough), which gives each node's
            output shape.

    Returns:
        The spec: each permutation's size, the tensor axes it moves and the nodes whose outputs carry it.

    Raises:
        LandscapeError: the model cannot be traced, or a node that receives permuted units is not covered
            (attention, a reshape that splits the units, a concatenation, an unknown module), naming the module.
    """
    gm = trace(model)
    try:
        shapes = _shapes(gm, example)
    except LandscapeError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LandscapeError(
            f"the traced {type(model).__name__} fails on the example inputs ({first}); check the data's shape"
        ) from exc
    walk = Walk(gm, shapes)
    walk.run()
    return walk.spec(model)
