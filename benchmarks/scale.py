"""How the costs grow with the model: time per surface point, per HVP, per sharpness draw, peak memory, file size.

For each model (random init, eval mode, a few synthetic images in one batch, CPU unless ``--device``): the
seconds per point of a 2 x 2 surface (eager, one point at a time, default ``--store-directions seed``), the least
seconds of three Hessian-vector products (``--hvp auto``), the seconds per noise draw of average sharpness (4
draws), the process's peak resident memory so far (``resource.getrusage``: a running maximum, so a row can only
repeat or raise the one above it) and the surface file's size, against the parameter count. Prints a table.

    python benchmarks/scale.py --smoke    # the zoo's minis, 2 images each (under a minute on 2 cores)
    python benchmarks/scale.py            # + torchvision resnet18 and resnet50 at 224 x 224, 4 images
    python benchmarks/scale.py --full     # + torchvision resnet152, vit_b_16 and vit_l_16 (needs tens of GB)
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.sharpness.measures import average_sharpness
from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.run import compute_surface
from landscape.core.objective import Objective
from landscape.models import create_model

#: (model spec, input side) by mode; each mode adds to the one before
SMOKE = [("resnet_mini", 32), ("vit_mini", 32), ("alternet_mini", 32)]
DEFAULT = [("torchvision:resnet18", 224), ("torchvision:resnet50", 224)]
FULL = [("torchvision:resnet152", 224), ("torchvision:vit_b_16", 224), ("torchvision:vit_l_16", 224)]
#: sharpness noise draws timed per model
DRAWS = 4


def measure(spec: str, side: int, images: int, device: str, folder: Path) -> dict[str, float]:
    """The costs of one model (see the module doc).

    Args:
        spec: the model, as ``create_model`` takes it.
        side: the input images' height and width (3 channels).
        images: synthetic images in the one batch.
        device: ``cpu`` or ``cuda``.
        folder: where the surface file is written.

    Returns:
        ``params``, ``point_s``, ``hvp_s``, ``draw_s``, ``peak_rss_mb``, ``file_kb``.
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
    start = time.perf_counter()
    average_sharpness(objective, 0.01, samples=DRAWS, resamples=10, seed=0)
    draw_s = (time.perf_counter() - start) / DRAWS
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux
    return {
        "params": float(n_params),
        "point_s": point_s,
        "hvp_s": min(times),
        "draw_s": draw_s,
        "peak_rss_mb": peak,
        "file_kb": out.stat().st_size / 1024,
    }


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
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--images", type=int, default=None, help="images per model (default 2 smoke, else 4)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = SMOKE + ([] if args.smoke else DEFAULT) + (FULL if args.full else [])
    images = args.images or (2 if args.smoke else 4)
    print(f"{'model':24s} {'params':>12s} {'point s':>9s} {'HVP s':>9s} {'draw s':>9s} {'peak MB':>9s} {'file KB':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        for spec, side in models:
            r = measure(spec, side, images, args.device, Path(tmp))
            print(
                f"{spec:24s} {int(r['params']):12,d} {r['point_s']:9.3g} {r['hvp_s']:9.3g} {r['draw_s']:9.3g} "
                f"{r['peak_rss_mb']:9.0f} {r['file_kb']:9.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
