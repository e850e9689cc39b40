"""Every GPU benchmark in one call of at most 8 minutes on one GPU, printed as one markdown table.

Rows (each beside a bare forward over the same samples, and for the Hessian rows one gradient, so that the
ratio is printed; timings synchronise the GPU):

1. loss surface: a 51 x 51 grid of the zoo's ``resnet50`` (CIFAR stem, 10 classes) on 10,000 synthetic
   3x32x32 images in batches of 500 (``compute_surface``, two seeded random filter-normalised directions),
   time for the whole grid; float32 and under bf16 autocast (its time and its largest relative loss
   difference to float32 over the points both computed). When the row's share of the time budget ends
   before the grid does, the points done are the measured subset and the whole grid is extrapolated (the
   row says so).
2. Hessian: the top-5 largest-magnitude eigenvalues (tol 1e-3) of ``resnet50`` on 4,096 images in batches of
   256 (``HessianOperator`` + ``lanczos``).
3. per-mini-batch spectrum (Paper A's protocol: top-5 of every mini-batch of 16) of the zoo's ``vit_ti``
   (100 classes) by ``max_eigenvalue_spectrum(..., group="auto")`` against PyHessian (``solver="pyhessian"``)
   on the first of the same batches: the time per batch of each and how many of PyHessian's eigenvalues
   differ by more than 1e-3 relative from ours.
4. Fourier profile of ``vit_ti`` (100 classes) on 10,000 images in batches of 500, float32 and under bf16
   autocast (its largest absolute difference of the log amplitudes to float32).
5. curvature of a large model in float32: the top-3 Hessian eigenvalues (``LA``) of torchvision's ``vit_b_16``
   on 32 synthetic 3x224x224 images in one batch, by exact products (``graph``, tol 1e-6), by central
   differences (``--hvp finite-difference``, the step measured at the point, tol 1e-4: their gradients per
   product, step, predicted error and largest relative error against the exact eigenvalues) and by
   ``fsdp_lanczos`` under ``torchrun`` on every GPU of the machine (nccl; one rank on a one-GPU machine; the
   smoke run: 2 gloo ranks on the CPU), against the same exact eigenvalues.

The budget (``--budget-s``, default 480 s, measured from the start of ``main``) is shared among the rows by
weight; a row scales its work down to its share, or stops at its end, and says so in its notes. A row that
fails is reported as such in the table, and the others still run (exit code 1). ``--json PATH`` also writes
the rows. ``--smoke`` runs the same code on the CPU at tiny sizes in a few seconds (the test's mode).
Without ``--smoke`` a CUDA device is required (exit code 2 otherwise).

    python benchmarks/gpu.py [--budget-s 480] [--json gpu.json] [--rows surface,hessian,spectrum,fourier,curvature]
    python benchmarks/gpu.py --smoke --json /tmp/gpu_smoke.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROWS = ("surface", "hessian", "spectrum", "fourier", "curvature")
#: relative share of the budget of each row (re-normalised over the rows still to run, so time one row
#: leaves unused goes to the rows after it)
WEIGHTS = {"surface": 0.29, "hessian": 0.19, "spectrum": 0.22, "fourier": 0.10, "curvature": 0.20}
RELATIVE_TOL = 1e-3  # "differs" between PyHessian's and our eigenvalues


@dataclass
class Sizes:
    """The problem sizes of every row: the GPU benchmark's, or the smoke test's tiny ones."""

    surface_model: str = "resnet50"
    surface_kw: dict[str, Any] = field(default_factory=dict)
    surface_samples: int = 10_000
    surface_batch: int = 500
    grid: int = 51
    surface_options: dict[str, Any] = field(default_factory=dict)
    hessian_model: str = "resnet50"
    hessian_kw: dict[str, Any] = field(default_factory=dict)
    hessian_samples: int = 4096
    hessian_batch: int = 256
    k: int = 5
    tol: float = 1e-3
    spectrum_model: str = "vit_ti"
    spectrum_kw: dict[str, Any] = field(default_factory=dict)
    spectrum_batch: int = 16
    spectrum_batches: int = 256
    spectrum_pilot: int = 16
    spectrum_group: int | str = "auto"
    fourier_model: str = "vit_ti"
    fourier_kw: dict[str, Any] = field(default_factory=dict)
    fourier_samples: int = 10_000
    fourier_batch: int = 500
    curvature_model: str = "torchvision:vit_b_16"
    curvature_kw: dict[str, Any] = field(default_factory=dict)
    curvature_samples: int = 32
    curvature_side: int = 224
    repeats: int = 3


def smoke_sizes() -> Sizes:
    """Tiny models and data that run every row's code path on 2 CPU cores in a few seconds."""
    tiny_vit = {"depth": 1, "embed_dim": 16, "num_heads": 2, "patch_size": 8}
    return Sizes(
        surface_model="resnet_mini",
        surface_kw={"widths": (4, 4, 8, 8)},
        surface_samples=8,
        surface_batch=4,
        grid=2,
        hessian_model="resnet_mini",
        hessian_kw={"widths": (4, 4, 8, 8)},
        hessian_samples=8,
        hessian_batch=4,
        spectrum_model="vit_mini",
        spectrum_kw=tiny_vit,
        spectrum_batches=2,
        spectrum_pilot=1,
        spectrum_group=2,  # the grouped (vmap) path, which "auto" picks on a GPU; on 2 CPU cores it picks 1
        fourier_model="vit_mini",
        fourier_kw=tiny_vit,
        fourier_samples=8,
        fourier_batch=4,
        curvature_model="vit_mini",
        curvature_kw=tiny_vit,
        curvature_samples=8,
        curvature_side=32,
        repeats=3,
    )


