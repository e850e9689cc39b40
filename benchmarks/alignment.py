"""Barriers before and after weight matching as the network widens: resnet_mini on digits at widths 1x, 2x, 4x.

For each width multiplier ``k`` two ``resnet_mini`` (stage widths ``k * (8, 16)``, one block per stage) are trained
on digits from seeds 0 and 1 (:func:`landscape.train.train_model`, AdamW, ``--epochs``), then
:func:`landscape.analyses.connect.run.run_connect` measures the line between them with ``align="weights"``
(BatchNorm statistics re-estimated at every point): the loss and error barriers of the line to theta_B as trained
(``unaligned_line``) and to theta_B aligned to theta_A by weight matching (``line``), on the test split. Entezari
et al. (2022) and Ainsworth et al. (2023) report that the aligned barrier shrinks as the width grows.

Printed: one row per width: parameters, the ends' test accuracies, the loss and error barriers before and after
alignment, and the seconds taken. ``--smoke`` is the CI-sized run (widths 1x and 2x of ``(4, 8)``, one epoch on
256 images, 3 points): it checks that the pipeline runs, not the finding.

Run:
    python benchmarks/alignment.py [--epochs 3] [--samples 500] [--steps 11] [--smoke]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from landscape.analyses.connect.run import run_connect
from landscape.models.checkpoint import read_checkpoint
from landscape.options.connect import ConnectOptions
from landscape.train import TrainConfig, train_model


def train_pair(widths: tuple[int, ...], args: argparse.Namespace, folder: Path) -> list[Path]:
    """Two resnet_mini of the given stage widths trained on digits from seeds 0 and 1; their checkpoints."""
    paths = []
    for seed in (0, 1):
        config = TrainConfig(
            model="resnet_mini",
            data="digits",
            epochs=args.epochs,
            seed=seed,
            device="cpu",
            subset=args.subset,
            model_kwargs={"widths": list(widths), "layers": [1] * len(widths)},
        )
        out = folder / f"w{'-'.join(map(str, widths))}_s{seed}.pt"
        train_model(config, out, force=True, quiet=True)
        paths.append(out)
    return paths


def main() -> None:
    """Train, align and measure each width; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=500, help="Test images the line is measured on.")
    parser.add_argument("--steps", type=int, default=11)
    parser.add_argument("--multipliers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="CI-sized: widths 1x and 2x of (4, 8), 1 epoch.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base, args.subset = (8, 16), None
    if args.smoke:
        base, args.subset, args.epochs, args.samples, args.steps, args.multipliers = (4, 8), 256, 1, 128, 3, [1, 2]
    header = f"{'widths':>10} {'params':>8} {'acc A':>6} {'acc B':>6} {'loss B':>15} {'error B':>15} {'s':>6}"
    print(header + "\n" + " " * 36 + "before -> after    before -> after")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for k in args.multipliers:
            widths = tuple(k * w for w in base)
            start = time.perf_counter()
            ends = train_pair(widths, args, folder)
            options = ConnectOptions(split="test", samples=args.samples, steps=args.steps, align="weights")
            res = run_connect(*ends, options, out=None, device="cpu", progress=False)
            bars = res.attrs["barriers"]
            before, after = bars["unaligned_line"]["test"], bars["line"]["test"]
            params = sum(t.numel() for t in read_checkpoint(ends[0]).state_dict.values() if t.is_floating_point())
            acc = res["line/accuracy"][0]
            print(
                f"{'-'.join(map(str, widths)):>10} {params:>8} {acc[0]:>6.3f} {acc[-1]:>6.3f} "
                f"{before['loss']:>6.3f} -> {after['loss']:<6.3f} {before['error']:>6.3f} -> {after['error']:<6.3f} "
                f"{time.perf_counter() - start:>6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
