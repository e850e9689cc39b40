"""Loss-surface cost, measured in one run on one model, data set and grid.

(a) seconds per grid point / seconds of one bare eager forward over the same samples (goal <= 1.10 on CPU);
(b) `loss-landscapes` (PyPI, import loss_landscapes) time for the same number of grid points / ours, and
    whether its value at the centre agrees with ours;
(c) with --compile: the same with the per-point loss compiled by torch.compile (compile time reported apart);
(d) vectorised (vmap over k stacked points) vs loop, per point.

CPU (default): a CIFAR-style ResNet of about 90k parameters (resnet_mini with widths 16-24-32-64), 128
synthetic CIFAR-sized inputs (3x32x32) in one batch of 128, a 10 x 10 grid (even, so that loss-landscapes'
grid contains the centre). Run:  python benchmarks/surface.py [--threads 1] [--compile]

GPU (not run by the authors of this script: no GPU was available): ``--device cuda`` (or ``--large`` on any
device) times a 51 x 51 grid of
resnet50 (CIFAR stem) on 10,000 synthetic CIFAR-sized inputs in batches of 500, reports minutes for the
whole grid (extrapolated from --gpu-points points, or all of them with --full) and the vmap speed-up:
    python benchmarks/surface.py --device cuda [--full] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from landscape.directions import random_directions
from landscape.models import create_model
from landscape.objective import Objective
from landscape.surface import PointEvaluator, compute_surface


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up call."""
    fn()
    sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def make_problem(args, device):
    torch.manual_seed(0)
    if args.large:
        model = create_model("resnet50", num_classes=10)
    else:
        model = create_model("resnet_mini", num_classes=10, widths=(16, 24, 32, 64))
    model = model.to(device).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.samples, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.samples,), generator=g)
    batches = [
        (x[i : i + args.batch_size].to(device), y[i : i + args.batch_size].to(device))
        for i in range(0, args.samples, args.batch_size)
    ]
    return model, batches


def bare_forward(model, batches, device, repeats):
    def run():
        with torch.inference_mode():
            for x, _ in batches:
                model(x)

    return timed(run, device, repeats)


def bare_forward_once(model, batches):
    with torch.inference_mode():
        for x, _ in batches:
            model(x)


def ours(objective, dirs, xs, ys, out, **kw):
    """Whole compute_surface call and steady-state seconds per point (between the first and last rounds)."""
    stamps = []
    t0 = time.perf_counter()
    res = compute_surface(
        objective,
        dirs,
        xs,
        ys,
        out=out,
        progress=False,
        on_round=lambda d, t: stamps.append((d, time.perf_counter())),
        **kw,
    )
    total = time.perf_counter() - t0
    (d0, t_first), (d1, t_last) = stamps[0], stamps[-1]
    steady = (t_last - t_first) / max(1, d1 - d0)
    return res, total, steady


def peer(model, batches, steps):
    """loss-landscapes' random_plane on the same model and samples; filter normalisation, else model."""
    import loss_landscapes
    import loss_landscapes.metrics

    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    metric = loss_landscapes.metrics.Loss(F.cross_entropy, x, y)
    errors = []
    for norm in ("filter", "model"):
        try:
            t0 = time.perf_counter()
            with torch.no_grad():
                grid = loss_landscapes.random_plane(
                    model, metric, distance=1, steps=steps, normalization=norm, deepcopy_model=True
                )
            return np.asarray(grid), time.perf_counter() - t0, norm, "; ".join(errors)
        except Exception as exc:  # its filter normalisation divides by zero on BatchNorm ResNets
            errors.append(f"{norm} normalisation failed: {type(exc).__name__}: {exc}")
    return None, float("nan"), None, "; ".join(errors)


def peer_centre(grid, steps):
    """The entry of random_plane's grid at offset (0, 0): row m; column m (m odd) or m - 1 (m even), m = steps/2.

    Its rows alternate direction and even rows are shifted by one step (read from loss_landscapes.main).
    """
    m = steps // 2
    return float(grid[m, m if m % 2 else m - 1])