@dataclass
class Row:
    """One line of the table.

    Attributes:
        benchmark: what was measured (analysis, model, precision).
        work: the work done, and the unit that ``unit_s`` times.
        total_s: seconds of the whole job (extrapolated when the notes say so).
        unit_s: seconds of one unit (one grid point, one solve, one mini-batch, one profile).
        forward_s: a bare forward over the unit's samples.
        backward_s: a forward and backward (one gradient) over the unit's samples.
        accuracy: agreement, convergence or error against float32, in words.
        notes: scaling, extrapolation and failures.
        extra: machine-readable details (eigenvalues, counts, steady-state times).
    """

    benchmark: str
    work: str
    total_s: float | None = None
    unit_s: float | None = None
    forward_s: float | None = None
    backward_s: float | None = None
    accuracy: str = ""
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    failed: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The row with its two ratios (``unit_s / forward_s`` and ``unit_s / backward_s``), JSON-ready."""
        out = asdict(self)
        out["ratio_forward"] = _ratio(self.unit_s, self.forward_s)
        out["ratio_backward"] = _ratio(self.unit_s, self.backward_s)
        return _plain(out)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays, and tuples, made JSON types (NaN kept as NaN)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


class Share:
    """A row's slice of the budget: it ends at ``deadline`` (``time.perf_counter`` seconds)."""

    def __init__(self, start: float, deadline: float) -> None:
        self.start, self.deadline = start, deadline

    def left(self) -> float:
        """Seconds left in this share (0 when it is over)."""
        return max(0.0, self.deadline - time.perf_counter())

    def part(self, fraction: float) -> Share:
        """A share that starts now and takes ``fraction`` of the time left in this one."""
        now = time.perf_counter()
        return Share(now, now + fraction * self.left())

    def over(self) -> bool:
        """Whether the share has ended."""
        return time.perf_counter() >= self.deadline


class Budget:
    """The total time, shared among the rows by weight; a row's share is taken when the row starts.

    Args:
        seconds: the whole budget from now.
        weights: the relative share of each row to run, in running order.
        reserve_s: seconds kept back for start-up, the table and the JSON file.
    """

    def __init__(self, seconds: float, weights: dict[str, float], reserve_s: float = 0.0) -> None:
        self.start = time.perf_counter()
        self.deadline = self.start + seconds - reserve_s
        self.pending = dict(weights)

    def share(self, name: str) -> Share:
        """The share of row ``name``: its weight's fraction of the time left among the rows not yet started."""
        weight = self.pending.pop(name)
        now = time.perf_counter()
        left = max(0.0, self.deadline - now)
        return Share(now, now + left * weight / (weight + sum(self.pending.values())))

    def elapsed(self) -> float:
        """Seconds since the budget started."""
        return time.perf_counter() - self.start


class _ShareEndedError(Exception):
    """Raised from a progress callback when a share ends: the work done so far is the measured subset."""


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, repeats: int, warmup: bool = True) -> float:
    """Median seconds of ``repeats`` synchronised calls of ``fn`` (after one warm-up call unless told not to)."""
    if warmup:
        fn()
        sync(device)
    times = []
    for _ in range(max(1, repeats)):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def autocast(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` when ``enabled``, else nothing."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def synthetic_batches(
    n: int, batch: int, num_classes: int, device: torch.device, seed: int = 1, side: int = 32
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` seeded Gaussian 3 x side x side images with uniform labels, in batches of ``batch``, on ``device``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, side, side, generator=g)
    y = torch.randint(0, num_classes, (n,), generator=g)
    return [(x[i : i + batch].to(device), y[i : i + batch].to(device)) for i in range(0, n, batch)]


def make_model(name: str, num_classes: int, kw: dict[str, Any], device: torch.device) -> torch.nn.Module:
    """A seeded random-init zoo model in eval mode on ``device``."""
    from landscape.models import create_model

    torch.manual_seed(0)
    return create_model(name, num_classes=num_classes, **kw).to(device).eval()


def forward_pass(model: torch.nn.Module, batches: Sequence[Any]) -> None:
    """A bare inference forward over every batch (``(x, y)`` pairs or inputs)."""
    with torch.inference_mode():
        for b in batches:
            model(b[0] if isinstance(b, (tuple, list)) else b)


def n_params(model: torch.nn.Module) -> int:
    """The number of parameter entries of ``model``."""
    return sum(p.numel() for p in model.parameters())


