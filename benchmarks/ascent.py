"""How close the default worst-case ascent comes to the maximum: against a ten times longer restarted ascent.

For each checkpoint (the demo's ``resnet_mini.pt`` and ``vit_mini.pt`` by default) the adaptive l-inf worst-case
m-sharpness of the demo's setting (rho = 0.005 of |w|, mini-batches of 32 training images) is measured per
mini-batch by the default ascent (20 iterations from each of 2 starts) and by one of ``--steps`` iterations from
each of ``--restarts`` starts (100 x 4: ten times the iterations), on the same batches. Every ascent keeps its
best point, so both are lower bounds of the maximum; printed per batch: both values, their ratio (the default's
share of the longer ascent's) and the iteration where the longer one found its best.

Run:
    python benchmarks/ascent.py demo/resnet_mini.pt demo/vit_mini.pt [--samples 64] [--steps 100] [--restarts 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import landscape


def main() -> None:
    """Measure each checkpoint both ways and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpts", nargs="+")
    parser.add_argument("--samples", type=int, default=64, help="Training images (mini-batches of 32).")
    parser.add_argument("--rho", type=float, default=0.005)
    parser.add_argument("--steps", type=int, default=100, help="Iterations per start of the longer ascent.")
    parser.add_argument("--restarts", type=int, default=4, help="Starts of the longer ascent.")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    common = {"samples": args.samples, "batch_size": 32, "measure": "worst", "rho": [args.rho], "p": "inf"}
    for ckpt in args.ckpts:
        start = time.perf_counter()
        default = landscape.sharpness(ckpt, "digits", **common, progress=False)
        longer = landscape.sharpness(ckpt, "digits", **common, steps=args.steps, restarts=args.restarts, progress=False)
        d, g = (np.asarray(r["values"], dtype=float).ravel() for r in (default, longer))
        best = np.asarray(longer["best_iteration"]).ravel()
        for i, (x, y, b) in enumerate(zip(d, g, best)):
            print(f"{ckpt} batch {i}: default {x:.6g}, longer {y:.6g}, ratio {x / y:.5f}, longer's best at {b}")
        print(f"{ckpt}: least ratio {np.min(d / g):.5f} ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
