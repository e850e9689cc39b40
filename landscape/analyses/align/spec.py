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
- the network's inputs are never permuted, and what reaches its output is not permuted either (the classifier's
  output axis): a permutation joined with them is dropped.

Any other node that receives a permuted tensor (attention, a reshape that splits the permuted axis, a
concatenation, a module the tracer cannot see into) is refused in one line naming the module, so a spec never
yields a network that computes another function.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn

from landscape.errors import LandscapeError


@dataclass(frozen=True)
class Axis:
    """One axis of one tensor that a permutation moves.

    Attributes:
        tensor: the state-dict name of the parameter or buffer (e.g. ``layer1.0.bn1.running_mean``).
        dim: the axis of that tensor.
        repeat: the axis holds ``size * repeat`` entries, unit ``c`` at ``c * repeat + j`` (after a flatten);
            1 otherwise.
    """

    tensor: str
    dim: int
    repeat: int = 1


@dataclass(frozen=True)
class Site:
    """Where a permutation's units are seen in the forward pass: a node's output, the axis that carries them.

    Attributes:
        node: the fx node's name.
        dim: the axis of the node's output that holds the units.
        repeat: as :attr:`Axis.repeat`.
        module: the module the node calls or belongs to (for messages and docs), ``""`` at the top.
    """

    node: str
    dim: int
    repeat: int = 1
    module: str = ""


@dataclass(frozen=True)
class Permutation:
    """One permutation of ``size`` units and every tensor axis and forward-pass site it moves.

    Attributes:
        name: the first module whose output carries it (e.g. ``stem.0`` for a ResNet's residual stream).
        size: the number of units.
        axes: the tensor axes it moves, in graph order.
        sites: the nodes whose outputs carry it, in graph order.
    """

    name: str
    size: int
    axes: tuple[Axis, ...]
    sites: tuple[Site, ...]


@dataclass(frozen=True)
class PermutationSpec:
    """Every permutation of a network's hidden units that leaves its function unchanged.

    Attributes:
        model: the network's class name.
        permutations: the permutations, in the order of their first site in the graph.
    """

    model: str
    permutations: tuple[Permutation, ...]

    def by_name(self) -> dict[str, Permutation]:
        """The permutations by name."""
        return {p.name: p for p in self.permutations}

    def touching(self) -> dict[str, list[tuple[str, Axis]]]:
        """Each tensor that some permutation moves -> the (permutation, axis) pairs that move it."""
        out: dict[str, list[tuple[str, Axis]]] = {}
        for p in self.permutations:
            for axis in p.axes:
                out.setdefault(axis.tensor, []).append((p.name, axis))
        return out


# -------------------------------------------------------------------------------------------- tracing
@dataclass(frozen=True)
class _State:
    """What a node's output carries: the group of its permuted axis (None: nothing permuted), axis, repeat."""

    group: int | None
    dim: int = 0
    repeat: int = 1


_FIXED = _State(None)
_NOT_TENSOR = _State(None, -1)


@dataclass
class _Group:
    size: int
    repeat: int = 1
    axes: list[Axis] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    creator: str = ""


class _Groups:
    """Union-find over the permutation groups; group 0 is the fixed one (inputs and outputs)."""

    def __init__(self) -> None:
        self.parent: list[int] = [0]
        self.groups: dict[int, _Group] = {0: _Group(0)}

    def new(self, size: int, creator: str) -> int:
        g = len(self.parent)
        self.parent.append(g)
        self.groups[g] = _Group(size, creator=creator)
        return g

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def union(self, a: int, b: int, where: str) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if 0 in (ra, rb):
            keep, gone = 0, rb if ra == 0 else ra
        else:
            keep, gone = min(ra, rb), max(ra, rb)
            if self.groups[keep].size != self.groups[gone].size:
                raise LandscapeError(
                    f"{where} joins units of {self.groups[keep].size} and {self.groups[gone].size} channels; "
                    "this network's hidden units cannot be permuted by landscape align"
                )
        self.parent[gone] = keep
        held, other = self.groups[keep], self.groups.pop(gone)
        held.axes += other.axes
        held.sites += other.sites
        return keep

    def tie(self, g: int, axis: Axis) -> None:
        self.groups[self.find(g)].axes.append(axis)

    def see(self, g: int, site: Site) -> None:
        self.groups[self.find(g)].sites.append(site)