def free(device: torch.device) -> None:
    """Return cached GPU memory between rows."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------ surface
@dataclass
class GridRun:
    """One ``compute_surface`` call, possibly stopped at its share's end.

    Attributes:
        loss: the loss on the grid, ``(ny, nx)`` (NaN where not done).
        done: which points were computed.
        elapsed_s: seconds from the call to its last finished round.
        steady_s: seconds per point between the first and the last round (whole time / points for one round).
        whole_s: seconds of the whole grid: measured, or ``elapsed_s`` plus ``steady_s`` per point not done.
        stopped: why it stopped before the grid's end: ``"share"`` (its time was over), ``"cap"`` (``max_points``
            reached), or ``""`` (it did not stop).
        attrs: the file's record of how the points were evaluated (batch points, compiled, BatchNorm folded).
    """

    loss: np.ndarray
    done: np.ndarray
    attrs: dict[str, Any]
    elapsed_s: float
    steady_s: float
    whole_s: float
    stopped: str

    @property
    def n_done(self) -> int:
        """Points computed."""
        return int(self.done.sum())


def run_grid(
    objective: Any,
    dirs: Any,
    coords: np.ndarray,
    out: Path,
    device: torch.device,
    share: Share,
    max_points: int | None = None,
    bf16: bool = False,
    options: dict[str, Any] | None = None,
) -> GridRun:
    """``compute_surface`` on ``coords x coords`` (one point a round), stopped once ``share`` or ``max_points`` ends.

    Args:
        objective: the loss.
        dirs: the two directions.
        coords: the coordinates of both axes.
        out: the HDF5 file to write (a new path).
        device: the objective's device (synchronised after every round).
        share: the time this call may take; it stops after the first round past its end.
        max_points: stop after this many points (None: the whole grid).
        bf16: run under bf16 autocast.
        options: further ``compute_surface`` keywords (e.g. ``compile``); none: its defaults.

    Returns:
        The :class:`GridRun`.
    """
    from landscape import store
    from landscape.analyses.surface.run import compute_surface

    total = coords.size**2
    stamps: list[tuple[int, float]] = []
    t0 = time.perf_counter()

    def on_round(n_done: int, n_total: int) -> None:
        sync(device)
        stamps.append((n_done, time.perf_counter()))
        if n_done < n_total and share.over():
            reason.append("share")
        elif n_done < n_total and max_points is not None and n_done >= max_points:
            reason.append("cap")
        if reason:
            raise _ShareEndedError

    reason: list[str] = []
    with autocast(device, bf16), contextlib.suppress(_ShareEndedError):  # stopped: the file holds the points done
        compute_surface(
            objective,
            dirs,
            coords,
            coords,
            out=out,
            batch_points=1,
            progress=False,
            on_round=on_round,
            **(options or {}),
        )
    result = store.read_result(out)
    done = np.asarray(result["done"], bool)
    loss = np.where(done, np.asarray(result["loss"], np.float64), np.nan)
    (d0, t_first), (d1, t_last) = stamps[0], stamps[-1]
    elapsed = t_last - t0
    steady = (t_last - t_first) / (d1 - d0) if d1 > d0 else elapsed / max(d1, 1)
    whole = elapsed + steady * (total - d1)
    keys = ("batch_points", "compiled", "compile_decision", "bn_folded")
    attrs = {k: result.attrs[k] for k in keys if k in result.attrs}
    return GridRun(loss, done, attrs, elapsed, steady, whole, reason[0] if reason else "")


def surface_rows(sizes: Sizes, device: torch.device, share: Share) -> list[Row]:
    """Rows 1a/1b: the loss surface in float32 and under bf16 autocast, each beside a bare forward."""
    from landscape.analyses.surface.directions import random_directions
    from landscape.core.objective import Objective

    model = make_model(sizes.surface_model, 10, sizes.surface_kw, device)
    batches = synthetic_batches(sizes.surface_samples, sizes.surface_batch, 10, device)
    objective = Objective(model, batches)
    dirs = random_directions(objective.params, ndim=2, seed=0)
    coords = np.linspace(-1.0, 1.0, sizes.grid)
    n_points = sizes.grid**2
    t_fwd = timed(lambda: forward_pass(objective.module, batches), device, sizes.repeats)
    with autocast(device, True):
        t_fwd16 = timed(lambda: forward_pass(objective.module, batches), device, sizes.repeats)
    name = f"{sizes.surface_model} ({n_params(model):,} params)"
    data = f"{sizes.surface_samples:,} images in batches of {sizes.surface_batch}"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        options = sizes.surface_options
        fp32 = run_grid(objective, dirs, coords, Path(tmp) / "fp32.h5", device, share.part(0.72), options=options)
        rows.append(_surface_row(f"surface {sizes.grid}x{sizes.grid}, {name}, float32", data, fp32, n_points, t_fwd))
        half = run_grid(
            objective,
            dirs,
            coords,
            Path(tmp) / "bf16.h5",
            device,
            share.part(0.95),
            max_points=fp32.n_done,
            bf16=True,
            options=options,
        )
    row = _surface_row(f"surface {sizes.grid}x{sizes.grid}, {name}, bf16 autocast", data, half, n_points, t_fwd16)
    both = half.done & fp32.done
    rel = np.abs(half.loss[both] - fp32.loss[both]) / np.abs(fp32.loss[both])
    row.accuracy = f"max relative loss difference to float32 {rel.max():.1e} over the {int(both.sum())} points of both"
    row.extra.update(max_rel_loss_diff=float(rel.max()), compared_points=int(both.sum()))
    row.extra["whole_grid_speedup_vs_fp32"] = fp32.whole_s / half.whole_s
    row.notes.append(f"{fp32.whole_s / half.whole_s:.2f}x the float32 grid's speed")
    rows.append(row)
    return rows


def _surface_row(benchmark: str, data: str, run: GridRun, n_points: int, t_fwd: float) -> Row:
    row = Row(
        benchmark,
        f"{n_points} points on {data}; unit: one point",
        total_s=run.whole_s,
        unit_s=run.whole_s / n_points,
        forward_s=t_fwd,
    )
    if run.stopped or run.n_done < n_points:
        why = "the float32 row's points" if run.stopped == "cap" else "the share's end"
        row.notes.append(
            f"EXTRAPOLATED: {run.n_done} of {n_points} points timed ({run.elapsed_s:.1f} s, up to {why}), "
            f"the rest at the steady {run.steady_s:.3g} s/point"
        )
    else:
        row.notes.append("whole grid timed")
    row.extra.update(
        points_timed=run.n_done, points=n_points, timed_s=run.elapsed_s, steady_s_per_point=run.steady_s, **run.attrs
    )
    shown = {k: run.attrs[k] for k in ("compiled", "bn_folded") if k in run.attrs}
    if shown:
        row.notes.append(", ".join(f"{k} {v}" for k, v in shown.items()))
    return row


# ------------------------------------------------------------------------------------------------ hessian
def linearize_capacity(objective: Any, device: torch.device, most: int = 8) -> int:
    """How many batches ``HessianOperator``'s auto mode may trace (each trace keeps a batch's intermediates).

    On the CPU ``most``; on a GPU as many as fit in half the free memory at three times the peak memory of one
    gradient (measured now), at most ``most``.

    Args:
        objective: the loss whose batches would be traced.
        device: its device.
        most: the operator's default cap.

    Returns:
        The number of batches, 0 when not even one fits.
    """
    if device.type != "cuda":
        return most
    free(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    objective.gradient()
    sync(device)
    peak = max(1, torch.cuda.max_memory_allocated(device) - base)
    return max(0, min(most, int(0.5 * torch.cuda.mem_get_info(device)[0] / (3 * peak))))


def hessian_rows(sizes: Sizes, device: torch.device, share: Share, hvp: str = "auto") -> list[Row]:
    """Row 2: top-k largest-magnitude Hessian eigenvalues by Lanczos, beside a forward and a gradient."""
    from landscape.analyses.hessian.lanczos import lanczos
    from landscape.analyses.hessian.operator import HessianOperator
    from landscape.core.objective import Objective

    model = make_model(sizes.hessian_model, 10, sizes.hessian_kw, device)
    batches = synthetic_batches(sizes.hessian_samples, sizes.hessian_batch, 10, device)
    notes: list[str] = []
    objective = Objective(model, batches)
    t_grad = timed(lambda: objective.gradient(), device, 1)
    # a conservative cost model (benchmarks/hessian.py: ~25-40 products of 2-5 gradients, trace ~10 gradients
    # of each traced batch): scale the samples down when it does not fit the share
    estimate = 160 * t_grad
    if estimate > 0.85 * share.left() and len(batches) > 1:
        keep = max(1, int(len(batches) * 0.85 * share.left() / estimate))
        if keep < len(batches):
            notes.append(
                f"SCALED DOWN from {sizes.hessian_samples:,} to {sum(len(b[1]) for b in batches[:keep]):,} images "
                f"(estimated {estimate:.0f} s > share {share.left():.0f} s)"
            )
            batches = batches[:keep]
            objective = Objective(model, batches)
    samples = sum(len(b[1]) for b in batches)
    t_fwd = timed(lambda: forward_pass(objective.module, batches), device, sizes.repeats)
    t_grad = timed(lambda: objective.gradient(), device, sizes.repeats)

    def callback(n_matvec: int, values: torch.Tensor, errors: torch.Tensor) -> None:
        if share.over():
            raise _ShareEndedError

    traced = linearize_capacity(objective, device)
    if hvp == "auto" and traced < 8:
        notes.append(f"auto mode may trace {traced} of the batches (GPU memory)")
        hvp = "auto" if traced else "jvp"

    def solve(mode: str) -> Any:
        op = HessianOperator(objective, mode=mode, max_linearized=max(1, traced))
        sync(device)
        t0 = time.perf_counter()
        res = lanczos(op, k=sizes.k, which="LM", tol=sizes.tol, seed=0, return_eigenvectors=False, callback=callback)
        sync(device)
        return res, time.perf_counter() - t0

    row = Row(
        f"Hessian top-{sizes.k} (LM, tol {sizes.tol:g}), {sizes.hessian_model} ({n_params(model):,} params)",
        f"{samples:,} images in batches of {sizes.hessian_batch}; unit: the whole solve",
        forward_s=t_fwd,
        backward_s=t_grad,
        notes=notes,
    )

    def attempt(mode: str) -> tuple[Any, float] | None:
        try:
            return solve(mode)
        except torch.cuda.OutOfMemoryError:
            return None  # returned outside the handler, so that the traceback's tensors are freed

    t_start = time.perf_counter()
    try:
        outcome = attempt(hvp)
        if outcome is None and hvp != "jvp":
            free(device)
            notes.append(f"hvp mode {hvp} ran out of GPU memory; jvp used")
            hvp = "jvp"
            t_start = time.perf_counter()
            outcome = attempt(hvp)
        if outcome is None:
            raise torch.cuda.OutOfMemoryError("the Hessian solve ran out of GPU memory with hvp mode jvp")
        res, seconds = outcome
    except _ShareEndedError:
        seconds = time.perf_counter() - t_start
        row.total_s = row.unit_s = seconds
        row.accuracy = "NOT FINISHED"
        notes.append(f"STOPPED at the share's end after {seconds:.1f} s: a lower bound, no eigenvalues")
        return [row]
    n_conv = int(res.converged.sum())
    row.total_s = row.unit_s = seconds
    row.accuracy = f"{n_conv}/{sizes.k} converged, {res.n_matvec} HVPs"
    notes.append(
        f"hvp mode {hvp}; {seconds / res.n_matvec / t_grad:.2f} gradients per HVP (trace included); "
        f"top eigenvalue {float(res.eigenvalues.abs().max()):.4g}"
    )
    row.extra.update(
        eigenvalues=res.eigenvalues.numpy(), n_matvec=res.n_matvec, converged=res.converged.numpy(), hvp=hvp
    )
    return [row]


# ----------------------------------------------------------------------------------------------- spectrum
def spectrum_rows(sizes: Sizes, device: torch.device, share: Share) -> list[Row]:
    """Rows 3a/3b: Paper A's per-mini-batch top-k by our grouped Lanczos and by PyHessian, per batch."""
    from landscape.analyses.hessian.spectrum import max_eigenvalue_spectrum
    from landscape.core.objective import Objective

    model = make_model(sizes.spectrum_model, 100, sizes.spectrum_kw, device)
    batches = synthetic_batches(sizes.spectrum_batches * sizes.spectrum_batch, sizes.spectrum_batch, 100, device)
    base = batches[: min(len(batches), 32)]
    base_objective = Objective(model, base)
    t_fwd = timed(lambda: forward_pass(base_objective.module, base), device, sizes.repeats) / len(base)
    t_grad = timed(lambda: base_objective.gradient(), device, sizes.repeats) / len(base)
    k = sizes.k
    name = f"{sizes.spectrum_model} ({n_params(model):,} params)"

    def spectrum(todo: Sequence[Any], part: Share, **kw: Any) -> tuple[Any, dict[int, Any], float, list[float]]:
        """The call's result (None if stopped at ``part``'s end), each batch's report, seconds, report times."""
        found: dict[int, Any] = {}
        stamps: list[float] = []

        def on_batch(item: Any) -> None:
            sync(device)
            found[item.index] = item
            stamps.append(time.perf_counter())
            if part.over() and len(found) < len(todo):
                raise _ShareEndedError

        sync(device)
        t0 = time.perf_counter()
        try:
            res = max_eigenvalue_spectrum(model, todo, k=k, tol=sizes.tol, on_batch=on_batch, **kw)
        except _ShareEndedError:
            res = None
        sync(device)
        return res, found, time.perf_counter() - t0, [t - t0 for t in stamps]

    def steady(stamps: list[float], first: int) -> float:
        """Seconds per batch after the first ``first`` batches (a group's batches are reported together)."""
        n = len(stamps)
        return (stamps[-1] - stamps[first - 1]) / (n - first) if n > first >= 1 else stamps[-1] / max(1, n)

    # ours: a pilot (warm-up, and the time per batch), then as many batches as fit its part of the share
    ours_part = share.part(0.42)
    pilot_n = min(sizes.spectrum_pilot, len(batches))
    pilot, _, t_pilot, _ = spectrum(batches[:pilot_n], ours_part, group=sizes.spectrum_group)
    per_batch = t_pilot / pilot_n
    n_ours = max(1, min(len(batches), int(ours_part.left() / per_batch)))
    res, ours, t_ours, stamps_ours = spectrum(batches[:n_ours], ours_part, group=sizes.spectrum_group)
    finished = res if res is not None else pilot  # a call stopped at the share's end returns nothing
    group = None if finished is None else finished.group
    choice = {} if finished is None else dict(getattr(finished, "group_choice", {}) or {})
    steady_ours = steady(stamps_ours, min(int(group or 1), len(ours)))
    row_ours = Row(
        f"spectrum top-{k} per batch of {sizes.spectrum_batch}, {name}, ours (lanczos, group {group})",
        f"{len(ours)} batches; unit: one batch",
        total_s=t_ours,
        unit_s=t_ours / len(ours),
        forward_s=t_fwd,
        backward_s=t_grad,
    )
    n_conv = sum(int(np.asarray(item.converged).sum()) for item in ours.values())
    row_ours.accuracy = f"{n_conv}/{len(ours) * k} eigenvalues converged"
    if n_ours < sizes.spectrum_batches or res is None:
        row_ours.notes.append(
            f"SCALED DOWN to {len(ours)} of {sizes.spectrum_batches} batches to fit the share"
            + (" (stopped at its end)" if res is None else "")
        )
    reason = f": {choice['reason']}" if choice.get("reason") else ""
    row_ours.notes.append(
        f"group {group} (option {sizes.spectrum_group}{reason}); steady {steady_ours:.3g} s/batch; "
        f"pilot of {pilot_n} not counted"
    )
    row_ours.extra.update(
        group=group,
        group_option=sizes.spectrum_group,
        group_choice=choice,
        batches=len(ours),
        steady_s_per_batch=steady_ours,
        pilot_batches=pilot_n,
        converged=n_conv,
    )

    # PyHessian: one pilot batch (the time per batch), then the first batches that fit the rest of the share
    py_part = share.part(0.95)
    _, _, t_py1, _ = spectrum(batches[:1], py_part, solver="pyhessian")
    n_py = max(1, min(len(ours), int(py_part.left() / t_py1)))
    _, theirs, t_py, stamps_py = spectrum(batches[:n_py], py_part, solver="pyhessian")
    steady_py = steady(stamps_py, 1)
    row_py = Row(
        f"spectrum top-{k} per batch of {sizes.spectrum_batch}, {name}, PyHessian",
        f"{len(theirs)} batches (the first of ours); unit: one batch",
        total_s=t_py,
        unit_s=t_py / len(theirs),
        forward_s=t_fwd,
        backward_s=t_grad,
    )
    common = sorted(set(theirs) & set(ours))
    a = np.array([np.asarray(ours[i].eigenvalues, np.float64) for i in common])
    b = np.array([np.asarray(theirs[i].eigenvalues, np.float64) for i in common])
    rel = np.abs(b - a) / np.abs(a)
    top = np.argmax(np.abs(a), axis=1)
    rel_top = rel[np.arange(len(common)), top]
    row_py.accuracy = (
        f"{int((rel > RELATIVE_TOL).sum())}/{rel.size} eigenvalues differ > {RELATIVE_TOL:g} relative from ours "
        f"(max {rel.max():.1e}; largest per batch: max {rel_top.max():.1e})"
    )
    if len(theirs) < len(ours):
        row_py.notes.append(f"a subset: {len(theirs)} of our {len(ours)} batches fit the share")
    row_py.notes.append(
        f"{row_py.unit_s / row_ours.unit_s:.1f}x our time per batch; steady {steady_py:.3g} s/batch; pilot not counted"
    )
    row_py.extra.update(
        batches=len(theirs),
        steady_s_per_batch=steady_py,
        compared_batches=common,
        ours_eigenvalues=a,
        pyhessian_eigenvalues=b,
        n_differ=int((rel > RELATIVE_TOL).sum()),
        n_compared=int(rel.size),
        max_rel_diff=float(rel.max()),
        max_rel_diff_largest=float(rel_top.max()),
    )
    return [row_ours, row_py]


