"""Loss-surface speed against the peers, whole grids measured side by side in one run, every goal printed.

For each model (``--models``: the CIFAR-style ResNet of about 90k parameters, ``resnet``: resnet_mini with widths
16-24-32-64; ``vit``: vit_mini, about 255k parameters) on ``--samples`` synthetic CIFAR-sized inputs (3x32x32, one
batch of 128 by default) and each square grid (``--grids``, default 3, 10 and 51 points a side over [-1, 1]^2), a
round times, one after the other and each whole, from the model and the batches to the surface:

- ``plain``: ours as the plain loop, ``compile="off", batch_points=1`` (the Objective, the directions and
  ``compute_surface``, BatchNorm folded and the layout chosen as every run does);
- ``auto cold``: ours with the defaults (``compile="auto", batch_points="auto"``) and an empty cache folder
  (``LANDSCAPE_CACHE_DIR``, inductor's kernels included): whatever it chooses to try (a vmap trial, exporting and
  building a compiled package) is counted;
- ``auto warm``: the same with the cache folder a first compiled run of the model left (``compile="on"`` on a
  2x2 grid, timed once per model from an empty cache and printed: its package and record);
- ``loss-landscapes``: its ``random_plane`` (PyPI ``loss-landscapes``; filter normalisation, else model
  normalisation where that crashes on BatchNorm, as it does on the ResNet);
- ``Li et al.``: their per-point loop, re-implemented in this script from the original code
  (github.com/tomgoldstein/loss-landscape: the model's weights set in place to theta + x d1 + y d2 with
  ``p.data.copy_``, then ``model(x)`` under ``no_grad`` over the batches), along our directions.

Each of our runs starts as a fresh process would: the per-process memory of the measured layout is cleared.
With ``--rounds R`` the rounds alternate the order of the ways (odd rounds reversed, so that a machine drifting
through the run weighs on every way alike) and the medians count. Wall seconds are printed with the CPU seconds
of the process and its children (a package is built in a child process; ``--clock cpu`` compares those, for a
loaded machine, where wall seconds measure the load), and the goals of issue 45:

- goal 4: ``auto`` / ``plain`` <= 1.25 on every grid, cold and warm;
- goal 5: the peers / ``auto warm`` >= 1.3 on every grid, and the peers / ``auto cold`` >= 1.3 on every grid
  where the cold run compiled and on the largest grid;
- agreement: the largest relative difference of each of our surfaces to ``plain`` (the compiled package is checked
  against eager to 1e-4 before use) and of ``plain`` to Li et al.'s loop.

Run:  python benchmarks/surface.py [--models resnet vit] [--grids 10 51] [--rounds 1] [--samples 128]
      python benchmarks/surface.py --quick      (a smoke test: 2x2 and 3x3 grids, 16 samples, nothing compiled)
      python benchmarks/surface.py --breakdown [--rounds 5]   (a point eager, compiled and compiled without the
                                                               rows pushed up, and the eager forward's operator
                                                               time by group: what no evaluation avoids)

GPU (not run by the authors of this script: no GPU was available): ``--device cuda`` (or ``--large`` on any
device) times a 51 x 51 grid of resnet50 (CIFAR stem) on 10,000 synthetic CIFAR-sized inputs in batches of 500,
reports minutes for the whole grid (extrapolated from --gpu-points points, or all of them with --full) and the
vmap speed-up:  python benchmarks/surface.py --device cuda [--full] [--compile]
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import resource
import shutil
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
from landscape.core import forward
from landscape.core.objective import Objective
from landscape.models import create_model
from landscape.options import checks

MODELS = {"resnet": ("resnet_mini", {"widths": (16, 24, 32, 64)}), "vit": ("vit_mini", {})}
#: goal 4: auto's whole grid at most this many times the plain loop's
AUTO_BOUND = 1.25
#: why a peer's row is empty where its package is missing
NOT_INSTALLED = "loss-landscapes is not installed: pip install -e '.[bench]'"
#: goal 5: the peers' whole grid at least this many times ours
PEER_GOAL = 1.3


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


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its children that have ended."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def make_problem(args, device, name="resnet"):
    torch.manual_seed(0)
    if args.large:
        model = create_model("resnet50", num_classes=10)
    else:
        zoo, kwargs = MODELS[name]
        model = create_model(zoo, num_classes=10, **kwargs)
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


def whole_ours(model, batches, steps, folder: Path, name: str, **kw):
    """Ours from the model and batches to the surface: (wall s, CPU s, result, seconds of the Objective alone)."""
    forward._LAYOUTS.clear()  # as a fresh process: the layout is measured again
    xs = np.linspace(-1, 1, steps)
    c0, t0 = cpu_seconds(), time.perf_counter()
    objective = Objective(model, batches, determinism="loss")  # as landscape.surface builds it for these directions
    built = time.perf_counter() - t0
    dirs = random_directions(objective.params, ndim=2, seed=0)
    res = compute_surface(objective, dirs, xs, xs, out=folder / f"{name}.h5", progress=False, **kw)
    return time.perf_counter() - t0, cpu_seconds() - c0, res, built


def with_cache(folder: Path):
    """Point landscape's cache folder (compile records, packages) and inductor's kernels at ``folder``."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ["LANDSCAPE_CACHE_DIR"] = str(folder)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder / "inductor")


