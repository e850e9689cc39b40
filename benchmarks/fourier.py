"""Cost of a full-depth Fourier profile relative to one forward pass over the same samples.

For each model (random init, CIFAR size: 3x32x32 inputs, 100 classes) and the same fixed batches:
  forward  = time of ``model(x)`` over every batch (eval, no_grad)
  profile  = time of ``fourier_profile(model, batches)`` (forward_intermediates of every block + the
             half-diagonal log-amplitude sums + variances), and of the radial profile (full 2D spectra)
and prints profile / forward (goal: <= 1.5 for the default diagonal profile). Each timing is the best of
``--repeats`` runs after one warm-up batch, as wall-clock time and as process CPU time (all threads; less
sensitive to other jobs on a shared machine). Usage:

    python benchmarks/fourier.py [--samples 256] [--batch-size 64] [--models vit_ti,resnet50] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

from landscape.fourier import fourier_profile
from landscape.models import create_model


def best_of(fn, repeats: int) -> tuple[float, float]:
    """Best wall-clock and best process CPU time (all threads) of ``repeats`` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--models", default="vit_ti,resnet50")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.samples, 3, 32, 32, generator=gen)
    batches = [xb.to(device) for xb in x.split(args.batch_size)]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}, "
          f"{args.samples} samples in batches of {args.batch_size}, best of {args.repeats}")
    for name in args.models.split(","):
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
        n_layers = len(model.forward_intermediates(batches[0][:1]))
        for k, clock in enumerate(("wall", "cpu")):
            print(f"{name:9s} {n_layers:3d} layers, {clock:4s} time: forward {t_fwd[k]:7.2f} s, diagonal profile "
                  f"{t_diag[k]:7.2f} s (ratio {t_diag[k] / t_fwd[k]:.2f}, goal <= 1.5), radial profile "
                  f"{t_rad[k]:7.2f} s (ratio {t_rad[k] / t_fwd[k]:.2f})")


if __name__ == "__main__":
    main()