# ------------------------------------------------------------------------------------------------ fourier
def fourier_rows(sizes: Sizes, device: torch.device, share: Share) -> list[Row]:
    """Rows 4a/4b: the diagonal Fourier profile in float32 and under bf16 autocast, beside a bare forward."""
    from landscape.analyses.fourier.features import fourier_profile

    model = make_model(sizes.fourier_model, 100, sizes.fourier_kw, device)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(sizes.fourier_samples, 3, 32, 32, generator=g)
    batches = [xb.to(device) for xb in x.split(sizes.fourier_batch)]
    notes: list[str] = []
    t_one = timed(lambda: forward_pass(model, batches[:1]), device, 1)
    # forwards and profiles in both precisions, warm-ups included: about 6 + 6 x 1.5 passes over the data
    estimate = 15 * t_one * len(batches)
    if estimate > 0.9 * share.left() and len(batches) > 1:
        keep = max(1, int(len(batches) * 0.9 * share.left() / estimate))
        if keep < len(batches):
            notes.append(
                f"SCALED DOWN from {sizes.fourier_samples:,} to {sum(len(b) for b in batches[:keep]):,} images "
                "to fit the share"
            )
            batches = batches[:keep]
    samples = sum(len(b) for b in batches)

    def profile() -> Any:
        out = fourier_profile(model, batches)
        sync(device)
        return out

    rows, profiles = [], []
    for bf16 in (False, True):
        with autocast(device, bf16):
            fourier_profile(model, batches[:1])  # warm-up (and the bf16 kernels)
            t_fwd = timed(lambda: forward_pass(model, batches), device, min(sizes.repeats, 2))
            t_prof = timed(profile, device, min(sizes.repeats, 2), warmup=False)
            profiles.append(profile())
        n_layers = len(profiles[-1].layers)
        rows.append(
            Row(
                f"Fourier profile (diagonal), {sizes.fourier_model} ({n_params(model):,} params), "
                + ("bf16 autocast" if bf16 else "float32"),
                f"{n_layers} maps over {samples:,} images in batches of {sizes.fourier_batch}; unit: the profile",
                total_s=t_prof,
                unit_s=t_prof,
                forward_s=t_fwd,
                notes=list(notes),
            )
        )
    p32, p16 = profiles
    diff = max(float(np.nanmax(np.abs(p16.log_amplitude(i) - p32.log_amplitude(i)))) for i in range(len(p32.layers)))
    rows[1].accuracy = f"max abs log-amplitude difference to float32 {diff:.1e}"
    rows[1].extra["max_abs_log_amplitude_diff"] = diff
    rows[1].notes.append(f"{rows[0].unit_s / rows[1].unit_s:.2f}x the float32 profile's speed")
    return rows


