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

``--compare A B --data cifar10:PATH`` is the published comparison instead (Ainsworth et al. 2023; Jordan et al.
2023, REPAIR): two networks of one architecture trained elsewhere (a 2x-wide ResNet-20 on CIFAR-10 in the
papers), the midpoint of the line after weight matching measured on the whole test split twice, with the
BatchNorm statistics interpolated as the weights are (``bn="eval"``) and re-estimated on training images
(``bn="recompute"``, the "BN reset"; networks without BatchNorm get REPAIR instead, ``repair=True``). Printed: the
ends' and the midpoints' test accuracies beside the published 94.5% / 94.2%, 17.6% and 83.9%.

Run:
    python benchmarks/alignment.py [--epochs 3] [--samples 500] [--steps 11] [--smoke]
    python benchmarks/alignment.py --compare A.pt B.pt --data cifar10:PATH [--samples N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
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


#: the published test accuracies (%) of a 2x-wide ResNet-20 on CIFAR-10: the ends, and the midpoint after weight
#: matching without and with the BatchNorm reset (Jordan et al. 2023)
PUBLISHED = {"end A": 94.5, "end B": 94.2, "midpoint, no reset": 17.6, "midpoint, reset": 83.9}


def compare(ends: list[Path], data: str, samples: int | None) -> dict[str, float]:
    """The ends' and the matched midpoints' test accuracies (%) of two trained networks, as the papers measure them.

    Args:
        ends: the two checkpoints.
        data: their dataset spec (e.g. ``cifar10:PATH``).
        samples: test images (None: the whole split).

    Returns:
        The accuracies by :data:`PUBLISHED`'s names.
    """
    options = ConnectOptions(data=data, split="test", samples=samples, steps=3, align="weights", bn="eval")
    plain = run_connect(*ends, options, out=None, device="auto", progress=False)
    accuracy = 100 * plain["line/accuracy"][0]  # the ends as trained (their own statistics), the midpoint
    out = {"end A": float(accuracy[0]), "end B": float(accuracy[-1]), "midpoint, no reset": float(accuracy[1])}
    # a BatchNorm network is reset by re-estimating its statistics, others by REPAIR
    reset = replace(options, bn="recompute") if plain.attrs["has_batchnorm"] else replace(options, repair=True)
    out["midpoint, reset"] = float(
        100 * run_connect(*ends, reset, out=None, device="auto", progress=False)["line/accuracy"][0][1]
    )
    return out


def main() -> None:
    """Train, align and measure each width; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=None, help="Test images (default 500; --compare: all).")
    parser.add_argument("--steps", type=int, default=11)
    parser.add_argument("--multipliers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="CI-sized: widths 1x and 2x of (4, 8), 1 epoch.")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="The published comparison instead.")
    parser.add_argument("--data", default=None, help="The dataset of --compare, e.g. cifar10:PATH.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.compare:
        if not args.data:
            parser.error("--compare needs --data, the dataset the two networks were trained on (e.g. cifar10:PATH)")
        measured = compare(list(args.compare), args.data, args.samples)
        print(f"{'':<20} {'measured %':>10} {'published %':>11}")
        for name, value in measured.items():
            print(f"{name:<20} {value:>10.1f} {PUBLISHED[name]:>11.1f}")
        return
    args.samples = 500 if args.samples is None else args.samples
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
