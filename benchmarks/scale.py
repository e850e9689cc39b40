"""How the costs grow with the model: time per surface point, per HVP, per sharpness draw, peak memory, file size.

For each model (random init, eval mode, a few synthetic images in one batch, CPU unless ``--device``), each in a
process of its own: the seconds per point of a 2 x 2 surface (eager, one point at a time, default
``--store-directions seed``), the least seconds of three Hessian-vector products (``--hvp auto``, its choice of
way measured before and not counted), the seconds per noise draw of average sharpness (4 draws, its forward tuned
once as the analysis tunes it), the process's peak resident memory (``VmHWM``) and the surface file's size, against
the parameter count (:data:`MAX_IMAGES` caps the images of a model too large for more). Prints a table, then each
cost per parameter and image (the slope) and the exponent of a least-squares fit ``cost ~ (params *
images)^b`` over the models at the largest input side (b = 1: linear).

    python benchmarks/scale.py --smoke    # the zoo's minis, 2 images each (under a minute on 2 cores)
    python benchmarks/scale.py            # + torchvision resnet18 and resnet50 at 224 x 224, 4 images
    python benchmarks/scale.py --full     # + torchvision resnet152, vit_b_16 and vit_l_16 (1 image: about 10 GB)
    python benchmarks/scale.py --memory   # peak memory per analysis against its points (resnet_mini, resnet18)
    python benchmarks/scale.py --finite-difference   # central-difference products of vit_b_16 and vit_l_16, 1-4 images
    python benchmarks/scale.py --fd-smoke   # the same code on the zoo's vit_mini, 1 and 2 images

``--memory`` runs each analysis (a surface of P points, P average-sharpness draws, a connect line of P points)
in its own process, for each P of ``--points``, and reports what the analysis adds to the process's peak
resident memory over the memory held once the model, the objective and the directions (or the second network)
are built, in parameter bytes: flat in P when a point allocates no copy of the parameters of its own.

``--finite-difference`` measures the Hessian's central-difference products (``--hvp finite-difference``, the step
measured at the point: docs/analyses.md) of torchvision's ``vit_b_16`` and ``vit_l_16`` at 1, 2 and 4 random
3 x 224 x 224 images (:data:`FD_MAX_IMAGES` caps a model too large for more), each in a process of its own: the
seconds of a gradient, of the step's measurement and of a product (the least of three, on random unit vectors),
the process's peak memory (``VmHWM``, or the GPU's peak
allocation) while only those were made, and, where exact products fit (:data:`EXACT_IMAGES`), the seconds and peak
of a kept-graph product (``graph``) and the relative error of the central difference against it, along the start
vector ``s`` Lanczos would take (the gradient's direction plus a Gaussian vector: it sees the top curvature) and
along random unit vectors, both relative to ``||H s||`` (a random vector's own ``||H v||`` is far smaller).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from landscape.analyses.connect.evaluate import evaluate_path
from landscape.analyses.connect.path import Endpoint
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.sharpness.measures import average_sharpness
from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.run import compute_surface
from landscape.core.forward import EvalForward
from landscape.core.objective import Objective
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.options import checks
from landscape.runtime.distributed import resolve_device

#: (model spec, input side) by mode; each mode adds to the one before
SMOKE = [("resnet_mini", 32), ("vit_mini", 32), ("alternet_mini", 32)]
DEFAULT = [("torchvision:resnet18", 224), ("torchvision:resnet50", 224)]
FULL = [("torchvision:resnet152", 224), ("torchvision:vit_b_16", 224), ("torchvision:vit_l_16", 224)]
#: images per model at most, where more do not fit this machine's 24 GiB: vit_l_16's kept-graph HVP at 4 images of
#: 224 x 224 was killed for memory; at 1 image its peak is about 10 GB
MAX_IMAGES = {"torchvision:vit_l_16": 1}
#: sharpness noise draws timed per model
DRAWS = 4
#: (model spec, input side) of ``--finite-difference``, and of its ``--smoke``
FD_MODELS = [("torchvision:vit_b_16", 224), ("torchvision:vit_l_16", 224)]
FD_SMOKE = [("vit_mini", 32)]
#: images of ``--finite-difference`` (``--smoke``: 1 and 2)
FD_IMAGES = (1, 2, 4)
#: the most images at which exact (kept-graph) products are compared: vit_l_16's at 4 images were killed for
#: memory here (24 GiB); at 1 the process's peak was 19.5 GB, so 2 are not tried
EXACT_IMAGES = {"torchvision:vit_l_16": 1}
#: the most images of ``--finite-difference`` per model: vit_l_16's central differences at 4 images were killed for
#: memory here (24 GiB), at 2 their peak was 21.5 GB
FD_MAX_IMAGES = {"torchvision:vit_l_16": 2}
#: (model spec, input side) of ``--memory``
MEMORY = [("resnet_mini", 32), ("torchvision:resnet18", 64)]
#: the analyses ``--memory`` runs, each in its own process
ANALYSES = ("surface", "sharpness", "connect")


def measure(spec: str, side: int, images: int, device: str, folder: Path) -> dict[str, float]:
    """The costs of one model (see the module doc).

    Args:
        spec: the model, as ``create_model`` takes it.
        side: the input images' height and width (3 channels).
        images: synthetic images in the one batch.
        device: ``cpu`` or ``cuda``.
        folder: where the surface file is written.

    Returns:
        ``params``, ``point_s``, ``hvp_s``, ``draw_s``, ``peak_rss_mb`` (this process's peak: run it in a process of
        its own), ``file_kb``, ``side``, ``images``.
    """
    torch.manual_seed(0)
    model = create_model(spec, num_classes=10).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(images, 3, side, side, generator=g)
    y = torch.randint(0, 10, (images,), generator=g)
    objective = Objective(model, [(x, y)], device=device)
    n_params = sum(t.numel() for t in objective.params.values())
    dirs = random_directions(objective.params, ndim=2, seed=0)
    out = folder / f"{spec.replace(':', '_')}.h5"
    grid = np.linspace(-1.0, 1.0, 2)
    start = time.perf_counter()
    compute_surface(objective, dirs, grid, grid, out=out, batch_points=1, compile="off", progress=False)
    point_s = (time.perf_counter() - start) / grid.size**2
    op = HessianOperator(objective, mode="auto")
    op.plan_products(3)
    v = torch.randn(op.shape[0], generator=g).to(device=op.device, dtype=op.dtype)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        op.matvec(v)
        times.append(time.perf_counter() - start)
    forward = EvalForward(objective)  # as the sharpness analysis tunes it once per run (not timed)
    forward.tune()
    start = time.perf_counter()
    average_sharpness(objective, 0.01, samples=DRAWS, resamples=10, seed=0, forward=forward)
    draw_s = (time.perf_counter() - start) / DRAWS
    peak = _status_kb("VmHWM") / 1024  # this process measures one model only
    return {
        "params": float(n_params),
        "point_s": point_s,
        "hvp_s": min(times),
        "draw_s": draw_s,
        "peak_rss_mb": peak,
        "file_kb": out.stat().st_size / 1024,
        "side": float(side),
        "images": float(images),
    }


def measure_differences(spec: str, side: int, images: int, device: str, exact: bool) -> dict[str, float]:
    """The costs and errors of one model's central-difference products (``--finite-difference``, the module doc).

    Args:
        spec: the model, as ``create_model`` takes it.
        side: the input images' height and width (3 channels).
        images: synthetic images in the one batch.
        device: ``cpu`` or ``cuda``.
        exact: also time exact (kept-graph) products and the differences' error against them.

    Returns:
        ``params``, ``images``, ``gradient_s``, ``step_s`` (the step's measurement), ``product_s``, ``peak_mb`` (while
        only those were made), ``step``, ``estimated_error``; with ``exact``: ``graph_s``, ``graph_peak_mb``,
        ``error_start``, ``error_random`` (``||C v - H v|| / ||H s||`` for the start vector ``s`` and the larger of two
        random unit vectors: relative to the curvature the top eigenvalues are measured on; NaN without).
    """
    from landscape.core.gradients import gradient_of

    torch.manual_seed(0)
    model = create_model(spec, num_classes=10).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(images, 3, side, side, generator=g)
    y = torch.randint(0, 10, (images,), generator=g)
    objective = Objective(model, [(x, y)], device=device)
    n_params = sum(t.numel() for t in objective.params.values())
    gradient = gradient_of(objective.batch_loss_at(0))
    gradient(objective.params)
    _reset_peak_memory(device)
    gradient_s = min(_seconds(lambda: gradient(objective.params), device) for _ in range(3))
    op = HessianOperator(objective, mode="finite-difference")
    step_s = _seconds(lambda: op.start_vector(torch.Generator().manual_seed(0)), device)
    start = op.start_vector(torch.Generator().manual_seed(0))
    vectors = [start] + [_unit(torch.randn(op.shape[0], generator=g)).to(op.device, op.dtype) for _ in range(2)]
    made = [op.matvec(v) for v in vectors[1:]]  # the start's product was the measurement's; these are timed
    product_s = min(_seconds(lambda v=v: op.matvec(v), device) for v in vectors[1:])
    made.insert(0, op.matvec(start))
    out = {
        "params": float(n_params),
        "images": float(images),
        "gradient_s": gradient_s,
        "step_s": step_s,
        "product_s": product_s,
        "peak_mb": _peak_memory_mb(device),
        "step": op.step().step,
        "estimated_error": op.step().error,
        "graph_s": math.nan,
        "graph_peak_mb": math.nan,
        "error_start": math.nan,
        "error_random": math.nan,
    }
    if exact:
        del op
        _reset_peak_memory(device)
        graph = HessianOperator(objective, mode="graph")
        truth = [graph.matvec(v) for v in vectors]
        out["graph_s"] = min(_seconds(lambda v=v: graph.matvec(v), device) for v in vectors[1:])
        out["graph_peak_mb"] = _peak_memory_mb(device)
        scale = float(truth[0].norm())  # ||H s||: the curvature scale the top eigenvalues are measured on
        errors = [float((a - b).norm()) / scale for a, b in zip(made, truth)]
        out["error_start"], out["error_random"] = errors[0], max(errors[1:])
    return out


def _unit(v: torch.Tensor) -> torch.Tensor:
    """``v / ||v||``."""
    return v / v.norm()


def _seconds(fn, device: str) -> float:  # noqa: ANN001
    """Wall seconds of one call of ``fn`` (the GPU synchronised)."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _reset_peak_memory(device: str) -> None:
    """Start a new peak: the GPU's allocation, or this process's resident memory."""
    gc.collect()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    else:
        _reset_peak()


