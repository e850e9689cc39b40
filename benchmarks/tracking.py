"""The cost of ``landscape train --track-sharpness N``: the same training with and without tracking.

Trains ``--model`` (default ``resnet_mini``) on ``--data`` (default digits) for ``--epochs`` with the training
defaults, once without tracking and once with ``--track-sharpness EVERY`` at the tracking defaults
(:data:`~landscape.options.sharpness.TRACK_BATCH_SIZE` images, Lanczos ``TRACK_TOL``, ``TRACK_NCV``,
``TRACK_MAXITER``, products by ``TRACK_HVP``, warm starts), alternating ``--repeats`` times, and prints the
median training time of each, the overhead ``(tracked - plain) / plain``, the records' Hessian-vector
products, and the command. The checkpoints of the two runs are checked to be equal (tracking must not change
training).

    python benchmarks/tracking.py --epochs 3 --every 10 --repeats 3
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from landscape.analyses.sharpness.track_file import sidecar_path
from landscape.models.checkpoint import load_model
from landscape.options.sharpness import TRACK_BATCH_SIZE, TRACK_HVP, TRACK_MAXITER, TRACK_NCV, TRACK_TOL
from landscape.store.read import read_result
from landscape.train import TrainConfig, train_model


def main() -> None:
    """Time training with and without sharpness tracking and print the overhead."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet_mini")
    parser.add_argument("--data", default="digits")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--every", type=int, default=10, help="--track-sharpness N")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"plain": [], "tracked": []}
    base = {"model": args.model, "data": args.data, "epochs": args.epochs, "device": args.device}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            for name, extra in (("plain", {}), ("tracked", {"track_sharpness": args.every})):
                result = train_model(TrainConfig(**base, **extra), Path(folder) / f"{name}.pt", force=True, quiet=True)
                times[name].append(result.metrics["minutes"] * 60)
        a, b = (load_model(Path(folder) / f"{n}.pt")[0].state_dict() for n in ("plain", "tracked"))
        same = all(torch.equal(a[k], b[k]) for k in a)
        side = read_result(sidecar_path(Path(folder) / "tracked.pt"))
    plain, tracked = statistics.median(times["plain"]), statistics.median(times["tracked"])
    products = side["n_products"].tolist()
    print(f"| {args.model} on {args.data}, {args.epochs} epochs, device {args.device} | seconds (median) |")
    print("| --- | --- |")
    print(f"| plain training | {plain:.2f} |")
    print(f"| --track-sharpness {args.every} | {tracked:.2f} |")
    print(f"\noverhead: {100 * (tracked - plain) / plain:+.1f}% ({len(products)} records)")
    print(
        f"tracking defaults: batch {TRACK_BATCH_SIZE}, tol {TRACK_TOL}, ncv {TRACK_NCV}, maxiter {TRACK_MAXITER}, "
        f"products by {TRACK_HVP}"
    )
    print(f"products per record: {products} (the first cold, the rest warm-started)")
    print(f"sharpness / threshold: {[round(float(x), 4) for x in side['sharpness'] / side['threshold']]}")
    print(f"the same weights with and without tracking: {same}")
    print(f"times: {times}")
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")


if __name__ == "__main__":
    main()