def cpu_main(args):
    device = torch.device("cpu")
    model, batches = make_problem(args, device)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model: CIFAR-style ResNet, {n_params} parameters; {args.samples} samples, batch {args.batch_size}; "
        f"grid {args.steps}x{args.steps}; threads {torch.get_num_threads()}"
    )
    objective = Objective(model, batches)
    dirs = random_directions(objective.params, ndim=2, seed=0)
    xs = ys = np.linspace(-1, 1, args.steps)
    n_points = args.steps**2
    t_fwd = bare_forward(model, batches, device, args.repeats)
    print(f"bare eager forward over the samples: {t_fwd * 1e3:.1f} ms")

    with tempfile.TemporaryDirectory() as tmp:
        res, total, steady = ours(objective, dirs, xs, ys, Path(tmp) / "a.h5", batch_points=1)
        t_fwd_after = bare_forward(model, batches, device, args.repeats)
        t_fwd = min(t_fwd, t_fwd_after)
        print(
            f"(a) ours, loop: {total:.2f} s for {n_points} points = {total / n_points * 1e3:.1f} ms/point "
            f"end to end ({steady * 1e3:.1f} ms/point steady)"
        )
        print(
            f"    ratio to a bare forward: {total / n_points / t_fwd:.3f} end to end, {steady / t_fwd:.3f} steady "
            f"(goal <= 1.10; bare forward re-measured after the run, min taken: {t_fwd * 1e3:.1f} ms)"
        )
        centre = objective.evaluate().loss
        ev = PointEvaluator(objective, dirs.x, dirs.y)
        ratios = []
        for k in range(args.pairs):  # adjacent pairs see the same machine load (this machine is shared)
            t_b = timed(lambda: bare_forward_once(model, batches), device, 1)
            t_p = timed(lambda k=k: ev.loop([(xs[k % len(xs)], ys[-1 - k % len(ys)])]), device, 1)
            ratios.append(t_p / t_b)
        print(
            f"    paired (bare forward, one grid point) x {args.pairs}: median ratio {statistics.median(ratios):.3f} "
            f"(quartiles {np.percentile(ratios, 25):.3f}..{np.percentile(ratios, 75):.3f})"
        )

        grid, t_peer, norm, error = peer(model, batches, args.steps)
        if grid is None:
            print(f"(b) loss-landscapes failed: {error}")
        else:
            their = peer_centre(grid, args.steps)
            print(
                f"(b) loss-landscapes random_plane ({norm} normalisation): {t_peer:.2f} s for {grid.size} points "
                f"= {t_peer / grid.size * 1e3:.1f} ms/point; theirs / ours = {t_peer / total:.2f}x"
            )
            if error:
                print(f"    ({error})")
            print(
                f"    centre: ours {centre:.7f}, theirs {their:.7f}, relative difference "
                f"{abs(their - centre) / abs(centre):.1e}"
            )

        evaluator = PointEvaluator(objective, dirs.x, dirs.y)
        pts = [(0.1 * i, -0.05 * i) for i in range(args.vmap_points)]
        t_loop = timed(lambda: evaluator.loop(pts), device, 2) / len(pts)
        t_vmap = timed(lambda: evaluator.vectorised(pts), device, 2) / len(pts)
        diff = np.abs(np.array(evaluator.loop(pts)) - np.array(evaluator.vectorised(pts)))[:, 0].max()
        print(
            f"(d) vmap over {len(pts)} points: {t_vmap * 1e3:.1f} ms/point vs loop {t_loop * 1e3:.1f} ms/point "
            f"(vmap speed-up {t_loop / t_vmap:.2f}x; max loss difference {diff:.1e}); auto picks "
            f"{evaluator.choose_batch_points()}"
        )

        if args.compile:
            t0 = time.perf_counter()
            ok = evaluator.enable_compile()
            t_compile = time.perf_counter() - t0
            if not ok:
                print(f"(c) torch.compile failed after {t_compile:.1f} s (eager fallback)")
            else:
                res_c, total_c, steady_c = ours(objective, dirs, xs, ys, Path(tmp) / "c.h5", compile=True)
                diff = np.abs(res_c["loss"] - res["loss"]).max() / np.abs(res["loss"]).max()
                print(
                    f"(c) compiled: {t_compile:.1f} s to compile (checked), then {total_c:.2f} s for {n_points} "
                    f"points ({steady_c * 1e3:.1f} ms/point steady, includes a warm re-compile check); ratio to a "
                    f"bare eager forward {steady_c / t_fwd:.3f}; max relative difference to eager {diff:.1e}"
                )
                if grid is not None:
                    print(f"    theirs / ours compiled (whole call) = {t_peer / total_c:.2f}x")


