"""What ``landscape demo`` costs, stage by stage, and whether its verdicts hold under other kernels, threads, seeds.

Runs the demo (full, or ``--quick``) from nothing into a fresh folder with ``--jobs`` worker processes of one
torch thread each and prints the table the demo wrote to ``timings.json`` (the same table ends ``summary.md``):
per stage the units, the wall-clock seconds summed over its units and the CPU seconds, then the run's wall-clock
time, its CPU time, the machine's cores and the load average before and after (other work on the machine
lengthens every number). With ``--compare-jobs`` it runs the same demo again with ``--jobs 1`` and prints the
ratio of the two wall-clock times, after checking that both runs wrote the same arrays.

With ``--kernels`` the same demo runs twice more, with ``ATEN_CPU_CAPABILITY=avx2`` (ATen's vector kernels of an
AVX2-only CPU) and with two torch threads per worker; with ``--replicate 3,4,5`` once more on those training
seeds (a second, disjoint set). Then every findings row is printed side by side, each run's value, interval and
verdict, with whether every run gives the same verdict; the first run's findings table follows as ``summary.md``
has it, with what it ran on (the table README.md and docs/reproduction.md show). Every demo runs in a process of
its own (``python -m landscape demo``), so that the kernels are chosen before torch starts. With ``--out DIR`` the
folders are kept (``DIR/native``, ``DIR/avx2``, ``DIR/threads2``, ``DIR/seeds3-4-5``) and a rerun resumes them:
its timings are then those of the resumed run.

    python benchmarks/demo.py --quick --compare-jobs
    python benchmarks/demo.py            # the full demo (the README's first command)
    python benchmarks/demo.py --kernels --replicate 3,4,5 --out DIR --write-docs   # the docs' findings

With ``--write-docs`` the findings are written into README.md's "Findings" section and docs/reproduction.md
(between their ``<!-- findings-... -->`` marks): what each run computed on, the first run's table with the other
runs' column, the rows side by side, and the verdicts in words, so that no number is copied by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from landscape.reproduce.demo import TIMINGS_FILE
from landscape.reproduce.table import FINDINGS_FILE, VERDICTS, Finding, findings_markdown, read_findings_record
from landscape.runtime.machine import machine_line
from landscape.runtime.workers import usable_cores


@dataclass(frozen=True)
class Variant:
    """One demo run: its folder's name, its environment and its extra ``landscape demo`` options."""

    name: str
    env: dict[str, str]
    options: tuple[str, ...] = ()


NATIVE = Variant("native", {})
KERNELS = (Variant("avx2", {"ATEN_CPU_CAPABILITY": "avx2"}), Variant("threads2", {}, ("--threads", "2")))


def _run(out: Path, quick: bool, jobs: int, variant: Variant = NATIVE) -> dict:
    """One demo into ``out`` in a process of its own; its timings, with the wall time measured here too."""
    command = [sys.executable, "-m", "landscape", "demo", "--out", str(out), "--jobs", str(jobs), "--device", "cpu"]
    command += ["--quick"] * quick + list(variant.options)
    start = time.perf_counter()
    subprocess.run(command, check=True, env={**os.environ, **variant.env})  # the [demo] lines say what is done
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


def _cell(f: Finding) -> str:
    if f.verdict == "not measured":
        return "not measured"
    return f"{f.value:.4g} [{f.low:.4g}, {f.high:.4g}] {f.verdict}"


def side_by_side(runs: dict[str, list[Finding]]) -> tuple[str, bool]:
    """Every findings row of every run side by side, and whether every row has one verdict in all runs.

    Args:
        runs: each run's findings by its name, rows in the same order.

    Returns:
        The Markdown table (claim, one cell per run, "same verdict") and whether all rows agree.
    """
    names = list(runs)
    first = runs[names[0]]
    lines = [f"| claim | {' | '.join(names)} | same verdict |", "|---" * (len(names) + 2) + "|"]
    agree = True
    for i, row in enumerate(first):
        stable = _stable(runs, i)
        agree &= stable
        same = "yes" if stable else "**no**"
        lines.append(f"| {row.claim} | " + " | ".join(_cell(runs[n][i]) for n in names) + f" | {same} |")
    return "\n".join(lines), agree


def with_other_runs(runs: dict[str, list[Finding]]) -> str:
    """The first run's findings table with a last column: whether the other runs give each row the same verdict.

    Args:
        runs: each run's findings by its name, the first run's first, rows in the same order.

    Returns:
        The Markdown table of :func:`landscape.reproduce.table.findings_markdown` with a column for the other runs:
        "same verdict", or for a row that is not stable every run's verdict, its own verdict cell then reading
        "**not stable**" rather than a verdict another run reverses.
    """
    names = list(runs)
    first, others = runs[names[0]], names[1:]
    lines = findings_markdown(first).splitlines()
    out = [lines[0] + f" {', '.join(others)} |", lines[1] + " --- |"]
    for i, line in enumerate(lines[2:]):
        if not others:
            cell = "–"
        elif _stable(runs, i):
            cell = "same verdict"
        else:
            cell = "; ".join(f"{n} {runs[n][i].verdict}" for n in names)
            head, verdict = line.rstrip(" |").rsplit(" | ", 1)
            assert verdict == first[i].verdict, line  # the verdict is findings_markdown's last column
            line = f"{head} | **not stable** |"
        out.append(f"{line} {cell} |")
    return "\n".join(out)


