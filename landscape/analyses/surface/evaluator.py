"""The loss and accuracy at grid points ``theta + a dx + b dy``: the point evaluator (loop, vmap, compiled)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.func import vmap

from landscape.core.combine import PointBuffer, Term, combine
from landscape.core.criteria import criterion_name
from landscape.core.forward import EvalForward
from landscape.core.objective import Objective
from landscape.core.params import ParamDict, weighted_sum
from landscape.errors import LandscapeError
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
from landscape.runtime import distributed as D
from landscape.runtime.devices import close, fastest

#: points evaluated in one vectorised call when vmap is tried
VMAP_POINTS = 8


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
    :meth:`~landscape.core.forward.EvalForward.tune`); after :meth:`enable_compile` the loop runs a
    ``torch.compile``-d per-batch loss.

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
        compiled: the compiled per-batch loss after a successful :meth:`enable_compile`, else None.
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

    def enable_compile(self) -> bool:
        """``torch.compile`` the per-batch loss (params are inputs: no recompilation across points).

        Compiles once per distinct batch shape now, under inference mode as the loop runs it, and checks the
        compiled loss at the centre against eager (relative 1e-4). The inputs go back to their own layout
        (inductor chooses the convolutions' layouts itself; channels-last inputs measured no faster compiled).
        Returns False, staying eager (and in the layout before), if compilation fails or disagrees, or with
        ``bn == "recompute"``.

        Returns:
            True when the compiled loss is in use (:attr:`compiled` set), else False.
        """
        if self.bn == "recompute":
            return False
        self._eager_layout = (self.batches, self.channels_last)
        self.batches, self.channels_last = self.obj.batches, False
        if not self._compile():
            self.disable_compile()
            return False
        return True

    def disable_compile(self) -> None:
        """Go back to the eager loss, in the input layout it had before :meth:`enable_compile`."""
        self.compiled = None
        self.batches, self.channels_last = self._eager_layout

    def _compile(self) -> bool:
        try:
            fn = torch.compile(self._batch_eval_state, dynamic=False)
            with torch.inference_mode():
                state = self._point_state(dict(self.theta))
                seen = set()
                for x, y in self.batches:
                    if tuple(x.shape) in seen:
                        continue
                    seen.add(tuple(x.shape))
                    got = float(fn(state, x, y)[0])
                    want = float(self._batch_eval_state(state, x, y)[0])
                    if not close(got, want, 1e-4):
                        return False
        except Exception:  # no compiler, an unsupported model, ...: eager fallback
            return False
        self.compiled = fn
        return True

    def compile_key(self) -> str:
        """The key of this evaluator's compile record: model class, state and batch shapes, device, threads, torch.

        Returns:
            The key (:func:`landscape.runtime.compile_cache.record_key`).
        """
        state = self._point_state(self.theta)
        dev = self.obj.device
        return compile_cache.record_key(
            torch=torch.__version__,
            model=f"{type(self.obj.module).__module__}.{type(self.obj.module).__qualname__}",
            state=[(n, list(t.shape), str(t.dtype)) for n, t in state.items()],
            batches=sorted({(tuple(x.shape), str(x.dtype)) for x, _ in self.obj.batches}),
            device=dev.type,
            device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "",
            threads=torch.get_num_threads() if dev.type == "cpu" else 0,
            criterion=criterion_name(self.obj.criterion),
            folded=0 if self.fold is None else self.fold.n_folded,
        )

    def time_point(self, batch_points: int = 1, repeats: int = 2) -> float:
        """Seconds per point of the current way of evaluating (compiled, loop or vmap), the fastest of ``repeats``.

        Args:
            batch_points: points per call (the way :meth:`evaluate` takes it).
            repeats: timed evaluations of ``batch_points`` points near the centre; the fastest counts.

        Returns:
            Seconds per point.
        """
        points = [(0.01 * i, -0.01 * i) for i in range(max(1, batch_points))]
        best, _ = fastest(lambda: self.evaluate(points, batch_points), self.obj.device, repeats)
        return best / len(points)

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

    def choose_batch_points(self, k: int = VMAP_POINTS, repeats: int = 2) -> int:
        """``k`` (vmap) if it evaluated ``k`` points of the first batch in under 0.8x the loop's time, else 1.

        vmap is not tried when the ``k`` stacked copies of the parameters would take more than
        :data:`~landscape.options.surface.VMAP_STACK_BYTES` (the loop holds one copy, whatever the grid).

        Args:
            k: points per vmap call to try.
            repeats: timed runs of each way (after one warm-up); the fastest counts.

        Returns:
            ``k``, or 1 when vmap is slower, fails on the model, its stack is too large, ``k <= 1`` or
            ``bn == "recompute"``.
        """
        if self.bn == "recompute" or k <= 1:
            return 1
        if k * sum(t.numel() * t.element_size() for t in self.theta.values()) > VMAP_STACK_BYTES:
            return 1
        points = [(0.01 * i, -0.01 * i) for i in range(k)]
        one = self.batches[:1]

        def loop_first_batch() -> None:
            a, b = self._coords(points)
            with torch.no_grad():
                for i in range(k):
                    params = self.point(a[i], b[i])
                    self._batch_eval(params, *one[0])[1].item()

        def timed(fn: Callable[[], Any]) -> float:
            return fastest(fn, self.obj.device, repeats, warm_up=True)[0]

        try:
            t_vmap = timed(lambda: self.vectorised(points, batches=1))
        except Exception:  # a model vmap cannot batch (data-dependent control flow, in-place ops)
            return 1
        t_loop = timed(loop_first_batch)
        return k if t_vmap < 0.8 * t_loop else 1


def choose_compile(
    evaluator: PointEvaluator, mode: str, batch_points: int, points_left: int
) -> tuple[bool, dict[str, Any]]:
    """Decide (rank 0, then every rank follows), compile where decided, record; return (compiled, decision).

    ``off``: eager. ``on``: compile. ``auto``: compile iff :func:`landscape.runtime.compile_cache.pays_back` with the
    eager seconds per point measured now (at ``batch_points``) and the compile record's estimates
    (:func:`landscape.runtime.compile_cache.estimate`); after a compile in ``auto`` the compiled loss is dropped again
    if it measures slower than eager. Every compile updates the record.
    """
    decision: dict[str, Any] = {"option": mode, "points_left": points_left}
    if mode == "off" or evaluator.bn == "recompute" or points_left == 0:
        decision["reason"] = "off" if mode == "off" else ("--bn recompute" if points_left else "no points left")
        return False, decision
    inductor_dir = compile_cache.use_inductor_cache()
    key, record, go = "", None, mode == "on"
    if D.is_main():
        key = evaluator.compile_key()
        record = compile_cache.read_record(key)
        eager_s = evaluator.time_point(batch_points)
        decision.update(eager_point_s=eager_s, cache=inductor_dir, key=key)
        if mode == "auto":
            est = compile_cache.estimate(record, eager_s, inductor_dir)
            go = compile_cache.pays_back(est["compile_s"], est["compiled_point_s"], eager_s, points_left)
            decision.update(
                compile_s_estimate=est["compile_s"],
                compiled_point_s_estimate=est["compiled_point_s"],
                estimate_source=est["source"],
                rule="compile_s + points_left * compiled_point_s < points_left * eager_point_s",
                reason="pays back" if go else "does not pay back",
            )
    go = bool(D.broadcast_object(go))
    if not go:
        return False, decision
    t0 = time.perf_counter()
    ok = evaluator.enable_compile()
    compile_s = time.perf_counter() - t0
    keep = ok
    if D.is_main():
        decision["compile_s"] = compile_s
        compiled_s = evaluator.time_point(1) if ok else float("inf")
        decision["compiled_point_s"] = compiled_s if ok else None
        eager_s = float(decision["eager_point_s"])
        new = compile_cache.updated_record(
            record, compile_s, compiled_s if ok else 0.0, eager_s, inductor_dir, failed=not ok
        )
        compile_cache.write_record(key, new)
        if not ok:
            decision["reason"] = "compiling failed or disagreed with eager"
        elif mode == "auto" and compiled_s >= eager_s:
            keep, decision["reason"] = False, "compiled, but measured slower than eager"
    keep = bool(D.broadcast_object(keep))
    if not keep:
        evaluator.disable_compile()
    return keep, decision