def large_main(args):
    device = torch.device(args.device)
    model, batches = make_problem(args, device)
    objective = Objective(model, batches)
    dirs = random_directions(objective.params, ndim=2, seed=0)
    steps = 51
    xs = ys = np.linspace(-1, 1, steps)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"resnet50 ({sum(p.numel() for p in model.parameters())} parameters) on {args.samples} CIFAR-sized "
        f"inputs, batch {args.batch_size}, {steps}x{steps} grid, {name}"
    )
    t_fwd = bare_forward(model, batches, device, 3)
    print(f"bare eager forward over the samples: {t_fwd:.3f} s")
    evaluator = PointEvaluator(objective, dirs.x, dirs.y)
    pts = [(0.02 * i, -0.02 * i) for i in range(args.vmap_points)]
    t_loop = timed(lambda: evaluator.loop(pts), device, 1) / len(pts)
    try:
        t_vmap = timed(lambda: evaluator.vectorised(pts), device, 1) / len(pts)
    except torch.cuda.OutOfMemoryError:
        t_vmap = float("inf")
        torch.cuda.empty_cache()
    print(
        f"loop {t_loop:.3f} s/point, vmap over {len(pts)} points {t_vmap:.3f} s/point: "
        f"vectorised speed-up {t_loop / t_vmap:.2f}x"
    )
    bp = len(pts) if t_vmap < t_loop else 1
    kw = {"batch_points": bp, "compile": args.compile}
    with tempfile.TemporaryDirectory() as tmp:
        if args.full:
            _, total, _ = ours(objective, dirs, xs, ys, Path(tmp) / "g.h5", **kw)
            print(
                f"51x51 grid: {total / 60:.1f} minutes ({total / steps**2:.3f} s/point, ratio to a bare forward "
                f"{total / steps**2 / t_fwd:.2f})"
            )
        else:
            sub = xs[: max(1, args.gpu_points // 2)]
            _, total, steady = ours(objective, dirs, sub, ys[:2], Path(tmp) / "g.h5", **kw)
            print(
                f"{2 * len(sub)} points: {steady:.3f} s/point steady -> 51x51 grid about "
                f"{steady * steps**2 / 60:.1f} minutes (ratio to a bare forward {steady / t_fwd:.2f})"
            )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--samples", type=int, default=None, help="default 128 on CPU, 10000 on CUDA")
    p.add_argument("--batch-size", type=int, default=None, help="default 128 on CPU, 500 on CUDA")
    p.add_argument("--steps", type=int, default=10, help="CPU grid is steps x steps (even)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--vmap-points", type=int, default=8)
    p.add_argument("--pairs", type=int, default=15, help="paired forward/point measurements")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the per-point loss")
    p.add_argument("--full", action="store_true", help="CUDA: run the whole 51x51 grid")
    p.add_argument(
        "--large", action="store_true", help="the resnet50 / 51x51 / 10,000-input benchmark (implied by --device cuda)"
    )
    p.add_argument("--gpu-points", type=int, default=20, help="CUDA: points timed when not --full")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.large = args.large or args.device == "cuda"
    gpu = args.large
    args.samples = args.samples or (10000 if gpu else 128)
    args.batch_size = args.batch_size or (500 if gpu else 128)
    if args.steps % 2:
        p.error("--steps must be even (loss-landscapes' grid holds the centre only then)")
    (large_main if gpu else cpu_main)(args)


if __name__ == "__main__":
    main()