# ---------------------------------------------------------------------------------------------- curvature
def curvature_rows(sizes: Sizes, device: torch.device, share: Share) -> list[Row]:
    """Rows 5a-5c: a large model's top-3 by exact products, by central differences and by ``fsdp_lanczos``."""
    from landscape.analyses.hessian.lanczos import lanczos
    from landscape.analyses.hessian.operator import HessianOperator
    from landscape.core.objective import Objective

    model = make_model(sizes.curvature_model, 10, sizes.curvature_kw, device)
    samples = sizes.curvature_samples
    batches = synthetic_batches(samples, samples, 10, device, side=sizes.curvature_side)
    objective = Objective(model, batches)
    t_grad = timed(lambda: objective.gradient(), device, 1)
    notes: list[str] = []
    # about 30 exact products of ~2.5 gradients, 30 differences of 2, and the ranks' start: scale down to the share
    estimate = 160 * t_grad
    if estimate > 0.8 * share.left() and samples > 1:
        samples = max(1, int(samples * 0.8 * share.left() / estimate))
        notes.append(f"SCALED DOWN from {sizes.curvature_samples} to {samples} images (estimated {estimate:.0f} s)")
        batches = synthetic_batches(samples, samples, 10, device, side=sizes.curvature_side)
        objective = Objective(model, batches)
    t_fwd = timed(lambda: forward_pass(objective.module, batches), device, sizes.repeats)
    t_grad = timed(lambda: objective.gradient(), device, sizes.repeats)
    name = f"{sizes.curvature_model} ({n_params(model):,} params)"
    work = f"{samples} images of {sizes.curvature_side}x{sizes.curvature_side}; unit: the whole solve"

    def solve(mode: str, tol: float) -> tuple[Any, float, Any]:
        op = HessianOperator(objective, mode=mode)
        sync(device)
        t0 = time.perf_counter()
        res = lanczos(op, k=3, which="LA", tol=tol, seed=0, return_eigenvectors=False)
        sync(device)
        return res, time.perf_counter() - t0, op

    exact, t_exact, _ = solve("graph", 1e-6)
    free(device)
    found, t_found, op = solve("finite-difference", 1e-4)
    choice = op.hvp_choice()
    step = choice["finite_difference"]
    spent = choice["finite_difference_gradients"]
    error = float(((found.eigenvalues - exact.eigenvalues) / exact.eigenvalues.abs()).abs().max())
    rows = [
        Row(f"Hessian top-3 (LA), {name}, exact (graph)", work, t_exact, t_exact, t_fwd, t_grad, notes=list(notes)),
        Row(f"Hessian top-3 (LA), {name}, finite differences", work, t_found, t_found, t_fwd, t_grad),
    ]
    rows[0].accuracy = f"{int(exact.converged.sum())}/3 converged, {exact.n_matvec} HVPs"
    rows[0].extra.update(eigenvalues=exact.eigenvalues.numpy(), n_matvec=exact.n_matvec)
    rows[1].accuracy = f"max relative error {error:.1e} against exact; {found.n_matvec} HVPs"
    rows[1].notes.append(
        f"{spent / found.n_matvec:.2f} gradients per HVP (the step's measurement included), "
        f"{t_found / found.n_matvec / t_grad:.2f} gradient times; step {step['step']:.3g}, predicted error "
        f"{step['estimated_error']:.2g}, measured asymmetry {found.symmetry_defect:.2g}"
    )
    rows[1].extra.update(
        eigenvalues=found.eigenvalues.numpy(),
        n_matvec=found.n_matvec,
        gradients=spent,
        max_rel_error=error,
        finite_difference=step,
        symmetry_defect=found.symmetry_defect,
    )
    del op
    free(device)
    rows.append(_fsdp_row(sizes, samples, device, share, exact.eigenvalues, name, work, t_fwd, t_grad))
    return rows


