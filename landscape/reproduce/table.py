"""The findings table's rows: one :class:`Finding` per claim, made from an interval over training seeds.

A row of :mod:`landscape.reproduce.findings` reads its units seed by seed (a
:class:`~landscape.reproduce.inputs.Grouped`), takes its statistic's interval over the seeds with
:func:`one_model` (one model) or :func:`compare` (two models), and states its verdict with :func:`measured`;
:func:`findings_markdown` writes the table, :func:`findings_record` its plain data (``findings.json``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from landscape.errors import LandscapeError
from landscape.reproduce.inputs import Grouped
from landscape.reproduce.statistics import Interval, seed_jackknife, seed_weights, verdict
from landscape.reproduce.widths import WidthSweep

VERDICTS = ("reproduced", "contradicted", "inconclusive", "not measured")


@dataclass(frozen=True)
class Finding:
    """The verdict on one claim.

    Attributes:
        claim: the claim, one line, the paper's words in ours.
        paper: ``"A"``, ``"B"`` or ``"Re-Basin"`` (Ainsworth et al. 2023's width effect, the demo's own test of it).
        statistic: what was measured, one line.
        value: the statistic on all the units.
        low: the lower end of its 95% interval over seeds (:func:`~landscape.reproduce.statistics.seed_jackknife`).
        high: the upper end of its 95% interval.
        n: the number of units over all seeds (mini-batches, images, batches of images, seed pairs, or seeds for
            Paper B; 0 when not measured).
        verdict: one of :data:`VERDICTS`.
        where: the files the number comes from, or the command that measures it.
        seeds: the number of trained models (seeds) the units come from (0 when not measured).
        se: the jackknife standard error over seeds (of the log of the value for a ratio; NaN without an
            interval).
        df: the degrees of freedom of the interval's t quantile (seeds - 1).
    """

    claim: str
    paper: str
    statistic: str
    value: float
    low: float
    high: float
    n: int
    verdict: str
    where: str
    seeds: int = 0
    se: float = math.nan
    df: int = 0


@dataclass(frozen=True)
class DemoFiles:
    """What every findings row reads: the demo folder, its seeds' folders, the models and the sizes of its units.

    Attributes:
        root: the demo folder.
        folders: ``{training seed: its folder}`` (:func:`landscape.reproduce.inputs.seed_folders`).
        models: the models (the roles ResNet, ViT and AlterNet go to the first name starting with ``resnet``,
            ``vit`` and ``alternet``).
        fourier_unit: images per batch of the Fourier statistics.
        widths: the width sweep whose ``widths/`` files give the width row.
    """

    root: Path
    folders: dict[int, Path]
    models: tuple[str, ...]
    fourier_unit: int
    widths: WidthSweep


def not_measured(claim: str, paper: str, statistic: str, where: str) -> Finding:
    """A finding whose inputs are absent; ``where`` names the command that makes them."""
    return Finding(claim, paper, statistic, math.nan, math.nan, math.nan, 0, "not measured", where)


def measured(
    claim: str,
    paper: str,
    statistic: str,
    estimate: Interval,
    units: tuple[int, int],
    where: str,
    *,
    side: str,
    threshold: float = 0.0,
) -> Finding:
    """A measured finding: its verdict from its interval over seeds.

    Args:
        claim: the claim, one line.
        paper: the paper column.
        statistic: what was measured, one line.
        estimate: the statistic's interval over seeds (:func:`one_model`, :func:`compare`,
            :func:`~landscape.reproduce.statistics.seed_mean`).
        units: ``(n, seeds)``: units over all seeds, and seeds.
        where: the files the number comes from.
        side: the claimed side of ``threshold``, ``"greater"`` or ``"less"``.
        threshold: the claimed threshold (on the value's scale, also for a ratio).

    Returns:
        The :class:`Finding`.
    """
    rule = verdict(estimate.low, estimate.high, side=side, threshold=threshold)
    return Finding(
        claim,
        paper,
        statistic,
        estimate.value,
        estimate.low,
        estimate.high,
        units[0],
        rule,
        where,
        units[1],
        se=estimate.se,
        df=estimate.df,
    )


def one_model(grouped: Grouped, statistic: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Interval:
    """``statistic`` of one model's units over its seeds, with its interval (:func:`seed_jackknife`).

    Args:
        grouped: the model's units, seed by seed.
        statistic: maps ``(units, unit weights (r, n))`` to ``r`` values (e.g. :func:`negative_share`).

    Returns:
        The interval over the seeds.
    """
    return seed_jackknife(len(grouped.sizes), lambda keep: statistic(grouped.units, seed_weights(keep, grouped.sizes)))


def compare(
    a: Grouped,
    b: Grouped,
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    log: bool = False,
) -> Interval:
    """``combine(statistic(a), statistic(b))`` of two models with its interval over the seeds of both.

    The seeds are those of either side; leaving seed K out removes seed K's units from both sides (seed K's two
    models are independent trainings, so each seed's pair is one independent observation).

    Args:
        a: the first model's units, seed by seed.
        b: the second model's units, seed by seed.
        statistic: maps ``(units, unit weights (r, n))`` to ``r`` values.
        combine: e.g. ``np.subtract``, or ``np.divide`` with ``log``.
        log: take the interval for the log of the combined value (a ratio).

    Returns:
        The interval over the seeds.
    """
    seeds = sorted(set(a.seeds) | set(b.seeds))

    def side(g: Grouped, keep: np.ndarray) -> np.ndarray:
        return statistic(g.units, seed_weights(keep[:, [seeds.index(s) for s in g.seeds]], g.sizes))

    with np.errstate(invalid="ignore", divide="ignore"):
        return seed_jackknife(len(seeds), lambda keep: combine(side(a, keep), side(b, keep)), log=log)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _number(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.4g}"


def findings_markdown(items: Sequence[Finding]) -> str:
    """The findings as a Markdown table: claim | paper | statistic | value [95% interval] | verdict.

    The statistic cell ends with the number of seeds and of units; a "not measured" verdict names what measures
    it.

    Args:
        items: the findings.

    Returns:
        The table (header, separator, one row per finding), without a trailing newline.
    """
    lines = [
        "| claim | paper | statistic | value [95% interval] | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in items:
        if f.verdict == "not measured":
            value, word = "–", f"not measured: {f.where}"
        else:
            value, word = f"{_number(f.value)} [{_number(f.low)}, {_number(f.high)}]", f.verdict
        stat = f"{f.statistic} ({f.seeds} seed{'s' if f.seeds != 1 else ''}, n = {f.n})" if f.n else f.statistic
        lines.append(f"| {_cell(f.claim)} | {f.paper} | {_cell(stat)} | {value} | {_cell(word)} |")
    return "\n".join(lines)


#: the demo folder's machine-readable findings (:func:`findings_record`)
FINDINGS_FILE = "findings.json"


def findings_record(items: Sequence[Finding], **about: Any) -> dict[str, Any]:
    """The findings as plain data (:data:`FINDINGS_FILE`): every field of every row, NaN as None, and ``about``.

    Args:
        items: the findings.
        **about: what else the record says (the run's seeds and what it computed on).

    Returns:
        ``{**about, "rows": [one dict per finding]}``, JSON-ready.
    """

    def plain(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    rows = [{k: plain(v) for k, v in dataclasses.asdict(f).items()} for f in items]
    return {**about, "rows": rows}


def read_findings_record(path: str | Path) -> list[Finding]:
    """The findings of a :data:`FINDINGS_FILE` (None read back as NaN).

    Args:
        path: the file (a demo folder's ``findings.json``).

    Returns:
        The findings in the file's order.

    Raises:
        LandscapeError: the file is not such a record.
    """
    path = Path(path)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
        names = [f.name for f in dataclasses.fields(Finding)]
        return [Finding(**{k: math.nan if r[k] is None else r[k] for k in names if k in r}) for r in rows]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LandscapeError(
            f"{path} is not a findings record of `landscape demo` ({exc}); run the demo again"
        ) from None
