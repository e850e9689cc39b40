"""Training the bend of a quadratic Bezier curve between two networks (Garipov et al. 2018).

The curve ``phi(t) = (1-t)^2 theta_A + 2t(1-t) theta_c + t^2 theta_B`` has fixed ends; its bend ``theta_c``
(initialised at the midpoint ``(theta_A + theta_B) / 2``) is trained by SGD on

    E_{t ~ U(0, 1)} L(phi(t)),

one ``t`` drawn per mini-batch: the step of mini-batch ``b`` follows the gradient of ``L_b(phi(t_b)) + R(phi(t_b))``
(the objective's data loss of that batch and its regulariser) with respect to ``theta_c``, which is
``2 t (1 - t)`` times the gradient at ``phi(t)``. The mini-batches are the objective's batches, visited in a new
random order each epoch.

BatchNorm during training (Garipov et al.'s convention): the forward of ``phi(t)`` runs with its BatchNorm layers
in train mode, so that every layer normalises by the statistics of the mini-batch it sees at that ``t``; the
running statistics this updates are thrown away (they are re-estimated per ``t`` when the curve is evaluated,
:func:`landscape.analyses.connect.evaluate.evaluate_path` with ``bn="recompute"``). Every other layer stays in
eval mode (dropout off: the training is deterministic given the seed). Other buffers are the ends' buffers
interpolated at ``t``.

Randomness: epoch ``e`` (0-based) draws its batch order and its ``t`` values from a private generator seeded
with ``(seed, e)``, so an epoch's draws depend on nothing but the seed and its index: a run resumed from the
state after epoch ``e`` (:class:`BendState`, e.g. saved by the caller from ``on_epoch``) continues exactly as an
uninterrupted run would. The global random state is never read or changed. Nothing here reads or writes files.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from landscape.analyses.connect.evaluate import prepare_path
from landscape.analyses.connect.path import Endpoint, bezier, check_same_architecture, interpolate_buffers, midpoint
from landscape.core.criteria import batch_loss
from landscape.core.objective import Objective, bn_train_mode
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.models.checkpoint import non_finite
from landscape.options import checks


@dataclass
class BendState:
    """The bend after some epochs of training, with what the next epoch needs to continue exactly.

    Attributes:
        epoch: the number of epochs done.
        bend: the bend ``theta_c``, name -> tensor (detached).
        momentum: SGD's momentum buffer of each bend tensor, name -> tensor (empty before the first step or
            without momentum).
        history: the mean training loss of each epoch done, ``sum_b (N_b/N) [L_b(phi(t_b)) + R(phi(t_b))]``.
    """

    epoch: int
    bend: ParamDict
    momentum: ParamDict = field(default_factory=dict)
    history: list[float] = field(default_factory=list)

    def state_dict(self) -> dict[str, Any]:
        """This state as plain data (tensors on the CPU, ints, floats, dicts, lists) for ``torch.save``.

        Returns:
            ``{"epoch", "bend", "momentum", "history"}``; :meth:`from_state_dict` reads it back.
        """
        return {
            "epoch": int(self.epoch),
            "bend": {n: t.detach().cpu().clone() for n, t in self.bend.items()},
            "momentum": {n: t.detach().cpu().clone() for n, t in self.momentum.items()},
            "history": [float(v) for v in self.history],
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> BendState:
        """The state saved by :meth:`state_dict`.

        Args:
            state: the dict (e.g. read back by ``torch.load(weights_only=True)``).

        Returns:
            The :class:`BendState` (tensors where they were saved: on the CPU).

        Raises:
            LandscapeError: a key is missing, or the epoch count does not match the history.
        """
        missing = [k for k in ("epoch", "bend", "momentum", "history") if k not in state]
        if missing:
            raise LandscapeError(f"the bend state lacks {missing[0]!r}; give a state saved by BendState.state_dict")
        epoch = int(state["epoch"])
        history = [float(v) for v in state["history"]]
        if epoch < 0 or len(history) != epoch:
            raise LandscapeError(f"the bend state says {epoch} epochs done but holds {len(history)} epochs' losses")
        return cls(epoch, dict(state["bend"]), dict(state["momentum"]), history)


def init_bend(a: Endpoint, b: Endpoint) -> BendState:
    """The state before training: the bend at the midpoint ``(theta_A + theta_B) / 2``, epoch 0.

    Args:
        a: ``theta_A``.
        b: ``theta_B``, of the same architecture.

    Returns:
        The :class:`BendState` of epoch 0.

    Raises:
        LandscapeError: ``a`` and ``b`` are not the same architecture (one line naming the first mismatch).
    """
    check_same_architecture(a, b)
    return BendState(0, midpoint(a.params, b.params))


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The private CPU generator of epoch ``epoch`` (0-based) of a run seeded with ``seed``.

    Seeded from ``numpy.random.SeedSequence([seed, epoch])``: different seeds and epochs give independent
    streams, and the stream of an epoch is the same whether the run was resumed or not.

    Args:
        seed: the run's seed, a whole number >= 0.
        epoch: the index of the epoch, a whole number >= 0.

    Returns:
        A new ``torch.Generator`` on the CPU.
    """
    state = np.random.SeedSequence([int(seed), int(epoch)]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state) & (2**63 - 1))


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise LandscapeError(f"{name} must be a whole number >= 0, got {value!r}")
    return int(value)


