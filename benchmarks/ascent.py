"""How close the default worst-case ascent comes to the maximum: against longer restarted ascents.

Two measurements; both print the default's share of the longer ascent per mini-batch (every ascent keeps its best
point, so every value is a lower bound of the maximum, and a share above 1 means the default found more).

**Checkpoints** (``python benchmarks/ascent.py demo/resnet_mini.pt demo/vit_mini.pt``): the adaptive l-inf
worst-case m-sharpness of the demo's setting (rho = 0.005 of |w|, mini-batches of 32 training images) per
mini-batch by the default ascent (10 iterations from each of 8 starts) and by one of ``--steps`` iterations from
each of ``--restarts`` starts (100 x 8: ten times the iterations), on the same batches; printed per batch: both
values, their ratio and the iteration where the longer one found its best; with ``--previous`` also the previous
default's values (20 iterations from each of 2 random starts) and those of ten times it (100 x 4).

**Trained MLPs** (``--mlps``): float64 ReLU MLPs trained by Adam on digits at 8 x 8 (``--widths``, ``--seeds``:
30 epochs, batches of 64, learning rate 0.01), on mini-batches of 32 (``--batches``), adaptive worst case at rho
0.05 and 0.1, p = inf and p = 2: the default
(:func:`~landscape.analyses.sharpness.measures.worst_sharpness` with its defaults) and the previous default (20
iterations from 2 random starts) against a restarted projected ascent 50 times the default's gradients, written
here from the definition (23 random starts, 200 signed or normalised steps each, of a size shrinking from rho to
rho / 100, the best loss of any iterate kept). Printed per case: the three values' shares, then per norm: the
least share, the median, and how many fall below 0.99, for the default and the previous one; and their costs in
gradients (forward and backward passes) per batch and radius.

Run:
    python benchmarks/ascent.py demo/resnet_mini.pt demo/vit_mini.pt [--samples 64] [--steps 100] [--restarts 8]
        [--previous]
    python benchmarks/ascent.py --mlps [--widths 64-8-6-10 ...] [--seeds 0 1 2] [--batches 6]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

import landscape
from landscape.analyses.sharpness.measures import worst_sharpness
from landscape.core.objective import Objective
from landscape.data import load_dataset
from landscape.options.sharpness import WORST_INIT, WORST_RESTARTS, WORST_STEPS

F64 = torch.float64
#: the previous default ascent (before the output-diversified starts): 20 iterations from each of 2 random starts
PREVIOUS = {"steps": 20, "restarts": 2, "init": "random"}
WIDTHS = ["64-8-6-10", "64-16-12-10", "64-20-16-12-10"]


def trained_mlp(widths: tuple[int, ...], seed: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A float64 ReLU MLP trained by Adam on digits at 8 x 8 from ``seed``; the training images and labels."""
    x, y = load_dataset("digits:8", "train").tensors()
    x = x.reshape(len(x), -1).to(F64)
    g = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    for k, (i, o) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [nn.Linear(i, o)] + ([nn.ReLU()] if k < len(widths) - 2 else [])
    net = nn.Sequential(*layers).to(F64)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_((torch.rand(p.shape, generator=g, dtype=F64) * 2 - 1) / p.shape[-1] ** 0.5)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(30):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 64):
            idx = order[i : i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    return net.eval(), x, y


def restarted_ascent(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, rho: float, p: str, starts: int = 23, steps: int = 200
) -> float:
    """``max_{||z||_p <= rho} CE(w + |w| z) - CE(w)`` by a restarted projected ascent (module doc), seed 11."""
    w = {n: t.detach() for n, t in net.named_parameters()}

    def loss(z: dict[str, torch.Tensor]) -> torch.Tensor:
        return nn.functional.cross_entropy(functional_call(net, {n: w[n] + w[n].abs() * z[n] for n in w}, (x,)), y)

    def norms(t: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.sqrt(sum((v.flatten(1) ** 2).sum(1) for v in t.values()))

    def scaled(t: dict[str, torch.Tensor], factor: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: v * factor.view(-1, *[1] * (v.ndim - 1)) for n, v in t.items()}

    base = float(loss({n: torch.zeros_like(t) for n, t in w.items()}))
    g = torch.Generator().manual_seed(11)
    if p == "inf":
        z = {n: (torch.rand(starts, *t.shape, generator=g, dtype=F64) * 2 - 1) * rho for n, t in w.items()}
    else:
        z = {n: torch.randn(starts, *t.shape, generator=g, dtype=F64) for n, t in w.items()}
        z = scaled(z, rho / norms(z))
    step_and_value = vmap(grad_and_value(loss))
    best = 0.0
    for t in range(steps):
        grads, values = step_and_value(z)
        best = max(best, float(values.max()) - base)
        size = rho * 0.01 ** (t / steps)
        if p == "inf":
            z = {n: (z[n] + size * torch.sign(grads[n])).clamp(-rho, rho) for n in z}
        else:
            z = {n: z[n] + v for n, v in scaled(grads, size / norms(grads).clamp_min(1e-300)).items()}
            z = scaled(z, (rho / norms(z)).clamp(max=1.0))
    return max(best, float(vmap(loss)(z).max()) - base)


def mlps(widths: list[str], seeds: list[int], batches: int) -> dict[str, dict[str, list[float]]]:
    """The ``--mlps`` measurement (module doc); printed, and returned as shares per norm and ascent."""
    shares: dict[str, dict[str, list[float]]] = {p: {"default": [], "previous": []} for p in ("inf", "2")}
    print(f"{'MLP':<16} {'seed':>4} {'batch':>5} {'p':>3} {'rho':>5}  default  previous  (share of the long ascent)")
    for text in widths:
        shape = tuple(int(v) for v in text.split("-"))
        for seed in seeds:
            net, x, y = trained_mlp(shape, seed)
            for b in range(batches):
                xb, yb = x[32 * b : 32 * (b + 1)], y[32 * b : 32 * (b + 1)]
                objective = Objective(net, [(xb, yb)], dtype=F64)
                for p in ("inf", "2"):
                    default = worst_sharpness(objective, (0.05, 0.1), p=p)
                    previous = worst_sharpness(objective, (0.05, 0.1), p=p, **PREVIOUS)
                    for r, rho in enumerate((0.05, 0.1)):
                        longer = restarted_ascent(net, xb, yb, rho, p)
                        d, q = float(default.values[0, r]) / longer, float(previous.values[0, r]) / longer
                        shares[p]["default"].append(d)
                        shares[p]["previous"].append(q)
                        print(f"{text:<16} {seed:>4} {b:>5} {p:>3} {rho:>5}  {d:.4f}   {q:.4f}", flush=True)
    cost = WORST_RESTARTS * (WORST_STEPS + 1) + (WORST_RESTARTS + 1) // 2 * (WORST_INIT == "output")
    print(
        f"gradients per batch and radius: the default {cost} ({WORST_RESTARTS} ascents of {WORST_STEPS} iterations "
        f"and their starts), the previous {PREVIOUS['restarts'] * (PREVIOUS['steps'] + 1)}, the long ascent 4623"
    )
    for p, by in shares.items():
        for name, values in by.items():
            v = np.asarray(values)
            print(
                f"p = {p}, {name}: least {v.min():.4f}, median {np.median(v):.4f}, below 0.99 on {(v < 0.99).sum()} "
                f"of {v.size}"
            )
    return shares


def main() -> None:
    """Measure each checkpoint both ways, or the trained MLPs, and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpts", nargs="*")
    parser.add_argument("--samples", type=int, default=64, help="Training images (mini-batches of 32).")
    parser.add_argument("--rho", type=float, default=0.005)
    parser.add_argument("--steps", type=int, default=100, help="Iterations per start of the longer ascent.")
    parser.add_argument("--restarts", type=int, default=8, help="Starts of the longer ascent.")
    parser.add_argument(
        "--previous", action="store_true", help="Also the previous default and ten times it (100 x 4, random)."
    )
    parser.add_argument("--mlps", action="store_true", help="The trained MLPs against a 50 times longer ascent.")
    parser.add_argument("--widths", nargs="+", default=WIDTHS, help="--mlps: the MLPs, e.g. 64-8-6-10.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="--mlps: training seeds.")
    parser.add_argument("--batches", type=int, default=6, help="--mlps: mini-batches of 32 per MLP.")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.mlps:
        mlps(args.widths, args.seeds, args.batches)
        return
    if not args.ckpts:
        parser.error("give checkpoints, or --mlps")
    common = {"samples": args.samples, "batch_size": 32, "measure": "worst", "rho": [args.rho], "p": "inf"}
    for ckpt in args.ckpts:
        start = time.perf_counter()
        default = landscape.sharpness(ckpt, "digits", **common, progress=False)
        longer = landscape.sharpness(ckpt, "digits", **common, steps=args.steps, restarts=args.restarts, progress=False)
        d, g = (np.asarray(r["values"], dtype=float).ravel() for r in (default, longer))
        best = np.asarray(longer["best_iteration"]).ravel()
        total = args.steps * args.restarts
        for i, (x, y, b) in enumerate(zip(d, g, best)):
            line = f"{ckpt} batch {i}: default {x:.6g}, longer {y:.6g}, ratio {x / y:.5f}"
            print(f"{line}, longer's best at {b} of {total}")
        print(f"{ckpt}: least ratio {np.min(d / g):.5f} ({time.perf_counter() - start:.0f} s)", flush=True)
        if args.previous:
            for label, kwargs in (
                ("previous default", PREVIOUS),
                ("ten times it", {**PREVIOUS, "steps": 100, "restarts": 4}),
            ):
                values = np.asarray(landscape.sharpness(ckpt, "digits", **common, **kwargs, progress=False)["values"])
                print(
                    f"{ckpt}: {label} ({kwargs['steps']} x {kwargs['restarts']}, random) "
                    + ", ".join(f"batch {i} {v:.6g}" for i, v in enumerate(values.ravel())),
                    flush=True,
                )


if __name__ == "__main__":
    main()
