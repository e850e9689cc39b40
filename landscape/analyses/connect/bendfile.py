"""The bend's checkpoint beside a connect file: ``connect.h5`` -> ``connect.bend.pt``, saved after every epoch.

The file is a landscape checkpoint (:func:`~landscape.models.checkpoint.save_checkpoint`, written atomically)
of the network ``theta_c``: the bend's parameters and the midpoint of the ends' buffers, so any analysis can take
it (``landscape surface --ckpt connect.bend.pt``). Its ``epoch`` is the number of epochs trained; ``extra``
holds what the next epoch needs to continue exactly (SGD's momentum buffers and the loss of each epoch,
:class:`~landscape.analyses.connect.bezier.BendState`) and the identity of the connect run it belongs to, so a
rerun of the same run continues from it and a bend of another run is never taken (nor replaced without
``force``).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from landscape.analyses.connect.bezier import BendState
from landscape.analyses.connect.path import Endpoint, interpolate_buffers
from landscape.errors import LandscapeError
from landscape.models.checkpoint import read_checkpoint, save_checkpoint
from landscape.store.files import check_companion

#: what ``extra["content"]`` of a bend checkpoint says
CONTENT = "bezier bend of landscape connect"


def bend_path(out: str | Path) -> Path:
    """Where the bend of the connect file ``out`` is kept: beside it, ``NAME.bend.pt``.

    Args:
        out: the connect result file.

    Returns:
        The checkpoint's path.
    """
    out = Path(out)
    return out.with_name(f"{out.stem}.bend.pt")


def _is_bend(path: Path) -> bool:
    """Whether the regular file at ``path`` is a bend checkpoint (of any connect run)."""
    try:
        extra = read_checkpoint(path, companion="the bend").meta.get("extra")
    except LandscapeError:
        return False
    return isinstance(extra, dict) and extra.get("content") == CONTENT


def read_bend(
    path: Path, identity: str, *, force: bool = False, params: Mapping[str, Tensor] | None = None
) -> BendState | None:
    """The bend state saved at ``path`` for the run of ``identity``; None when there is none to continue from.

    The file is read without following a link and checked against itself and against the run before any use:
    its parameter names and shapes are ``params``' (theta_A's), its epoch count is the length of its loss
    history, and every tensor and loss is finite.

    Args:
        path: the bend checkpoint.
        identity: the identity of the connect run (:func:`landscape.store.identity_of` of its attributes).
        force: the user's ``--force``: a bend of another run, or a damaged one, is then trained anew and replaced.
        params: theta_A's parameters, which the bend must match; None: not checked.

    Returns:
        The saved state, or None (no file; or, with ``force``, a bend that is not this run's or is damaged).

    Raises:
        LandscapeError: what is at ``path`` is not a bend (a link, another checkpoint, any other file: never
            replaced, not even with ``force``), or, without ``force``, it holds the bend of another run or a bend
            that does not hold together (one line naming the field).
    """
    if not os.path.lexists(path):
        return None
    check_companion(path, "the bend", ours=_is_bend, force=force)
    ckpt = read_checkpoint(path, companion="the bend")
    extra = ckpt.meta.get("extra")
    if extra.get("identity") != identity:
        if force:
            return None
        raise LandscapeError(
            f"{path} holds the bend of another connect run; pass --force to train the bend anew and replace it, "
            "or choose another --out"
        )
    try:
        return _checked_state(ckpt.meta, ckpt.state_dict, extra, params)
    except LandscapeError as exc:
        if force:
            return None
        raise LandscapeError(
            f"{path} is a damaged bend: {exc}; pass --force to train the bend anew and replace it"
        ) from None


def _checked_state(
    meta: Mapping[str, Any], state: Mapping[str, Tensor], extra: Mapping[str, Any], params: Mapping[str, Tensor] | None
) -> BendState:
    """The bend's state from a checkpoint's fields, each checked (a :class:`LandscapeError` names the first wrong)."""
    names = extra.get("parameter_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise LandscapeError("its parameter_names are not a list of names")
    if len(set(names)) != len(names):
        raise LandscapeError("its parameter_names repeat a name")
    ghost = next((n for n in names if n not in state), None)
    if ghost is not None:
        raise LandscapeError(f"parameter {ghost!r} is named but not stored")
    if params is not None:
        if list(names) != list(params):
            differ = next((n for n in [*names, *params] if n not in params or n not in names), names[0])
            raise LandscapeError(f"its parameters are not theta_A's (first difference: {differ!r})")
        wrong = next((n for n in names if tuple(state[n].shape) != tuple(params[n].shape)), None)
        if wrong is not None:
            raise LandscapeError(f"parameter {wrong!r} has shape {tuple(state[wrong].shape)}, not theta_A's")
    epoch = meta.get("epoch")
    if type(epoch) is not int or epoch < 0:
        raise LandscapeError(f"its epoch is {epoch!r}, not a count of epochs")
    history = extra.get("history")
    if not isinstance(history, list) or not all(type(v) in (int, float) and math.isfinite(v) for v in history):
        raise LandscapeError("its loss history is not a list of finite numbers")
    momentum = extra.get("momentum")
    if not isinstance(momentum, dict):
        raise LandscapeError("its momentum is not a dict of tensors")
    for name, buf in momentum.items():
        if name not in names or not isinstance(buf, Tensor) or tuple(buf.shape) != tuple(state[name].shape):
            raise LandscapeError(f"its momentum of {name!r} is not a tensor of that parameter's shape")
    lacking = next((n for n in names if n not in momentum), None)
    if momentum and lacking is not None:  # SGD keeps a buffer for every tensor once it has stepped, else none
        raise LandscapeError(f"its momentum has no buffer for parameter {lacking!r} (it holds one for others)")
    for where, tensors in (("parameter", {n: state[n] for n in names}), ("momentum of", momentum)):
        bad = next((n for n, t in tensors.items() if not t.is_floating_point() or not bool(t.isfinite().all())), None)
        if bad is not None:
            raise LandscapeError(f"its {where} {bad!r} holds values that are not finite floats")
    return BendState.from_state_dict(
        {"epoch": epoch, "bend": {n: state[n] for n in names}, "momentum": momentum, "history": history}
    )


def bend_network(model: nn.Module, state: BendState, a: Endpoint, b: Endpoint) -> nn.Module:
    """A copy of ``model`` holding the network theta_c: the bend's parameters, the midpoint of the buffers.

    Args:
        model: a network of the ends' architecture (not changed).
        state: the bend.
        a: theta_A (its buffers).
        b: theta_B (its buffers).

    Returns:
        The copy, on the CPU.
    """
    net = copy.deepcopy(model).cpu()
    buffers = interpolate_buffers(a.buffers, b.buffers, 0.5)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name in state.bend:
                p.copy_(state.bend[name].to(p.device, p.dtype))
        for name, t in net.named_buffers():
            t.copy_(buffers[name].to(t.device, t.dtype))
    return net


def save_bend(
    path: Path,
    network: nn.Module,
    state: BendState,
    identity: str,
    *,
    meta: dict[str, Any],
    train_options: dict[str, Any],
    force: bool = False,
) -> Path:
    """Write the bend after ``state.epoch`` epochs as a landscape checkpoint of ``network`` (atomically).

    Args:
        path: the bend checkpoint.
        network: theta_c as a network (:func:`bend_network`).
        state: the bend's training state.
        identity: the identity of the connect run.
        meta: ``model_name``, ``model_kwargs``, ``num_classes`` and ``dataset`` of the checkpoint.
        train_options: the bend's training options (recorded).
        force: replace a file at ``path`` that landscape did not write.

    Returns:
        ``path``.

    Raises:
        LandscapeError: the file cannot be written, or may not be replaced.
    """
    plain = state.state_dict()
    extra = {
        "content": CONTENT,
        "identity": identity,
        "parameter_names": list(plain["bend"]),
        "momentum": plain["momentum"],
        "history": plain["history"],
    }
    return save_checkpoint(
        path,
        network,
        model_name=meta["model_name"],
        model_kwargs=meta["model_kwargs"],
        num_classes=int(meta["num_classes"]),
        dataset=meta.get("dataset"),
        epoch=state.epoch,
        metrics={"train_loss": plain["history"][-1]} if plain["history"] else {},
        train_options=train_options,
        extra=extra,
        force=force,
    )