def peer(model, batches, steps):
    """loss-landscapes' random_plane on the same model and samples; filter normalisation, else model.

    Returns (grid, seconds, normalisation, errors); grid None and seconds NaN where it did not run (not installed:
    ``pip install -e ".[bench]"``).
    """
    try:
        import loss_landscapes
        import loss_landscapes.metrics
    except ImportError:
        return None, float("nan"), None, NOT_INSTALLED

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


def seconds_or_dash(seconds: float) -> str:
    """Seconds to two decimals for the table, or "-" where the way did not run."""
    return "-" if math.isnan(seconds) else f"{seconds:.2f}"


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


def way(res) -> str:
    """How a surface's points were evaluated, from its file."""
    if res.attrs["compiled"]:
        return "compiled"
    bp = int(res.attrs["batch_points"])
    return f"vmap x{bp}" if bp > 1 else "eager"


def build_warm_cache(model, batches, folder: Path) -> tuple[float, str]:
    """Fill ``folder`` as a first compiled run would: ``compile="on"`` on a 2x2 grid (its package and record)."""
    with_cache(folder)
    seconds, _, res, _ = whole_ours(model, batches, 2, folder, "build", compile="on", batch_points=1)
    return seconds, way(res)


def one_round(model, batches, steps, tmp: Path, warm_cache: Path, k: int) -> dict:
    """One round on one model and grid: every way timed whole, one after the other (odd rounds in reverse order)."""
    row: dict = {}
    xs = np.linspace(-1, 1, steps)
    objective = Objective(model, batches)
    dirs = random_directions(objective.params, ndim=2, seed=0)
    out: dict = {}

    def plain():
        with_cache(tmp / f"unused{k}")
        row["plain"], row["plain_cpu"], out["plain"], row["objective"] = whole_ours(
            model, batches, steps, tmp, f"plain{k}", compile="off", batch_points=1
        )

    def loss_landscapes():
        c0 = cpu_seconds()
        out["grid"], row["ll"], row["ll_norm"], row["ll_error"] = peer(model, batches, steps)
        row["ll_cpu"] = cpu_seconds() - c0

    def li():
        c0 = cpu_seconds()
        out["li"], row["li"] = li_et_al(model, batches, dirs, xs, xs)
        row["li_cpu"] = cpu_seconds() - c0

    def cold():
        with_cache(tmp / f"cold{k}")  # empty
        row["cold"], row["cold_cpu"], out["cold"], _ = whole_ours(model, batches, steps, tmp, f"cold{k}")

    def warm():
        with_cache(warm_cache)
        row["warm"], row["warm_cpu"], out["warm"], _ = whole_ours(model, batches, steps, tmp, f"warm{k}")

    ways = [plain, loss_landscapes, li, cold, warm]
    for run in ways if k % 2 == 0 else ways[::-1]:
        run()
    ref = out["plain"]["data_loss"]
    scale = np.abs(ref).max()
    cold_file, warm_file = out["cold"], out["warm"]
    row["cold_way"], row["warm_way"] = way(cold_file), way(warm_file)
    row["cold_setup"] = cold_file.attrs["compile_decision"].get("setup_s", 0.0)
    row["warm_setup"] = warm_file.attrs["compile_decision"].get("setup_s", 0.0)
    row["cold_reason"] = cold_file.attrs["compile_decision"].get("reason", "")
    row["warm_reason"] = warm_file.attrs["compile_decision"].get("reason", "")
    row["diff"] = max(np.abs(cold_file["data_loss"] - ref).max(), np.abs(warm_file["data_loss"] - ref).max()) / scale
    row["li_diff"] = np.abs(out["li"] - ref).max() / scale
    if out["grid"] is not None and steps % 2 == 0:
        centre = float(objective.evaluate().data_loss)
        row["ll_centre"] = abs(peer_centre(out["grid"], steps) - centre) / abs(centre)
    return row


