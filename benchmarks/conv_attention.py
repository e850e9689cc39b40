"""Paper B's construction measured: error against F.conv2d by sharpness, and the head lower bound.

Prints two markdown tables (the README's): for a 3->8 channel 3x3 convolution on 2x2 patches of 32x32 images in
float64, the off-target attention mass (measured and closed form) and the error of the attention layer at each
bias margin c; then, for three convolutions, the fit with all heads, the lower bound for one head fewer and the
best least-squares fit over every choice of that many heads.

    python benchmarks/conv_attention.py [--seed 0]
"""

import argparse

import torch
from torch import nn

from landscape.models.conv_attention import (
    best_fit_fewer_heads,
    construction_error,
    fit_heads,
    head_lower_bound,
    heads_needed,
    neighbour_offsets,
    ring_width,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    conv = nn.Conv2d(3, 8, 3, padding=1).double()
    x = torch.randn(4, 3, 32, 32, dtype=torch.float64)
    print("| c | off-target mass | predicted | max abs error | max rel error |")
    print("| --- | --- | --- | --- | --- |")
    for c in (5, 10, 15, 20, 30, 40):
        r = construction_error(conv, 2, x, sharpness=float(c))
        cells = (r.off_target_mass, r.predicted_mass, r.max_abs_error, r.max_rel_error)
        print(f"| {c} | " + " | ".join(f"{v:.2e}" for v in cells) + " |")

    print()
    print("| convolution | heads needed | fit with all heads | fewer heads | lower bound | best fit |")
    print("| --- | --- | --- | --- | --- | --- |")
    sample = torch.randn(48, 3, 16, 16, dtype=torch.float64)
    for k, p in ((3, 2), (5, 2), (3, 1)):
        conv = nn.Conv2d(3, 8, k, padding=k // 2).double()
        heads = heads_needed(k, p)
        full = fit_heads(conv, p, neighbour_offsets(ring_width(k, p)), sample)
        bound = head_lower_bound(conv, p, heads - 1)
        best_error, _ = best_fit_fewer_heads(conv, p, heads - 1, sample)
        print(f"| 3->8, K={k}, P={p} | {heads} | {full:.1e} | {heads - 1} | {bound:.3f} | {best_error:.3f} |")


if __name__ == "__main__":
    main()
