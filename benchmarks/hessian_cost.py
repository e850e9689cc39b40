"""Where the gradients of one top-5 solve go: each phase of ``--hvp auto``'s Lanczos in units of one gradient.

The problem is benchmarks/hessian.py's (a CIFAR-style ResNet of 78k parameters, one batch of 128 synthetic
images, eval mode, CPU). A gradient is timed first (least of five, after a warm-up), then one Lanczos solve
(top-5 by magnitude, tol 1e-3, hvp auto) runs with every batch product timed and labelled by the way it was
made (a first product after a setup is labelled ``<way> setup+first``); what is left of the solve's time is the
solver's own work (orthogonalisation, Ritz values, residual checks). Times are the process's CPU time (one
thread: other processes' load on a shared machine enters it less; ``--clock wall`` for wall time).
``--solves 2`` runs a second solve at the same point in the same process.

    python benchmarks/hessian_cost.py --threads 1
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

from landscape.analyses.hessian import products as products_module
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.operator import HessianOperator
from landscape.core.objective import Objective
from landscape.models.resnet import ResNet


def problem(samples: int) -> Objective:
    """The benchmark's ResNet and batch, as an objective."""
    torch.manual_seed(0)
    model = ResNet(layers=(1, 1, 1), widths=(16, 32, 64), num_classes=10).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(samples, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (samples,), generator=g)
    return Objective(model, [(x, y)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--solves", type=int, default=1)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    obj = problem(args.samples)
    obj.gradient()
    times = []
    for _ in range(5):
        start = clock()
        obj.gradient()
        times.append(clock() - start)
    t_grad = min(times)
    print(f"gradient {t_grad * 1e3:.1f} ms {args.clock} time (least of 5; median {sorted(times)[2] * 1e3:.1f} ms)")

    log: list[tuple[str, float]] = []
    original = products_module.BatchProducts._product

    def timed_product(self, way, v):  # noqa: ANN001, ANN202
        fresh = way not in ("jvp", products_module.FINITE_DIFFERENCE) and not (
            way == self._cache_way and self.cache is not None
        )
        start = clock()
        out = original(self, way, v)
        log.append((f"{way} setup+first" if fresh else way, clock() - start))
        return out

    products_module.BatchProducts._product = timed_product
    for solve in range(args.solves):
        log.clear()
        op = HessianOperator(obj, mode="auto")
        start = clock()
        res = lanczos(op, k=5, which="LM", tol=1e-3, seed=0)
        wall = clock() - start
        phases: dict[str, list[float]] = defaultdict(list)
        for label, seconds in log:
            phases[label].append(seconds)
        in_products = sum(seconds for _, seconds in log)
        print(
            f"\nsolve {solve + 1}: {wall:.2f} s, {res.n_matvec} products, {wall / t_grad / res.n_matvec:.2f} "
            f"gradients per product ({wall / t_grad:.1f} gradients in all)"
        )
        for label, values in phases.items():
            print(
                f"  {label:24s} x{len(values):2d}: {sum(values) / t_grad:6.1f} gradients "
                f"({sum(values) / t_grad / len(values):.2f} each, least {min(values) / t_grad:.2f})"
            )
        print(f"  {'solver (outside products)':24s}    : {(wall - in_products) / t_grad:6.1f} gradients")
        print(f"  choice: {op.hvp_choice()}")


if __name__ == "__main__":
    main()