def _check_options(lr: float, momentum: float, weight_decay: float, seed: int) -> tuple[float, float, float, int]:
    return (
        checks.positive(lr, "lr"),
        checks.in_range(momentum, "momentum", 0.0, 1.0, high_open=True),
        checks.non_negative(weight_decay, "weight_decay"),
        _whole(seed, "seed"),
    )


def train_bend_epoch(
    objective: Objective,
    a: Endpoint,
    b: Endpoint,
    state: BendState,
    *,
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    seed: int = 0,
) -> BendState:
    """One epoch of SGD on the bend: the state after epoch ``e`` in, the state after epoch ``e + 1`` out.

    For each of the objective's batches, in the epoch's random order, ``t ~ U(0, 1)`` is drawn and one SGD step
    (PyTorch's ``SGD``: ``v <- momentum v + g + weight_decay theta_c``, ``theta_c <- theta_c - lr v``) is taken on
    ``L_b(phi(t)) + R(phi(t))`` with BatchNorm in train mode (see the module doc). The same ``lr``, ``momentum``,
    ``weight_decay`` and ``seed`` must be given for every epoch of a run (the state does not record them).

    Args:
        objective: the training objective: its model, batches (the mini-batches), criterion and regulariser.
        a: ``theta_A`` (fixed).
        b: ``theta_B`` (fixed, same architecture).
        state: the state after epoch ``e`` (:func:`init_bend` for ``e = 0``); not changed.
        lr: the learning rate, finite and > 0.
        momentum: SGD momentum, in ``[0, 1)``.
        weight_decay: SGD weight decay of the bend, finite and >= 0.
        seed: the run's seed (whole number >= 0).

    Returns:
        The new :class:`BendState` (epoch ``e + 1``, on the objective's device).

    Raises:
        LandscapeError: a bad option, ends or a bend that do not fit the objective's model, or a loss that is
            NaN or infinite, or a bend or momentum that is not finite after the last step (training diverged).
    """
    lr, momentum, weight_decay, seed = _check_options(lr, momentum, weight_decay, seed)
    a, b, bend = prepare_path(objective, a, b, state.bend)
    assert bend is not None
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in bend.items()}
    optimizer = torch.optim.SGD(list(leaves.values()), lr=lr, momentum=momentum, weight_decay=weight_decay)
    if state.momentum and momentum > 0:
        optimizer.load_state_dict(
            {
                "state": {
                    i: {"momentum_buffer": state.momentum[n].detach().to(leaves[n].device, leaves[n].dtype).clone()}
                    for i, n in enumerate(leaves)
                },
                "param_groups": optimizer.state_dict()["param_groups"],
            }
        )
    gen = epoch_generator(seed, state.epoch)
    order = torch.randperm(len(objective.batches), generator=gen).tolist()
    ts = torch.rand(len(objective.batches), generator=gen, dtype=torch.float64).tolist()
    mean_loss = 0.0
    for i, t in zip(order, ts):
        x, y = objective.batches[i]
        phi = bezier(a.params, leaves, b.params, t)
        buffers = interpolate_buffers(a.buffers, b.buffers, t)  # BatchNorm's running statistics: written, unused
        with bn_train_mode(objective.module):
            out = objective.logits(phi, x, buffers)
        loss = batch_loss(out, y, objective.criterion) + objective.regularizer(phi)
        value = float(loss.detach())
        if not np.isfinite(value):
            raise LandscapeError(
                f"bend training diverged (loss {value} at t={t:.3g}) in epoch {state.epoch + 1}; lower lr"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        try:
            optimizer.step()
        except RuntimeError as exc:  # torch cannot hold lr in the parameters' dtype
            if "overflow" not in str(exc):
                raise
            raise LandscapeError(
                f"--bend-lr {lr:g} overflows the bend's {bend_dtype(leaves)} parameters; lower it"
            ) from None
        mean_loss += objective.weights[i] * value
    buffers_after = {
        n: optimizer.state[p]["momentum_buffer"].detach().clone()
        for n, p in leaves.items()
        if optimizer.state.get(p, {}).get("momentum_buffer") is not None
    }
    _require_finite_after(objective, a, b, leaves, buffers_after, state.epoch + 1)
    return BendState(
        state.epoch + 1,
        {n: t.detach() for n, t in leaves.items()},
        buffers_after,
        [*state.history, mean_loss],
    )


def bend_dtype(leaves: Mapping[str, Tensor]) -> str:
    """The dtype of the bend's parameters, as a word (``float32``)."""
    return str(next(iter(leaves.values())).dtype).removeprefix("torch.")


@torch.no_grad()
def _require_finite_after(
    objective: Objective,
    a: Endpoint,
    b: Endpoint,
    leaves: Mapping[str, Tensor],
    momentum: Mapping[str, Tensor],
    epoch: int,
) -> None:
    """Refuse a bend whose last step diverged: its parameters, momentum and loss at the midpoint must be finite.

    The loss of every step is checked before the step; the last step's result is checked here, on the first
    batch at ``t = 0.5``, so that a bend which diverged in its last step is never saved.

    Raises:
        LandscapeError: a parameter or momentum buffer is not finite, or the loss there is NaN or infinite.
    """
    found = non_finite({n: t.detach() for n, t in leaves.items()}) or non_finite(dict(momentum), "momentum of")
    if found is None:
        x, y = objective.batches[0]
        phi = bezier(a.params, {n: t.detach() for n, t in leaves.items()}, b.params, 0.5)
        with bn_train_mode(objective.module):
            out = objective.logits(phi, x, interpolate_buffers(a.buffers, b.buffers, 0.5))
        value = float(batch_loss(out, y, objective.criterion) + objective.regularizer(phi))
        found = None if np.isfinite(value) else f"loss at t=0.5 is {value}"
    if found is not None:
        raise LandscapeError(
            f"bend training diverged in epoch {epoch}: after its last step the bend's {found}; lower lr (--bend-lr)"
        )


def train_bend(
    objective: Objective,
    a: Endpoint,
    b: Endpoint,
    *,
    epochs: int,
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    seed: int = 0,
    state: BendState | None = None,
    on_epoch: Callable[[BendState], None] | None = None,
) -> BendState:
    """Train the bend for ``epochs`` epochs in all, from the midpoint or from a saved state.

    Runs :func:`train_bend_epoch` until ``epochs`` epochs are done, calling ``on_epoch`` with each new state (the
    caller's chance to save ``state.state_dict()`` as a checkpoint). Resuming from the state after epoch ``e``
    with the same options gives, bit for bit, the bend of an uninterrupted run.

    Args:
        objective: the training objective (model, mini-batches, criterion, regulariser).
        a: ``theta_A``.
        b: ``theta_B``, of the same architecture.
        epochs: the total number of epochs (whole number >= 1).
        lr: the learning rate, finite and > 0.
        momentum: SGD momentum, in ``[0, 1)``.
        weight_decay: SGD weight decay of the bend, finite and >= 0.
        seed: the run's seed (whole number >= 0).
        state: the state to continue from (default: :func:`init_bend`, the midpoint at epoch 0).
        on_epoch: called with the state after each epoch.

    Returns:
        The state after ``epochs`` epochs (``state`` itself when that many are done already).

    Raises:
        LandscapeError: a bad option, a state with more epochs done than ``epochs``, ends that are not the
            same architecture, or a diverged loss.
    """
    epochs = checks.positive_int(epochs, "epochs")
    _check_options(lr, momentum, weight_decay, seed)
    state = init_bend(a, b) if state is None else state
    if state.epoch > epochs:
        raise LandscapeError(f"the bend state has {state.epoch} epochs done, more than epochs={epochs}")
    while state.epoch < epochs:
        state = train_bend_epoch(objective, a, b, state, lr=lr, momentum=momentum, weight_decay=weight_decay, seed=seed)
        if on_epoch is not None:
            on_epoch(state)
    return state