def _fsdp_row(
    sizes: Sizes,
    samples: int,
    device: torch.device,
    share: Share,
    exact: torch.Tensor,
    name: str,
    work: str,
    t_fwd: float,
    t_grad: float,
) -> Row:
    """Row 5c: ``fsdp_lanczos`` under ``torchrun`` (this script's ``--fsdp-child``), against ``exact``."""
    import os
    import subprocess

    ranks = max(1, torch.cuda.device_count()) if device.type == "cuda" else 2
    row = Row(f"Hessian top-3 (LA), {name}, fsdp_lanczos on {ranks} rank(s)", work, forward_s=t_fwd, backward_s=t_grad)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "fsdp.json"
        job = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), __file__]
        job += ["--fsdp-child", str(out), "--fsdp-samples", str(samples)] + (
            ["--smoke"] if device.type == "cpu" else []
        )
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(job, capture_output=True, text=True, env=env, timeout=max(60.0, share.left() + 60.0))
        if done.returncode != 0:
            raise RuntimeError(f"fsdp_lanczos ranks failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        result = json.loads(out.read_text())
    found = torch.tensor(result["eigenvalues"], dtype=torch.float64)
    error = float(((found - exact) / exact.abs()).abs().max())
    row.total_s = row.unit_s = result["seconds"]
    row.accuracy = f"max relative error {error:.1e} against exact; {result['n_matvec']} HVPs"
    step = result["finite_difference"]
    row.notes.append(
        f"{step['gradients_total'] / result['n_matvec']:.2f} gradients per HVP; step {step['step']:.3g}, predicted "
        f"error {step['estimated_error']:.2g}; the ranks' start not counted"
    )
    row.extra.update(result, max_rel_error=error, ranks=ranks)
    return row


def fsdp_child(out: Path, samples: int, smoke: bool) -> int:
    """One rank of row 5c: the model sharded with ``fully_shard``, ``fsdp_lanczos``; rank 0 writes ``out``."""
    import torch.distributed as dist

    from landscape.analyses.hessian.fsdp import fsdp_lanczos, fully_shard_model
    from landscape.runtime import distributed

    sizes = smoke_sizes() if smoke else Sizes()
    device = distributed.start("cpu" if smoke else "auto")
    torch.set_num_threads(1 if smoke else torch.get_num_threads())
    model = fully_shard_model(make_model(sizes.curvature_model, 10, sizes.curvature_kw, device))
    batches = synthetic_batches(samples, samples, 10, device, side=sizes.curvature_side)
    sync(device)
    t0 = time.perf_counter()
    res = fsdp_lanczos(model, batches, k=3, which="LA", tol=1e-4, seed=0)
    sync(device)
    seconds = time.perf_counter() - t0
    if dist.get_rank() == 0:
        record = {
            "eigenvalues": res.eigenvalues.tolist(),
            "n_matvec": res.n_matvec,
            "seconds": seconds,
            "symmetry_defect": res.symmetry_defect,
            "finite_difference": res.finite_difference,
        }
        out.write_text(json.dumps(_plain(record)))
    dist.barrier()
    dist.destroy_process_group()
    return 0


RUNNERS: dict[str, Callable[[Sizes, torch.device, Share], list[Row]]] = {
    "surface": surface_rows,
    "hessian": hessian_rows,
    "spectrum": spectrum_rows,
    "fourier": fourier_rows,
    "curvature": curvature_rows,
}


# ---------------------------------------------------------------------------------------------------- table
def _num(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.3g}"


def format_table(rows: Sequence[Row]) -> str:
    """The rows as one markdown table (ratios are per unit: the unit's time over its forward / gradient)."""
    head = (
        "| benchmark | work | total (s) | per unit (s) | forward (s) | fwd+bwd (s) | unit / forward "
        "| unit / fwd+bwd | accuracy | notes |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        d = r.as_dict()
        cells = [
            r.benchmark,
            r.work,
            _num(r.total_s),
            _num(r.unit_s),
            _num(r.forward_s),
            _num(r.backward_s),
            _num(d["ratio_forward"]),
            _num(d["ratio_backward"]),
            r.accuracy,
            "; ".join(r.notes),
        ]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def describe_device(device: torch.device) -> str:
    """The device's name and the float32 matmul/convolution settings in force."""
    if device.type != "cuda":
        return f"CPU, {torch.get_num_threads()} threads"
    try:
        tf32 = f"TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, TF32 cuDNN {torch.backends.cudnn.allow_tf32}"
    except Exception:  # a torch that refuses the legacy flags
        tf32 = "TF32 flags unreadable"
    return f"{torch.cuda.get_device_name(device)}; {tf32} (torch's defaults, unchanged)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen rows within the budget, print the table (and write ``--json``); return the exit code.

    Args:
        argv: command-line arguments (None: ``sys.argv[1:]``).

    Returns:
        0 when every row ran, 1 when one failed, 2 without a CUDA device and without ``--smoke``.
    """
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (seconds): the test's mode")
    p.add_argument("--budget-s", type=float, default=480.0, help="total seconds for every row (default 480)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    p.add_argument(
        "--surface-compile", default=None, help="surface rows: compute_surface's compile option (default: its own)"
    )
    p.add_argument("--group", default=None, help="spectrum row: batches computed together, auto or N (default auto)")
    p.add_argument("--fsdp-child", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--fsdp-samples", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fsdp_child is not None:
        return fsdp_child(args.fsdp_child, args.fsdp_samples, args.smoke)
    chosen = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = sorted(set(chosen) - set(ROWS))
    if unknown or not chosen:
        p.error(f"--rows takes a comma-separated subset of {','.join(ROWS)}, got {args.rows!r}")
    if args.budget_s <= 0:
        p.error("--budget-s must be positive")
    if not args.smoke and not torch.cuda.is_available():
        print("benchmarks/gpu.py needs a CUDA device (none found); use --smoke for the CPU check", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.smoke else "cuda")
    sizes = smoke_sizes() if args.smoke else Sizes()
    if args.group is not None:
        if args.group != "auto" and not (args.group.isdigit() and int(args.group) >= 1):
            p.error(f"--group takes auto or a positive integer, got {args.group!r}")
        sizes.spectrum_group = args.group if args.group == "auto" else int(args.group)
    if args.surface_compile is not None:
        sizes.surface_options["compile"] = args.surface_compile
    reserve = min(25.0, 0.05 * args.budget_s)
    budget = Budget(args.budget_s, {r: WEIGHTS[r] for r in ROWS if r in chosen}, reserve_s=reserve)
    rows: list[Row] = []
    for name in ROWS:
        if name not in chosen:
            continue
        share = budget.share(name)
        try:
            rows.extend(RUNNERS[name](sizes, device, share))
        except Exception as exc:  # one failing row must not lose the others' numbers
            traceback.print_exc(file=sys.stderr)
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            rows.append(Row(name, "FAILED", notes=[message], failed=True))
        free(device)
    elapsed = budget.elapsed()
    header = (
        f"GPU benchmarks ({'smoke, ' if args.smoke else ''}{describe_device(device)}; torch {torch.__version__}; "
        f"{elapsed:.0f} s of a {args.budget_s:g} s budget)"
    )
    table = format_table(rows)
    print(header + "\n\n" + table, flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": "python benchmarks/gpu.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "device": describe_device(device),
            "torch": torch.__version__,
            "smoke": args.smoke,
            "budget_s": args.budget_s,
            "elapsed_s": elapsed,
            "rows": [r.as_dict() for r in rows],
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
