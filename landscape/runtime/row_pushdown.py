"""Compute only the rows a graph's output reads: ``select`` pushed up through row-wise operators.

A classifier that reads one token (a ViT's CLS token: ``select(x, 1, 0)`` before the head) needs only that row of
everything above the select that works row by row: the last block's MLP, its attention output for that query,
its norms and residual additions. :func:`push_rows_up` rewrites an exported graph (``torch.export``'s ATen
graph) so that such operators run on the rows read: ``rows(op(x, ...)) = op(rows(x), ...)`` wherever ``op``
works on each row alone. The rewrite stops at a node whose full value something else needs (the keys and values
every query attends to), so the graph computes the same function with fewer operations.

The rows travel as ``aten.slice.Tensor(x, dim, start, end)`` (the rank kept, so that broadcasting and matrix
products keep their meaning), and the original ``select`` reads row 0 of the slice.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

aten = torch.ops.aten

#: operators that act on each element alone: any dim of the output is the same dim of each (broadcast) input
_ELEMENTWISE = {
    aten.add.Tensor,
    aten.sub.Tensor,
    aten.mul.Tensor,
    aten.div.Tensor,
    aten.add.Scalar,
    aten.sub.Scalar,
    aten.mul.Scalar,
    aten.div.Scalar,
    aten.neg.default,
    aten.gelu.default,
    aten.relu.default,
    aten.silu.default,
    aten.tanh.default,
    aten.sigmoid.default,
    aten.hardswish.default,
    aten.hardtanh.default,
    aten.leaky_relu.default,
    aten.elu.default,
    aten.exp.default,
    aten.sqrt.default,
    aten.rsqrt.default,
    aten.clone.default,
    aten.contiguous.default,
}


def push_rows_up(gm: fx.GraphModule) -> int:
    """Rewrite ``gm`` in place so that every ``select`` is pushed as far up as row-wise operators allow.

    Each ``select(op(x, ...), d, i)`` whose ``op`` acts on the rows of dim ``d`` one by one becomes
    ``op(x[..., i:i+1, ...], ...)`` read at row 0, and the slice moves on up through ``x``'s operator while ``x``
    has no other use (or only uses that read the same rows: they are merged). Operators crossed: elementwise
    ones (with broadcasting), ``linear``, ``matmul`` (rows, columns and batch dims), ``layer_norm``,
    ``rms_norm``, ``softmax`` / ``log_softmax`` (not along their dim), ``dropout`` when not training,
    ``transpose``, ``permute``, and ``reshape`` / ``view`` keeping the dims up to ``d``. Each node needs its
    ``meta["val"]`` (fake tensor); graphs with symbolic shapes or an operator that writes into a tensor are left
    unchanged.

    Args:
        gm: a graph module of ATen operators with fake values in its nodes' meta (``torch.export``'s).

    Returns:
        The number of operators that now run on fewer rows (0: unchanged).
    """
    graph = gm.graph
    tensors = [n.meta.get("val") for n in graph.nodes]
    tensors = [v for v in tensors if isinstance(v, torch.Tensor)]
    if any(any(not isinstance(s, int) for s in v.shape) for v in tensors):
        return 0
    fake_mode = torch._guards.detect_fake_mode(tensors)
    if fake_mode is None or any(_mutates(n) for n in graph.nodes):
        return 0
    ours: list[fx.Node] = []
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.select.int:
            src, dim, index = node.args
            if not isinstance(src, fx.Node) or len(src.users) != 1 or _shape(src) is None:
                continue
            d = _norm(dim, len(_shape(src)))
            index = _norm(index, _shape(src)[d])
            if _rule(src, d, [index, index + 1]) is None:
                continue
            with graph.inserting_before(node):
                rows = _node(graph, fake_mode, aten.slice.Tensor, (src, d, index, index + 1))
                node.args = (rows, d, 0)
            ours.append(rows)
    narrowed = 0
    changed = True
    while changed:
        changed = False
        for rows in list(ours):
            if rows.graph is not graph or rows not in ours:
                continue
            pushed = _push(graph, fake_mode, rows, ours)
            if pushed:
                narrowed += 1
                changed = True
    if narrowed:
        graph.lint()
        gm.recompile()
    return narrowed


def _push(graph: fx.Graph, fake_mode: Any, rows: fx.Node, ours: list[fx.Node]) -> bool:
    """Move the slice ``rows`` above its source's operator; False when it cannot move."""
    src = rows.args[0]
    if not isinstance(src, fx.Node) or src.op != "call_function":
        return False
    users = list(src.users)
    if any(u not in ours or u.args[1:] != rows.args[1:] for u in users):
        return False
    new = _rule(src, rows.args[1], list(rows.args[2:4]))
    if new is None:
        return False
    made: list[fx.Node] = []

    def place(x: Any) -> Any:
        if isinstance(x, _Rows):
            made.append(_node(graph, fake_mode, aten.slice.Tensor, (x.node, x.dim, x.start, x.end)))
            return made[-1]
        if isinstance(x, (list, tuple)):
            return type(x)(place(y) for y in x)
        return x

    with graph.inserting_before(src):
        try:
            narrowed = _node(graph, fake_mode, src.target, place(new), src.kwargs)
        except Exception:  # an operator the fake values refuse on the rows (a view that cannot be): leave it
            for node in reversed(made):
                graph.erase_node(node)
            return False
    narrowed.meta.update({k: v for k, v in src.meta.items() if k not in ("val", "tensor_meta")})
    for other in users:
        if other is not rows:
            other.replace_all_uses_with(rows)
            ours.remove(other)
            graph.erase_node(other)
    rows.replace_all_uses_with(narrowed)
    ours.remove(rows)
    graph.erase_node(rows)
    graph.erase_node(src)
    ours.extend(made)
    return True


