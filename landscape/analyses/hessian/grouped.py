"""Hessian-vector products of several equal-sized mini-batches at once, and the measured choice of how many.

For batches ``b_1 .. b_G`` of one size stacked into ``(G, B, ...)`` inputs, one call computes

    H_{b_i} v_i + H_R v_i        for i = 1 .. G,

each batch with its own vector, by ``torch.func.vmap`` of ``jvp(grad(L_b))`` over the stacked batches and
vectors (on a GPU one call keeps the device busy where a batch of 16 alone does not). Paper A's per-mini-batch
spectra run one Lanczos per batch; :func:`~landscape.analyses.hessian.lanczos.drive_together` runs a group's Lanczos
recurrences in lockstep on these products, each with its own basis, restarts and convergence, and a converged
batch leaves the group.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import torch
from torch import Tensor
from torch.func import grad, jvp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from landscape.analyses.hessian.products import ProductCosts
from landscape.core.criteria import batch_loss
from landscape.core.objective import Objective
from landscape.core.params import ParamDict, flatten, unflatten
from landscape.core.second_order import SecondOrderFold
from landscape.runtime.devices import fastest, synchronize
from landscape.runtime.workers import one_intra_op_thread

T = TypeVar("T")

#: the most batches ``auto`` puts in one group
MAX_GROUP = 64
#: the groups ``auto`` times on the CPU (a GPU's is bounded by memory instead)
CPU_TRIAL_GROUP = 4
#: the share of the free GPU memory ``auto`` lets a group's products use
MEMORY_SHARE = 0.5
#: ``auto`` groups only when a grouped product per batch takes less than this share of a serial one
GAIN = 0.9


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
            return batch_loss(o.logits(params, x, second_order=True), y, o.criterion)

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
    """How a spectrum run computes its batches: how many at once, which way, and why.

    Attributes:
        option: what was asked for (``"auto"`` or a number).
        group: the most batches computed at once (1: one after another).
        way: ``"serial"`` (one batch at a time), ``"vmap"`` (one vectorised product per step for the group,
            Lanczos runs in lockstep) or ``"threads"`` (CPU: each of ``group`` threads runs its batches' Lanczos
            the serial way on its own copy of the model, with one intra-op thread).
        reason: how ``auto`` decided (or ``"given"``).
        seconds: per-batch product times measured by ``auto`` (``serial``, ``vmap``, ``threads``), if any.
        memory_per_batch: bytes one batch's vectorised product needed on the GPU (``auto`` on CUDA), or 0.
    """

    option: int | str
    group: int
    way: str
    reason: str
    seconds: dict[str, float] = field(default_factory=dict)
    memory_per_batch: int = 0

    def as_dict(self) -> dict[str, object]:
        """The choice as a JSON-able dict (a result-file attribute, docs/schema.md)."""
        return {
            "option": self.option,
            "group": self.group,
            "way": self.way,
            "reason": self.reason,
            "seconds": {k: round(v, 6) for k, v in self.seconds.items()},
            "memory_per_batch": self.memory_per_batch,
        }


def _timed(fn: Callable[[], object], device: torch.device, repeats: int = 2) -> float:
    """The least of ``repeats`` timed calls (load spikes only add)."""
    return fastest(fn, device, repeats)[0]


class WorkerPool:
    """``workers`` threads, each with its own copy of the objective's model.

    ``functional_call`` swaps a module's tensors while it runs, so two threads must never share one module (nor
    its BatchNorm-folded copy for second derivatives, which is made for each worker before the threads start).

    Args:
        objective: the objective; worker 0 uses it, the others shallow copies with a deep-copied module.
        workers: the number of threads (>= 1).

    Attributes:
        objectives: one objective per worker.
    """

    def __init__(self, objective: Objective, workers: int) -> None:
        self.objectives = [objective]
        objective.prepare_second_order()
        for _ in range(max(1, int(workers)) - 1):
            twin = copy.copy(objective)
            twin.module = copy.deepcopy(objective.module)
            twin.second_order_fold = SecondOrderFold()  # its own folded copy, folded here and not in a worker
            twin.prepare_second_order()
            self.objectives.append(twin)

    def map(self, fn: Callable[[Objective, int], T], items: Sequence[int]) -> list[T]:
        """``[fn(objective_w, item) for item in items]``, each item taken by the next free worker ``w``.

        Runs with one intra-op thread (:func:`~landscape.runtime.workers.one_intra_op_thread`) and PyTorch's math
        attention backend (as every :class:`~landscape.core.objective.Objective` evaluation); an exception in a
        worker stops the others after their current item and is raised here.
        ``fn`` must not use ``torch.func`` transforms (their state is process-wide).

        Args:
            fn: the work on one item, given the worker's objective.
            items: the items (batch indices).

        Returns:
            The results in the order of ``items``.
        """
        queue = list(enumerate(items))
        lock = threading.Lock()
        out: dict[int, T] = {}

        def work(objective: Objective) -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    slot, item = queue.pop(0)
                try:
                    out[slot] = fn(objective, item)
                except BaseException:
                    with lock:  # the other workers stop after their current item
                        queue.clear()
                    raise

        workers = self.objectives[: max(1, min(len(self.objectives), len(items)))]
        # the attention backend is process-wide: set once here, so no thread's exit can restore another one
        with one_intra_op_thread(), sdpa_kernel(SDPBackend.MATH), ThreadPoolExecutor(len(workers)) as pool:
            for future in [pool.submit(work, o) for o in workers]:
                future.result()
        return [out[slot] for slot in range(len(items))]


def choose_group(
    objective: Objective,
    indices: Sequence[int],
    serial: Callable[[Objective, int], Callable[[Tensor], Tensor]],
    option: int | str = "auto",
    pool: WorkerPool | None = None,
    threaded: Callable[[Objective, int], Callable[[Tensor], Tensor]] | None = None,
) -> GroupChoice:
    """How to compute the equal-sized batches ``indices``: one at a time, vectorised in groups, or in threads.

    A number G uses ``vmap`` groups of G (capped at ``len(indices)``; 1 is serial). ``"auto"`` measures the
    per-batch time of one product three ways and takes the least, a grouped way only when it takes less than
    :data:`GAIN` of the serial time:

    - serial: ``serial(objective, indices[0])``'s product (the least of two calls after two more);
    - vmap: a trial group's vectorised product (the least of two calls after a warm-up), per batch; the
      trial group is :data:`CPU_TRIAL_GROUP` batches on a CPU and, on a GPU, the most batches whose products
      fit in :data:`MEMORY_SHARE` of the free memory (measured on 4), at most :data:`MAX_GROUP`; a model
      whose forward cannot run under ``vmap`` (``RuntimeError``/``NotImplementedError``) is not grouped;
    - threads (CPU, with a ``pool`` of at least 2 workers and ``threaded``): each worker makes ``threaded``
      products on its own batch at once (two after three), the wall time per product made.

    Args:
        objective: the objective of the batches.
        indices: equal-sized batches of the objective.
        serial: ``(objective, index) -> (v -> H_index v)`` made the serial way (a new operator).
        option: ``"auto"`` or a group size.
        pool: the worker threads ``"threads"`` would use (CPU).
        threaded: like ``serial``, made the way a worker thread makes them (plain autograd: ``torch.func``'s
            transforms keep process-wide state and cannot run in two threads at once).

    Returns:
        The :class:`GroupChoice`.
    """
    count = len(indices)
    if option != "auto":
        group = max(1, min(int(option), count))
        return GroupChoice(option, group, "vmap" if group > 1 else "serial", "given")
    if count < 2:
        return GroupChoice(option, 1, "serial", "one batch")
    device = objective.device
    n = sum(p.numel() for p in objective.params.values())
    gen = torch.Generator().manual_seed(0)
    dtype = next(iter(objective.params.values())).dtype
    V = torch.randn(n, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    product = serial(objective, indices[0])
    product(V)  # the serial way settles in (auto: a timed jvp, then its choice)
    product(V)
    seconds = {"serial": _timed(lambda: product(V), device)}
    groups = {"serial": 1}
    vmap_group, memory, failed = _time_vmap(objective, indices, V, seconds)
    if vmap_group:
        groups["vmap"] = vmap_group
    if device.type != "cuda" and pool is not None and threaded is not None and len(pool.objectives) > 1:
        workers = pool.objectives[: min(len(pool.objectives), count)]
        groups["threads"] = len(workers)
        seconds["threads"] = _time_threads(pool, indices[: len(workers)], threaded, V)
    best = min(seconds, key=lambda way: seconds[way] / (1.0 if way == "serial" else GAIN))
    note = f"; vmap failed on a trial group: {failed}" if failed else ""
    if best == "serial":
        return GroupChoice(option, 1, "serial", f"no grouped way is faster per batch{note}", seconds, memory)
    reason = f"{best} over {groups[best]} batches is the fastest per batch{note}"
    return GroupChoice(option, groups[best], best, reason, seconds, memory)


def _time_vmap(
    objective: Objective, indices: Sequence[int], v: Tensor, seconds: dict[str, float]
) -> tuple[int, int, str]:
    """Time a trial vmap group (into ``seconds["vmap"]``); ``(group, memory per batch, failure type or "")``."""
    device = objective.device
    trial = min(len(indices), CPU_TRIAL_GROUP if device.type != "cuda" else 4)
    memory = 0
    try:
        products = GroupedProducts(objective, indices[:trial])
        V = v.expand(trial, -1).contiguous()
        if device.type == "cuda":
            synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            products(list(range(trial)), V)
            memory = max(1, math.ceil((torch.cuda.max_memory_allocated(device) - base) / trial))
            free, _ = torch.cuda.mem_get_info(device)
            fits = int(MEMORY_SHARE * free // memory)
            if fits > trial:
                trial = min(len(indices), fits, MAX_GROUP)
                products = GroupedProducts(objective, indices[:trial])
                V = v.expand(trial, -1).contiguous()
        slots = list(range(trial))
        products(slots, V)  # warm-up
        seconds["vmap"] = _timed(lambda: products(slots, V), device) / trial
    except (RuntimeError, NotImplementedError) as exc:  # vmap cannot batch an op of this model, or no memory
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return 0, memory, type(exc).__name__
    return trial, memory, ""


def _time_threads(
    pool: WorkerPool,
    indices: Sequence[int],
    serial: Callable[[Objective, int], Callable[[Tensor], Tensor]],
    v: Tensor,
) -> float:
    """Wall seconds per product when each worker makes serial products on its own batch at the same time."""
    products: dict[int, Callable[[Tensor], Tensor]] = {}

    def warm(objective: Objective, index: int) -> None:
        products[index] = serial(objective, index)
        for _ in range(3):
            products[index](v)

    def two(objective: Objective, index: int) -> None:
        products[index](v)
        products[index](v)

    pool.map(warm, indices)
    t0 = time.perf_counter()
    pool.map(two, indices)
    return (time.perf_counter() - t0) / (2 * len(indices))


def shared_costs(costs: dict[tuple[int, ...], ProductCosts], shape: tuple[int, ...]) -> ProductCosts:
    """The product measurements shared by the batches of input shape ``shape`` (created when new).

    Args:
        costs: the record by input shape.
        shape: a batch's input shape.

    Returns:
        The :class:`~landscape.analyses.hessian.products.ProductCosts` for that shape.
    """
    return costs.setdefault(tuple(shape), ProductCosts())
