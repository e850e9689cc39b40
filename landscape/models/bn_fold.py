"""Fold eval-mode BatchNorm into the convolution before it, for any (perturbed) parameters.

A convolution ``z = conv(x, W) + b`` followed by an eval-mode BatchNorm with running mean ``m``, variance ``v``,
``eps``, weight ``gamma`` and bias ``beta`` computes ``gamma * (z - m) / sqrt(v + eps) + beta``, which is the
convolution with

    W' = W * s (per output channel),   b' = (b - m) * s + beta,   s = gamma / sqrt(v + eps).

:func:`fold_batchnorm` finds the conv -> BN pairs it can *prove* (``torch.fx``), in a copy of the model whose
folded BN layers are removed; :meth:`FoldedModel.state` maps a full state dict of the original model (the
parameters of any grid point, the buffers) to the state of that copy. The user's model is never modified.

A pair is folded only when all of these hold: the module (or, where tracing the whole model fails, a traceable
submodule) traces with ``torch.fx.symbolic_trace``; the BN is a ``BatchNorm1d/2d/3d`` in eval mode with
``track_running_stats`` and running statistics; its one input is the output of a ``Conv1d/2d/3d`` with as many
output channels, which nothing else uses; each of the two modules is called once and its tensors are not read
elsewhere nor shared with another module. Anything else is left unfolded (and the reason recorded).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_BNS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


@dataclass(frozen=True)
class FoldPair:
    """One folded conv -> BN pair, by qualified names in the original model.

    Attributes:
        conv: the convolution's module name.
        bn: the BatchNorm's module name.
        eps: the BatchNorm's ``eps``.
        conv_bias: whether the convolution has a bias of its own (else the folded copy gains one).
        affine: whether the BatchNorm has ``weight`` and ``bias``.
    """

    conv: str
    bn: str
    eps: float
    conv_bias: bool
    affine: bool


@dataclass
class FoldedModel:
    """A copy of a model with its provable conv -> BN pairs folded (see the module docstring).

    Attributes:
        module: the folded copy (the original module itself when nothing was folded); it shares the original's
            parameters and buffers (it is only called with a full state, :meth:`state`).
        pairs: the folded pairs.
        notes: why other BatchNorm layers or submodules were left unfolded (short, human-readable).
        keys: the names of the folded copy's parameters and buffers.
    """

    module: nn.Module
    pairs: list[FoldPair] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    keys: frozenset[str] = frozenset()

    @property
    def n_folded(self) -> int:
        """The number of BatchNorm layers folded away."""
        return len(self.pairs)

    def state(self, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The folded copy's state for the original model's full state ``state`` (params and buffers).

        Args:
            state: name -> tensor for every parameter and buffer of the original model (e.g. a grid point's
                perturbed parameters with the centre's buffers). Works under ``torch.func.vmap`` too.

        Returns:
            name -> tensor for the folded copy: each folded conv's ``weight`` and ``bias`` replaced by ``W'``
            and ``b'``, the folded BatchNorms' tensors dropped.
        """
        out = dict(state)
        for p in self.pairs:
            w = out[f"{p.conv}.weight"]
            mean = out.pop(f"{p.bn}.running_mean")
            scale = torch.rsqrt(out.pop(f"{p.bn}.running_var") + p.eps)
            out.pop(f"{p.bn}.num_batches_tracked", None)
            shift = -mean
            if p.conv_bias:
                shift = out[f"{p.conv}.bias"] - mean
            if p.affine:
                scale = out.pop(f"{p.bn}.weight") * scale
                out[f"{p.conv}.bias"] = shift * scale + out.pop(f"{p.bn}.bias")
            else:
                out[f"{p.conv}.bias"] = shift * scale
            out[f"{p.conv}.weight"] = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
        return {k: v for k, v in out.items() if k in self.keys}


