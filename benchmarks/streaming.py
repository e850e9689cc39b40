"""Memory against the number of samples: fixed batches held as a list against batches that stream.

A CIFAR-10 training split of 16,500 random images is written once in the real on-disk format (the tests'
writer, ``tests/data/test_data.py``). For each N and each way, a fresh process loads the split (its uint8
images: the baseline), builds an :class:`~landscape.core.objective.Objective` of a random-init ``resnet_mini``
over N samples in batches of 128 (``--way list``: every batch normalised and held as float32, as before batches
streamed; ``--way stream``: :func:`landscape.data.batches.stream_batches`) and evaluates the loss once. It
prints the peak resident memory minus the baseline's peak (``resource.getrusage``; the loading's own transient
peak hides small rows) and the resident memory held after the evaluation minus that before, in MB.

    python benchmarks/streaming.py            # N = 256, 1024, 4096, 16384 (about a minute on 2 cores)
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = (256, 1024, 4096, 16384)
BATCH = 128


def peak_mb() -> float:
    """The process's peak resident memory so far, in MB (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def resident_mb() -> float:
    """The process's resident memory now, in MB (``/proc/self/statm``)."""
    import os

    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def one(folder: str, n: int, way: str) -> None:
    """Measure one N and way in this process; print ``peak - baseline`` and ``held - baseline`` in MB."""
    import torch

    from landscape.core.objective import Objective
    from landscape.data.batches import fixed_batches, stream_batches
    from landscape.data.loading import load_dataset
    from landscape.models import create_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = create_model("resnet_mini", num_classes=10).eval()
    dataset = load_dataset(f"cifar10:{folder}", "train")
    with torch.no_grad():  # one forward of a batch first: its activations belong to the baseline
        model(dataset.images(torch.arange(BATCH)))
    baseline, resident = peak_mb(), resident_mb()
    make = fixed_batches if way == "list" else stream_batches
    objective = Objective(model, make(dataset, BATCH, n, seed=0), check=False)
    objective.evaluate()
    print(f"{peak_mb() - baseline:.1f}/{resident_mb() - resident:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=3, metavar=("FOLDER", "N", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one[0], int(args.one[1]), args.one[2])
        return
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "data")]
    from test_data import write_cifar10

    with tempfile.TemporaryDirectory() as folder:
        write_cifar10(Path(folder), per_class=1650)  # 16,500 training images
        print(f"{'samples':>8} {'list MB peak/held':>18} {'stream MB peak/held':>20}   (RSS above the loaded split)")
        for n in SAMPLES:
            row = [
                subprocess.run(
                    [sys.executable, __file__, "--one", folder, str(n), way], check=True, capture_output=True, text=True
                ).stdout.strip()
                for way in ("list", "stream")
            ]
            print(f"{n:>8} {row[0]:>18} {row[1]:>20}", flush=True)


if __name__ == "__main__":
    main()
