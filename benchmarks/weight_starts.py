"""Weight matching's starts: the objective each descent reaches between independent MLPs trained on digits.

For each architecture (``--widths``, default the four of tests/analyses/align/test_weights.py: 64-16-12-10,
64-20-16-12-10, 64-32-24-10, 64-24-32-10) and each pair of seeds (``--pairs``, default 0-1 and 2-3) two MLPs are
trained briefly by SGD on digits at 8 x 8 (``--epochs``, batches of 32, learning rate 0.05, momentum 0.9), and
:func:`~landscape.analyses.align.weights.weight_matching` aligns the second to the first from every start of
:data:`~landscape.options.align.DESCENT_STARTS` (the invariant match and the identity, each visiting the
permutations in the layers' order and in a seeded random order). Printed per pair: each start's objective
``sum_t <A_t, pi(B)_t>`` over the best one's (1 for the kept start), its sweeps, and the seconds of all the descents
against those of the first alone (the single start of earlier releases); then, over the pairs, how often each start
was the best and its least share of the best.

Run:
    python benchmarks/weight_starts.py [--epochs 3] [--pairs 0-1 2-3] [--widths 64-16-12-10 ...]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from landscape.analyses.align.permute import identity
from landscape.analyses.align.spec import permutation_spec
from landscape.analyses.align.weights import best_descent, weight_matching
from landscape.data import load_dataset
from landscape.options.align import DESCENT_STARTS

WIDTHS = ["64-16-12-10", "64-20-16-12-10", "64-32-24-10", "64-24-32-10"]


def digits_mlp(widths: tuple[int, ...], seed: int, epochs: int) -> nn.Module:
    """An MLP (Linear-ReLU-...-Linear) of ``widths`` trained by SGD on digits at 8 x 8 from ``seed``."""
    x, y = load_dataset("digits:8", "train").tensors()
    x = x.reshape(len(x), -1)
    g = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    for k, (i, o) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [nn.Linear(i, o)] + ([nn.ReLU()] if k < len(widths) - 2 else [])
    net = nn.Sequential(*layers)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / p.shape[-1] ** 0.5)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 32):
            idx = order[i : i + 32]
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    return net.eval()


def main(argv: list[str] | None = None) -> None:
    """Align every pair from every start and print each start's share of the best objective."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", nargs="+", default=WIDTHS, help="Architectures, e.g. 64-16-12-10.")
    parser.add_argument("--pairs", nargs="+", default=["0-1", "2-3"], help="Seed pairs, e.g. 0-1.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [f"{start}/{order}" for start, order in DESCENT_STARTS]
    shares: dict[str, list[float]] = {n: [] for n in names}
    print(f"{'MLP':<16} {'seeds':<6} " + " ".join(f"{n:>18}" for n in names) + "  seconds (first alone)")
    for text in args.widths:
        widths = tuple(int(w) for w in text.split("-"))
        for pair in args.pairs:
            sa, sb = (int(s) for s in pair.split("-"))
            net_a, net_b = (digits_mlp(widths, s, args.epochs) for s in (sa, sb))
            a, b = net_a.state_dict(), net_b.state_dict()
            spec = permutation_spec(net_a, torch.randn(2, widths[0]))
            start = time.perf_counter()
            m = weight_matching(spec, a, b)
            seconds = time.perf_counter() - start
            start = time.perf_counter()
            best_descent(spec, a, b, identity(spec), list(spec.permutations), starts=DESCENT_STARTS[:1])
            first = time.perf_counter() - start
            cells = []
            for name, d in zip(names, m.starts):
                shares[name].append(d.objective / m.objective_after)
                cells.append(f"{d.objective / m.objective_after:.5f} ({d.sweeps} sw)")
            print(f"{text:<16} {pair:<6} " + " ".join(f"{c:>18}" for c in cells) + f"  {seconds:.2f} ({first:.2f})")
    print("over the pairs: start, times the best, least share of the best")
    for name, values in shares.items():
        print(f"  {name:<20} {sum(v == 1.0 for v in values)} of {len(values)}, {min(values):.5f}")


if __name__ == "__main__":
    main()