def fold_batchnorm(model: nn.Module) -> FoldedModel:
    """Fold every provable eval-mode conv -> BatchNorm pair of ``model`` into a copy (``model`` is untouched).

    The whole model is traced with ``torch.fx``; where that fails, each child module is tried in turn
    (recursively), so that the traceable blocks of a model with untraceable parts (attention, control flow)
    are still folded. The trace only proves the pattern: the copy keeps every module type and ``forward``; a
    folded convolution gains ``W'``/``b'`` (a bias when it had none) and its BatchNorm becomes ``nn.Identity``.

    Args:
        model: the module, in eval mode.

    Returns:
        The :class:`FoldedModel` (with ``n_folded == 0`` and the original module when nothing could be folded).
    """
    pairs: list[FoldPair] = []
    notes: list[str] = []
    counts: dict[int, int] = {}
    tensors = [t for _, t in model.named_parameters(remove_duplicate=False)]
    for t in tensors + [t for _, t in model.named_buffers(remove_duplicate=False)]:
        counts[id(t)] = counts.get(id(t), 0) + 1
    _find_pairs(model, "", pairs, notes, counts)
    if not pairs:
        return FoldedModel(model, [], notes or ["no conv -> BatchNorm pair"], frozenset())
    # the copy shares the model's tensors: its own are never read (FoldedModel.state gives every one of them)
    folded = copy.deepcopy(model, {id(t): t for t in tensors + [t for _, t in model.named_buffers()]})
    for p in pairs:
        conv = folded.get_submodule(p.conv)
        if conv.bias is None:
            conv.bias = nn.Parameter(torch.zeros(conv.out_channels, dtype=conv.weight.dtype, device=conv.weight.device))
        parent, _, leaf = p.bn.rpartition(".")
        setattr(folded.get_submodule(parent) if parent else folded, leaf, nn.Identity())
    keys = frozenset(dict(folded.named_parameters()).keys() | dict(folded.named_buffers()).keys())
    return FoldedModel(folded, pairs, notes, keys)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _find_pairs(
    module: nn.Module, prefix: str, pairs: list[FoldPair], notes: list[str], counts: dict[int, int]
) -> None:
    """Append the provable pairs of ``module`` (traced whole, else child by child) to ``pairs``."""
    children = list(module.named_children())
    if not children:
        return
    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as exc:  # control flow on tensors, unsupported ops, ...: try the children
        if not prefix:
            notes.append(f"the model does not trace with torch.fx ({type(exc).__name__}); its blocks were tried")
        for name, child in children:
            _find_pairs(child, _join(prefix, name), pairs, notes, counts)
        return
    calls: dict[str, int] = {}
    read: set[str] = set()
    for n in gm.graph.nodes:
        if n.op == "call_module":
            calls[n.target] = calls.get(n.target, 0) + 1
        elif n.op == "get_attr":
            read.add(str(n.target))
    for bn_node in gm.graph.nodes:
        if bn_node.op != "call_module" or type(gm.get_submodule(bn_node.target)) not in _BNS:
            continue
        bn = gm.get_submodule(bn_node.target)
        name = _join(prefix, bn_node.target)
        reason = _refusal(gm, bn_node, bn, calls, read, counts)
        if reason:
            notes.append(f"{name}: {reason}")
            continue
        conv_node = bn_node.args[0]
        conv = gm.get_submodule(conv_node.target)
        pairs.append(
            FoldPair(_join(prefix, conv_node.target), name, float(bn.eps), conv.bias is not None, bool(bn.affine))
        )


def _refusal(
    gm: torch.fx.GraphModule,
    bn_node: torch.fx.Node,
    bn: nn.Module,
    calls: dict[str, int],
    read: set[str],
    counts: dict[int, int],
) -> str:
    """Why this BatchNorm cannot be folded into its input ("" when it can)."""
    if bn.training:
        return "in train mode"
    if not bn.track_running_stats or bn.running_mean is None or bn.running_var is None:
        return "no running statistics (track_running_stats=False)"
    if len(bn_node.args) != 1 or bn_node.kwargs:
        return "called with extra arguments"
    src = bn_node.args[0]
    if not isinstance(src, torch.fx.Node) or src.op != "call_module":
        return "its input is not a convolution"
    conv = gm.get_submodule(src.target)
    if type(conv) not in _CONVS or _CONVS.index(type(conv)) != _BNS.index(type(bn)):
        return "its input is not a convolution of its dimension"
    if conv.out_channels != bn.num_features:
        return "channel counts differ"
    if len(src.users) != 1:
        return "the convolution's output is used elsewhere too"
    if calls.get(src.target, 0) != 1 or calls.get(bn_node.target, 0) != 1:
        return "a module called more than once"
    for target in (src.target, bn_node.target):
        if any(r == target or r.startswith(target + ".") for r in read):
            return "its tensors are read elsewhere"
    tensors = [conv.weight, conv.bias, bn.weight, bn.bias, bn.running_mean, bn.running_var]
    if any(t is not None and counts.get(id(t), 0) != 1 for t in tensors):
        return "a tensor shared with another module"
    return ""
