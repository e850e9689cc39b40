"""Whether the demo's verdicts need its sizes: every findings row recomputed on a share of each seed's units.

For each share ``f`` of ``--shares`` the mini-batch units of the spectrum and sharpness rows (the rows of each
seed's file, in order; :func:`landscape.reproduce.inputs.stack_seeds`) and the test images of the accuracy row
are cut to the first ``ceil(f n)`` of each seed, and every findings row is computed again with the same
bootstrap (:func:`landscape.reproduce.findings.findings`). The Fourier rows (batches of images of one profile)
and the seed-level rows (Paper B, the width sweep) are computed on all their units at every share. Printed: per
row and share, the units, the width of the 95% interval and the verdict; then the shares at which every verdict
is that of the full sizes. The demo's files are only read.

Run after the full demo:
    python benchmarks/demo_sizes.py demo [--shares 1 0.67 0.33] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from unittest import mock

import numpy as np

from landscape.reproduce import findings as F
from landscape.reproduce import inputs
from landscape.reproduce.demo import FULL
from landscape.reproduce.inputs import Grouped


def _first_share(stack, share: float):
    """``stack`` (a function returning a :class:`Grouped`) with each seed's units cut to the first share."""

    def cut(*args, **kwargs):
        grouped = stack(*args, **kwargs)
        if grouped is None or share >= 1:
            return grouped
        keep = [max(1, math.ceil(share * n)) for n in grouped.sizes]
        starts = np.cumsum([0, *grouped.sizes[:-1]])
        rows = np.concatenate([grouped.units[s : s + k] for s, k in zip(starts, keep)])
        return Grouped(rows, keep, grouped.seeds)

    return cut


def rows_at(folder: Path, share: float, resamples: int) -> list[F.Finding]:
    """Every findings row of ``folder`` with the spectrum, sharpness and accuracy units cut to ``share``."""
    cut = _first_share(inputs.stack_seeds, share)
    with mock.patch.object(inputs, "stack_seeds", cut), mock.patch.object(F, "stack_seeds", cut):
        return F.findings(folder, FULL.models, seed=0, resamples=resamples, fourier_unit=FULL.fourier_unit)


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a full demo's folder")
    parser.add_argument("--shares", type=float, nargs="+", default=[1.0, 0.67, 0.33])
    parser.add_argument("--resamples", type=int, default=FULL.resamples)
    args = parser.parse_args()
    shares = sorted(set(args.shares) | {1.0}, reverse=True)
    table = {share: rows_at(args.folder, share, args.resamples) for share in shares}
    full = table[1.0]
    header = " | ".join(f"share {s:g}: n, width, verdict" for s in shares)
    print(f"| row | {header} |")
    print("|---" * (len(shares) + 1) + "|")
    for i, row in enumerate(full):
        cells = []
        for share in shares:
            r = table[share][i]
            width = r.high - r.low
            cells.append(f"{r.n}, {'–' if not math.isfinite(width) else f'{width:.3g}'}, {r.verdict}")
        print(f"| {row.claim} | " + " | ".join(cells) + " |")
    same = [s for s in shares if [r.verdict for r in table[s]] == [r.verdict for r in full]]
    print(f"every verdict as at the full sizes at shares: {', '.join(f'{s:g}' for s in same)}")


if __name__ == "__main__":
    main()