def peer_centre(grid, steps):
    """The entry of random_plane's grid at offset (0, 0): row m; column m (m odd) or m - 1 (m even), m = steps/2.

    Its rows alternate direction and even rows are shifted by one step (read from loss_landscapes.main).
    """
    m = steps // 2
    return float(grid[m, m if m % 2 else m - 1])


def cpu_main(args):
    device = torch.device("cpu")
    print(
        f"{args.samples} synthetic 3x32x32 samples in batches of {args.batch_size}; torch threads "
        f"{torch.get_num_threads()}; torch {torch.__version__}, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}; grids {', '.join(f'{g}x{g}' for g in args.grids)}; "
        f"{args.rounds} round(s)"
    )
    header = (
        f"{'model':<8}{'grid':>7}{'plain':>9}{'l-l':>9}{'Li':>9}{'cold':>9}{'warm':>9}  "
        f"{'cold way':<10}{'warm way':<10}{'set-up cold/warm s':>19}  {'diff':>8}"
    )
    goals = []
    table = []
    for name in args.models:
        model, batches = make_problem(args, device, name)
        n_params = sum(p.numel() for p in model.parameters())
        t_fwd = bare_forward(model, batches, device, 3)
        print(f"{name}: {MODELS[name][0]}, {n_params} parameters; a bare eager forward {t_fwd * 1e3:.1f} ms")
        warm_cache = Path(tempfile.mkdtemp(prefix="landscape-bench-cache-"))
        if args.quick:
            print("    the warm cache: left empty (--quick builds nothing)")
        else:
            seconds, built = build_warm_cache(model, batches, warm_cache)
            print(f"    the warm cache: compile='on' on a 2x2 grid took {seconds:.1f} s ({built}), from an empty cache")
        for steps in args.grids:
            rows = []
            for k in range(args.rounds):
                with tempfile.TemporaryDirectory() as tmp:
                    rows.append(one_round(model, batches, steps, Path(tmp), warm_cache, k))
            med = {key: statistics.median(r[key] for r in rows) for key in rows[0] if isinstance(rows[0][key], float)}
            last = rows[-1]
            table.append(
                f"{name:<8}{steps:>4}x{steps:<2}{med['plain']:>9.2f}{seconds_or_dash(med['ll']):>9}{med['li']:>9.2f}"
                f"{med['cold']:>9.2f}{med['warm']:>9.2f}  {last['cold_way']:<10}{last['warm_way']:<10}"
                f"{med['cold_setup']:>9.2f}/{med['warm_setup']:<9.2f}  {med['diff']:>8.1e}"
            )
            print(table[-1], flush=True)
            if last["ll_error"]:
                ran = f"; ran with {last['ll_norm']} normalisation" if last["ll_norm"] else ""
                print(f"    (loss-landscapes: {last['ll_error']}{ran})")
            centre = f", loss-landscapes' centre {med['ll_centre']:.1e}" if "ll_centre" in med else ""
            print(
                f"    CPU s: plain {med['plain_cpu']:.1f}, l-l {med['ll_cpu']:.1f}, Li {med['li_cpu']:.1f}, "
                f"cold {med['cold_cpu']:.1f}, warm {med['warm_cpu']:.1f}; the Objective (in each of ours) "
                f"{med['objective']:.2f} s; decisions: cold {last['cold_reason']!r}, warm {last['warm_reason']!r}; "
                f"relative differences to plain: Li et al. {med['li_diff']:.1e}{centre}"
            )

            def ratio(a: str, b: str, rows: list[dict] = rows) -> float:
                suffix = "_cpu" if args.clock == "cpu" else ""
                return statistics.median(r[a + suffix] / r[b + suffix] for r in rows)

            where = f"{name} {steps}x{steps}"
            for cache in ("cold", "warm"):
                goals.append((f"4: {where}, auto {cache} / plain", ratio(cache, "plain"), f"<= {AUTO_BOUND}", "le"))
            for peer_key, peer_name in (("ll", "loss-landscapes"), ("li", "Li et al.")):
                goals.append((f"5: {where}, {peer_name} / auto warm", ratio(peer_key, "warm"), f">= {PEER_GOAL}", "ge"))
                cold_applies = last["cold_way"] == "compiled" or steps == max(args.grids)
                goals.append(
                    (
                        f"5: {where}, {peer_name} / auto cold",
                        ratio(peer_key, "cold"),
                        f">= {PEER_GOAL}" if cold_applies else "(information: the cold run judged a build not to pay)",
                        "ge" if cold_applies else "",
                    )
                )
        shutil.rmtree(warm_cache, ignore_errors=True)
    print()
    print("whole grids, wall seconds (medians over the rounds); ways chosen and set-up seconds of the last round")
    print(header)
    for line in table:
        print(line)
    print()
    print(f"goals ({args.clock} seconds; ratios: medians over the rounds of each round's ratio)")
    for what, value, goal, sense in goals:
        if math.isnan(value):
            print(f"  goal {what}: not measured ({NOT_INSTALLED})")
            continue
        verdict = (
            ""
            if not sense
            else ("MET" if (value <= AUTO_BOUND if sense == "le" else value >= PEER_GOAL) else "NOT MET")
        )
        print(f"  goal {what}: {value:.2f}x {goal} {verdict}".rstrip())


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