class _Rows:
    """An input to slice: ``node[..., start:end, ...]`` along ``dim``."""

    def __init__(self, node: fx.Node, dim: int, start: int, end: int) -> None:
        self.node, self.dim, self.start, self.end = node, dim, start, end


def _rule(src: fx.Node, d: int, span: list[int]) -> tuple[Any, ...] | None:
    """The arguments of ``src``'s operator on the rows ``span`` of its output's dim ``d``, or None."""
    target, args = src.target, src.args
    shape = _shape(src)
    if shape is None or any(isinstance(v, fx.Node) for v in src.kwargs.values()):
        return None
    rank = len(shape)
    start, end = span
    if target in _ELEMENTWISE:
        return tuple(_broadcast_rows(a, d, rank, start, end) for a in args)
    x = args[0] if args else None
    if not isinstance(x, fx.Node) or _shape(x) is None:
        return None
    rows = _Rows(x, d, start, end)
    if target is aten.dropout.default:
        return None if args[2] and args[1] != 0 else (rows, *args[1:])
    if target in (aten.layer_norm.default, aten.rms_norm.default):
        return None if d >= rank - len(args[1]) else (rows, *args[1:])
    if target in (aten.softmax.int, aten.log_softmax.int, aten._softmax.default, aten._log_softmax.default):
        return None if _norm(args[1], rank) == d else (rows, *args[1:])
    if target is aten.linear.default:
        return None if d == rank - 1 else (rows, *args[1:])
    if target is aten.matmul.default:
        return _matmul_rows(args[0], args[1], d, rank, start, end)
    if target is aten.transpose.int:
        d0, d1 = _norm(args[1], rank), _norm(args[2], rank)
        return (_Rows(x, d1 if d == d0 else d0 if d == d1 else d, start, end), *args[1:])
    if target is aten.permute.default:
        return (_Rows(x, _norm(args[1][d], rank), start, end), args[1])
    if target in (aten.reshape.default, aten.view.default, aten._unsafe_view.default):
        if list(_shape(x)[: d + 1]) != list(shape[: d + 1]):
            return None
        return (rows, [*shape[:d], end - start, *shape[d + 1 :]])
    return None


def _broadcast_rows(a: Any, d: int, rank: int, start: int, end: int) -> Any:
    """An elementwise input on the rows: sliced where it has the dim with more than one entry, else itself."""
    shape = _shape(a) if isinstance(a, fx.Node) else None
    if shape is None:
        return a
    k = d - (rank - len(shape))
    return a if k < 0 or shape[k] == 1 else _Rows(a, k, start, end)


def _matmul_rows(a: Any, b: Any, d: int, rank: int, start: int, end: int) -> tuple[Any, ...] | None:
    """``matmul(a, b)``'s arguments on the rows of its output's dim ``d`` (both at least matrices), or None."""
    sa = _shape(a) if isinstance(a, fx.Node) else None
    sb = _shape(b) if isinstance(b, fx.Node) else None
    if sa is None or sb is None or len(sa) < 2 or len(sb) < 2:
        return None
    if d == rank - 2:
        return (_Rows(a, len(sa) - 2, start, end), b)
    if d == rank - 1:
        return (a, _Rows(b, len(sb) - 1, start, end))
    return (_broadcast_rows(a, d, rank, start, end), _broadcast_rows(b, d, rank, start, end))


def _node(graph: fx.Graph, fake_mode: Any, target: Any, args: tuple[Any, ...], kwargs: dict | None = None) -> fx.Node:
    """A new call of ``target`` with its fake value in ``meta["val"]`` (raises, adding nothing, if it has none)."""
    kwargs = dict(kwargs or {})
    fake_args = fx.node.map_arg(args, lambda n: n.meta["val"])
    fake_kwargs = fx.node.map_arg(kwargs, lambda n: n.meta["val"])
    with fake_mode:
        val = target(*fake_args, **fake_kwargs)
    node = graph.call_function(target, args, kwargs)
    node.meta["val"] = val
    return node


def _shape(node: fx.Node) -> tuple[int, ...] | None:
    """The node's shape from its fake value, or None when it is not a tensor."""
    val = node.meta.get("val")
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _mutates(node: fx.Node) -> bool:
    """Whether the node writes into a tensor (views of it would then see the write where it happens)."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    return schema is not None and schema.is_mutable


def _norm(dim: int, size: int) -> int:
    return dim + size if dim < 0 else dim
