"""Whether the demo's verdicts need its sizes: every findings row on a share of each seed's units, and on other seeds.

For each share ``f`` of ``--shares`` the mini-batch units of the spectrum and sharpness rows (the rows of each
seed's file, in order; :func:`landscape.reproduce.inputs.stack_seeds`) and the test images of the accuracy row
are cut to the first ``ceil(f n)`` of each seed, and every findings row is computed again with the same
interval over seeds (:data:`landscape.reproduce.findings.ROWS`). The Fourier rows (batches of images of one
profile) and the seed-level rows (Paper B, the width sweep) are computed on all their units at every share.
Printed: per row and share, the units, the width of the 95% interval and the verdict; then the shares at which
every verdict is that of the full sizes.

With ``--seed-sets`` every row is computed again at all its units on each set of training seeds (e.g. ``0,1,2``,
``3,4,5`` and ``0,1,2,3,4,5``): which rows a second set of seeds decides otherwise, and which more seeds decide.
``--also DIR`` adds the seed folders of a second demo folder (e.g. ``landscape demo --seeds 3,4,5 --out DIR``;
its ``seedK/`` folders), so that both runs' seeds can be pooled. The demos' files are only read.

Run after the full demo:
    python benchmarks/demo_sizes.py demo [--shares 1 0.67 0.33]
    python benchmarks/demo_sizes.py demo --also demo-345 --seed-sets 0,1,2 3,4,5 0,1,2,3,4 0,1,2,3,4,5
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from unittest import mock

import numpy as np

from landscape.reproduce import findings as F
from landscape.reproduce import inputs
from landscape.reproduce.inputs import Grouped, seed_folders
from landscape.reproduce.settings import FULL
from landscape.reproduce.table import DemoFiles, Finding
from landscape.reproduce.widths import WidthSweep


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


def demo_files(folder: Path, also: Path | None, seeds: list[int] | None) -> DemoFiles:
    """The inputs of every row: ``folder``'s seeds and ``also``'s (its ``seedK/`` folders), or only ``seeds``.

    The rows read from one demo folder (Paper B's ``paper_b.json``, the width sweep's ``widths/``) read that of the
    folder holding the first seed.
    """
    folders = seed_folders(folder)
    owner = dict.fromkeys(folders, folder)
    if also is not None:
        extra = {s: d for s, d in seed_folders(also).items() if s != 0 or (also / "resnet_mini.pt").is_file()}
        folders.update(extra)
        owner.update(dict.fromkeys(extra, also))
    if seeds is not None:
        folders = {s: folders[s] for s in sorted(seeds) if s in folders}
    root = owner[next(iter(folders))] if folders else folder
    return DemoFiles(root, folders, FULL.models, FULL.fourier_unit, FULL.widths or WidthSweep())


def rows_at(src: DemoFiles, share: float) -> list[Finding]:
    """Every findings row of ``src`` with the spectrum, sharpness and accuracy units cut to ``share``."""
    cut = _first_share(inputs.stack_seeds, share)
    with mock.patch.object(inputs, "stack_seeds", cut), mock.patch.object(F, "stack_seeds", cut):
        return [finding for row in F.ROWS for finding in row(src)]


def _cell(r: Finding) -> str:
    width = r.high - r.low
    return f"{r.n}, {'–' if not math.isfinite(width) else f'{width:.3g}'}, {r.verdict}"


def _print_table(columns: dict[str, list[Finding]]) -> None:
    names = list(columns)
    first = columns[names[0]]
    print(f"| row | {' | '.join(f'{n}: n, width, verdict' for n in names)} |")
    print("|---" * (len(names) + 1) + "|")
    for i, row in enumerate(first):
        print(f"| {row.claim} | " + " | ".join(_cell(columns[n][i]) for n in names) + " |")


def main() -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a full demo's folder")
    parser.add_argument("--shares", type=float, nargs="+", default=[1.0, 0.67, 0.33])
    parser.add_argument("--also", type=Path, default=None, help="a second demo folder whose seedK/ folders join")
    parser.add_argument("--seed-sets", nargs="+", default=[], help="sets of training seeds, e.g. 0,1,2 3,4,5")
    args = parser.parse_args()
    src = demo_files(args.folder, args.also, None)
    shares = sorted(set(args.shares) | {1.0}, reverse=True)
    if len(shares) > 1 or not args.seed_sets:
        main_seeds = demo_files(args.folder, None, None)
        table = {f"share {s:g}": rows_at(main_seeds, s) for s in shares}
        _print_table(table)
        full = table["share 1"]
        same = [s for s in shares if [r.verdict for r in table[f"share {s:g}"]] == [r.verdict for r in full]]
        print(f"every verdict as at the full sizes at shares: {', '.join(f'{s:g}' for s in same)}\n")
    if args.seed_sets:
        sets = {text: [int(s) for s in text.replace(",", " ").split()] for text in args.seed_sets}
        missing = sorted({s for seeds in sets.values() for s in seeds} - set(src.folders))
        if missing:
            parser.error(f"no folder of seeds {missing} in {args.folder} or --also")
        columns = {
            f"seeds {text}": rows_at(demo_files(args.folder, args.also, seeds), 1.0) for text, seeds in sets.items()
        }
        _print_table(columns)


if __name__ == "__main__":
    main()