def _stable(runs: dict[str, list[Finding]], i: int, names: list[str] | None = None) -> bool:
    """Whether every run (of ``names``, default all) gives row ``i`` the same verdict."""
    return len({runs[n][i].verdict for n in (names or list(runs))}) == 1


#: the files ``--write-docs`` fills, relative to the repository, and the marked blocks each holds
DOCS = {
    "README.md": ("findings-summary",),
    "docs/reproduction.md": ("findings-machine", "findings-table", "findings-side", "findings-verdicts"),
}
ROOT = Path(__file__).resolve().parents[1]


def fill_block(text: str, name: str, content: str) -> str:
    """``text`` with what lies between ``<!-- name -->`` and ``<!-- /name -->`` replaced by ``content``.

    Raises:
        ValueError: the text does not hold the two marks once each, in that order.
    """
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"the text does not hold {start} ... {end} once")
    head, rest = text.split(start)
    return f"{head}{start}\n{content}\n{end}{rest.split(end)[1]}"


def _g(x: float) -> str:
    return f"{x:.3g}" if np.isfinite(x) else "–"


def _short(f: Finding) -> str:
    return f"{f.claim} ({_g(f.value)} [{_g(f.low)}, {_g(f.high)}])" if f.verdict != "not measured" else f.claim


def verdicts_in_words(runs: dict[str, list[Finding]], values: bool = True) -> str:
    """The rows every run gives one verdict, one bullet per verdict; then the rows that are not stable.

    Args:
        runs: each run's findings by its name, the first run's first, rows in the same order.
        values: whether each row carries its value and interval (the first run's).

    Returns:
        Markdown bullets: "**reproduced** (k): claim (value [low, high]); ..." per verdict that occurs among the
        stable rows, then "**not stable** (k): claim (run verdict, ...)" when some row differs between the runs.
    """
    names = list(runs)
    first = runs[names[0]]
    lines = []
    for word in VERDICTS:
        rows = [f for i, f in enumerate(first) if f.verdict == word and _stable(runs, i)]
        if rows:
            lines.append(f"- **{word}** ({len(rows)}): " + "; ".join(_short(f) if values else f.claim for f in rows))
    unstable = [i for i in range(len(first)) if not _stable(runs, i)]
    if unstable:
        cells = [f"{first[i].claim} ({', '.join(f'{n} {runs[n][i].verdict}' for n in names)})" for i in unstable]
        lines.append(f"- **not stable** ({len(unstable)}, another run gives another verdict): " + "; ".join(cells))
    return "\n".join(lines)


def machine_and_seeds(runs: dict[str, list[Finding]], records: dict[str, dict]) -> str:
    """Which rows the machine alone changes (runs on the first run's seeds) and whether other seeds change them too.

    Args:
        runs: each run's findings by its name, the first run's first, rows in the same order.
        records: each run's ``findings.json`` as read (its ``seeds``).

    Returns:
        A sentence (with a leading space), or "" when there are not both kinds of run.
    """
    names = list(runs)
    seeds = records[names[0]].get("seeds")
    same = [n for n in names[1:] if records[n].get("seeds") == seeds]
    other = [n for n in names[1:] if records[n].get("seeds") != seeds]
    if not same or not other:
        return ""
    first = runs[names[0]]
    by_machine = [i for i in range(len(first)) if not _stable(runs, i, [names[0], *same])]
    by_seeds = [i for i in by_machine if not _stable(runs, i, [names[0], *other])]
    return (
        f" On the same seeds the kernels and threads ({', '.join(same)}) change the verdict of {len(by_machine)}"
        f" rows; other seeds ({', '.join(other)}) change {len(by_seeds)} of them as well."
    )