def _peak_memory_mb(device: str) -> float:
    """The peak since :func:`_reset_peak_memory`, in MB: the GPU's allocation, or this process's ``VmHWM``."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return _status_kb("VmHWM") / 1024


def difference_table(models: list[tuple[str, int]], counts: list[int], device: str, threads: int) -> None:
    """Run :func:`measure_differences` for every model and image count, each in a new process; print the rows.

    Args:
        models: ``(spec, side)`` pairs.
        counts: the image counts.
        device: ``cpu`` or ``cuda``.
        threads: torch threads of each child.
    """
    head = ("model", "params", "images", "grad s", "step s", "FD s/prod", "FD/grad", "FD MB", "graph s", "graph MB")
    print("{:22s} {:>12s} {:>6s} {:>8s} {:>8s} {:>9s} {:>7s} {:>8s} {:>8s} {:>8s}".format(*head), end="")
    print(" {:>9s} {:>9s} {:>9s} {:>9s}".format("step", "predicted", "err start", "err rand"))
    for spec, side in models:
        for count in counts:
            if count > FD_MAX_IMAGES.get(spec, count):
                print(f"{spec:22s} {'':12s} {count:6d}  (not run: more than this machine's memory, FD_MAX_IMAGES)")
                continue
            exact = count <= EXACT_IMAGES.get(spec, max(counts))
            job = [sys.executable, __file__, "--fd-child", spec, str(side), str(count), str(int(exact))]
            job += ["--device", device, "--threads", str(threads)]
            r = _child(job, f"the central differences of {spec}")
            print(
                f"{spec:22s} {int(r['params']):12,d} {count:6d} {r['gradient_s']:8.3g} {r['step_s']:8.3g} "
                f"{r['product_s']:9.3g} {r['product_s'] / r['gradient_s']:7.2f} {r['peak_mb']:8.0f} "
                f"{r['graph_s']:8.3g} {r['graph_peak_mb']:8.0f} {r['step']:9.2g} {r['estimated_error']:9.2g} "
                f"{r['error_start']:9.2g} {r['error_random']:9.2g}",
                flush=True,
            )


def _status_kb(field: str) -> int:
    """A ``/proc/self/status`` field in kilobytes (``VmRSS``: resident now, ``VmHWM``: its peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Reset the kernel's peak resident memory of this process (``VmHWM``) to what is resident now."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def memory_child(analysis: str, spec: str, side: int, images: int, points: int, device: str) -> dict[str, float]:
    """One analysis of ``points`` points on one model, in this process: its memory over the inputs' and its time.

    The peak is the kernel's ``VmHWM``, reset once the inputs are built: ``resource.getrusage`` cannot be used in a
    child process, since a child started by ``vfork`` + ``exec`` inherits its parent's peak there.

    Args:
        analysis: ``surface`` (a square grid of ``points`` points, eager loop), ``sharpness`` (``points`` average-case
            draws) or ``connect`` (a line of ``points`` points between two initialisations, BatchNorm re-estimated).
        spec: the model, as ``create_model`` takes it.
        side: the input images' height and width.
        images: synthetic images in the one batch.
        points: the points (or draws) evaluated.
        device: ``cpu`` or ``cuda``.

    Returns:
        ``param_mb``; ``objective_copies``: what building the objective added, in parameter bytes; ``extra_copies``:
        the analysis's peak over the memory held before it, in parameter bytes; ``point_s``: seconds per point.
    """
    torch.manual_seed(0)
    model = create_model(spec, num_classes=10).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(images, 3, side, side, generator=g)
    y = torch.randint(0, 10, (images,), generator=g)
    gc.collect()
    before = _status_kb("VmRSS")
    objective = Objective(model, [(x, y)], device=device, check=False)
    gc.collect()
    param_bytes = sum(t.numel() * t.element_size() for t in objective.params.values())
    built = _status_kb("VmRSS")
    folder = tempfile.TemporaryDirectory()
    if analysis == "surface":
        n = math.isqrt(points)
        grid = np.linspace(-1.0, 1.0, n)
        dirs = random_directions(objective.params, ndim=2, seed=0)

        def run() -> None:
            out = Path(folder.name) / "surface.h5"
            compute_surface(objective, dirs, grid, grid, out=out, batch_points=1, compile="off", progress=False)

    elif analysis == "sharpness":

        def run() -> None:
            average_sharpness(objective, 0.01, samples=points, resamples=10, seed=0)

    else:
        torch.manual_seed(1)
        a, b = Endpoint.of(model), Endpoint.of(create_model(spec, num_classes=10).eval())

        def run() -> None:
            evaluate_path(objective, a, b, points=points, bn="recompute")

    gc.collect()
    base = _status_kb("VmRSS")
    _reset_peak()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    peak = _status_kb("VmHWM")
    folder.cleanup()
    return {
        "param_mb": param_bytes / 2**20,
        "objective_copies": (built - before) * 1024 / param_bytes,
        "extra_copies": (peak - base) * 1024 / param_bytes,
        "point_s": seconds / points,
    }


def memory_table(models: list[tuple[str, int]], counts: list[int], images: int, device: str, threads: int) -> None:
    """Run :func:`memory_child` for every model, analysis and point count, each in a new process; print the rows.

    Args:
        models: ``(spec, side)`` pairs.
        counts: the point counts (squares, for the surface's grid).
        images: synthetic images in the one batch.
        device: ``cpu`` or ``cuda``.
        threads: torch threads of each child.
    """
    head = ("model", "analysis", "points", "param MB", "objective", "extra", "s/point")
    print("{:22s} {:10s} {:>6s} {:>8s} {:>9s} {:>7s} {:>8s}".format(*head))
    for spec, side in models:
        for analysis in ANALYSES:
            for count in counts:
                job = [sys.executable, __file__, "--memory-child", analysis, spec, str(side), str(images), str(count)]
                job += ["--device", device, "--threads", str(threads)]
                r = _child(job, f"{analysis} of {spec}")
                print(
                    f"{spec:22s} {analysis:10s} {count:6d} {r['param_mb']:8.2f} {r['objective_copies']:9.2f} "
                    f"{r['extra_copies']:7.2f} {r['point_s']:8.3f}",
                    flush=True,
                )


def _device(text: str) -> str:
    """An argparse type: the device :func:`landscape.runtime.distributed.resolve_device` names, as a string."""
    try:
        return str(resolve_device(text))
    except LandscapeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _child(job: list[str], what: str) -> dict[str, float]:
    """Run one measuring child process; its JSON line, or a one-line exit naming the child's last error line."""
    done = subprocess.run(job, capture_output=True, text=True)
    if done.returncode != 0:
        killed = "killed by SIGKILL (out of memory?)" if done.returncode == -9 else "no error output"
        last = (done.stderr.strip().splitlines() or [killed])[-1]
        raise SystemExit(f"scale.py: the measurement of {what} failed: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Measure every model of the chosen mode and print the table.

    Args:
        argv: the command line (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="the zoo's minis only, 2 images each")
    mode.add_argument("--full", action="store_true", help="add resnet152, vit_b_16 and vit_l_16")
    mode.add_argument("--memory", action="store_true", help="peak memory per analysis against its points")
    mode.add_argument(
        "--memory-child", nargs=5, metavar=("ANALYSIS", "SPEC", "SIDE", "IMAGES", "POINTS"), help=argparse.SUPPRESS
    )
    mode.add_argument("--model-child", nargs=3, metavar=("SPEC", "SIDE", "IMAGES"), help=argparse.SUPPRESS)
    mode.add_argument(
        "--finite-difference", action="store_true", help="central-difference products of vit_b_16 and vit_l_16"
    )
    mode.add_argument("--fd-child", nargs=4, metavar=("SPEC", "SIDE", "IMAGES", "EXACT"), help=argparse.SUPPRESS)
    parser.add_argument("--fd-smoke", action="store_true", help="--finite-difference on vit_mini (1, 2 images)")
    parser.add_argument(
        "--points", type=checks.positive_argument, nargs="+", default=[4, 16], help="point counts of --memory (squares)"
    )
    parser.add_argument("--device", type=_device, default="cpu")
    parser.add_argument(
        "--images", type=checks.positive_argument, default=None, help="images per model (default 2 smoke, else 4)"
    )
    parser.add_argument("--threads", type=checks.positive_argument, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory_child:
        analysis, spec, side, images, points = args.memory_child
        print(json.dumps(memory_child(analysis, spec, int(side), int(images), int(points), args.device)))
        return 0
    if args.memory:
        memory_table(MEMORY, args.points, args.images or 2, args.device, args.threads)
        return 0
    if args.fd_child:
        spec, side, images, exact = args.fd_child
        print(json.dumps(measure_differences(spec, int(side), int(images), args.device, exact == "1")))
        return 0
    if args.finite_difference or args.fd_smoke:
        models, counts = (FD_SMOKE, [1, 2]) if args.fd_smoke else (FD_MODELS, list(FD_IMAGES))
        difference_table(models, counts, args.device, args.threads)
        return 0
    if args.model_child:
        spec, side, images = args.model_child
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(measure(spec, int(side), int(images), args.device, Path(tmp))))
        return 0
    models = SMOKE + ([] if args.smoke else DEFAULT) + (FULL if args.full else [])
    images = args.images or (2 if args.smoke else 4)
    head = ("model", "params", "images", "point s", "HVP s", "draw s", "peak MB", "file KB")
    print("{:24s} {:>12s} {:>6s} {:>9s} {:>9s} {:>9s} {:>9s} {:>9s}".format(*head))
    rows = []
    for spec, side in models:
        count = min(images, MAX_IMAGES.get(spec, images))
        job = [sys.executable, __file__, "--model-child", spec, str(side), str(count)]
        job += ["--device", args.device, "--threads", str(args.threads)]
        r = _child(job, spec)
        rows.append(r)
        print(
            f"{spec:24s} {int(r['params']):12,d} {count:6d} {r['point_s']:9.3g} {r['hvp_s']:9.3g} {r['draw_s']:9.3g} "
            f"{r['peak_rss_mb']:9.0f} {r['file_kb']:9.1f}",
            flush=True,
        )
    print_slopes(rows)
    return 0


def print_slopes(rows: list[dict[str, float]]) -> None:
    """Each cost per parameter and image, and the exponent of its power-law fit, over the largest input side.

    Args:
        rows: :func:`measure`'s results (at least two at the largest side for a fit).
    """
    side = max(r["side"] for r in rows)
    big = [r for r in rows if r["side"] == side]
    size = np.array([r["params"] * r["images"] for r in big])
    print(f"\nper parameter and image, at {int(side)} x {int(side)}:")
    for key, name in (("point_s", "surface point"), ("hvp_s", "HVP"), ("draw_s", "sharpness draw")):
        cost = np.array([r[key] for r in big])
        per = cost / size
        fit = f"exponent {np.polyfit(np.log(size), np.log(cost), 1)[0]:.2f}" if len(big) > 1 else "one model: no fit"
        print(f"  {name:15s} {np.median(per):.3g} s (from {per.min():.3g} to {per.max():.3g}); {fit}")
    memory = np.array([r["peak_rss_mb"] for r in big])
    params = np.array([r["params"] for r in big])
    if len(big) > 1:
        slope = np.polyfit(params, memory, 1)[0] * 2**20
        print(f"  peak memory: {slope:.1f} bytes per parameter (least squares over the models)")


if __name__ == "__main__":
    sys.exit(main())
