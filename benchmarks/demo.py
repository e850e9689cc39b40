"""What ``landscape demo`` costs, stage by stage: wall and CPU time of every stage, and the total.

Runs the demo (full, or ``--quick``) from nothing into a fresh folder with ``--jobs`` worker processes of one
torch thread each and prints the table the demo wrote to ``timings.json`` (the same table ends ``summary.md``):
per stage the units, the wall-clock seconds summed over its units and the CPU seconds, then the run's wall-clock
time, its CPU time, the machine's cores and the load average before and after (other work on the machine
lengthens every number). With ``--compare-jobs`` it runs the same demo again with ``--jobs 1`` and prints the
ratio of the two wall-clock times, after checking that both runs wrote the same arrays.

    python benchmarks/demo.py --quick --compare-jobs
    python benchmarks/demo.py            # the full demo (the README's first command)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from landscape.reproduce.demo import TIMINGS_FILE, run_demo
from landscape.runtime.memory import keep_freed_memory
from landscape.runtime.workers import usable_cores


def _run(out: Path, quick: bool, jobs: int) -> dict:
    """One demo from nothing into ``out``; its timings, with the wall time measured here too."""
    start = time.perf_counter()
    run_demo(out, quick=quick, jobs=jobs, device="cpu")  # the workers are quiet; the [demo] lines say what is done
    timings = json.loads((out / TIMINGS_FILE).read_text())
    timings["measured_wall_seconds"] = time.perf_counter() - start
    return timings


def _table(t: dict) -> str:
    lines = [f"{'stage':<10} {'units':>5} {'wall s':>8} {'CPU s':>8}"]
    lines += [
        f"{r['stage']:<10} {r['units']:>5} {r['wall_seconds']:>8.1f} {r['cpu_seconds']:>8.1f}" for r in t["stages"]
    ]
    lines.append(f"{'total':<10} {'':>5} {t['measured_wall_seconds']:>8.1f} {t['cpu_seconds']:>8.1f}")
    return "\n".join(lines)


def _datasets(f: h5py.File) -> list[str]:
    names: list[str] = []
    f.visititems(lambda n, item: names.append(n) if isinstance(item, h5py.Dataset) else None)
    return names


def _same_arrays(a: Path, b: Path) -> bool:
    """Whether every HDF5 file of folder ``a`` holds the arrays of the same file in ``b``, bit for bit."""
    for path in sorted(a.rglob("*.h5")):
        with h5py.File(path, "r") as fa, h5py.File(b / path.relative_to(a), "r") as fb:
            for name in _datasets(fa):
                x, y = np.asarray(fa[name][()]), np.asarray(fb[name][()])
                if x.dtype != y.dtype or x.shape != y.shape:
                    return False
                if (x.tolist() != y.tolist()) if x.dtype == object else (x.tobytes() != y.tobytes()):
                    return False
    return True


def main() -> None:
    """Run the demo and print its stage table (and the one-job comparison)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the quick demo")
    parser.add_argument("--jobs", type=int, default=usable_cores(), help="worker processes (default: the cores)")
    parser.add_argument("--compare-jobs", action="store_true", help="also run with --jobs 1 and print the ratio")
    parser.add_argument("--out", type=Path, default=None, help="keep the demo folders here (default: a temporary)")
    parser.add_argument(
        "--keep-memory",
        action="store_true",
        help="keep freed memory in the process and its workers, as `landscape demo` does (landscape.runtime.memory)",
    )
    args = parser.parse_args()
    if args.keep_memory and not keep_freed_memory():
        parser.error("--keep-memory needs glibc's malloc (Linux)")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        load = os.getloadavg()
        many = _run(root / f"jobs{args.jobs}", args.quick, args.jobs)
        print(f"landscape demo{' --quick' if args.quick else ''} --jobs {args.jobs} on {usable_cores()} cores")
        print(_table(many))
        if args.compare_jobs and args.jobs != 1:
            one = _run(root / "jobs1", args.quick, 1)
            print(f"\nthe same with --jobs 1:\n{_table(one)}")
            same = _same_arrays(root / "jobs1", root / f"jobs{args.jobs}")
            ratio = many["measured_wall_seconds"] / one["measured_wall_seconds"]
            print(f"\nwall time --jobs {args.jobs} / --jobs 1: {ratio:.2f}; same arrays: {same}")
        after = os.getloadavg()
    print(f"load average (1 min) before {load[0]:.1f}, after {after[0]:.1f}")
    print("command: python " + shlex.join(["benchmarks/demo.py", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
