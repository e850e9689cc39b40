"""Loss-surface cost, measured in one run on one model, data set and grid.

(a) seconds per grid point / seconds of one bare eager forward over the same samples (goal <= 1.10 on CPU);
(b) `loss-landscapes` (PyPI, import loss_landscapes) time for the same number of grid points / ours, and
    whether its value at the centre agrees with ours;
(c) with --compile [on|auto]: the whole compute_surface call with the per-point loss compiled by torch.compile,
    compile included (its seconds, read from the file's compile_decision, reported apart);
(d) vectorised (vmap over k stacked points) vs loop, per point;
(e) Li et al.'s per-point loop on the same samples and directions: a faithful minimal re-implementation, in this
    script, of the loop of the original loss-landscape code (github.com/tomgoldstein/loss-landscape: set the
    model's weights in place to theta + x*d1 + y*d2 with p.data.copy_, then a plain model(x) under no_grad over
    the batches);
(goals) with --compile: per point compiled <= 0.6x a bare eager forward; the whole grid, compile included, >= 1.3x
    faster than loss-landscapes and than Li et al.; a run with a warm compile cache (the same command run a second
    time) >= 1.5x faster than loss-landscapes. A goal not met is printed with a profile of a compiled point.

Ours evaluates every point with the model's eval-mode BatchNorms folded into the convolutions (bn_folded) and with
channels-last inputs when that measured faster (channels_last); both are recorded in the file.

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
import copy
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.evaluator import PointEvaluator
from landscape.analyses.surface.run import compute_surface
from landscape.core.objective import Objective
from landscape.models import create_model
from landscape.runtime import compile_cache


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


def li_et_al(model, batches, dirs, xs, ys):
    """Li et al.'s per-point loop, re-implemented here (not their code) from loss-landscape's plot_surface.crunch,
    net_plotter.set_weights and evaluation.eval_loss: for each grid point the weights of one model are set in place
    to theta + x*d1 + y*d2 (``p.data.copy_``), then the loss is summed over the batches with a plain ``net(x)`` under
    ``torch.no_grad()`` (cross-entropy times batch size, arg-max accuracy). Returns the (ny, nx) losses and seconds.
    """
    net = copy.deepcopy(model).eval()
    names = [n for n, _ in net.named_parameters()]
    weights = [p.data.clone() for p in net.parameters()]
    d1 = [dirs.x[n].to(weights[k].dtype) for k, n in enumerate(names)]
    d2 = [dirs.y[n].to(weights[k].dtype) for k, n in enumerate(names)]
    criterion = torch.nn.CrossEntropyLoss()
    losses = np.empty((len(ys), len(xs)))
    t0 = time.perf_counter()
    for j, b in enumerate(ys):
        for i, a in enumerate(xs):
            for p, w, u, v in zip(net.parameters(), weights, d1, d2):
                p.data.copy_(w + float(a) * u + float(b) * v)
            total_loss, correct, total = 0.0, 0, 0
            with torch.no_grad():
                for x, y in batches:
                    out = net(x)
                    total_loss += criterion(out, y).item() * x.size(0)
                    total += x.size(0)
                    correct += out.data.max(1)[1].eq(y).sum().item()
            losses[j, i] = total_loss / total
    return losses, time.perf_counter() - t0


def top_ops(fn, calls=3, rows=6):
    """The ``rows`` operators with the most self CPU time over ``calls`` calls of ``fn`` (torch.profiler), as text."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    text = "; ".join(
        f"{e.key} {e.self_cpu_time_total / calls / 1e3:.1f} ms ({100 * e.self_cpu_time_total / total:.0f}%)"
        for e in events[:rows]
    )
    return text, {e.key: e.self_cpu_time_total / calls / 1e6 for e in events}


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
        f"grid {args.steps}x{args.steps}; threads {torch.get_num_threads()}; "
        f"cache {compile_cache.cache_dir()}"
    )
    objective = Objective(model, batches)
    dirs = random_directions(objective.params, ndim=2, seed=0)
    xs = ys = np.linspace(-1, 1, args.steps)
    n_points = args.steps**2
    t_fwd = bare_forward(model, batches, device, args.repeats)
    print(f"bare eager forward over the samples: {t_fwd * 1e3:.1f} ms")

    with tempfile.TemporaryDirectory() as tmp:
        res, total, steady = ours(objective, dirs, xs, ys, Path(tmp) / "a.h5", batch_points=1, compile="off")
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
        ev.enable_fold()  # as compute_surface evaluates a point (BatchNorm folded, channels-last when faster)
        ev.choose_memory_format()
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
            print(
                f"(b) loss-landscapes random_plane ({norm} normalisation): {t_peer:.2f} s for {grid.size} points "
                f"= {t_peer / grid.size * 1e3:.1f} ms/point; theirs / ours = {t_peer / total:.2f}x"
            )
            if error:
                print(f"    ({error})")
            if args.steps % 2 == 0:
                their = peer_centre(grid, args.steps)
                print(
                    f"    centre: ours {centre:.7f}, theirs {their:.7f}, relative difference "
                    f"{abs(their - centre) / abs(centre):.1e}"
                )
            else:
                print("    (an odd --steps puts no grid point of theirs at the centre: centre not compared)")

        li, t_li = li_et_al(model, batches, dirs, xs, ys)
        li_diff = np.abs(li - res["data_loss"]).max() / np.abs(res["data_loss"]).max()
        print(
            f"(e) Li et al.'s loop (re-implemented here): {t_li:.2f} s for {li.size} points = "
            f"{t_li / li.size * 1e3:.1f} ms/point; theirs / ours = {t_li / total:.2f}x; max relative difference "
            f"to our surface (same directions) {li_diff:.1e}"
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
            probe = PointEvaluator(objective, dirs.x, dirs.y)
            probe.enable_fold()
            before = compile_cache.read_record(probe.compile_key())
            res_c, total_c, steady_c = ours(objective, dirs, xs, ys, Path(tmp) / "c.h5", compile=args.compile)
            d = res_c.attrs["compile_decision"]
            diff = np.abs(res_c["loss"] - res["loss"]).max() / np.abs(res["loss"]).max()
            cache = "cold" if before is None else f"warm ({before.n_compiles} compile(s) recorded before)"
            print(
                f"(c) compile {args.compile}: compiled {res_c.attrs['compiled']}, cache {cache}, "
                f"{d.get('compile_s', 0.0):.1f} s to compile (checked), {total_c:.2f} s for {n_points} points "
                f"compile included ({steady_c * 1e3:.1f} ms/point steady); steady ratio to a bare eager forward "
                f"{steady_c / t_fwd:.3f}; BatchNorms folded {res_c.attrs['bn_folded']}; max relative difference "
                f"to eager {diff:.1e}"
            )
            print(f"    decision: {d}")
            goals(args, objective, dirs, model, batches, t_fwd, steady_c, total_c, t_peer, t_li, before, res_c)


def goals(args, objective, dirs, model, batches, t_fwd, steady_c, total_c, t_peer, t_li, before, res_c):
    """Print each goal as met / not met with the measured numbers; with a profile where one is not met."""

    def line(name, value, goal, met):
        print(f"    {name}: {value:.2f}x (goal {goal}) {'MET' if met else 'NOT MET'}")
        return met

    ev = PointEvaluator(objective, dirs.x, dirs.y)
    ev.enable_fold()
    ev.enable_compile()  # warm in this process: not timed
    ratios = []
    for k in range(args.pairs):  # adjacent pairs see the same machine load (this machine is shared)
        t_b = timed(lambda: bare_forward_once(model, batches), torch.device("cpu"), 1)
        t_p = timed(lambda k=k: ev.loop([(0.05 * k, -0.03 * k)]), torch.device("cpu"), 1)
        ratios.append(t_p / t_b)
    paired = statistics.median(ratios)
    print("(goals)")
    print(
        f"    paired (bare forward, one compiled point) x {args.pairs}: median {paired:.3f} (quartiles "
        f"{np.percentile(ratios, 25):.3f}..{np.percentile(ratios, 75):.3f}); whole-run steady {steady_c / t_fwd:.3f}"
    )
    ok1 = line("per point compiled / bare eager forward (paired median)", paired, "<= 0.60", paired <= 0.6)
    ok2 = t_peer == t_peer and line(
        f"{args.steps}x{args.steps} compile included: loss-landscapes / ours",
        t_peer / total_c,
        ">= 1.3",
        t_peer / total_c >= 1.3,
    )
    ok3 = line(
        f"{args.steps}x{args.steps} compile included: Li et al. / ours", t_li / total_c, ">= 1.3", t_li / total_c >= 1.3
    )
    if before is None:
        print("    warm-cache goal (>= 1.5x loss-landscapes): this run compiled cold; run the same command again")
        ok4 = True
    else:
        ok4 = line("warm cache: loss-landscapes / ours", t_peer / total_c, ">= 1.5", t_peer / total_c >= 1.5)
    if not (ok1 and ok2 and ok3 and ok4):
        d = res_c.attrs["compile_decision"]
        print(
            f"    why (measured): compile {d.get('compile_s', 0.0):.1f} s of the {total_c:.1f} s; "
            f"{args.steps**2} points x {steady_c * 1e3:.1f} ms = {args.steps**2 * steady_c:.1f} s"
        )
        text_c, ops_c = top_ops(lambda: ev.loop([(0.1, 0.2)]))
        text_b, _ = top_ops(lambda: bare_forward_once(model, batches))
        print(f"    profile of a compiled point: {text_c}")
        print(f"    profile of a bare eager forward: {text_b}")
        conv = ops_c.get("aten::mkldnn_convolution", 0.0)
        if conv:
            n = args.steps**2
            print(
                f"    bound: the compiled point's convolutions alone take {conv * 1e3:.1f} ms = {conv / t_fwd:.2f}x "
                f"the bare forward; with nothing else per point the grid would take {n * conv:.1f} s + compile "
                f"{d.get('compile_s', 0.0):.1f} s, {t_peer / (n * conv + d.get('compile_s', 0.0)):.2f}x faster than "
                "loss-landscapes"
            )


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
    kw = {"batch_points": bp, "compile": args.compile or "off"}
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
    p.add_argument("--steps", type=int, default=10, help="CPU grid is steps x steps (even: the centre is compared)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--vmap-points", type=int, default=8)
    p.add_argument("--pairs", type=int, default=15, help="paired forward/point measurements")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument(
        "--compile",
        nargs="?",
        const="on",
        default=None,
        choices=["on", "auto"],
        help="also time a compiled run (--compile alone: on) and check the goals",
    )
    p.add_argument("--cache-dir", default=None, help="LANDSCAPE_CACHE_DIR for this run (compile records, kernels)")
    p.add_argument("--full", action="store_true", help="CUDA: run the whole 51x51 grid")
    p.add_argument(
        "--large", action="store_true", help="the resnet50 / 51x51 / 10,000-input benchmark (implied by --device cuda)"
    )
    p.add_argument("--gpu-points", type=int, default=20, help="CUDA: points timed when not --full")
    args = p.parse_args()
    if args.cache_dir:
        os.environ["LANDSCAPE_CACHE_DIR"] = args.cache_dir
    if args.threads:
        torch.set_num_threads(args.threads)
    args.large = args.large or args.device == "cuda"
    gpu = args.large
    args.samples = args.samples or (10000 if gpu else 128)
    args.batch_size = args.batch_size or (500 if gpu else 128)
    (large_main if gpu else cpu_main)(args)


if __name__ == "__main__":
    main()
