"""The optimisers of ``landscape train`` by name, and their state by parameter name (saved with each checkpoint).

:func:`build_optimizer` makes the optimiser a name of :data:`~landscape.options.train.OPTIMIZERS` stands for;
:func:`optimizer_state` turns its ``state_dict()`` into plain data keyed by parameter names (a checkpoint's
``extra["optimizer"]``, docs/schema.md) and :func:`load_optimizer_state` puts such a state into a fresh optimiser
of the same run, so that what depends on it (Adam's preconditioner of a sharpness record) can be rebuilt.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from landscape.errors import LandscapeError
from landscape.options.train import DEFAULT_MOMENTUM, OPTIMIZERS


def build_optimizer(
    name: str, groups: Sequence[dict], lr: float, momentum: float | None = None
) -> torch.optim.Optimizer:
    """The optimiser ``name`` over the param groups ``groups`` (each with its ``weight_decay``).

    ``adamw``: ``torch.optim.AdamW``; ``adam``: ``torch.optim.Adam``; ``sgd``: ``torch.optim.SGD`` without
    momentum; ``sgd-nesterov``: with Nesterov momentum ``momentum``; ``heavy-ball``: with heavy-ball momentum
    ``momentum`` (no dampening).

    Args:
        name: one of :data:`~landscape.options.train.OPTIMIZERS`.
        groups: the param groups.
        lr: the learning rate.
        momentum: the momentum of ``sgd-nesterov`` and ``heavy-ball`` (None: ``DEFAULT_MOMENTUM``); unused by
            the others.

    Returns:
        The optimiser.

    Raises:
        LandscapeError: an unknown name.
    """
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr)
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr)
    if name in ("sgd-nesterov", "heavy-ball"):
        beta = DEFAULT_MOMENTUM if momentum is None else momentum
        return torch.optim.SGD(groups, lr=lr, momentum=beta, nesterov=name == "sgd-nesterov")
    raise LandscapeError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def optimizer_state(optimizer: torch.optim.Optimizer, model: nn.Module) -> dict[str, Any]:
    """The optimiser's state as plain data keyed by the model's parameter names.

    Args:
        optimizer: the optimiser of ``model``'s parameters.
        model: the model.

    Returns:
        ``{"type": class name, "param_groups": [group options with "params" as names], "state": {name: {key:
        tensor on the CPU}}}``; parameters the optimiser has no state for yet are left out of ``state``.
    """
    name_of = {id(p): n for n, p in model.named_parameters()}
    groups = []
    for group in optimizer.param_groups:
        options = {k: v for k, v in group.items() if k != "params"}
        groups.append({**options, "params": [name_of[id(p)] for p in group["params"]]})
    state = {
        name_of[id(p)]: {k: v.detach().to("cpu", copy=True) if torch.is_tensor(v) else v for k, v in s.items()}
        for p, s in optimizer.state.items()
        if id(p) in name_of
    }
    return {"type": type(optimizer).__name__, "param_groups": groups, "state": state}


def load_optimizer_state(optimizer: torch.optim.Optimizer, model: nn.Module, saved: Mapping[str, Any]) -> None:
    """Put a state of :func:`optimizer_state` into ``optimizer`` (of ``model``, built as the saved one was).

    Args:
        optimizer: a fresh optimiser of the same type and groups.
        model: its model.
        saved: the state, as :func:`optimizer_state` gave it.

    Raises:
        LandscapeError: another optimiser type, or groups that hold other parameters.
    """
    if saved["type"] != type(optimizer).__name__:
        raise LandscapeError(f"the saved optimiser state is {saved['type']}'s, not {type(optimizer).__name__}'s")
    params = dict(model.named_parameters())
    index = {id(p): i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
    names = [n for g in saved["param_groups"] for n in g["params"]]
    if [index.get(id(params[n])) if n in params else None for n in names] != list(range(len(index))):
        raise LandscapeError("the saved optimiser state's param groups hold other parameters than this optimiser's")
    groups = [{**g, "params": [index[id(params[n])] for n in g["params"]]} for g in saved["param_groups"]]
    state = {index[id(params[n])]: dict(s) for n, s in saved["state"].items()}
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """Multiplier of the base learning rate at ``step``: linear warm-up, then cosine decay to 0.

    ``(step + 1) / T_w`` for ``step < T_w``, else ``(1 + cos(pi * min(1, (step - T_w) / (T - T_w)))) / 2``.

    Args:
        step: the optimisation step, from 0.
        total_steps: the run's number of steps ``T``.
        warmup_steps: the number of warm-up steps ``T_w`` (0: no warm-up).

    Returns:
        The factor, in [0, 1].
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup_steps) / span)))
