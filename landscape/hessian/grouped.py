"""Hessian-vector products of several equal-sized mini-batches at once, and the measured choice of how many.

For batches ``b_1 .. b_G`` of one size stacked into ``(G, B, ...)`` inputs, one call computes

    H_{b_i} v_i + H_R v_i        for i = 1 .. G,

each batch with its own vector, by ``torch.func.vmap`` of ``jvp(grad(L_b))`` over the stacked batches and
vectors (on a GPU one call keeps the device busy where a batch of 16 alone does not). Paper A's per-mini-batch
spectra run one Lanczos per batch; :func:`~landscape.hessian.lanczos.drive_together` runs a group's Lanczos
recurrences in lockstep on these products, each with its own basis, restarts and convergence, and a converged
batch leaves the group.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.func import grad, jvp, vmap

from landscape.hessian.products import ProductCosts
from landscape.objective import Objective, batch_loss
from landscape.params import ParamDict, flatten, unflatten

#: the most batches ``auto`` puts in one group
MAX_GROUP = 64
#: the groups ``auto`` times on the CPU (a GPU's is bounded by memory instead)
CPU_TRIAL_GROUP = 8
#: the share of the free GPU memory ``auto`` lets a group's products use
MEMORY_SHARE = 0.5


class GroupedProducts:
    """``(slots, V) -> [H_{b_s} v_s + H_R v_s]`` for batches of one size, in one vectorised call.

    Args:
        objective: the objective whose batches, parameters (all of its variable ones), criterion and
            regulariser are used.
        indices: the objective's batches of the group; all of one size.

    Attributes:
        indices: the batches, in slot order.
        n: the number of parameter entries (the vectors' length).
        n_products: the number of batch products made (a call with m rows makes m).

    Raises:
        ValueError: the batches are not all of one size, or there are none.
    """

    def __init__(self, objective: Objective, indices: Sequence[int]) -> None:
        self.indices = [int(i) for i in indices]
        if not self.indices:
            raise ValueError("a group needs at least one batch")
        batches = [objective.batches[i] for i in self.indices]
        if len({tuple(x.shape) for x, _ in batches}) != 1 or len({tuple(y.shape) for _, y in batches}) != 1:
            raise ValueError("the batches of a group must all have one shape")
        self.objective = objective
        self.params: ParamDict = objective.params
        self.n = sum(p.numel() for p in self.params.values())
        self._x = torch.stack([x for x, _ in batches])
        self._y = torch.stack([y for _, y in batches])
        self._vectorised = vmap(self._one)
        self.n_products = 0

    def _one(self, x: Tensor, y: Tensor, v: Tensor) -> Tensor:
        o = self.objective

        def loss(params: ParamDict) -> Tensor:
            return batch_loss(o.logits(params, x), y, o.criterion)

        vec = unflatten(v, self.params)
        hv = jvp(grad(loss), (self.params,), (vec,))[1]
        if o.regularizer.active:
            reg = jvp(grad(o.regularizer), (self.params,), (vec,))[1]
            hv = {n: hv[n] + reg[n] for n in hv}
        return flatten(hv)

    def __call__(self, slots: Sequence[int], V: Tensor) -> Tensor:
        """The products of the batches in ``slots`` (positions in :attr:`indices`) with the rows of ``V``.

        Args:
            slots: which batches of the group, one per row of ``V``.
            V: the vectors, shape ``(len(slots), n)``.

        Returns:
            Row ``i``: ``H_{b_{slots[i]}} V[i] + H_R V[i]``, shape ``(len(slots), n)``.
        """
        index = torch.as_tensor(list(slots), dtype=torch.long, device=self._x.device)
        self.n_products += len(slots)
        return self._vectorised(self._x.index_select(0, index), self._y.index_select(0, index), V)


@dataclass
class GroupChoice:
    """The group size a spectrum run used and why.

    Attributes:
        option: what was asked for (``"auto"`` or a number).
        group: the group size used.
        reason: how ``auto`` decided (or ``"given"``).
        seconds: per-batch product times measured by ``auto`` (``serial``, ``vmap``), if any.
        memory_per_batch: bytes one batch's vectorised product needed on the GPU (``auto`` on CUDA), or 0.
    """

    option: int | str
    group: int
    reason: str
    seconds: dict[str, float] = field(default_factory=dict)
    memory_per_batch: int = 0

    def as_dict(self) -> dict[str, object]:
        """The choice as a JSON-able dict (a result-file attribute, docs/schema.md)."""
        return {
            "option": self.option,
            "group": self.group,
            "reason": self.reason,
            "seconds": {k: round(v, 6) for k, v in self.seconds.items()},
            "memory_per_batch": self.memory_per_batch,
        }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], object], device: torch.device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def choose_group(
    objective: Objective,
    indices: Sequence[int],
    serial: Callable[[Tensor], Tensor],
    option: int | str = "auto",
) -> GroupChoice:
    """How many of the equal-sized batches ``indices`` to compute together.

    A number is used as given (capped at ``len(indices)``). ``"auto"``: on a GPU, the most batches whose
    vectorised products fit in :data:`MEMORY_SHARE` of the free memory (measured on a trial group), at most
    :data:`MAX_GROUP`; on a CPU a trial group of :data:`CPU_TRIAL_GROUP`. The trial group's per-batch product
    time (second of two calls) is compared with ``serial``'s (the serial way's product of one vector on
    ``indices[0]``, the third of three calls): the group is used when it is faster per batch, else 1. A
    model whose forward cannot run under ``vmap`` (``RuntimeError``/``NotImplementedError`` on the trial)
    gets 1.

    Args:
        objective: the objective of the batches.
        indices: equal-sized batches of the objective.
        serial: ``v -> H_{b_0} v`` made the serial way.
        option: ``"auto"`` or a group size.

    Returns:
        The :class:`GroupChoice`.
    """
    count = len(indices)
    if option != "auto":
        return GroupChoice(option, max(1, min(int(option), count)), "given")
    if count < 2:
        return GroupChoice(option, 1, "one batch")
    device = objective.device
    n = sum(p.numel() for p in objective.params.values())
    gen = torch.Generator().manual_seed(0)
    dtype = next(iter(objective.params.values())).dtype
    trial = min(count, CPU_TRIAL_GROUP if device.type != "cuda" else 4)
    V = torch.randn(trial, n, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    products = GroupedProducts(objective, indices[:trial])
    slots = list(range(trial))
    memory = 0
    try:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            products(slots, V)
            memory = max(1, math.ceil((torch.cuda.max_memory_allocated(device) - base) / trial))
            free, _ = torch.cuda.mem_get_info(device)
            fits = int(MEMORY_SHARE * free // memory)
            if fits > trial:
                trial = min(count, fits, MAX_GROUP)
                V = torch.randn(trial, n, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
                products = GroupedProducts(objective, indices[:trial])
                slots = list(range(trial))
        products(slots, V)  # warm-up
        t_group = _timed(lambda: products(slots, V), device) / trial
    except (RuntimeError, NotImplementedError) as exc:  # vmap cannot batch an op of this model, or no memory
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return GroupChoice(option, 1, f"vmap failed on a trial group: {type(exc).__name__}", memory_per_batch=memory)
    serial(V[0])  # the serial way settles in (auto: a timed jvp, then its choice)
    serial(V[0])
    t_serial = _timed(lambda: serial(V[0]), device)
    seconds = {"serial": t_serial, "vmap": t_group}
    if t_group < t_serial:
        return GroupChoice(option, trial, f"vmap over {trial} batches is faster per batch", seconds, memory)
    return GroupChoice(option, 1, f"vmap over {trial} batches is not faster per batch", seconds, memory)


def shared_costs(costs: dict[tuple[int, ...], ProductCosts], shape: tuple[int, ...]) -> ProductCosts:
    """The product measurements shared by the batches of input shape ``shape`` (created when new).

    Args:
        costs: the record by input shape.
        shape: a batch's input shape.

    Returns:
        The :class:`~landscape.hessian.products.ProductCosts` for that shape.
    """
    return costs.setdefault(tuple(shape), ProductCosts())
