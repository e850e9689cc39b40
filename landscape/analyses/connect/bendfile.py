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
from pathlib import Path
from typing import Any

import torch
from torch import nn

from landscape.analyses.connect.bezier import BendState
from landscape.analyses.connect.path import Endpoint, interpolate_buffers
from landscape.errors import LandscapeError
from landscape.models.checkpoint import read_checkpoint, save_checkpoint
from landscape.store.files import check_replaceable

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


def read_bend(path: Path, identity: str, *, force: bool = False) -> BendState | None:
    """The bend state saved at ``path`` for the run of ``identity``; None when there is none to continue from.

    Args:
        path: the bend checkpoint.
        identity: the identity of the connect run (:func:`landscape.store.identity_of` of its attributes).
        force: the user's ``--force``: a file of another run (or one that cannot be read) is then trained anew
            and replaced.

    Returns:
        The saved state, or None (no file; or, with ``force``, a file that is not this run's).

    Raises:
        LandscapeError: what is at ``path`` may not be replaced (:func:`~landscape.store.files.check_replaceable`),
            or, without ``force``, it holds the bend of another run or no bend at all.
    """
    if not path.exists() and not path.is_symlink():
        return None
    check_replaceable(path, force=force)
    try:
        ckpt = read_checkpoint(path)
    except LandscapeError:
        if force:
            return None
        raise
    extra = ckpt.meta.get("extra") or {}
    if extra.get("content") != CONTENT or extra.get("identity") != identity:
        if force:
            return None
        raise LandscapeError(
            f"{path} holds the bend of another connect run (or no bend); pass --force to train the bend anew "
            "and replace it, or choose another --out"
        )
    names = list(extra.get("parameter_names") or [])
    state = {
        "epoch": ckpt.meta.get("epoch"),
        "bend": {n: ckpt.state_dict[n] for n in names},
        "momentum": dict(extra.get("momentum") or {}),
        "history": list(extra.get("history") or []),
    }
    return BendState.from_state_dict(state)


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
