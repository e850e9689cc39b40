"""What a new process pays before its first number: reading digits and importing an analysis, in a fresh Python.

Every CLI command, demo worker and notebook kernel starts this way. Two child processes are timed in each
round, their order alternating from round to round (the machine's drift cancels in each round's ratio):

- ``landscape``: ``load_dataset("digits", "train").tensors()``, then ``import landscape.analyses.hessian.run``;
- ``+ old imports``: the same after importing what reading digits and that module imported before they stopped
  (``sklearn.datasets``, ``sklearn.model_selection`` and ``torchvision.transforms.v2``).

Run from the repository root, in the project's environment:

    python benchmarks/startup.py [--rounds 5]

It prints each round's wall and CPU seconds of both, then the medians and the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from first_run import timed

#: what a process runs to read digits and import the Hessian analysis
LANDSCAPE = (
    "from landscape.data.loading import load_dataset; load_dataset('digits', 'train').tensors(); "
    "import landscape.analyses.hessian.run"
)
#: the imports that reading digits and the Hessian analysis no longer pay
OLD_IMPORTS = "import sklearn.datasets, sklearn.model_selection, torchvision.transforms.v2; "
WAYS = {"landscape": LANDSCAPE, "+ old imports": OLD_IMPORTS + LANDSCAPE}


def main(argv: list[str] | None = None) -> list[dict[str, tuple[float, float]]]:
    """Time both ways in fresh processes for ``--rounds`` rounds; print and return each round's ``(wall, cpu)``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="Rounds of the two processes (default 5).")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    names = list(WAYS)
    rows = []
    print(f"{'round':>5} " + " ".join(f"{name + ' (wall, cpu s)':>28}" for name in names))
    for r in range(args.rounds):
        row = {}
        for name in names if r % 2 == 0 else names[::-1]:
            row[name] = timed([sys.executable, "-c", WAYS[name]], Path.cwd())
        rows.append(row)
        print(f"{r:>5} " + " ".join(f"{row[n][0]:>18.2f} {row[n][1]:>9.2f}" for n in names), flush=True)
    for i, clock in enumerate(("wall", "cpu")):
        medians = {n: statistics.median(row[n][i] for row in rows) for n in names}
        ratio = statistics.median(row[names[0]][i] / row[names[1]][i] for row in rows)
        print(
            f"median {clock}: landscape {medians[names[0]]:.2f} s, + old imports {medians[names[1]]:.2f} s; "
            f"landscape / + old imports {ratio:.2f} (median of {len(rows)} rounds)"
        )
    return rows


if __name__ == "__main__":
    main()
