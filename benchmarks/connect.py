"""Mode-connectivity cost, measured in one run: a connect line with BatchNorm re-estimated at every point against
bare forward passes over the same points.

For ``--steps`` points of the line between two networks, on the same fixed samples:

(a) ours, ``bn="recompute"`` (the default): :func:`landscape.analyses.connect.run.run_connect`, the whole call
    (file written point by point) and its steady seconds per point (between the first and the last point);
(b) ours, ``bn="eval"`` (the ends' interpolated statistics), the same two numbers;
(c) bare: per point, the interpolated weights loaded into one model (``load_state_dict``), then one eval-mode
    forward over the samples under ``inference_mode``, no loss;
(d) bare with BatchNorm re-estimation, the least a recompute point needs: per point the weights loaded, one
    train-mode pass over the samples (cumulative averaging) and one eval-mode forward.

Printed: the seconds of each and the ratios (a)/(c), (a)/(d), (b)/(c), all measured in this one run.

CPU (default): a CIFAR-style ResNet of about 90k parameters (resnet_mini, widths 16-24-32-64) from two seeds, 256
synthetic CIFAR-sized inputs (3x32x32) in batches of 128, 11 points. Run:
    python benchmarks/connect.py [--threads 1] [--steps 11] [--samples 256] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import torch

from landscape.analyses.connect.run import run_connect
from landscape.models import create_model
from landscape.options.connect import ConnectOptions


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_problem(args: argparse.Namespace, device: torch.device):
    """Two resnet_mini of different seeds and fixed synthetic batches on ``device``."""
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(create_model("resnet_mini", num_classes=10, widths=(16, 24, 32, 64)).to(device).eval())
    g = torch.Generator().manual_seed(2)
    x = torch.randn(args.samples, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.samples,), generator=g)
    batches = [
        (x[i : i + args.batch_size].to(device), y[i : i + args.batch_size].to(device))
        for i in range(0, args.samples, args.batch_size)
    ]
    return models, batches


def ours(models, batches, steps: int, bn: str, out: Path, device: str) -> tuple[float, float]:
    """The whole run_connect call (seconds) and its steady seconds per point."""
    stamps = []
    t0 = time.perf_counter()
    run_connect(
        *models,
        ConnectOptions(steps=steps, bn=bn),
        out=out,
        device=device,
        progress=False,
        batches=batches,
        on_progress=lambda stage, done, total: stamps.append((done, time.perf_counter())),
    )
    total = time.perf_counter() - t0
    (d0, t_first), (d1, t_last) = stamps[0], stamps[-1]
    return total, (t_last - t_first) / max(1, d1 - d0)


@torch.no_grad()
def bare(models, batches, steps: int, device: torch.device, *, recompute: bool) -> float:
    """Seconds per point of loading theta(alpha) and forwarding the samples (with a BN re-estimation pass)."""
    a, b = (m.state_dict() for m in models)
    net = copy.deepcopy(models[0])
    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    times = []
    for k in range(steps):
        alpha = k / (steps - 1)
        t0 = time.perf_counter()
        net.load_state_dict({n: (1 - alpha) * t + alpha * b[n] if t.is_floating_point() else t for n, t in a.items()})
        if recompute:
            for m in bns:
                m.reset_running_stats()
                m.momentum = None
            net.train()
            for x, _ in batches:
                net(x)
            net.eval()
        with torch.inference_mode():
            for x, _ in batches:
                net(x)
        sync(device)
        times.append(time.perf_counter() - t0)
    return sum(times[1:]) / (steps - 1)  # the first point warms up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=11)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    models, batches = make_problem(args, device)
    bare_eval = bare(models, batches, args.steps, device, recompute=False)
    bare_recompute = bare(models, batches, args.steps, device, recompute=True)
    with tempfile.TemporaryDirectory() as tmp:
        rec_total, rec_point = ours(models, batches, args.steps, "recompute", Path(tmp) / "r.h5", args.device)
        eval_total, eval_point = ours(models, batches, args.steps, "eval", Path(tmp) / "e.h5", args.device)
    n_params = sum(p.numel() for p in models[0].parameters())
    print(
        f"resnet_mini ({n_params:,} parameters), {args.samples} samples in batches of {args.batch_size}, "
        f"{args.steps} points, {args.threads} thread(s), {device}"
    )
    print(f"(a) ours, bn=recompute: {rec_total:.2f} s whole, {1e3 * rec_point:.1f} ms/point")
    print(f"(b) ours, bn=eval:      {eval_total:.2f} s whole, {1e3 * eval_point:.1f} ms/point")
    print(f"(c) bare forward:                 {1e3 * bare_eval:.1f} ms/point")
    print(f"(d) bare BN pass + forward:       {1e3 * bare_recompute:.1f} ms/point")
    print(
        f"ratios per point: (a)/(c) = {rec_point / bare_eval:.2f}, (a)/(d) = {rec_point / bare_recompute:.2f}, "
        f"(b)/(c) = {eval_point / bare_eval:.2f}"
    )


if __name__ == "__main__":
    main()