def doc_blocks(runs: dict[str, list[Finding]], records: dict[str, dict]) -> dict[str, str]:
    """The content of every block :data:`DOCS` names, from the runs' findings and their records.

    Args:
        runs: each run's findings by its name, the first run's first.
        records: each run's ``findings.json`` as read (its seeds and what it computed on).

    Returns:
        The blocks by name.
    """
    names = list(runs)
    first = runs[names[0]]
    counts = {w: sum(f.verdict == w for f in first) for w in VERDICTS}
    unstable = [f.claim for i, f in enumerate(first) if not _stable(runs, i)]
    cap = records[names[0]].get("cpu_capability", "?")
    said = ", ".join(f"{counts[w]} **{w}**" for w in VERDICTS[1:] if counts[w])
    summary = f"On CPU capability {cap}, {counts['reproduced']} of its {len(first)} rows are **reproduced**, {said}."
    if len(names) > 1:
        kept = {w: sum(f.verdict == w and _stable(runs, i) for i, f in enumerate(first)) for w in VERDICTS}
        kept_said = ", ".join(f"{kept[w]} {w}" for w in VERDICTS if kept[w])
        more = f"{len(names) - 1} more run{'s' * (len(names) > 2)} ({', '.join(names[1:])})"
        summary += (
            f" Beside it, {more}: {len(first) - len(unstable)} rows take one verdict in all {len(names)} ({kept_said})"
            + (f", and {len(unstable)} are **not stable**: " + "; ".join(unstable) + "." if unstable else ".")
        )
    machine = "\n".join(
        f"- {n}: seeds {', '.join(map(str, r.get('seeds', [])))}; {machine_line(r)}" for n, r in records.items()
    )
    side, agree = side_by_side(runs) if len(names) > 1 else ("(one run)", True)
    verdict = f"Every verdict the same in all {len(names)} runs: {'yes' if agree else 'no'}." + machine_and_seeds(
        runs, records
    )
    return {
        "findings-summary": summary,
        "findings-machine": machine,
        "findings-table": with_other_runs(runs),
        "findings-side": f"{side}\n\n{verdict}",
        "findings-verdicts": verdicts_in_words(runs),
    }


def write_docs(runs: dict[str, list[Finding]], records: dict[str, dict], root: Path = ROOT) -> list[Path]:
    """Write :func:`doc_blocks` into the files of :data:`DOCS` under ``root``; the files written."""
    blocks = doc_blocks(runs, records)
    written = []
    for name, marks in DOCS.items():
        path = root / name
        text = path.read_text(encoding="utf-8")
        for mark in marks:
            text = fill_block(text, mark, blocks[mark])
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    """Run the demo and print its stage table (and the one-job comparison, the side-by-side findings)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the quick demo")
    parser.add_argument("--jobs", type=int, default=usable_cores(), help="worker processes (default: the cores)")
    parser.add_argument("--compare-jobs", action="store_true", help="also run with --jobs 1 and print the ratio")
    parser.add_argument("--kernels", action="store_true", help="also run with ATEN_CPU_CAPABILITY=avx2 and 2 threads")
    parser.add_argument("--replicate", default=None, help="also run on these training seeds, e.g. 3,4,5")
    parser.add_argument("--out", type=Path, default=None, help="keep the demo folders here (default: a temporary)")
    parser.add_argument("--write-docs", action="store_true", help="write the findings into README.md and the docs")
    args = parser.parse_args()
    variants = [NATIVE, *(KERNELS if args.kernels else ())]
    if args.replicate:
        seeds = args.replicate.replace(",", " ").split()
        variants.append(Variant(f"seeds{'-'.join(seeds)}", {}, ("--seeds", ",".join(seeds))))
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        load = os.getloadavg()
        main_run = _run(root / NATIVE.name, args.quick, args.jobs)
        print(f"landscape demo{' --quick' if args.quick else ''} --jobs {args.jobs} on {usable_cores()} cores")
        print(_table(main_run))
        if args.compare_jobs and args.jobs != 1:
            one = _run(root / "jobs1", args.quick, 1)
            print(f"\nthe same with --jobs 1:\n{_table(one)}")
            same = _same_arrays(root / "jobs1", root / NATIVE.name)
            ratio = main_run["measured_wall_seconds"] / one["measured_wall_seconds"]
            print(f"\nwall time --jobs {args.jobs} / --jobs 1: {ratio:.2f}; same arrays: {same}")
        for variant in variants[1:]:
            timings = _run(root / variant.name, args.quick, args.jobs, variant)
            print(
                f"\n{variant.name}: {timings['measured_wall_seconds']:.1f} s wall, {timings['cpu_seconds']:.1f} s CPU"
            )
        if len(variants) > 1 or args.out or args.write_docs:
            records = {v.name: json.loads((root / v.name / FINDINGS_FILE).read_text()) for v in variants}
            runs = {v.name: read_findings_record(root / v.name / FINDINGS_FILE) for v in variants}
            print("\nWhat each run computed on:")
            for name, record in records.items():
                print(f"- {name}: seeds {', '.join(map(str, record['seeds']))}; {machine_line(record)}")
            if len(variants) > 1:
                table, agree = side_by_side(runs)
                print(f"\n{table}\n\nevery verdict the same in all {len(runs)} runs: {agree}")
            print(f"\nThe findings of {NATIVE.name} ({machine_line(records[NATIVE.name])}), beside the other runs:\n")
            print(with_other_runs(runs))
            if args.write_docs:
                print("\nwrote the findings into " + ", ".join(map(str, write_docs(runs, records))))
        after = os.getloadavg()
    print(f"\nload average (1 min) before {load[0]:.1f}, after {after[0]:.1f}")
    print("command: python " + shlex.join(["benchmarks/demo.py", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