#: what the forward's time is spent on: torch.profiler's operator names, grouped
OP_GROUPS = {
    "matrix products": ("aten::addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::matmul"),
    "convolutions": ("aten::mkldnn_convolution", "aten::convolution", "aten::_convolution", "aten::conv2d"),
    "attention (fused)": ("aten::_scaled_dot_product_flash_attention_for_cpu",),
    "softmax": ("aten::_softmax", "aten::softmax"),
}


def breakdown_main(args):
    """Where one point's time goes: a profiled forward of each model per operator group, eager and compiled.

    The ways are timed in interleaved rounds (each round one point of each way, after a warm-up call), the
    medians printed.

    The eager forward is the plain loop's (BatchNorm folded, the layout chosen); the compiled one the package that
    ``compile="on"`` builds (into a temporary cache folder), beside the package of the whole graph (built without
    the rows the loss reads pushed up, :func:`landscape.runtime.row_pushdown.push_rows_up`). Each group's share of
    the forward's self time is printed, with the seconds per point, and the matrix products' share says how much of
    a point no evaluation of the same forward can remove.
    """
    from torch.profiler import profile

    device = torch.device("cpu")
    for name in args.models:
        model, batches = make_problem(args, device, name)
        with tempfile.TemporaryDirectory() as tmp:
            with_cache(Path(tmp))
            objective = Objective(model, batches, determinism="loss")
            dirs = random_directions(objective.params, ndim=2, seed=0)
            evaluator = PointEvaluator(objective, dirs.x, dirs.y)
            evaluator.tune()
            ways = [("eager", evaluator)]
            compiled = PointEvaluator(objective, dirs.x, dirs.y)
            res = compute_surface(
                objective,
                dirs,
                [0.0, 0.1],
                [0.0, 0.1],
                out=Path(tmp) / "c.h5",
                progress=False,
                compile="on",
                batch_points=1,
            )
            if res.attrs["compiled"]:
                from landscape.runtime import packages

                compiled.tune()
                key = compiled.compile_key()
                runner = packages.load_package(key, packages.cached_package(key), device)
                if runner is not None and compiled.use_package(runner, unfolded=True):
                    ways.append(("compiled", compiled))
                whole = PointEvaluator(objective, dirs.x, dirs.y)  # the same package without the rows pushed up
                whole.tune()
                program = Path(tmp) / "whole.pt2"
                whole.export(program, narrow_rows=False)
                built = packages.build_package(program, key + "-whole", threads=torch.get_num_threads())
                runner = None if built.path is None else packages.load_package(key + "-whole", built.path, device)
                if runner is not None and whole.use_package(runner, unfolded=True):
                    ways.append(("whole graph", whole))
            samples: dict = {way: [] for way, _ in ways}
            for _ in range(args.rounds):  # the ways interleaved, so that each round sees one phase of the machine
                for way, ev in ways:
                    samples[way].append(timed(lambda ev=ev: ev.loop([(0.1, 0.2)]), device, 1))
            walls = {way: statistics.median(times) for way, times in samples.items()}
            with profile() as prof:  # the eager forward's operators (a package's kernels are not seen by it)
                for _ in range(args.rounds):
                    evaluator.loop([(0.1, 0.2)])
            events = prof.key_averages()
            total = sum(e.self_cpu_time_total for e in events)
            shares = {
                g: sum(e.self_cpu_time_total for e in events if e.key in ops) / total for g, ops in OP_GROUPS.items()
            }
            parts = ", ".join(f"{g} {100 * v:.0f}%" for g, v in shares.items() if v > 0)
            compiled_part = (
                f"; compiled {walls['compiled'] * 1e3:.1f} ms ({walls['compiled'] / walls['eager']:.2f}x eager"
                + (
                    f", {statistics.median(np.divide(samples['compiled'], samples['whole graph'])):.2f}x the whole "
                    "graph's package (the median of the rounds' ratios): "
                    f"{walls['whole graph'] * 1e3:.1f} ms, {res.attrs['compile_decision'].get('rows_narrowed')} "
                    "operators narrowed to the rows read)"
                    if "whole graph" in walls
                    else ")"
                )
                if "compiled" in walls
                else "; compiled: the package was not built"
            )
            print(
                f"{name}: a point (wall, median of {args.rounds}) eager {walls['eager'] * 1e3:.1f} ms{compiled_part}; "
                f"the eager forward's operator time: {parts}, the rest {100 * (1 - sum(shares.values())):.0f}%"
            )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--grids", type=checks.positive_argument, nargs="+", default=[3, 10, 51], help="points a side")
    p.add_argument("--rounds", type=checks.positive_argument, default=1, help="alternating rounds (medians count)")
    p.add_argument("--samples", type=checks.positive_argument, default=None, help="default 128 on CPU, 10000 on CUDA")
    p.add_argument("--batch-size", type=checks.positive_argument, default=None, help="default 128 on CPU, 500 on CUDA")
    p.add_argument("--threads", type=checks.positive_argument, default=1, help="torch intra-op threads")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="the seconds the goals compare: wall (default), or CPU of the process and its children (on a loaded "
        "machine, where wall seconds measure the load)",
    )
    p.add_argument("--quick", action="store_true", help="smoke test: grids 2 and 3, 16 samples, nothing compiled")
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="where a point's time goes: the operators of a profiled forward by group, eager and compiled",
    )
    p.add_argument("--vmap-points", type=int, default=8)
    p.add_argument("--compile", nargs="?", const="on", default=None, choices=["on", "auto"], help="GPU: compile")
    p.add_argument("--full", action="store_true", help="CUDA: run the whole 51x51 grid")
    p.add_argument(
        "--large", action="store_true", help="the resnet50 / 51x51 / 10,000-input benchmark (implied by --device cuda)"
    )
    p.add_argument("--gpu-points", type=int, default=20, help="CUDA: points timed when not --full")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    args.large = args.large or args.device == "cuda"
    gpu = args.large
    if args.quick:
        args.grids, args.samples, args.rounds = [2, 3], args.samples or 16, 1
    args.samples = args.samples or (10000 if gpu else 128)
    args.batch_size = args.batch_size or (500 if gpu else 128)
    if args.breakdown:
        return breakdown_main(args)
    (large_main if gpu else cpu_main)(args)


if __name__ == "__main__":
    main()
