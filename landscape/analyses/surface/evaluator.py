"""The loss and accuracy at grid points ``theta + a dx + b dy``: the point evaluator (loop, vmap, compiled package)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.func import vmap

from landscape.core.combine import PointBuffer, Term, combine
from landscape.core.criteria import batch_loss, criterion_name, hit_count, select_logits
from landscape.core.forward import EvalForward
from landscape.core.objective import Objective
from landscape.core.params import ParamDict, weighted_sum
from landscape.errors import LandscapeError
from landscape.models.fingerprint import module_fingerprint
from landscape.options.surface import (  # noqa: F401 (re-exported)
    BN_MODES,
    COMPILE_MODES,
    MAX_POINTS,
    VMAP_STACK_BYTES,
    SurfaceOptions,
    compile_attr,
    compile_mode,
    parse_grid,
)
from landscape.runtime import compile_cache
from landscape.runtime.devices import close, fastest, measured
from landscape.runtime.row_pushdown import push_rows_up

#: points evaluated in one vectorised call when vmap is tried
VMAP_POINTS = 8
#: the paired evaluations of the first batch (eager, then compiled) whose median ratio is recorded for a package
RATIO_PAIRS = 3


PointResult = tuple[int, int, float, float, float]  # (j, i, loss, data_loss, accuracy)


# ---------------------------------------------------------------------------------------------- grid
def point_params(
    theta: Mapping[str, Tensor],
    dx: Mapping[str, Tensor],
    dy: Mapping[str, Tensor] | None,
    a: Tensor,
    b: Tensor,
    buffer: PointBuffer | None = None,
) -> ParamDict:
    """``theta + a * dx (+ b * dy)``; ``a`` and ``b`` are 0-d tensors (one point) or (k,) (k stacked points).

    Formed by :func:`landscape.core.combine.combine` (``(theta + a dx) + b dy``, the same roundings with or
    without a buffer).

    Args:
        theta: the centre parameters, name -> tensor.
        dx: the x direction, same names and shapes as ``theta``.
        dy: the y direction (same names and shapes), or None for a line (then ``b`` is ignored).
        a: x coordinate(s): a 0-d tensor or a ``(k,)`` tensor.
        b: y coordinate(s), shaped like ``a``.
        buffer: write the point (0-d ``a`` only) into this buffer's tensors, rewritten at every call; None: new
            tensors.

    Returns:
        The point's params, name -> tensor of the parameter's shape (0-d ``a``), or of ``(k, *shape)``
        (``(k,)`` ``a``: k stacked points, for ``vmap``).
    """
    terms: list[Term] = [(None, theta), (a, dx)]
    if dy is not None:
        terms.append((b, dy))
    return combine(terms, buffer)


# ---------------------------------------------------------------------------------------- evaluation
class PointEvaluator(EvalForward):
    """Evaluates grid points of one objective and pair of directions, one at a time or vectorised.

    ``loop(points)`` evaluates each point in turn, each written into one buffer reused for every point
    (:meth:`point`; BatchNorm buffers re-estimated per point when ``bn == "recompute"``);
    ``vectorised(points)`` stacks the points' params and evaluates them in one ``torch.func.vmap`` call per
    batch. Both return ``(loss, data_loss, accuracy)`` per point. The forward is
    :class:`~landscape.core.forward.EvalForward`'s (BatchNorm folded, inputs' layout chosen, by its
    :meth:`~landscape.core.forward.EvalForward.tune`); after :meth:`use_package` the loop runs the per-batch
    loss compiled ahead of time (:meth:`export`, :mod:`landscape.runtime.packages`).

    Args:
        objective: the loss; its params are the centre ``theta``.
        dx: the x direction (names and shapes of the objective's params).
        dy: the y direction, or None for a 1D surface.
        bn: ``eval`` (the centre model's running statistics) or ``recompute`` (re-estimated at every point).

    Attributes:
        obj: the objective.
        dx: the x direction.
        dy: the y direction, or None.
        bn: the BatchNorm mode.
        theta: the centre params (``objective.params``).
        compiled: the compiled per-batch loss after a successful :meth:`use_package`, else None.
        fold, fold_notes, batches, channels_last: as :class:`~landscape.core.forward.EvalForward`'s.
    """

    def __init__(self, objective: Objective, dx: ParamDict, dy: ParamDict | None, bn: str = "eval") -> None:
        super().__init__(objective, bn)
        self.dx, self.dy = dx, dy
        self.theta = objective.params
        self.compiled: Callable[[ParamDict, Tensor, Tensor], tuple[Tensor, Tensor]] | None = None
        self._eager_layout = (self.batches, False)
        self._buffer: PointBuffer | None = None

    def point(self, a: Tensor, b: Tensor) -> ParamDict:
        """The params of one point ``theta + a dx (+ b dy)``, written into the evaluator's one reused buffer.

        The returned tensors are rewritten by the next call: use them before asking for another point.

        Args:
            a: the x coordinate, a 0-d tensor in the params' dtype and device.
            b: the y coordinate, likewise (ignored for a 1D surface).

        Returns:
            The point's params, name -> tensor (the buffer's tensors).
        """
        if self._buffer is None:
            self._buffer = PointBuffer(self.theta)
        return point_params(self.theta, self.dx, self.dy, a, b, self._buffer)

    def _batch_eval(self, params: ParamDict, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Mean loss and number of correct predictions of one batch at ``params`` (vmap-able)."""
        return self._batch_eval_state(self._point_state(params), x, y)

    def compile_key(self) -> str:
        """The key of this evaluator's compiled package and compile record.

        It holds what the compiled per-batch loss is a function of, apart from the values of its inputs: the
        model's fingerprint (:func:`landscape.models.fingerprint.module_fingerprint`: tree, attributes, code; of
        the folded copy when folded) and the code of the loss and of the graph's rewrite, the names, shapes and
        dtypes of the state, the inputs' and labels' shapes and dtypes, the logits selector, criterion, device,
        threads and the torch and Python versions and CPU capability.

        Returns:
            The key (:func:`landscape.runtime.compile_cache.record_key`).
        """
        state = self._point_state(self.theta)
        dev = self.obj.device
        module = self.obj.module if self.fold is None else self.fold.module
        code = [batch_loss, hit_count, select_logits, EvalForward._batch_eval_state, push_rows_up]
        if self.fold is not None:
            code.append(type(self.fold).state)
        return compile_cache.record_key(
            torch=torch.__version__,
            python=list(sys.version_info[:2]),
            capability=torch.backends.cpu.get_cpu_capability(),
            model=module_fingerprint(module, code),
            state=sorted((n, list(t.shape), str(t.dtype)) for n, t in state.items()),
            batches=self._shapes(),
            output=repr(self.obj.output),
            device=dev.type,
            device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "",
            threads=torch.get_num_threads() if dev.type == "cpu" else 0,
            criterion=criterion_name(self.obj.criterion),
            folded=self.n_folded,
        )

    def _shapes(self) -> list[tuple[Any, ...]]:
        """The distinct ``(input shape, dtype, label shape, dtype)`` of the batches, sorted."""
        seen = set()
        for b in range(len(self.obj.batches)):
            x, y = self.obj.batches[b]
            seen.add((tuple(x.shape), str(x.dtype), tuple(y.shape), str(y.dtype)))
        return sorted(seen)

    def export(self, path: Path, narrow_rows: bool = True) -> tuple[int, int]:
        """``torch.export`` the per-batch loss of a full state to ``path`` (``torch.export.save``), for a package.

        The exported function takes the state's tensors in the order of their sorted names, a batch of inputs
        and its labels, and returns the batch's mean loss and number of correct predictions (NaN when a logit
        is not finite). With batches of more than one size the batch dimension is symbolic (one package serves
        them all), else every shape is fixed; then the rows the loss reads are pushed up the graph
        (:func:`landscape.runtime.row_pushdown.push_rows_up`: a classifier of the CLS token runs its last
        block's queries, MLP and norms on that token alone).

        Args:
            path: the file to write.
            narrow_rows: push the rows read up the graph (False: the whole graph, as a comparison).

        Returns:
            The number of nodes in the exported graph and the number of operators narrowed to the rows read.
        """
        state = self._point_state(self.theta)
        names = sorted(state)
        evaluate = self._batch_eval_state

        class PerBatchLoss(torch.nn.Module):
            def forward(self, tensors: list[Tensor], x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
                return evaluate(dict(zip(names, tensors)), x, y)

        x, y = self.obj.batches[0]
        dynamic = None
        if len({s[0][0] for s in self._shapes()}) > 1:
            batch = torch.export.Dim("batch", min=1)
            dynamic = ([None] * len(names), {0: batch}, {0: batch})
        args = ([state[n] for n in names], x.contiguous(), y)
        with torch.inference_mode(False), torch.no_grad():
            program = torch.export.export(PerBatchLoss(), args, dynamic_shapes=dynamic, strict=False)
        narrowed = push_rows_up(program.graph_module) if narrow_rows else 0
        torch.export.save(program, path)
        return len(program.graph.nodes), narrowed

    def use_package(
        self,
        runner: Callable[[list[Tensor]], list[Tensor]],
        at: tuple[float, float] = (0.0, 0.0),
        unfolded: bool = False,
    ) -> bool:
        """Evaluate every batch by ``runner`` (a loaded package of :meth:`export`) if it agrees with eager.

        Checked at the grid point ``at`` (the centre where the eager loss there is not finite) on the first batch
        of each shape: the loss by the package against the eager one to a relative 1e-4 (the compiled loss's
        tolerance). With ``unfolded`` the eager loss is the model's own, BatchNorm unfolded: the check then also
        stands for the fold's (:meth:`~landscape.core.forward.EvalForward.check_fold`), which need not run. Inputs
        go to the package in their own layout (inductor chose the convolutions' layouts itself). Nothing changes
        when it disagrees or fails.

        Args:
            runner: the loaded package (:func:`landscape.runtime.packages.load_package`): the state's tensors in the
                order of their sorted names, the inputs and the labels in, the loss and hits out.
            at: ``(a, b)``: the point checked.
            unfolded: check against the unfolded eager loss.

        Returns:
            True when the package is in use (:attr:`compiled` set).
        """
        if self.bn == "recompute":
            return False
        names = sorted(self._point_state(self.theta))
        reference = self.unfolded() if unfolded else self

        def compiled(state: ParamDict, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
            loss, hits = runner([*(state[n] for n in names), x.contiguous(), y])
            return loss, hits

        try:
            with torch.inference_mode():
                a, b = self._coords([at])
                point = {n: t.clone() for n, t in self.point(a[0], b[0]).items()}
                seen: set[tuple[int, ...]] = set()
                for k in range(len(self.obj.batches)):
                    x, y = self.obj.batches[k]
                    if tuple(x.shape) in seen:
                        continue
                    seen.add(tuple(x.shape))
                    at_point = point
                    want = float(reference._batch_eval_state(reference._point_state(at_point), x, y)[0])
                    if not math.isfinite(want):
                        at_point = dict(self.theta)
                        want = float(reference._batch_eval_state(reference._point_state(at_point), x, y)[0])
                    if not close(float(compiled(self._point_state(at_point), x, y)[0]), want, 1e-4):
                        return False
        except Exception:  # a package of other inputs, a runtime failure: stay eager
            return False
        self._eager_layout = (self.batches, self.channels_last)
        self.batches, self.channels_last = self.obj.batches, False
        self.compiled = compiled
        return True

    def compiled_ratio(self, at: tuple[float, float], rounds: int = RATIO_PAIRS) -> float:
        """The package's work over eager's on the first batch at the grid point ``at``: the median of ``rounds`` pairs.

        Each pair evaluates the batch eagerly (in the eager way's layout) and by the package, one after the other,
        and compares their work (:func:`landscape.runtime.devices.measured`: CPU seconds on a CPU), so that a
        pair sees one load of a shared machine.

        Args:
            at: ``(a, b)``: the point.
            rounds: the pairs.

        Returns:
            The median ratio (inf without a package in use).
        """
        if self.compiled is None:
            return float("inf")
        a, b = self._coords([at])
        eager_batches = self._eager_layout[0]
        ratios = []
        with torch.inference_mode():
            state = self._point_state(self.point(a[0], b[0]))
            for _ in range(rounds):
                _, eager, _ = measured(lambda: self._batch_eval_state(state, *eager_batches[0]), self.obj.device)
                _, mine, _ = measured(lambda: self.compiled(state, *self.obj.batches[0]), self.obj.device)
                ratios.append(mine / max(eager, 1e-12))
        return sorted(ratios)[len(ratios) // 2]

    def drop_compiled(self) -> None:
        """Go back to the eager loss, in the input layout it had before :meth:`use_package`."""
        if self.compiled is not None:
            self.compiled = None
            self.batches, self.channels_last = self._eager_layout

    def _coords(self, points: Sequence[tuple[float, float]]) -> tuple[Tensor, Tensor]:
        ref = next(iter(self.theta.values()))
        ab = torch.tensor(points, dtype=torch.float64).reshape(-1, 2).to(ref.device, ref.dtype)
        return ab[:, 0], ab[:, 1]

    @torch.inference_mode()
    def loop(self, points: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
        """Evaluate the points one by one (under inference mode).

        Args:
            points: the ``(a, b)`` grid coordinates of each point (``b`` ignored for a 1D surface).

        Returns:
            ``(loss, data_loss, accuracy)`` per point, in order: loss = data loss + regulariser, accuracy in [0, 1].
        """
        a, b = self._coords(points)
        out = []
        for k in range(len(points)):
            params = self.point(a[k], b[k])
            if self.bn == "recompute":
                ev = self.obj.evaluate(params, self.obj.recompute_bn_buffers(params))
                out.append((ev.loss, ev.data_loss, ev.accuracy))
            else:
                out.append(self._point(params))
        return out

    def _point(self, params: ParamDict) -> tuple[float, float, float]:
        """One point: the state built (and folded) once, then each batch, compiled when enabled."""
        fn = self._batch_eval_state if self.compiled is None else self.compiled
        state = self._point_state(params)
        correct = 0.0

        def batch_term(b: int) -> float:
            nonlocal correct
            loss, hits = fn(state, *self.batches[b])
            correct += float(hits)
            return float(loss)

        data_loss = weighted_sum(self.obj.weights, batch_term, start=0.0)
        reg = float(self.obj.regularizer(params))
        return data_loss + reg, data_loss, correct / self.obj.n_samples

    @torch.no_grad()
    def vectorised(self, points: Sequence[tuple[float, float]], batches: int | None = None) -> list[tuple[float, ...]]:
        """Evaluate the points in one vmap call per batch (``batches``: use only the first ones, for timing).

        Args:
            points: the ``(a, b)`` grid coordinates of each point, all evaluated in one stacked call.
            batches: evaluate only the first ``batches`` data batches (for timing); None uses all.

        Returns:
            ``(loss, data_loss, accuracy)`` per point, in order.

        Raises:
            LandscapeError: with ``bn == "recompute"`` (vmap cannot re-estimate BatchNorm statistics).
        """
        if self.bn == "recompute":
            raise LandscapeError("vectorised evaluation cannot re-estimate BatchNorm statistics; use --batch-points 1")
        a, b = self._coords(points)
        stacked = point_params(self.theta, self.dx, self.dy, a, b)
        obj = self.obj
        correct = torch.zeros(len(points), dtype=torch.float64)

        def batch_term(b: int) -> Tensor:
            losses, hits = vmap(self._batch_eval, in_dims=(0, None, None))(stacked, *self.batches[b])
            correct.add_(hits.double().cpu())
            return losses.double().cpu()

        weights = obj.weights[:batches]
        data_loss = weighted_sum(weights, batch_term, start=torch.zeros(len(points), dtype=torch.float64)).tolist()
        correct = correct.tolist()
        reg = vmap(obj.regularizer)(stacked).tolist() if obj.regularizer.active else [0.0] * len(points)
        return [(d + r, d, c / obj.n_samples) for d, r, c in zip(data_loss, reg, correct)]

    def evaluate(self, points: Sequence[tuple[float, float]], batch_points: int) -> list[tuple[float, float, float]]:
        """Evaluate with the loop (``batch_points == 1``) or vectorised in groups of ``batch_points``.

        Args:
            points: the ``(a, b)`` grid coordinates of each point.
            batch_points: points per vectorised call (the last group is padded with its last point); ``<= 1``
                evaluates them one by one.

        Returns:
            ``(loss, data_loss, accuracy)`` per point, in order.

        Raises:
            LandscapeError: ``batch_points > 1`` with ``bn == "recompute"`` (see :meth:`vectorised`).
        """
        if batch_points <= 1:
            return self.loop(points)
        out: list[tuple[float, float, float]] = []
        for s in range(0, len(points), batch_points):
            group = list(points[s : s + batch_points])
            pad = batch_points - len(group)  # keep one shape per call: pad with the last point
            out += self.vectorised(group + [group[-1]] * pad)[: len(group)]
        return out

    def vmap_fits(self, k: int) -> bool:
        """Whether ``k`` stacked copies of the parameters fit :data:`~landscape.options.surface.VMAP_STACK_BYTES`.

        Args:
            k: points per vectorised call.

        Returns:
            True when vmap over ``k`` points may be tried (the loop holds one copy, whatever the grid).
        """
        size = sum(t.numel() * t.element_size() for t in self.theta.values())
        return self.bn != "recompute" and k > 1 and k * size <= VMAP_STACK_BYTES

    def time_vmap(self, k: int = VMAP_POINTS) -> float | None:
        """Seconds per point of one vmap call of ``k`` points on the first batch (no warm-up: an upper bound).

        Args:
            k: points per call.

        Returns:
            The seconds per point, or None when vmap cannot evaluate the model (data-dependent control flow,
            in-place operations) or ``k`` points do not fit (:meth:`vmap_fits`).
        """
        if not self.vmap_fits(k):
            return None
        points = [(0.01 * i, -0.01 * i) for i in range(k)]
        try:
            seconds, _ = fastest(lambda: self.vectorised(points, batches=1), self.obj.device, 1)
        except Exception:  # a model vmap cannot batch
            return None
        return seconds / k
