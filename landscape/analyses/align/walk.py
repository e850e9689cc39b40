"""The walk over a traced graph that derives a permutation spec, by rules per module, function and method.

The rules are listed in :mod:`landscape.analyses.align.spec`.
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

from landscape.analyses.align.attention import attention_layout
from landscape.analyses.align.axes import Axis, Permutation, PermutationSpec, Site
from landscape.analyses.align.groups import FIXED, NOT_TENSOR, Groups, State
from landscape.errors import LandscapeError

_ELEMENTWISE_MODULES = (
    nn.ReLU,
    nn.ReLU6,
    nn.GELU,
    nn.SiLU,
    nn.Sigmoid,
    nn.Tanh,
    nn.LeakyReLU,
    nn.ELU,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Softplus,
    nn.Mish,
    nn.Identity,
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
)
_POOL_MODULES = (
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
)
_ELEMENTWISE_FUNCTIONS = {
    F.relu,
    F.relu6,
    F.gelu,
    F.silu,
    F.leaky_relu,
    F.elu,
    F.hardswish,
    F.dropout,
    torch.relu,
    torch.sigmoid,
    torch.tanh,
    torch.nn.functional.sigmoid,
    torch.nn.functional.tanh,
    operator.neg,
}
_POOL_FUNCTIONS = {
    F.adaptive_avg_pool1d,
    F.adaptive_avg_pool2d,
    F.adaptive_max_pool2d,
    F.avg_pool1d,
    F.avg_pool2d,
    F.max_pool1d,
    F.max_pool2d,
}
_ELEMENTWISE_METHODS = {"relu", "relu_", "sigmoid", "tanh", "contiguous", "clone", "detach", "float", "neg"}
_BINARY_FUNCTIONS = {
    operator.add,
    operator.iadd,
    operator.sub,
    operator.isub,
    operator.mul,
    operator.imul,
    operator.truediv,
    operator.itruediv,
    torch.add,
    torch.sub,
    torch.mul,
    torch.div,
}
_BINARY_METHODS = {"add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_"}
_REDUCTIONS = {torch.mean: "mean", torch.sum: "sum", torch.amax: "amax"}
_REDUCTION_METHODS = {"mean", "sum", "amax"}
_SHAPE_METHODS = {"size", "dim", "numel"}
_SHAPE_ATTRS = {"shape", "ndim", "dtype", "device"}


class Walk:
    """One pass over the graph in topological order, each node's output state from its inputs'."""

    def __init__(self, gm: fx.GraphModule, shapes: dict[str, tuple[int, ...] | None]) -> None:
        self.gm = gm
        self.shapes = shapes
        self.groups = Groups()
        self.states: dict[str, State] = {}
        self.attrs: dict[str, str] = {}  # get_attr node -> tensor name
        self.modules = dict(gm.named_modules())

    # ------------------------------------------------------------------------------------- helpers
    def where(self, n: fx.Node) -> str:
        """The module a node calls or sits in, for messages: ``layer1.0.conv1 (Conv2d)``."""
        if n.op == "call_module":
            return f"module {n.target} ({type(self.modules[str(n.target)]).__name__})"
        stack = n.meta.get("nn_module_stack") or {}
        if stack:
            path, kind = list(stack.values())[-1]
            kind_name = getattr(kind, "__name__", str(kind))
            return f"module {path} ({kind_name}), at {_op_text(n)}"
        return f"{_op_text(n)} in {type(self.gm).__name__}.forward"

    def module_path(self, n: fx.Node) -> str:
        """The path of the module a node calls or sits in (``""`` at the top)."""
        if n.op == "call_module":
            return str(n.target)
        stack = n.meta.get("nn_module_stack") or {}
        return list(stack.values())[-1][0] if stack else ""

    def state(self, a: Any) -> State:
        """What an argument carries (a non-node: nothing)."""
        return self.states.get(a.name, NOT_TENSOR) if isinstance(a, fx.Node) else NOT_TENSOR

    def ndim(self, n: fx.Node) -> int:
        """The number of axes of a node's output (-1: not a tensor)."""
        shape = self.shapes.get(n.name)
        return -1 if shape is None else len(shape)

    def permuted_inputs(self, n: fx.Node) -> list[fx.Node]:
        """The node's inputs that carry a live permutation."""
        found: list[fx.Node] = []
        for a in n.all_input_nodes:
            s = self.state(a)
            if s.group is not None and self.groups.find(s.group) != 0:
                found.append(a)
        return found

    def refuse(self, n: fx.Node, why: str) -> LandscapeError:
        """The one-line error for a node no rule covers, naming its module."""
        return LandscapeError(
            f"{self.where(n)} {why}; landscape align cannot permute this network's hidden units "
            "(supported: Linear, Conv, BatchNorm, LayerNorm, elementwise activations, pooling, residual adds, "
            "flatten, attention with a fused qkv, windowed or shift attention)"
        )

    def live(self, s: State) -> bool:
        """Whether a state carries a permutation that is not fixed."""
        return s.group is not None and self.groups.find(s.group) != 0

    def tie(self, s: State, tensor: str, dim: int) -> None:
        """Tie ``tensor``'s axis ``dim`` to the permutation ``s`` carries (if live)."""
        if self.live(s) and s.group is not None:
            self.groups.tie(s.group, Axis(tensor, dim, s.repeat))

    def new_group(self, n: fx.Node, size: int, dim: int, tensors: list[str]) -> State:
        """A new permutation of ``size`` units started at ``n``, moving axis 0 of ``tensors``; its state."""
        g = self.groups.new(size, self.module_path(n))
        for t in tensors:
            self.groups.tie(g, Axis(t, 0, 1))
        return State(g, dim, 1)

    # ------------------------------------------------------------------------------------------ walk
    def run(self) -> None:
        """Walk the graph in topological order, each node's state and the groups' sites."""
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                self.states[n.name] = FIXED if self.shapes.get(n.name) is not None else NOT_TENSOR
            elif n.op == "get_attr":
                self.attrs[n.name] = str(n.target)
                self.states[n.name] = FIXED
            elif n.op == "output":
                self.output(n)
                continue
            else:
                self.states[n.name] = self.node(n) if self.shapes.get(n.name) is not None else self.non_tensor(n)
            s = self.states[n.name]
            if self.live(s) and s.group is not None:
                self.groups.see(s.group, Site(n.name, s.dim, s.repeat, self.module_path(n)))

    def non_tensor(self, n: fx.Node) -> State:
        """A node whose result is not a tensor: a size or shape is harmless, anything else must see no units.

        A tuple of tensors (a split, an attention module's output) that received permuted units is refused.
        """
        harmless = (n.op == "call_method" and n.target in _SHAPE_METHODS) or (
            n.op == "call_function"
            and (n.target is operator.getitem or (n.target is getattr and n.args[1] in _SHAPE_ATTRS))
        )
        if not harmless and self.permuted_inputs(n):
            raise self.refuse(n, "receives permuted units and returns what is not a tensor")
        return NOT_TENSOR

    def output(self, n: fx.Node) -> None:
        """The network's outputs are not permuted: their groups are fixed."""
        for a in n.all_input_nodes:
            s = self.state(a)
            if s.group is not None:
                self.groups.union(s.group, 0, self.where(n))

    def node(self, n: fx.Node) -> State:
        """A node's output state, by the rule of its kind."""
        if n.op == "call_module":
            return self.module(n, self.modules[str(n.target)])
        if n.op == "call_function":
            return self.function(n, n.target)
        if n.op == "call_method":
            return self.method(n, str(n.target))
        raise self.refuse(n, f"is an fx node of kind {n.op}")

    def first(self, n: fx.Node) -> State:
        """The state of a node's first argument."""
        return self.state(n.args[0]) if n.args else NOT_TENSOR

    def passed(self, n: fx.Node) -> State:
        """The state of a node that acts on each unit alone (its other inputs must carry no permutation)."""
        s = self.first(n)
        others = [a for a in self.permuted_inputs(n) if a is not n.args[0]]
        if others:
            raise self.refuse(n, f"combines a permuted tensor ({others[0].name}) with another in a way not followed")
        return s if s.group is not None else FIXED

    # ----------------------------------------------------------------------------------- modules
    def module(self, n: fx.Node, m: nn.Module) -> State:
        """The rule of a called module."""
        s = self.first(n)
        target = str(n.target)
        if attention_layout(m) is not None:
            return self.attention(n, m)
        if isinstance(m, nn.Linear):
            if self.live(s) and s.dim != self.ndim(n.args[0]) - 1:
                raise self.refuse(n, "acts on another axis than the permuted one")
            self.tie(s, f"{target}.weight", 1)
            tensors = [f"{target}.weight"] + ([f"{target}.bias"] if m.bias is not None else [])
            return self.new_group(n, m.out_features, self.ndim(n) - 1, tensors)
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            if self.live(s) and (s.dim != 1 or s.repeat != 1):
                raise self.refuse(n, "acts on another axis than the permuted one")
            tensors = [f"{target}.weight"] + ([f"{target}.bias"] if m.bias is not None else [])
            if m.groups == 1:
                self.tie(s, f"{target}.weight", 1)
                return self.new_group(n, m.out_channels, 1, tensors)
            if m.groups == m.in_channels == m.out_channels:  # depthwise: each channel on its own
                for t in tensors:
                    self.tie(s, t, 0)
                return s if s.group is not None else FIXED
            if self.live(s):
                raise self.refuse(n, f"is a grouped convolution (groups={m.groups}) on permuted channels")
            return FIXED
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            if self.live(s) and s.dim != 1:
                raise self.refuse(n, "normalises another axis than the permuted one")
            for name in ("weight", "bias", "running_mean", "running_var"):
                if getattr(m, name, None) is not None:
                    self.tie(s, f"{target}.{name}", 0)
            return s if s.group is not None else FIXED
        if isinstance(m, nn.LayerNorm):
            affine = [f"{target}.{name}" for name in ("weight", "bias") if getattr(m, name, None) is not None]
            return self.layer_norm(n, len(m.normalized_shape), affine)
        if isinstance(m, _ELEMENTWISE_MODULES):
            return self.passed(n)
        if isinstance(m, _POOL_MODULES):
            if self.live(s) and (s.dim != 1 or s.repeat != 1):
                raise self.refuse(n, "pools over the permuted axis")
            return self.passed(n)
        if isinstance(m, nn.Flatten):
            return self.flatten(n, s, m.start_dim, m.end_dim)
        if self.permuted_inputs(n):
            raise self.refuse(n, "receives permuted units and no permutation spec covers it")
        return FIXED

    def layer_norm(self, n: fx.Node, normalized: int, tensors: list[str]) -> State:
        """A LayerNorm over the last ``normalized`` axes (a module or ``F.layer_norm``).

        Over the units' axis alone it ties its weight and bias (``tensors``); over other axes it passes the units.
        """
        s = self.first(n)
        if not self.live(s):
            return FIXED
        if s.dim < self.ndim(n.args[0]) - normalized:
            return s  # it normalises other axes: the units' axis is carried through
        if normalized != 1 or s.repeat != 1:
            raise self.refuse(n, "normalises the permuted axis together with others")
        for tensor in tensors:
            self.tie(s, tensor, 0)
        return s

    def functional_layer_norm(self, n: fx.Node) -> State:
        """``F.layer_norm(x, shape, weight, bias)`` (a LayerNorm subclass traced into): its weight and bias."""
        shape = n.args[1] if len(n.args) > 1 else n.kwargs["normalized_shape"]
        affine = [*n.args[2:4], n.kwargs.get("weight"), n.kwargs.get("bias")]
        for a in affine:
            if isinstance(a, fx.Node) and a.name not in self.attrs and self.live(self.first(n)):
                raise self.refuse(n, "normalises with a weight that is not a parameter")
        tensors = [self.attrs[a.name] for a in affine if isinstance(a, fx.Node) and a.name in self.attrs]
        return self.layer_norm(n, len(shape) if isinstance(shape, (list, tuple)) else 1, tensors)

    def attention(self, n: fx.Node, m: nn.Module) -> State:
        """An attention module's output state; its head-aware permutations made (:mod:`.attention`).

        Args:
            n: the node that calls the module.
            m: the module.

        Returns:
            The state of its output: a new permutation of ``proj``'s outputs.

        Raises:
            LandscapeError: a module that is not covered receives permuted units, the units are not on its channel
                axis, or the module is given a mask.
        """
        layout = attention_layout(m)
        s = self.first(n)
        if isinstance(layout, str) or layout is None:
            if self.permuted_inputs(n):
                raise self.refuse(n, layout or "is an attention module no rule covers")
            return FIXED
        if self.live(s) and (s.dim != layout.channel_dim % self.ndim(n.args[0]) or s.repeat != 1):
            raise self.refuse(n, "attends over the permuted axis")
        extra = [*n.args[1:], *n.kwargs.values()]  # a mask is a tensor; an unset one is None (or a None input)
        if any(
            self.shapes.get(v.name) is not None if isinstance(v, fx.Node) else v not in (None, False) for v in extra
        ):
            raise self.refuse(n, "is given a mask or other inputs (not covered)")
        inner = layout.heads * layout.head_dim
        target = str(n.target)
        qkv = f"{target}.{layout.qkv}"
        self.tie(s, f"{qkv}.weight", 1)
        has_bias = getattr(m, layout.qkv).bias is not None
        roles = {"qk": (0, 1), "vo": (2,)} if layout.qkv == "qkv" else {"vo": (None,)}
        for role, parts in roles.items():
            g = self.groups.new(
                inner, target, node=n.name, name=f"{target}.{role}", heads=layout.heads, fixed_heads=layout.fixed_heads
            )
            for k in parts:
                span = None if k is None else (k * inner, (k + 1) * inner)
                self.groups.tie(g, Axis(f"{qkv}.weight", 0, 1, span))
                if has_bias:
                    self.groups.tie(g, Axis(f"{qkv}.bias", 0, 1, span))
            if role == "qk":  # the score bias of each head: moved by the head order the module's roles share
                for tensor in layout.per_head:
                    self.groups.tie(g, Axis(f"{target}.{tensor}", 0, per_head=True))
            if role == "vo":
                self.groups.tie(g, Axis(f"{target}.proj.weight", 1))
        tensors = [f"{target}.proj.weight"] + ([f"{target}.proj.bias"] if m.proj.bias is not None else [])
        return self.new_group(n, m.proj.weight.shape[0], layout.channel_dim % self.ndim(n), tensors)

    # --------------------------------------------------------------------------------- functions
    def function(self, n: fx.Node, f: Any) -> State:
        """The rule of a called function."""
        if f in _ELEMENTWISE_FUNCTIONS:
            return self.passed(n)
        if f in _POOL_FUNCTIONS:
            s = self.first(n)
            if self.live(s) and (s.dim != 1 or s.repeat != 1):
                raise self.refuse(n, "pools over the permuted axis")
            return self.passed(n)
        if f in _BINARY_FUNCTIONS:
            return self.elementwise(n)
        if f is torch.flatten:
            start = n.args[1] if len(n.args) > 1 else n.kwargs.get("start_dim", 0)
            end = n.args[2] if len(n.args) > 2 else n.kwargs.get("end_dim", -1)
            return self.flatten(n, self.first(n), int(start), int(end))
        if f in _REDUCTIONS:
            return self.reduce(n)
        if f is F.softmax or f is torch.softmax:
            return self.passed(n)
        if f is operator.getitem:
            return self.index(n)
        if f is F.layer_norm:
            return self.functional_layer_norm(n)
        if f is torch.transpose:
            return self.transpose(n, [int(a) for a in n.args[1:3]])
        if f is torch.cat or f is torch.concat:
            return self.concatenate(n)
        if f is getattr:
            if self.permuted_inputs(n):
                raise self.refuse(n, "indexes a permuted tensor")
            return FIXED
        if self.permuted_inputs(n):
            raise self.refuse(n, "receives permuted units and no permutation spec covers it")
        return FIXED

    def method(self, n: fx.Node, name: str) -> State:
        """The rule of a called tensor method."""
        if name in _ELEMENTWISE_METHODS:
            return self.passed(n)
        if name in _BINARY_METHODS:
            return self.elementwise(n)
        if name == "flatten":
            start = n.args[1] if len(n.args) > 1 else n.kwargs.get("start_dim", 0)
            end = n.args[2] if len(n.args) > 2 else n.kwargs.get("end_dim", -1)
            return self.flatten(n, self.first(n), int(start), int(end))
        if name in ("view", "reshape"):
            return self.reshape(n)
        if name in _REDUCTION_METHODS:
            return self.reduce(n)
        if name == "softmax":
            return self.passed(n)
        if name in ("transpose", "permute"):
            dims = n.args[1:]
            if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
                dims = dims[0]
            return self.transpose(n, [int(d) for d in dims], swap=name == "transpose")
        if name == "expand" and self.ndim(n) == self.ndim(n.args[0]):
            if n.args[0].name in self.attrs:  # a parameter broadcast over the batch (a CLS token)
                self.attrs[n.name] = self.attrs[n.args[0].name]
            return self.passed(n)
        if self.permuted_inputs(n):
            raise self.refuse(n, "receives permuted units and no permutation spec covers it")
        return FIXED

    def elementwise(self, n: fx.Node) -> State:
        """An add, subtraction, product or quotient of tensors (a residual connection, a gate, a scale).

        Operands that carry units must carry the same units on the same axis: their permutations are joined into
        one. A parameter along the units (a position embedding, a layer scale) moves with them; a tensor that
        broadcasts along them is the same for every unit; any other tensor that varies along them (the network's
        input) fixes the permutation.
        """
        return self.join(n, [a for a in (*n.args[:2], *n.kwargs.values()) if isinstance(a, fx.Node)])

    def join(self, n: fx.Node, operands: list[fx.Node]) -> State:
        """The operands' units joined into one permutation (:meth:`elementwise`); the output's state."""
        operands = [a for a in operands if self.shapes.get(a.name) is not None]
        live = [a for a in operands if self.live(self.state(a))]
        if not live:
            return FIXED
        ref = self.state(live[0])
        out_nd = self.ndim(n)
        ref_dim = ref.dim - self.ndim(live[0]) + out_nd
        assert ref.group is not None
        for a in operands:
            s, shape = self.state(a), self.shapes[a.name] or ()
            d = ref_dim - out_nd + len(shape)  # the units' axis in this operand (broadcasting from the right)
            if self.live(s):
                if s.dim != d or s.repeat != ref.repeat:
                    raise self.refuse(n, "combines tensors whose permuted units lie on different axes")
                assert s.group is not None
                self.groups.union(ref.group, s.group, self.where(n))
            elif d < 0 or d >= len(shape) or shape[d] == 1:
                continue
            elif a.name in self.attrs:
                self.tie_attr(n, a, ref, d)
            else:
                self.groups.union(ref.group, 0, self.where(n))
        return State(ref.group, ref_dim, ref.repeat)

    def tie_attr(self, n: fx.Node, attr: fx.Node, ref: State, dim: int) -> None:
        """A parameter or buffer used in the forward (a position embedding): its axis along the units moves."""
        tensor = self.attrs[attr.name]
        if tensor not in self.gm.state_dict():
            raise self.refuse(n, f"combines the units with {tensor}, which is not a parameter or buffer")
        assert ref.group is not None
        self.groups.tie(ref.group, Axis(tensor, dim, ref.repeat))

    def transpose(self, n: fx.Node, dims: list[int], swap: bool = True) -> State:
        """A transpose of two axes (``swap``) or a permute of all: the units' axis moves with it."""
        s = self.first(n)
        if not self.live(s):
            return FIXED
        nd = self.ndim(n)
        dims = [d % nd for d in dims]
        if swap:
            a, b = dims
            return replace(s, dim=b if s.dim == a else a if s.dim == b else s.dim)
        return replace(s, dim=dims.index(s.dim))

    def concatenate(self, n: fx.Node) -> State:
        """A concatenation along another axis than the units' (the CLS token before the patch tokens).

        Its operands are joined as in an add (:meth:`elementwise`): a parameter among them (the CLS token) moves
        with the units. Along the units' axis it is refused.
        """
        tensors = n.args[0] if n.args else n.kwargs.get("tensors", ())
        dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
        operands = [a for a in tensors if isinstance(a, fx.Node)]
        live = [a for a in operands if self.live(self.state(a))]
        if not live:
            return FIXED
        if any(self.state(a).dim == int(dim) % self.ndim(n) for a in live):
            raise self.refuse(n, "concatenates along the permuted axis")
        return self.join(n, operands)

    def index(self, n: fx.Node) -> State:
        """``x[...]`` by integers and slices (``tokens[:, 0]``): the units' axis must be taken whole (``:``)."""
        s = self.first(n)
        if not self.live(s):
            return FIXED
        index = n.args[1] if isinstance(n.args[1], tuple) else (n.args[1],)
        if not all(isinstance(i, (int, slice)) for i in index) or len(index) > self.ndim(n.args[0]):
            raise self.refuse(n, "indexes a permuted tensor")
        if s.dim < len(index) and index[s.dim] != slice(None):
            raise self.refuse(n, "indexes the permuted axis")
        return replace(s, dim=s.dim - sum(isinstance(i, int) for i in index[: s.dim]))

    def flatten(self, n: fx.Node, s: State, start: int, end: int) -> State:
        """A flatten of axes ``start..end``: the units' axis gains a repeat when the axes behind it join it."""
        if not self.live(s):
            return FIXED
        shape = self.shapes[n.args[0].name] or ()
        nd = len(shape)
        start, end = start % nd if nd else 0, end % nd if nd else 0
        if s.dim < start or s.dim > end:
            return State(s.group, s.dim if s.dim < start else s.dim - (end - start), s.repeat)
        if s.dim != start:
            raise self.refuse(n, "flattens the permuted axis behind another")
        inner = 1
        for d in range(start + 1, end + 1):
            inner *= shape[d]
        return State(s.group, start, s.repeat * inner)

    def reshape(self, n: fx.Node) -> State:
        """A view or reshape: unchanged shape, or a flatten of the axes behind the units'; else refused."""
        s = self.first(n)
        if not self.live(s):
            return FIXED
        before, after = self.shapes[n.args[0].name] or (), self.shapes[n.name] or ()
        if before == after:
            return s
        # (N, ..., C, rest...) -> (N, ..., C * prod(rest)): the flatten of the trailing axes from the units'
        if len(after) == s.dim + 1 and before[: s.dim] == after[: s.dim]:
            return self.flatten(n, s, s.dim, len(before) - 1)
        raise self.refuse(n, f"reshapes the permuted axis ({before} -> {after})")

    def reduce(self, n: fx.Node) -> State:
        """A reduction: over the units' axis it fixes them (any order gives the same); else it passes them."""
        s = self.first(n)
        if not self.live(s):
            return FIXED
        nd = self.ndim(n.args[0])
        dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        keep = bool(n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False))
        if dims is None:
            return FIXED  # a reduction over everything: the same for any order of the units
        dims = [int(d) % nd for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
        if s.dim in dims:
            if s.repeat != 1:
                raise self.refuse(n, "reduces over a flattened permuted axis")
            return FIXED
        return State(s.group, s.dim if keep else s.dim - sum(d < s.dim for d in dims), s.repeat)

    # -------------------------------------------------------------------------------------- result
    def spec(self, model: nn.Module) -> PermutationSpec:
        """The spec of the groups found, named after their first site's module, in graph order."""
        found: list[tuple[int, Permutation]] = []
        order = {n.name: i for i, n in enumerate(self.gm.graph.nodes)}
        for g, group in self.groups.groups.items():
            if g == 0 or self.groups.find(g) != g:
                continue
            sites = tuple(sorted(group.sites, key=lambda s: order[s.node]))
            axes = tuple(dict.fromkeys(group.axes))
            if group.name:
                p = Permutation(group.name, group.size, axes, sites, group.heads, group.heads_of, group.fixed_heads)
                found.append((order[group.node], p))
            elif sites:
                name = sites[0].module or sites[0].node
                found.append((order[sites[0].node], Permutation(name, group.size, axes, sites)))
        found.sort(key=lambda item: item[0])
        names: dict[str, int] = {}
        unique = []
        for _, p in found:
            k = names.get(p.name, 0)
            names[p.name] = k + 1
            unique.append(p if k == 0 else replace(p, name=f"{p.name}#{k}"))
        return PermutationSpec(type(model).__name__, tuple(unique))


def _op_text(n: fx.Node) -> str:
    target = n.target
    name = getattr(target, "__name__", None) or str(target)
    return f"{n.op} {name}"