class _Tracer(fx.Tracer):
    """``torch.fx.Tracer`` that remembers which module it is inside, to name it when tracing fails."""

    def __init__(self) -> None:
        super().__init__()
        self.inside: list[tuple[str, str]] = []

    def call_module(self, m: nn.Module, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        self.inside.append((self.path_of_module(m), type(m).__name__))
        try:
            return super().call_module(m, forward, args, kwargs)
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
        where = tracer.inside[-1] if tracer.inside else ("", type(model).__name__)
        name = f"{where[0]} ({where[1]})" if where[0] else where[1]
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LandscapeError(
            f"cannot trace module {name} with torch.fx ({first}); landscape align needs a traceable network "
            "(attention and data-dependent control flow are not supported)"
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


class _Walk:
    """One pass over the graph in topological order, each node's output state from its inputs'."""

    def __init__(self, gm: fx.GraphModule, shapes: dict[str, tuple[int, ...] | None]) -> None:
        self.gm = gm
        self.shapes = shapes
        self.groups = _Groups()
        self.states: dict[str, _State] = {}
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
        if n.op == "call_module":
            return str(n.target)
        stack = n.meta.get("nn_module_stack") or {}
        return list(stack.values())[-1][0] if stack else ""

    def state(self, a: Any) -> _State:
        return self.states.get(a.name, _NOT_TENSOR) if isinstance(a, fx.Node) else _NOT_TENSOR

    def ndim(self, n: fx.Node) -> int:
        shape = self.shapes.get(n.name)
        return -1 if shape is None else len(shape)

    def permuted_inputs(self, n: fx.Node) -> list[fx.Node]:
        found: list[fx.Node] = []
        for a in n.all_input_nodes:
            s = self.state(a)
            if s.group is not None and self.groups.find(s.group) != 0:
                found.append(a)
        return found

    def refuse(self, n: fx.Node, why: str) -> LandscapeError:
        return LandscapeError(
            f"{self.where(n)} {why}; landscape align cannot permute this network's hidden units "
            "(supported: Linear, Conv, BatchNorm, LayerNorm, elementwise activations, pooling, residual adds, "
            "flatten)"
        )

    def live(self, s: _State) -> bool:
        return s.group is not None and self.groups.find(s.group) != 0

    def tie(self, s: _State, tensor: str, dim: int) -> None:
        if self.live(s) and s.group is not None:
            self.groups.tie(s.group, Axis(tensor, dim, s.repeat))

    def new_group(self, n: fx.Node, size: int, dim: int, tensors: list[str]) -> _State:
        g = self.groups.new(size, self.module_path(n))
        for t in tensors:
            self.groups.tie(g, Axis(t, 0, 1))
        return _State(g, dim, 1)

    # ------------------------------------------------------------------------------------------ walk
    def run(self) -> None:
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                self.states[n.name] = _FIXED if self.shapes.get(n.name) is not None else _NOT_TENSOR
            elif n.op == "get_attr":
                self.attrs[n.name] = str(n.target)
                self.states[n.name] = _FIXED
            elif n.op == "output":
                self.output(n)
                continue
            else:
                self.states[n.name] = self.node(n) if self.shapes.get(n.name) is not None else self.non_tensor(n)
            s = self.states[n.name]
            if self.live(s) and s.group is not None:
                self.groups.see(s.group, Site(n.name, s.dim, s.repeat, self.module_path(n)))

    def non_tensor(self, n: fx.Node) -> _State:
        """A node whose result is not a tensor: a size or shape is harmless, anything else must see no units.

        A tuple of tensors (a split, an attention module's output) that received permuted units is refused.
        """
        harmless = (n.op == "call_method" and n.target in _SHAPE_METHODS) or (
            n.op == "call_function"
            and (n.target is operator.getitem or (n.target is getattr and n.args[1] in _SHAPE_ATTRS))
        )
        if not harmless and self.permuted_inputs(n):
            raise self.refuse(n, "receives permuted units and returns what is not a tensor")
        return _NOT_TENSOR

    def output(self, n: fx.Node) -> None:
        for a in n.all_input_nodes:
            s = self.state(a)
            if s.group is not None:
                self.groups.union(s.group, 0, self.where(n))

    def node(self, n: fx.Node) -> _State:
        if n.op == "call_module":
            return self.module(n, self.modules[str(n.target)])
        if n.op == "call_function":
            return self.function(n, n.target)
        if n.op == "call_method":
            return self.method(n, str(n.target))
        raise self.refuse(n, f"is an fx node of kind {n.op}")

    def first(self, n: fx.Node) -> _State:
        return self.state(n.args[0]) if n.args else _NOT_TENSOR

    def passed(self, n: fx.Node) -> _State:
        """The state of a node that acts on each unit alone (its other inputs must carry no permutation)."""
        s = self.first(n)
        others = [a for a in self.permuted_inputs(n) if a is not n.args[0]]
        if others:
            raise self.refuse(n, f"combines a permuted tensor ({others[0].name}) with another in a way not followed")
        return s if s.group is not None else _FIXED

    # ----------------------------------------------------------------------------------- modules
    def module(self, n: fx.Node, m: nn.Module) -> _State:
        s = self.first(n)
        target = str(n.target)
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
                return s if s.group is not None else _FIXED
            if self.live(s):
                raise self.refuse(n, f"is a grouped convolution (groups={m.groups}) on permuted channels")
            return _FIXED
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            if self.live(s) and s.dim != 1:
                raise self.refuse(n, "normalises another axis than the permuted one")
            for name in ("weight", "bias", "running_mean", "running_var"):
                if getattr(m, name, None) is not None:
                    self.tie(s, f"{target}.{name}", 0)
            return s if s.group is not None else _FIXED
        if isinstance(m, nn.LayerNorm):
            return self.layer_norm(n, m, s, target)
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
        return _FIXED

    def layer_norm(self, n: fx.Node, m: nn.LayerNorm, s: _State, target: str) -> _State:
        if not self.live(s):
            return _FIXED
        nd = self.ndim(n.args[0])
        k = len(m.normalized_shape)
        if s.dim < nd - k:
            return s  # it normalises other axes: the units' axis is carried through
        if k != 1 or s.repeat != 1:
            raise self.refuse(n, "normalises the permuted axis together with others")
        for name in ("weight", "bias"):
            if getattr(m, name, None) is not None:
                self.tie(s, f"{target}.{name}", 0)
        return s

    # --------------------------------------------------------------------------------- functions
    def function(self, n: fx.Node, f: Any) -> _State:
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
        if f is operator.getitem or f is getattr:
            if self.permuted_inputs(n):
                raise self.refuse(n, "indexes a permuted tensor")
            return _FIXED
        if self.permuted_inputs(n):
            raise self.refuse(n, "receives permuted units and no permutation spec covers it")
        return _FIXED

    def method(self, n: fx.Node, name: str) -> _State:
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
        if self.permuted_inputs(n):
            raise self.refuse(n, "receives permuted units and no permutation spec covers it")
        return _FIXED

    def elementwise(self, n: fx.Node) -> _State:
        """An add, subtraction, product or quotient of tensors (a residual connection, a gate, a scale).

        Operands that carry units must carry the same units on the same axis: their permutations are joined into
        one. A parameter along the units (a position embedding, a layer scale) moves with them; a tensor that
        broadcasts along them is the same for every unit; any other tensor that varies along them (the network's
        input) fixes the permutation.
        """
        operands = [a for a in (*n.args[:2], *n.kwargs.values()) if isinstance(a, fx.Node)]
        operands = [a for a in operands if self.shapes.get(a.name) is not None]
        live = [a for a in operands if self.live(self.state(a))]
        if not live:
            return _FIXED
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
            elif a.op == "get_attr":
                self.tie_attr(n, a, ref, d)
            else:
                self.groups.union(ref.group, 0, self.where(n))
        return _State(ref.group, ref_dim, ref.repeat)

    def tie_attr(self, n: fx.Node, attr: fx.Node, ref: _State, dim: int) -> None:
        """A parameter or buffer used in the forward (a position embedding): its axis along the units moves."""
        tensor = self.attrs[attr.name]
        if tensor not in self.gm.state_dict():
            raise self.refuse(n, f"combines the units with {tensor}, which is not a parameter or buffer")
        assert ref.group is not None
        self.groups.tie(ref.group, Axis(tensor, dim, ref.repeat))

    def flatten(self, n: fx.Node, s: _State, start: int, end: int) -> _State:
        if not self.live(s):
            return _FIXED
        shape = self.shapes[n.args[0].name] or ()
        nd = len(shape)
        start, end = start % nd if nd else 0, end % nd if nd else 0
        if s.dim < start or s.dim > end:
            return _State(s.group, s.dim if s.dim < start else s.dim - (end - start), s.repeat)
        if s.dim != start:
            raise self.refuse(n, "flattens the permuted axis behind another")
        inner = 1
        for d in range(start + 1, end + 1):
            inner *= shape[d]
        return _State(s.group, start, s.repeat * inner)

    def reshape(self, n: fx.Node) -> _State:
        s = self.first(n)
        if not self.live(s):
            return _FIXED
        before, after = self.shapes[n.args[0].name] or (), self.shapes[n.name] or ()
        if before == after:
            return s
        # (N, ..., C, rest...) -> (N, ..., C * prod(rest)): the flatten of the trailing axes from the units'
        if len(after) == s.dim + 1 and before[: s.dim] == after[: s.dim]:
            return self.flatten(n, s, s.dim, len(before) - 1)
        raise self.refuse(n, f"reshapes the permuted axis ({before} -> {after})")

    def reduce(self, n: fx.Node) -> _State:
        s = self.first(n)
        if not self.live(s):
            return _FIXED
        nd = self.ndim(n.args[0])
        dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        keep = bool(n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False))
        if dims is None:
            return _FIXED  # a reduction over everything: the same for any order of the units
        dims = [int(d) % nd for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
        if s.dim in dims:
            if s.repeat != 1:
                raise self.refuse(n, "reduces over a flattened permuted axis")
            return _FIXED
        return _State(s.group, s.dim if keep else s.dim - sum(d < s.dim for d in dims), s.repeat)

    # -------------------------------------------------------------------------------------- result
    def spec(self, model: nn.Module) -> PermutationSpec:
        found: list[Permutation] = []
        order = {n.name: i for i, n in enumerate(self.gm.graph.nodes)}
        for g, group in self.groups.groups.items():
            if g == 0 or self.groups.find(g) != g:
                continue
            sites = tuple(sorted(group.sites, key=lambda s: order[s.node]))
            axes = tuple(dict.fromkeys(group.axes))
            if not sites:
                continue
            name = sites[0].module or sites[0].node
            found.append(Permutation(name, group.size, axes, sites))
        found.sort(key=lambda p: order[p.sites[0].node])
        names: dict[str, int] = {}
        unique = []
        for p in found:
            k = names.get(p.name, 0)
            names[p.name] = k + 1
            unique.append(p if k == 0 else Permutation(f"{p.name}#{k}", p.size, p.axes, p.sites))
        return PermutationSpec(type(model).__name__, tuple(unique))


def _op_text(n: fx.Node) -> str:
    target = n.target
    name = getattr(target, "__name__", None) or str(target)
    return f"{n.op} {name}"


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
    walk = _Walk(gm, shapes)
    walk.run()
    return walk.spec(model)


def iter_axes(spec: PermutationSpec) -> Iterator[tuple[str, Axis]]:
    """Every (permutation name, axis) pair of a spec, in order."""
    for p in spec.permutations:
        for axis in p.axes:
            yield p.name, axis
