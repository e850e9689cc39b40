"""Cost of a full-depth Fourier profile relative to one forward pass over the same samples.

For each model (random init, CIFAR size: 3x32x32 inputs, 100 classes) and the same fixed batches:
  forward  = time of ``model(x)`` over every batch (eval, no_grad)
  profile  = time of ``fourier_profile(model, batches)`` (block_features of every block + the
             half-diagonal log-amplitude sums + variances), and of the radial profile (full 2D spectra)
and prints profile / forward (goal: <= 1.5 for the default diagonal profile). Each timing is the best of
``--repeats`` runs after one warm-up batch, as wall-clock time and as process CPU time (all threads; less
sensitive to other jobs on a shared machine).

Then the cost of the hooks alone for models we did not write (timm, random init, one batch
of ``--taps-batch``) at 224 px: ``FeatureTaps(model)(x)`` (hooks added, one forward, every block's map read, hooks
removed; no FFT) against a bare ``model(x)``, both in eval mode under ``no_grad``, the two interleaved for
``--taps-repeats`` rounds after a warm-up, median wall-clock times; prints taps / forward (goal: <= 1.10).
An empty ``--models`` or ``--taps-models`` skips that part. Usage:

    python benchmarks/fourier.py [--samples 256] [--batch-size 64] [--models vit_ti,resnet50] [--threads N]
        [--taps-models vit_tiny_patch16_224,resnet50] [--taps-batch 8] [--taps-repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from landscape.analyses.fourier.features import fourier_profile
from landscape.models import create_model
from landscape.models.taps import FeatureTaps


def best_of(fn, repeats: int) -> tuple[float, float]:
    """Best wall-clock and best process CPU time (all threads) of ``repeats`` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def interleaved_medians(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median wall-clock time of each of ``fns``, called in turn ``repeats`` times (after one warm-up round)."""
    times: list[list[float]] = [[] for _ in fns]
    for round_ in range(repeats + 1):
        for k, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            if round_:
                times[k].append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def taps_overhead(names: list[str], batch: int, repeats: int, device: torch.device, sync, size: int = 224) -> None:
    """Print the table of ``FeatureTaps(model)(x)`` against ``model(x)`` for timm models at their 224 px."""
    import timm

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, size, size, generator=gen).to(device)
    print(
        f"\ntaps overhead: FeatureTaps(model)(x) vs model(x), batch {batch} at {size} px, eval + no_grad, "
        f"median of {repeats} interleaved rounds"
    )
    print(f"{'model':24s} {'rule':15s} {'maps':>4s} {'forward ms':>10s} {'taps ms':>9s} {'ratio':>6s} goal")
    for name in names:
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).to(device).eval()

        def forward(model=model) -> None:
            model(x)
            sync()

        def tapped(model=model) -> None:
            FeatureTaps(model)(x)
            sync()

        with torch.no_grad():
            t_fwd, t_taps = interleaved_medians([forward, tapped], repeats)
            taps = FeatureTaps(model)
            n_maps = len(taps(x))
        print(
            f"{name:24s} {taps.rule:15s} {n_maps:4d} {1e3 * t_fwd:10.1f} {1e3 * t_taps:9.1f} "
            f"{t_taps / t_fwd:6.3f} <= 1.10"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--models", default="vit_ti,resnet50")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--taps-models", default="vit_tiny_patch16_224,resnet50")
    parser.add_argument("--taps-batch", type=int, default=8)
    parser.add_argument("--taps-repeats", type=int, default=15)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.samples, 3, 32, 32, generator=gen)
    batches = [xb.to(device) for xb in x.split(args.batch_size)]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}, "
        f"{args.samples} samples in batches of {args.batch_size}, best of {args.repeats}"
    )
    for name in filter(None, args.models.split(",")):
        torch.manual_seed(0)
        model = create_model(name, num_classes=100).to(device).eval()

        def forward(model=model) -> None:
            with torch.no_grad():
                for xb in batches:
                    model(xb)
            sync()

        def profile(kind: str, model=model) -> None:
            fourier_profile(model, batches, profile=kind)
            sync()

        with torch.no_grad():  # warm-up
            model(batches[0])
        fourier_profile(model, batches[:1])
        t_fwd = best_of(forward, args.repeats)
        t_diag = best_of(lambda: profile("diagonal"), args.repeats)
        t_rad = best_of(lambda: profile("radial"), args.repeats)
        n_layers = len(model.block_features(batches[0][:1]))
        for k, clock in enumerate(("wall", "cpu")):
            print(
                f"{name:9s} {n_layers:3d} layers, {clock:4s} time: forward {t_fwd[k]:7.2f} s, diagonal profile "
                f"{t_diag[k]:7.2f} s (ratio {t_diag[k] / t_fwd[k]:.2f}, goal <= 1.5), radial profile "
                f"{t_rad[k]:7.2f} s (ratio {t_rad[k] / t_fwd[k]:.2f})"
            )
    taps_models = list(filter(None, args.taps_models.split(",")))
    if taps_models:
        taps_overhead(taps_models, args.taps_batch, args.taps_repeats, device, sync)


if __name__ == "__main__":
    main()
