"""1D and 2D loss surfaces ``L(theta + a * dx + b * dy)`` over a grid, written to HDF5 as the run goes.

Every grid point is a new params dict ``theta + a*dx + b*dy`` evaluated by the :class:`~landscape.core.objective.
Objective` (sample-weighted mean over fixed batches, plus the regulariser). The file (docs/schema.md, surface)
schema) holds ``xcoordinates`` (nx), ``ycoordinates`` (ny; ``[0]`` for a line), ``loss``, ``data_loss``,
``accuracy`` and ``done`` (ny, nx) and the directions ``directions/x/<param>`` (and ``directions/y/<param>``).
Points are appended and flushed as they finish, so a killed run leaves a valid file; rerunning resumes from
the ``done`` mask with the directions read back from the file, and ends with the same numbers. Under torchrun
the points of each round are shared among ranks and only rank 0 writes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from landscape.analyses.surface import directions as dirs
from landscape.analyses.surface.directions import Directions
from landscape.core.front import ModelSource, augmented_batches_for, batches_for, build_objective, load_inputs
from landscape.core.objective import Objective, Regularizer, batch_loss, criterion_name, hit_count, select_logits
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.models.bn_fold import FoldedModel, fold_batchnorm
from landscape.models.checkpoint import file_sha256, load_model
from landscape.options import checks
from landscape.options.surface import (  # noqa: F401 (re-exported)
    BN_MODES,
    COMPILE_MODES,
    MAX_POINTS,
    SurfaceOptions,
    compile_attr,
    compile_mode,
    parse_grid,
)
from landscape.runtime import compile_cache
from landscape.runtime import distributed as D
from landscape.runtime.lifecycle import analysis_file
from landscape.store import result as store

#: points evaluated in one vectorised call when vmap is tried
VMAP_POINTS = 8

PointResult = tuple[int, int, float, float, float]  # (j, i, loss, data_loss, accuracy)


# ---------------------------------------------------------------------------------------------- grid
def point_params(
    theta: Mapping[str, Tensor], dx: Mapping[str, Tensor], dy: Mapping[str, Tensor] | None, a: Tensor, b: Tensor
) -> ParamDict:
    """``theta + a * dx (+ b * dy)``; ``a`` and ``b`` are 0-d tensors (one point) or (k,) (k stacked points).

    Args:
        theta: the centre parameters, name -> tensor.
        dx: the x direction, same names and shapes as ``theta``.
        dy: the y direction (same names and shapes), or None for a line (then ``b`` is ignored).
        a: x coordinate(s): a 0-d tensor or a ``(k,)`` tensor.
        b: y coordinate(s), shaped like ``a``.

    Returns:
        The point's params, name -> tensor of the parameter's shape (0-d ``a``), or of ``(k, *shape)``
        (``(k,)`` ``a``: k stacked points, for ``vmap``).
    """
    out = {}
    for n, t in theta.items():
        shape = (-1,) + (1,) * t.ndim if a.ndim else ()
        p = t + a.reshape(shape) * dx[n]
        out[n] = p if dy is None else p + b.reshape(shape) * dy[n]
    return out


# ---------------------------------------------------------------------------------------- evaluation
class PointEvaluator:
    """Evaluates grid points of one objective and pair of directions, one at a time or vectorised.

    ``loop(points)`` evaluates each point in turn (BatchNorm buffers re-estimated per point when
    ``bn == "recompute"``); ``vectorised(points)`` stacks the points' params and evaluates them in one
    ``torch.func.vmap`` call per batch. Both return ``(loss, data_loss, accuracy)`` per point. After
    :meth:`enable_fold` every forward runs on a copy of the model with its eval-mode BatchNorms folded into the
    convolutions before them (for each point's own parameters, :mod:`landscape.models.bn_fold`); after
    :meth:`enable_compile` the loop runs a ``torch.compile``-d per-batch loss.

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
        fold: the folded model after a successful :meth:`enable_fold`, else None.
        fold_notes: why BatchNorm layers were left unfolded (after :meth:`enable_fold`).
        batches: the objective's batches, as evaluated (channels-last inputs after
            :meth:`choose_memory_format` picked them).
        channels_last: whether the inputs are channels-last.
    """

    def __init__(self, objective: Objective, dx: ParamDict, dy: ParamDict | None, bn: str = "eval") -> None:
        self.obj, self.dx, self.dy, self.bn = objective, dx, dy, bn
        self.theta = objective.params
        self.compiled: Callable[[ParamDict, Tensor, Tensor], tuple[Tensor, Tensor]] | None = None
        self.fold: FoldedModel | None = None
        self.fold_notes: list[str] = []
        self.batches = list(objective.batches)
        self.channels_last = False
        self._eager_layout = (self.batches, False)

    # -- the per-batch loss ------------------------------------------------------------------------
    def _point_state(self, params: Mapping[str, Tensor]) -> ParamDict:
        """The full state of the forward at ``params`` (fixed params and buffers added; folded when enabled)."""
        state = {**self.obj.fixed, **params, **self.obj.buffers}
        return state if self.fold is None else self.fold.state(state)

    def _batch_eval_state(self, state: ParamDict, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Mean loss and number of correct predictions of one batch for a full state (the function compiled)."""
        module = self.obj.module if self.fold is None else self.fold.module
        with sdpa_kernel(SDPBackend.MATH):
            out = select_logits(functional_call(module, state, (x,)), self.obj.output)
        hits = hit_count(out, y).to(out.dtype)
        return batch_loss(out, y, self.obj.criterion), torch.where(torch.isfinite(out).all(), hits, torch.nan)

    def _batch_eval(self, params: ParamDict, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Mean loss and number of correct predictions of one batch at ``params`` (vmap-able)."""
        return self._batch_eval_state(self._point_state(params), x, y)

    def enable_fold(self) -> int:
        """Fold the model's eval-mode conv -> BatchNorm pairs (:func:`landscape.models.bn_fold.fold_batchnorm`).

        The folded forward is checked at the centre against the unfolded one on the first batch (relative
        1e-10 in float64, 1e-4 otherwise); it stays unfolded when that fails, when nothing can be folded, or
        with ``bn == "recompute"``. The objective's model is not modified (the fold works on a copy).

        Returns:
            The number of BatchNorm layers folded (0 when unfolded; :attr:`fold_notes` says why).
        """
        self.fold, self.fold_notes = None, []
        if self.bn == "recompute":
            self.fold_notes = ["--bn recompute re-estimates the statistics at every point"]
            return 0
        try:
            folded = fold_batchnorm(self.obj.module)
        except Exception as exc:  # an unforeseen module structure: stay unfolded
            self.fold_notes = [f"folding failed ({type(exc).__name__})"]
            return 0
        self.fold_notes = list(folded.notes)
        if folded.n_folded == 0:
            return 0
        x, y = self.batches[0]
        try:
            with torch.inference_mode():
                want = self._batch_eval_state(self._point_state(self.theta), x, y)[0]
                self.fold = folded
                got = self._batch_eval_state(self._point_state(self.theta), x, y)[0]
        except Exception as exc:  # the forward uses the folded modules in a way the trace did not show
            self.fold = None
            self.fold_notes.append(f"the folded model failed to run ({type(exc).__name__}); unfolded")
            return 0
        tol = 1e-10 if want.dtype == torch.float64 else 1e-4
        if not abs(float(got) - float(want)) <= tol * max(1.0, abs(float(want))):
            self.fold = None
            self.fold_notes.append("the folded loss differs from the unfolded one at the centre; unfolded")
            return 0
        return folded.n_folded

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
        self.batches, self.channels_last = list(self.obj.batches), False
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
                    if not abs(got - want) <= 1e-4 * max(1.0, abs(want)):
                        return False
        except Exception:  # no compiler, an unsupported model, ...: eager fallback
            return False
        self.compiled = fn
        return True

    def choose_memory_format(self, repeats: int = 2) -> bool:
        """Use channels-last inputs if a forward of the first batch at the centre is faster so (and agrees).

        Only for 4D float32/float16/bfloat16 inputs of a model with 2D convolutions, with ``bn == "eval"``
        (float64 stays as it is: its results are compared exactly). On CPU a channels-last convolution runs
        several times faster in oneDNN than an NCHW one of the same shape. Taken when it is under 0.95x the
        NCHW time and agrees to a relative 1e-4.

        Args:
            repeats: timed forwards of each layout (after a warm-up); the fastest counts.

        Returns:
            Whether the inputs are now channels-last (:attr:`channels_last`, :attr:`batches`).
        """
        x0, y0 = self.obj.batches[0]
        convs = any(isinstance(m, torch.nn.Conv2d) for m in self.obj.module.modules())
        if self.bn != "eval" or not convs or x0.ndim != 4:
            return False
        if x0.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return False
        cl = x0.contiguous(memory_format=torch.channels_last)
        state = self._point_state(self.theta)

        def run(x: Tensor) -> tuple[float, float]:
            best, value = float("inf"), 0.0
            with torch.inference_mode():
                self._batch_eval_state(state, x, y0)
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    value = float(self._batch_eval_state(state, x, y0)[0])
                    _sync(self.obj.device)
                    best = min(best, time.perf_counter() - t0)
            return best, value

        try:
            (t_plain, want), (t_cl, got) = run(x0), run(cl)
        except Exception:  # a model that cannot take channels-last inputs
            return False
        if not (t_cl < 0.95 * t_plain and abs(got - want) <= 1e-4 * max(1.0, abs(want))):
            return False
        self.batches = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in self.obj.batches]
        self.channels_last = True
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
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            self.evaluate(points, batch_points)
            _sync(self.obj.device)
            best = min(best, time.perf_counter() - t0)
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
            params = point_params(self.theta, self.dx, self.dy, a[k], b[k])
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
        data_loss, correct = 0.0, 0
        for w, (x, y) in zip(self.obj.weights, self.batches):
            loss, hits = fn(state, x, y)
            data_loss += w * float(loss)
            correct += float(hits)
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
        pairs = list(zip(obj.weights, self.batches))[:batches]
        data_loss = [0.0] * len(points)
        correct = [0] * len(points)
        for w, (x, y) in pairs:
            losses, hits = vmap(self._batch_eval, in_dims=(0, None, None))(stacked, x, y)
            for k, (lv, hv) in enumerate(zip(losses.tolist(), hits.tolist())):
                data_loss[k] += w * lv
                correct[k] += hv
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

        Args:
            k: points per vmap call to try.
            repeats: timed runs of each way (after one warm-up); the fastest counts.

        Returns:
            ``k``, or 1 when vmap is slower, fails on the model, ``k <= 1`` or ``bn == "recompute"``.
        """
        if self.bn == "recompute" or k <= 1:
            return 1
        points = [(0.01 * i, -0.01 * i) for i in range(k)]
        one = self.batches[:1]

        def loop_first_batch() -> None:
            a, b = self._coords(points)
            with torch.no_grad():
                for i in range(k):
                    params = point_params(self.theta, self.dx, self.dy, a[i], b[i])
                    self._batch_eval(params, *one[0])[1].item()

        def timed(fn: Callable[[], Any]) -> float:
            fn()  # warm-up
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                _sync(self.obj.device)
                best = min(best, time.perf_counter() - t0)
            return best

        try:
            t_vmap = timed(lambda: self.vectorised(points, batches=1))
        except Exception:  # a model vmap cannot batch (data-dependent control flow, in-place ops)
            return 1
        t_loop = timed(loop_first_batch)
        return k if t_vmap < 0.8 * t_loop else 1


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------------------------- file
def _write_directions(f: store.ResultFile, directions: Directions) -> None:
    for axis, d in (("x", directions.x), ("y", directions.y)):
        if d is None:
            continue
        for name, t in d.items():
            f.write(f"directions/{axis}/{name}", t.detach().cpu().numpy())
    if directions.trajectory is not None:
        f.write("trajectory/coordinates", np.asarray(directions.trajectory), axes=["snapshot", "xy"])
    f.flush()


def _read_directions(f: store.ResultFile, like: Mapping[str, Tensor], ndim: int) -> tuple[ParamDict, ParamDict | None]:
    out = []
    for axis in ("x", "y")[:ndim]:
        group = f"directions/{axis}"
        if f.keys(group) != sorted(like):
            raise LandscapeError(f"{f.path}: stored directions do not match the model's parameters; use --force")
        out.append({n: torch.from_numpy(f.read(f"{group}/{n}")).to(t.device, t.dtype) for n, t in like.items()})
    return out[0], (out[1] if ndim == 2 else None)


def _create_arrays(f: store.ResultFile, xs: np.ndarray, ys: np.ndarray) -> None:
    f.write("xcoordinates", xs, axes=["x"])
    f.write("ycoordinates", ys, axes=["y"])
    shape = (len(ys), len(xs))
    for name in ("loss", "data_loss", "accuracy"):
        f.allocate(name, shape, "f8", fill=np.nan, axes=["y", "x"])
    f.allocate("done", shape, bool, fill=False, axes=["y", "x"])


def _fingerprint(directions: Directions) -> str:
    m = directions.meta
    return f"{m.get('x_norm', 0.0):.6g},{m.get('y_norm', 0.0):.6g},{m.get('cosine', 0.0) or 0.0:.4g}"


def check_grid_size(objective: Objective, n_points: int, shape: tuple[int, int]) -> None:
    """Refuse a grid of more than :data:`MAX_POINTS` points before anything is allocated.

    The message gives the number of points, the memory its arrays need and the time they would take at the
    cost of one point measured now on this device.

    Args:
        objective: the loss; evaluated once (only when the grid is too large) to time one point.
        n_points: the number of grid points (nx * ny).
        shape: the grid shape ``(ny, nx)``.

    Raises:
        LandscapeError: ``n_points`` is more than :data:`MAX_POINTS`.
    """
    if n_points <= MAX_POINTS:
        return
    t0 = time.perf_counter()
    objective.evaluate()
    _sync(objective.device)
    seconds = (time.perf_counter() - t0) * n_points
    gigabytes = n_points * (3 * 8 + 1) / 1e9
    raise LandscapeError(
        f"a {shape[1]} x {shape[0]} grid has {n_points:,} points: {gigabytes:.1f} GB of arrays and about "
        f"{seconds / 3600:.0f} hours at the {seconds / n_points:.3g} s per point measured now; use at most "
        f"{MAX_POINTS:,} points (fewer NUM in --x/--y)"
    )


def _resume_surface(
    f: store.ResultFile,
    directions: Directions,
    xs: np.ndarray,
    ys: np.ndarray,
    like: Mapping[str, Tensor],
) -> dict[str, Any]:
    """Rank 0: set up a new file or read a resumed one; return the state every rank needs (directions, done mask)."""
    if f.resumed and f.attr("directions_written", False):
        return {
            "dirs": _read_directions(f, like, directions.ndim),
            "done": f.read("done"),
            "bp": f.attr("batch_points"),
            "complete": f.complete,
        }
    f.delete("directions")  # a new file, or one killed before its directions were complete: (re)write them
    _create_arrays(f, xs, ys)
    _write_directions(f, directions)
    f.set_attrs({k: directions.meta[k] for k in ("x_norm", "y_norm", "cosine") if k in directions.meta})
    f.set_attrs({"directions_written": True})
    f.flush()
    return {"dirs": None, "done": f.read("done"), "bp": None, "complete": False}


# ------------------------------------------------------------------------------------------ the run
def compute_surface(
    objective: Objective,
    directions: Directions,
    xcoords: Sequence[float] | np.ndarray,
    ycoords: Sequence[float] | np.ndarray | None = None,
    *,
    out: str | Path,
    attrs: Mapping[str, Any] | None = None,
    force: bool = False,
    bn: str = "eval",
    batch_points: int | str = "auto",
    progress: bool | None = None,
    on_round: Callable[[int, int], None] | None = None,
    compile: bool | str = "auto",
    fold_bn: bool = True,
) -> store.Result:
    """Evaluate ``L(theta + a*dx + b*dy)`` and accuracy on the grid ``xcoords x ycoords`` into ``out``.

    Args:
        objective: the loss (its params are the centre ``theta``).
        directions: ``x`` (and ``y`` for a plane: ``ycoords`` given). On resume the file's directions are used.
        xcoords: x grid coordinates (nx).
        ycoords: y grid coordinates (ny); None makes a 1D surface (ny = 1, stored as ``[0.0]``).
        out: the HDF5 file; an existing file of the same run is resumed, of other options refused.
        force: overwrite an existing file from other options.
        attrs: provenance and options recorded as root attributes (they decide whether a file is the same run).
        bn: ``eval`` (centre model's running statistics) or ``recompute`` (re-estimated at every point).
        batch_points: points per evaluation call: 1 = loop, k > 1 = vmap over k stacked points, ``auto`` =
            the faster of the two on a quick measurement (recorded, and reused on resume).
        progress: tqdm bar on rank 0 (None: only when stderr is a terminal).
        on_round: called on every rank after each round of points with ``(points done, total)``.
        compile: ``on`` (True): ``torch.compile`` the per-batch loss (one point at a time; eager if compiling
            fails); ``off`` (False): eager; ``auto``: compile only when the expected compile time pays back over
            the points left (:func:`landscape.runtime.compile_cache.pays_back`, with the eager time measured now and the
            compile and compiled times from the record of an earlier compile, else conservative defaults).
            The outcome and the decision's inputs are recorded (``compiled``, ``compile_decision``); the
            compiler's caches persist in the cache folder (:mod:`landscape.runtime.compile_cache`).
        fold_bn: fold eval-mode BatchNorm into the convolutions before them at every point where that can be
            proven (:mod:`landscape.models.bn_fold`; recorded as ``bn_folded``); the numbers agree to rounding.

    Returns:
        The file read back (:class:`landscape.store.result.Result`), on every rank.

    Raises:
        LandscapeError: an unknown ``bn`` (or ``recompute`` without BatchNorm layers), non-finite or empty
            coordinates, directions that do not match the coordinates (or, on resume, the model's parameters),
            a bad ``batch_points`` or ``compile``, a grid of more than :data:`MAX_POINTS` points, a file of other
            options (without ``force``), or, after the run, a surface whose finished points are all NaN or Inf.
    """
    if bn not in BN_MODES:
        raise LandscapeError(f"unknown BatchNorm mode {bn!r}; use eval or recompute")
    if bn == "recompute" and not objective.has_batchnorm():
        raise LandscapeError("--bn recompute needs a model with BatchNorm layers; use --bn eval")
    xs = np.asarray(checks.finite_all(np.asarray(xcoords, dtype=np.float64).reshape(-1), "x coordinate"))
    ys = (
        np.zeros(1)
        if ycoords is None
        else np.asarray(checks.finite_all(np.asarray(ycoords, dtype=np.float64).reshape(-1), "y coordinate"))
    )
    if (ycoords is None) != (directions.y is None):
        raise LandscapeError("a 2D surface needs two directions and y coordinates; a 1D surface one and none")
    if xs.size == 0 or ys.size == 0:
        raise LandscapeError("the grid is empty; give at least one point per axis")
    if isinstance(batch_points, str) and batch_points != "auto":
        raise LandscapeError(f"--batch-points must be a positive integer or auto, got {batch_points!r}")
    if not isinstance(batch_points, str) and int(batch_points) < 1:
        raise LandscapeError(f"--batch-points must be a positive integer or auto, got {batch_points!r}")
    mode = compile_mode(compile)
    ndim = directions.ndim
    full = {
        **(attrs or {}),
        **{k: v for k, v in directions.meta.items() if k not in ("x_norm", "y_norm", "cosine")},
        "surface_ndim": ndim,
        "xgrid": [float(xs[0]), float(xs[-1]), int(xs.size)],
        "ygrid": None if ndim == 1 else [float(ys[0]), float(ys[-1]), int(ys.size)],
        "bn": bn,
        "criterion": objective.criterion,
        "regularizer": objective.regularizer.describe(),
        "n_samples": objective.n_samples,
        "direction_fingerprint": _fingerprint(directions),
        "compile": compile_attr(mode),
    }
    check_grid_size(objective, int(xs.size * ys.size), (int(ys.size), int(xs.size)))

    def resume(f: store.ResultFile) -> dict[str, Any]:
        return _portable(_resume_surface(f, directions, xs, ys, objective.params))

    with analysis_file(out, "surface", full, force=force, resume=resume) as (f, state):
        assert state is not None
        dx, dy = state["dirs"] if state["dirs"] is not None else (directions.x, directions.y)
        if state["dirs"] is not None:
            dx, dy = (None if d is None else {n: t.to(objective.device) for n, t in d.items()} for d in (dx, dy))
        if not state["complete"]:
            evaluator = PointEvaluator(objective, dx, dy, bn)
            n_folded = evaluator.enable_fold() if fold_bn else 0
            if bool(D.broadcast_object(evaluator.choose_memory_format() if D.is_main() else False)):
                evaluator.batches = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in objective.batches]
                evaluator.channels_last = True
            bp = state["bp"]
            if bp is None and mode != "on":
                bp = evaluator.choose_batch_points() if batch_points == "auto" else int(batch_points)
                bp = int(D.broadcast_object(bp))
            left = -(-int((~state["done"].astype(bool)).sum()) // D.world_size())
            compiled, decision = _compile(evaluator, mode, int(bp or 1), left)
            bp = 1 if compiled else int(bp or 1)
            if f is not None:
                f.set_attrs(
                    {
                        "batch_points": bp,
                        "batch_points_option": str(batch_points),
                        "compiled": compiled,
                        "compile_option": mode,
                        "compile_decision": decision,
                        "bn_folded": n_folded,
                        "channels_last": evaluator.channels_last,
                        "bn_fold_notes": "; ".join(evaluator.fold_notes)[:2000] if fold_bn else "off",
                    }
                )
                f.flush()
            _run_points(evaluator, xs, ys, state["done"], int(bp), f, progress, on_round)
    if not D.is_main() and not Path(out).exists():  # another node: the file lives with rank 0
        return store.Result(Path(out), {"kind": "surface", **full})
    result = store.read_result(out)
    if D.is_main():
        _check_finite_surface(result)
    return result


def _compile(evaluator: PointEvaluator, mode: str, batch_points: int, points_left: int) -> tuple[bool, dict[str, Any]]:
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


def _check_finite_surface(result: store.Result) -> None:
    """Refuse (after the run, the file kept) a surface none of whose finished points has a finite loss."""
    loss, done = result["loss"], result["done"].astype(bool)
    if done.any() and not np.isfinite(loss[done]).any():
        raise LandscapeError(
            f"{result.path}: every grid point's loss is NaN or Inf: the model diverges along these "
            "directions or at its centre; check the checkpoint, or use a smaller grid (--x/--y)"
        )


def _portable(state: dict[str, Any]) -> dict[str, Any]:
    """The state with the directions on CPU, so that it can be broadcast to every rank."""
    if state.get("dirs") is None or not D.active():
        return state
    return {**state, "dirs": tuple(None if d is None else {n: t.cpu() for n, t in d.items()} for d in state["dirs"])}


def _run_points(
    evaluator: PointEvaluator,
    xs: np.ndarray,
    ys: np.ndarray,
    done: np.ndarray,
    batch_points: int,
    f: store.ResultFile | None,
    progress: bool | None,
    on_round: Callable[[int, int], None] | None,
) -> None:
    """Evaluate the points not yet done, in rounds of ``batch_points * world_size``; rank 0 writes each round."""
    from tqdm import tqdm

    todo = [(j, i) for j in range(ys.size) for i in range(xs.size) if not done[j, i]]
    total = int(done.size)
    n_done = total - len(todo)
    show = D.is_main() and (sys.stderr.isatty() if progress is None else progress)
    step = batch_points * D.world_size()
    with tqdm(total=total, initial=n_done, disable=not show, unit="pt", desc="surface", dynamic_ncols=True) as bar:
        for s in range(0, len(todo), step):
            mine = D.shard(todo[s : s + step])
            values = evaluator.evaluate([(xs[i], ys[j]) for j, i in mine], batch_points) if mine else []
            results = [(j, i, *v) for (j, i), v in zip(mine, values)]
            gathered = [r for part in D.all_gather_objects(results) for r in part]
            if f is not None:
                _write_points(f, gathered)
            n_done += len(gathered)
            bar.update(len(gathered))
            if on_round is not None:
                on_round(n_done, total)


def _write_points(f: store.ResultFile, results: Sequence[PointResult]) -> None:
    """Write the values, then mark each point done (values flushed first: a kill leaves undone points NaN)."""
    for j, i, loss, data_loss, acc in results:
        f.write_at("loss", (j, i), loss)
        f.write_at("data_loss", (j, i), data_loss)
        f.write_at("accuracy", (j, i), acc)
    f.flush()
    for j, i, *_ in results:
        f.write_at("done", (j, i), True)
    f.mark_done()


# --------------------------------------------------------------------------------- from a checkpoint
def run_surface(
    source: ModelSource | str | Path,
    options: SurfaceOptions = SurfaceOptions(),
    *,
    out: str | Path = "surface.h5",
    model_name: str | None = None,
    force: bool = False,
    device: str = "auto",
    progress: bool | None = None,
) -> store.Result:
    """The ``landscape surface`` command: model source -> Objective -> directions -> :func:`compute_surface`.

    Directions: ``options.target`` (x = target - theta, alpha = 1 lands on it; y random for a plane), else
    ``options.trajectory`` snapshots (PCA plane of the trajectory around the centre), else seeded random
    directions normalised by ``options.norm``. ``options.samples`` images of ``options.data``
    (``options.split``), picked and ordered by ``options.seed``, in fixed batches of ``options.batch_size``;
    with ``options.augment == "paper-a"`` the batches are Paper A's augmented data instead
    (``options.augment_copies`` copies of each sample, drawn once from the seed, see :mod:`landscape.data.augment`)
    and the loss is the soft-target cross-entropy.
    Works in one process or under torchrun (only rank 0 writes).

    Args:
        source: a checkpoint path or a :class:`~landscape.core.front.ModelSource` (published weights, a random
            init, ``timm:`` models, ...).
        options: every analysis option (validated when it was built); its :meth:`SurfaceOptions.attrs` are
            recorded in the file.
        out: the HDF5 file; an existing file of the same run is resumed, of other options refused.
        model_name: the model of a checkpoint that does not name it.
        force: overwrite an existing file from other options.
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: tqdm bar on rank 0 (None: only when stderr is a terminal).

    Returns:
        The file read back (:class:`landscape.store.result.Result`), on every rank.

    Raises:
        LandscapeError: the options are not a :class:`SurfaceOptions`, the model, data, target or snapshots
            cannot be loaded, or the file belongs to other options (without ``force``).
    """
    if not isinstance(options, SurfaceOptions):
        raise LandscapeError(f"run_surface takes its options as a SurfaceOptions, got {type(options).__name__}")
    o = options
    xs, ys = o.xcoords, o.ycoords
    ndim = o.ndim
    reg = Regularizer.from_options(o.regularizer, o.reg_coef)
    dev = D.start(device)
    inputs = load_inputs(source, model_name=model_name, data=o.data, split=o.split, device=dev)
    if o.augment == "none":
        batches = batches_for(inputs, batch_size=o.batch_size, n_samples=o.samples, seed=o.seed)
        criterion = "cross_entropy"
    else:  # Paper A's augmented training data, drawn once from the seed and held fixed for every point
        batches = augmented_batches_for(
            inputs, batch_size=o.batch_size, n_samples=o.samples, seed=o.seed, copies=o.augment_copies
        )
        criterion = "soft_cross_entropy"
    objective = build_objective(
        inputs, batches, criterion=criterion, regularizer=reg, allow_stochastic=o.allow_stochastic
    )
    patterns = o.patterns
    recorded = {k: v for k, v in o.attrs().items() if k != "seed"}
    recorded["fused_attention_off"] = objective.fused_attention_off
    if o.target is not None:
        other = dict(load_model(o.target, inputs.source.model, **inputs.source.model_kwargs)[0].named_parameters())
        directions = dirs.target_directions(
            objective.params, other, ndim=ndim, seed=o.seed, norm=o.norm, ignore_1d=o.ignore_1d, zero_patterns=patterns
        )
        recorded["target_sha256"] = file_sha256(o.target)
    elif o.trajectory:
        snaps = [
            dict(load_model(p, inputs.source.model, **inputs.source.model_kwargs)[0].named_parameters())
            for p in o.trajectory
        ]
        directions = dirs.pca_directions(objective.params, snaps, ndim=ndim)
    else:
        directions = dirs.random_directions(
            objective.params, ndim=ndim, seed=o.seed, norm=o.norm, ignore_1d=o.ignore_1d, zero_patterns=patterns
        )
    attrs = inputs.provenance(objective.n_samples, o.seed, **recorded)
    return compute_surface(
        objective,
        directions,
        xs,
        ys,
        out=out,
        attrs=attrs,
        force=force,
        bn=o.bn,
        batch_points=o.batch_points,
        progress=progress,
        compile=o.compile,
    )
