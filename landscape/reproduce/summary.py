"""The demo's ``summary.md``: the models, the findings, Paper B's run, two seeds' barriers, then every figure.

The first paragraph says what the run computed on (torch, the CPU capability, threads, device); the first table
holds the first seed's models (whose figures follow), a second one every seed's; the paragraph above the findings
table says what its intervals cover (the trainings: an interval over seeds).
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from landscape.analyses.connect.summary import ALL_PATHS, path_barriers
from landscape.reproduce.inputs import read_paper_b, seeds_text
from landscape.reproduce.paper_b import written_by_demo
from landscape.reproduce.widths import WIDTH_DIR, PairBarriers, width_label, width_table
from landscape.runtime.machine import machine_line
from landscape.store.files import WRITTEN_BY, write_text
from landscape.store.read import read_result
from landscape.version import __version__


@dataclass
class ModelReport:
    """What the summary says about one model trained with one seed."""

    model: str
    seed: int
    checkpoint: Path
    test_accuracy: float
    top_eigenvalue: float
    negative_share: float
    hf_msa: float
    hf_conv: float
    figures: list[Path]


@dataclass(frozen=True)
class FindingsText:
    """What the paragraph above the findings table says about the intervals.

    Attributes:
        table: the Markdown table of :func:`landscape.reproduce.findings.findings_markdown`.
        seeds: the training seeds.
        spectrum_batch: images per mini-batch of the spectra.
        fourier_unit: images per batch, the Fourier statistics' unit.
    """

    table: str
    seeds: tuple[int, ...]
    spectrum_batch: int
    fourier_unit: int


def _fmt(value: float, spec: str) -> str:
    return "–" if math.isnan(value) else format(value, spec)


def _cells(r: ModelReport) -> str:
    return (
        f"{_fmt(r.test_accuracy, '.4f')} | {_fmt(r.top_eigenvalue, '.4g')} | {_fmt(r.negative_share, '.3f')} "
        f"| {_fmt(r.hf_msa, '.3f')} | {_fmt(r.hf_conv, '.3f')} |"
    )


_COLUMNS = (
    "test accuracy | top Hessian eigenvalue | share of negative eigenvalues "
    "| high-freq Delta log amp, MSA | high-freq Delta log amp, Conv/MLP |"
)


def _models_tables(reports: Sequence[ModelReport], seed_reports: Sequence[ModelReport]) -> list[str]:
    """The first seed's models side by side; then, with several seeds, one row per model and seed."""
    lines = [f"| model | {_COLUMNS}", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.model} | {_cells(r)}" for r in reports]
    lines.append("")
    if len({r.seed for r in seed_reports}) > 1:
        lines += [
            "Every training seed (seed K's files in `seedK/`; the first seed's are the table above):",
            "",
            f"| model | seed | {_COLUMNS}",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [f"| {r.model} | {r.seed} | {_cells(r)}" for r in seed_reports]
        lines.append("")
    return lines


def _paragraph(text: str) -> list[str]:
    return textwrap.wrap(text, width=112, break_on_hyphens=False)


def _findings_section(text: FindingsText) -> list[str]:
    """The "Findings" heading, the paragraph that says what the value and the interval are, and the table."""
    paragraph = (
        "A verdict for each claim of Paper A and Paper B (landscape.reproduce.findings). Each model is trained "
        f"with {seeds_text(text.seeds)}; the value is the statistic on all units of all these trainings "
        f"(mini-batches of {text.spectrum_batch} for the spectra, the test images for accuracy, batches of "
        f"{text.fourier_unit} of the Fourier file's images). Training randomness enters once per seed, so the 95% "
        "interval is over the seeds: the value -/+ the t quantile of (seeds - 1) degrees of freedom times the "
        "delete-one-seed jackknife's standard error (for a ratio, on the log scale). A claim is reproduced or "
        "contradicted only when it holds across the trainings (one seed gives no interval): reproduced when the "
        "interval lies on the claimed side of zero (or of the stated threshold), contradicted when it lies on the "
        "other side, inconclusive when it contains it. A row whose interval ends near its threshold can take "
        "another verdict on other seeds, or on a machine whose kernels differ (their last bits, amplified by "
        "training, make other trainings): docs/reproduction.md gives every row on a second set of seeds and on "
        "other kernels."
    )
    return ["## Findings", "", *_paragraph(paragraph), "", text.table, ""]


def _pct(value: float) -> str:
    return _fmt(100 * float(value), ".1f")


def _paper_b_section(path: Path, quick: bool) -> list[str]:
    """Paper B's run: where the rows come from, its size, and one row per seed (nothing when there is no file)."""
    if not path.is_file():
        why = "the quick demo leaves it out (its trainings take minutes)" if quick else "no paper_b.json"
        return ["## Paper B", "", f"Not measured: {why}; the full demo measures it.", ""]
    rows = read_paper_b(path)
    if written_by_demo(path):
        source = f"the demo's own run ({json.loads(path.read_text(encoding='utf-8')).get('description', '')})"
    else:
        source = f"the rows of `{path.name}`, which the demo did not write (e.g. `benchmarks/cnn_init_vit.py`)"
    about = (
        f"Paper B's row comes from {source}: test accuracy (%) on the digits test split; the CNN-initialised ViT "
        "is trained for the CNN's steps and as many again, the random-init control for twice the steps."
    )
    lines = [
        "## Paper B",
        "",
        *_paragraph(about),
        "",
        "| fraction | seed | train images | steps per stage | convvit (CNN) | vit_rpe, CNN init "
        "| vit_rpe, random init, 2x steps |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.get('fraction', '–')} | {r.get('seed', '–')} | {r.get('n_train', '–')} | {r.get('steps', '–')} "
            f"| {_pct(r.get('cnn', math.nan))} | {_pct(r.get('vit_cnn_init', math.nan))} "
            f"| {_pct(r.get('vit_random_2x', math.nan))} |"
        )
    return [*lines, ""]


def _inside(path: str, folder: Path) -> str:
    """``path`` relative to ``folder`` when it lies inside it, else as given."""
    try:
        return Path(path).resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return path


def _between_section(between: Sequence[Path], out_dir: Path) -> list[str]:
    """The barriers between the two seeds' models (the connect file first in ``between``, then its figures)."""
    if not between:
        return []
    path, figures = Path(between[0]), list(between[1:])
    result = read_result(path)
    a, b = (_inside(str(result.attrs.get(k, "?")), out_dir) for k in ("checkpoint", "other_checkpoint"))
    bn = "re-estimated at every point" if result.attrs.get("bn") == "recompute" else "interpolated (eval)"
    aligned = str(result.attrs.get("align", "none")) != "none"
    about = (
        f"`{path.name}`: the straight line theta(a) = (1 - a) theta_A + a theta_B between `{a}` and `{b}` "
        "(the same model trained from two seeds) and the trained quadratic Bezier curve between them "
        f"(Garipov et al. 2018), BatchNorm statistics {bn}. A barrier is max over the path of the loss (or error) "
        "above the straight interpolation of the endpoints' values (Frankle et al. 2020). Permuting a layer's "
        "hidden units does not change the function, so a barrier between two trainings as they are says nothing "
        "about basins: "
        + (
            "theta_B's units are first permuted to match theta_A's by weight matching (Ainsworth et al. 2023); "
            "`line` and `curve` join theta_A to the aligned theta_B, `unaligned_line` to theta_B as trained. A "
            "line barrier near 0 after alignment means the two minima share a basin up to a permutation."
            if aligned
            else "the line and curve join theta_B as trained (no alignment), so a line barrier above 0 does not "
            "show that the minima lie in different basins (`landscape connect --align weights` tests that)."
        )
    )
    lines = ["## Between two minima", "", *_paragraph(about), ""]
    lines += ["| path | split | loss barrier | at | error barrier | at |", "| --- | --- | --- | --- | --- | --- |"]
    for group, coord in ALL_PATHS:
        barriers = path_barriers(result, group)
        for split, x in (barriers or {}).items():
            lines.append(
                f"| {group} | {split} | {_fmt(x.loss, '.4g')} | {coord} = {_fmt(x.loss_at, '.2f')} "
                f"| {_fmt(x.error, '.4g')} | {coord} = {_fmt(x.error_at, '.2f')} |"
            )
    lines.append("")
    lines += [f"![{p.stem}]({p.relative_to(out_dir).as_posix()})" for p in figures]
    return [*lines, ""]


def _width_section(rows: Sequence[PairBarriers], under_between: bool) -> list[str]:
    """The width sweep: every seed pair's barriers before and after weight matching at each width."""
    if not rows:
        return []
    widths = ", ".join(f"{width_label(k)}x" for k in sorted({r.k for r in rows}))
    about = (
        f"The line between `{rows[0].model}` trained from every pair of seeds, at {widths} its "
        f"channels (`{WIDTH_DIR}/`), on the test split, BatchNorm statistics re-estimated at every point: its loss "
        "and error barriers to theta_B as trained and to theta_B with its units permuted to match theta_A by "
        "weight matching. Ainsworth et al. (2023) report that the barrier left after matching shrinks as the "
        'network widens; the findings row "After alignment the barrier falls with width" is this table\'s '
        "widest-minus-narrowest difference of the matched barriers, averaged over the seed pairs."
    )
    head = "### Barriers against width" if under_between else "## Barriers against width"
    return [head, "", *_paragraph(about), "", *width_table(rows), ""]


def _cost_section(table: Sequence[tuple[str, int, float, float]], wall: float, jobs: int | None) -> list[str]:
    """The run's cost: each stage's units, wall and CPU seconds (summed over the units), and the total."""
    cpu = sum(row[3] for row in table)
    workers = "" if jobs is None else f" on {jobs} worker process{'es' if jobs != 1 else ''} of one torch thread"
    lines = [
        "## What this run cost",
        "",
        f"{wall:.0f} s of wall-clock time{workers}, {cpu:.0f} s of CPU time. Per stage, summed over its units (a",
        "stage whose file was complete was skipped and costs next to nothing):",
        "",
        "| stage | units | wall (s) | CPU (s) |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {stage} | {units} | {w:.1f} | {c:.1f} |" for stage, units, w, c in table]
    return [*lines, ""]


def write_summary(
    reports: list[ModelReport],
    shared_figures: list[Path],
    out_dir: Path,
    *,
    quick: bool,
    findings_text: FindingsText | None = None,
    seed_reports: Sequence[ModelReport] = (),
    jobs: int | None = None,
    machine: dict[str, Any] | None = None,
    between: Sequence[Path] = (),
    widths: Sequence[PairBarriers] = (),
    force: bool = False,
    cost: tuple[Sequence[tuple[str, int, float, float]], float] | None = None,
) -> Path:
    """Write ``summary.md``: the models side by side, the findings, Paper B's run, then every figure embedded.

    Args:
        reports: the numbers of each model of the first seed (the figures are theirs).
        shared_figures: the figures that overlay the models.
        out_dir: the demo folder.
        quick: the quick demo (said in the title).
        findings_text: the findings table and what its intervals rest on (a "Findings" section after the models'
            tables, then a "Paper B" section), or None to leave both out.
        seed_reports: the numbers of each model and seed (a second table when there are several seeds).
        jobs: the worker processes the demo ran on (said in the opening paragraph), or None.
        machine: what the run computed on (:func:`landscape.runtime.machine.machine`: torch version, CPU
            capability, torch threads per worker, device; said in the opening paragraph), or None.
        between: the connect file of two seeds' models and its figures (a "Between two minima" section after
            Paper B's), or empty to leave it out.
        widths: the width sweep's barriers (:func:`landscape.reproduce.widths.read_barriers`), a table in that
            section, or empty.
        force: replace a ``summary.md`` that landscape did not write (see
            :func:`landscape.store.files.check_replaceable`).
        cost: what the run cost: its stage table (:func:`landscape.runtime.workers.stage_table`) and its
            wall-clock seconds (a last section), or None.

    Returns:
        The path of ``summary.md``.
    """
    first = reports[0].seed if reports else 0
    threads = (machine or {}).get("torch_threads", 1)
    where = "in one process" if jobs == 1 else f"on {jobs} worker processes"
    ran = f"Computed {where} of {'one torch thread' if threads == 1 else f'{threads} torch threads'}. " if jobs else ""
    if machine:
        ran += f"Ran on: {machine_line(machine)}. "
    lines = [
        "# landscape demo" + (" (quick)" if quick else ""),
        "",
        "Digits data (scikit-learn, 1x32x32). Surfaces: loss = NLL + 0.05 * sum_p ||theta_p|| (Paper A's plotted",
        "loss) on filter-normalised directions. Spectrum: top-5 largest-magnitude Hessian eigenvalues of the NLL of",
        "every mini-batch of 16 (BN in eval mode; the norm-sum term is left out because its Hessian, 0.05/||theta_p||",
        "on each tensor, swamps the data term for small tensors). High-frequency value: Delta log amplitude at the",
        "highest frequency, averaged over the blocks of each kind (MSA vs Conv/MLP; downsampling counts as Conv).",
        f"{ran}The models trained with seed {first}, whose surfaces and figures follow:",
        "",
    ]
    lines += _models_tables(reports, seed_reports)
    if findings_text is not None:
        lines += _findings_section(findings_text)
        lines += _paper_b_section(out_dir / "paper_b.json", quick)
    lines += _between_section(between, out_dir)
    lines += _width_section(widths, bool(between))
    for r in reports:
        lines += [f"## {r.model}", ""]
        lines += [f"![{p.stem}]({p.relative_to(out_dir).as_posix()})" for p in r.figures]
        lines.append("")
    if shared_figures:
        lines += ["## All models", ""]
        lines += [f"![{p.stem}]({p.relative_to(out_dir).as_posix()})" for p in shared_figures]
        lines.append("")
    if cost is not None:
        lines += _cost_section(*cost, jobs)
    lines.append(f"<!-- landscape {__version__} ({WRITTEN_BY}) -->")
    path = out_dir / "summary.md"
    write_text(path, "\n".join(lines) + "\n", force=force, kind="summary")
    return path
