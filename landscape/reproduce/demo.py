"""``landscape demo``: the main job on the bundled digits data, end to end, resumable.

For each of ``resnet_mini``, ``vit_mini`` and ``alternet_mini`` and each training seed of
``DemoSettings.seeds`` (FULL: 0, 1, 2; QUICK: 0, 1): train (or reuse the checkpoint), compute Paper A's
per-mini-batch max-eigenvalue spectrum and the Fourier profile of the feature maps; for the first seed's models
also a 2D filter-normalised loss surface and every figure. Seed 0's files are in the demo folder, seed K's in
``seedK/`` (:func:`landscape.reproduce.inputs.seed_folder`). With ``DemoSettings.data_fractions`` (FULL only),
``vit_mini`` is also trained on shares of the data into ``data_size/`` of each seed's folder (the data-size
claim); with ``DemoSettings.paper_b`` (FULL only) Paper B's low-data experiment runs at a small size
(:mod:`landscape.reproduce.paper_b`, ``paper_b/`` and ``paper_b.json``). Then ``summary.md`` puts the models side
by side and gives a verdict on every claim of both papers with an interval over the training seeds
(:mod:`landscape.reproduce.findings`), and ``report.html`` (:func:`landscape.plot.report.write_report`: the
tables and every figure in one self-contained page). Every stage writes its own file and is skipped when its
file is complete, so a rerun resumes rather than recomputes.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from landscape.analyses.connect.run import run_connect
from landscape.analyses.fourier.run import run_fourier
from landscape.analyses.hessian.run import run_spectrum
from landscape.analyses.sharpness.run import run_sharpness
from landscape.analyses.surface.run import run_surface
from landscape.errors import LandscapeError
from landscape.models.checkpoint import read_checkpoint
from landscape.options.fourier import FourierOptions
from landscape.options.hessian import SpectrumOptions
from landscape.options.surface import SurfaceOptions
from landscape.plot import plot_files
from landscape.plot.report import write_report
from landscape.reproduce.findings import SHARPNESS_FILE, findings
from landscape.reproduce.inputs import seed_folder, seeds_text
from landscape.reproduce.negative import NEGATIVE_DIR, NEGATIVE_FILE, NEGATIVE_OPERATORS, NEGATIVE_TOL
from landscape.reproduce.paper_b import PaperBSettings, paper_b_row, paper_b_seeds, write_paper_b
from landscape.reproduce.settings import FULL, QUICK, DemoSettings, with_seeds
from landscape.reproduce.summary import FindingsText, ModelReport, write_summary
from landscape.reproduce.table import FINDINGS_FILE, findings_markdown, findings_record
from landscape.reproduce.training import train_on_digits
from landscape.reproduce.widths import connect_unit as width_connect_unit
from landscape.reproduce.widths import pairs, read_barriers, width_label
from landscape.reproduce.widths import train_unit as width_train_unit
from landscape.runtime.distributed import resolve_device
from landscape.runtime.machine import machine, machine_line
from landscape.runtime.workers import (
    StageTime,
    Stopwatch,
    Unit,
    intra_op_threads,
    run_units,
    stage_table,
    usable_cores,
)
from landscape.store.files import WRITTEN_BY, ensure_folder, ensure_subfolder, write_text
from landscape.store.read import read_result

#: the models whose sharpness the demo measures (the findings compare ViT with ResNet)
SHARPNESS_MODELS = ("resnet_mini", "vit_mini")
#: the demo's connect file, in the demo folder
CONNECT_FILE = "connect_{model}.h5"


def _progress(quiet: bool) -> bool | None:
    return False if quiet else None


def _train_stage(
    model: str,
    settings: DemoSettings,
    out: Path,
    *,
    seed: int = 0,
    device: str,
    force: bool,
    quiet: bool,
    subset: float | None = None,
) -> Path:
    """Train ``model`` with ``seed`` into ``out`` unless a checkpoint of the same model and options is there.

    ``subset`` replaces the training share of the model's settings (the data-size runs).
    """
    train = dict(settings.train[model]) if subset is None else {**settings.train[model], "subset": subset}
    return train_on_digits(model, train, out, seed=seed, device=device, force=force, quiet=quiet)


def _mean_or_nan(values: np.ndarray) -> float:
    return float(np.mean(values)) if values.size else math.nan


def _spectrum_stage(ckpt: Path, settings: DemoSettings, out: Path, *, device: str, force: bool, quiet: bool) -> Path:
    """Paper A's per-mini-batch top-5 spectrum of ``ckpt`` into ``out``.

    Products by a kept gradient graph, one batch at a time: what ``auto`` measured fastest on every demo model,
    fixed so that the numbers do not depend on a measurement made under the machine's load.
    """
    options = SpectrumOptions(
        batch_size=settings.spectrum_batch,
        samples=settings.spectrum_batches * settings.spectrum_batch,
        top_k=5,
        which="LM",
        hvp="graph",
        group=1,
    )
    run_spectrum(ckpt, options, out=out, device=device, force=force, progress=_progress(quiet))
    return out


def _negative_stage(
    ckpt: Path, settings: DemoSettings, operator: str, out: Path, *, device: str, force: bool, quiet: bool
) -> Path:
    """The most negative eigenvalue of ``operator`` (``hessian`` or ``residual``) of each of the spectrum's batches.

    The same mini-batches as :func:`_spectrum_stage` (the seeded order's first), products by a kept gradient graph,
    each eigenvalue to :data:`~landscape.reproduce.negative.NEGATIVE_TOL`.
    """
    options = SpectrumOptions(
        batch_size=settings.spectrum_batch,
        samples=settings.spectrum_batches * settings.spectrum_batch,
        top_k=1,
        which="SA",
        tol=NEGATIVE_TOL,
        hvp="graph",
        group=1,
        operator=operator,
    )
    run_spectrum(ckpt, options, out=out, device=device, force=force, progress=_progress(quiet))
    return out


def _surface_options(settings: DemoSettings) -> SurfaceOptions:
    """The first seed's 2D surface: Paper A's plotted loss on filter-normalised directions.

    The choices that are otherwise measured at run time (vectorised points, compiling) are fixed, so that the
    numbers do not depend on the load of the machine or on how many workers share it.
    """
    grid = f"-1:1:{settings.grid}"
    return SurfaceOptions(
        x=grid,
        y=grid,
        samples=settings.surface_samples,
        norm="filter",
        regularizer="norm-sum",
        reg_coef=settings.reg_coef,
        batch_points=1,
        compile="off",
    )


def model_unit(
    model: str, settings: DemoSettings, out_dir: Path, *, seed: int, device: str, force: bool, quiet: bool
) -> tuple[ModelReport, dict[str, Path], list[StageTime]]:
    """One model and seed: train, spectrum, sharpness, negative curvature, Fourier, the surface (first seed).

    Each stage is skipped when its file is complete.

    Returns:
        The model's numbers read back from its files, the result files by analysis (``surface``, ``spectrum``,
        ``sharpness_MEASURE``, ``negative_OPERATOR``, ``fourier``) and what each stage cost.
    """
    watch = Stopwatch()
    folder = ensure_folder(seed_folder(out_dir, seed))
    with watch("train"):
        ckpt = _train_stage(model, settings, folder / f"{model}.pt", seed=seed, device=device, force=force, quiet=quiet)
    files: dict[str, Path] = {}
    figures: list[Path] = []
    if seed == settings.seeds[0]:
        files["surface"] = folder / f"{model}_surface.h5"
        with watch("surface"):
            run_surface(
                ckpt,
                _surface_options(settings),
                out=files["surface"],
                force=force,
                device=device,
                progress=_progress(quiet),
            )
        with watch("figures"):
            # the demo's own figures folder: its figures are replaced, also those of releases without the mark
            drawn = plot_files([files["surface"]], ensure_subfolder(out_dir, "figures", model), "png", force=True)
            figures = [p for p in drawn if p.suffix == ".png"]
    with watch("spectrum"):
        files["spectrum"] = _spectrum_stage(
            ckpt, settings, folder / f"{model}_spectrum.h5", device=device, force=force, quiet=quiet
        )
    for options in settings.sharpness if model in SHARPNESS_MODELS else ():
        name = f"sharpness_{options.measure}"
        files[name] = folder / SHARPNESS_FILE.format(model=model, measure=options.measure)
        with watch("sharpness"):
            run_sharpness(ckpt, options, out=files[name], device=device, force=force, progress=_progress(quiet))
    for operator in NEGATIVE_OPERATORS if model in settings.negative_curvature else ():
        where = ensure_folder(folder / NEGATIVE_DIR)
        files[f"negative_{operator}"] = where / NEGATIVE_FILE.format(model=model, operator=operator)
        with watch("curvature"):
            _negative_stage(
                ckpt, settings, operator, files[f"negative_{operator}"], device=device, force=force, quiet=quiet
            )
    files["fourier"] = folder / f"{model}_fourier.h5"
    with watch("fourier"):
        run_fourier(
            ckpt,
            FourierOptions(samples=settings.fourier_samples),
            out=files["fourier"],
            device=device,
            force=force,
            progress=_progress(quiet),
        )
    return _report(model, seed, ckpt, files, figures), files, watch.records


def data_size_unit(
    fraction: float, settings: DemoSettings, out_dir: Path, *, seed: int, device: str, force: bool, quiet: bool
) -> tuple[Path, list[StageTime]]:
    """``vit_mini`` trained on ``fraction`` of the data with ``seed``, and its spectrum (``data_size/`` of the seed).

    Returns:
        The spectrum file and what each stage cost.
    """
    watch = Stopwatch()
    model = "vit_mini"
    folder = ensure_folder(seed_folder(out_dir, seed) / "data_size")
    stem = f"{model}_data{fraction:g}"  # e.g. vit_mini_data0.06: a name, not a path with a suffix
    with watch("train"):
        ckpt = _train_stage(
            model, settings, folder / f"{stem}.pt", seed=seed, device=device, force=force, quiet=quiet, subset=fraction
        )
    with watch("spectrum"):
        path = folder / f"{stem}_spectrum.h5"
        spectrum = _spectrum_stage(ckpt, settings, path, device=device, force=force, quiet=quiet)
    return spectrum, watch.records


def _data_size_stages(
    settings: DemoSettings, out_dir: Path, *, seed: int = 0, device: str, force: bool, quiet: bool
) -> list[Path]:
    """Train ``vit_mini`` on each of ``settings.data_fractions`` of the data and take its spectrum (``data_size/``).

    The files go to ``data_size/`` of the seed's folder (:func:`landscape.reproduce.inputs.seed_folder`).
    """
    return [
        data_size_unit(fraction, settings, out_dir, seed=seed, device=device, force=force, quiet=quiet)[0]
        for fraction in settings.data_fractions
    ]


def paper_b_unit(
    settings: PaperBSettings, seed: int, out_dir: Path, *, device: str, force: bool, quiet: bool
) -> tuple[dict[str, Any], list[StageTime]]:
    """One seed of Paper B's run (:func:`landscape.reproduce.paper_b.paper_b_row`), timed.

    Returns:
        Its row of ``paper_b.json`` and what it cost.
    """
    watch = Stopwatch()
    with watch("paper_b"):
        row = paper_b_row(settings, seed, out_dir, device=device, force=force, quiet=quiet)
    return row, watch.records


def connect_unit(
    settings: DemoSettings, out_dir: Path, *, device: str, force: bool, quiet: bool
) -> tuple[list[Path], list[StageTime]]:
    """The line and curve between ``settings.connect_model`` trained with the first two seeds, and its figures.

    Returns:
        The connect file (``connect_MODEL.h5`` in the demo folder) then its figures, and what it cost.
    """
    assert settings.connect is not None
    watch = Stopwatch()
    model = settings.connect_model
    a, b = (seed_folder(out_dir, s) / f"{model}.pt" for s in settings.seeds[:2])
    path = out_dir / CONNECT_FILE.format(model=model)
    with watch("connect"):
        run_connect(a, b, settings.connect, out=path, device=device, force=force, progress=_progress(quiet))
    with watch("figures"):
        drawn = plot_files([path], ensure_subfolder(out_dir, "figures", "connect"), "png", force=True)
    return [path, *(p for p in drawn if p.suffix == ".png")], watch.records


def _report(model: str, seed: int, ckpt: Path, files: dict[str, Path], figures: list[Path]) -> ModelReport:
    """Read the numbers the summary needs back from the files."""
    metrics = read_checkpoint(ckpt).meta.get("metrics") or {}
    spectrum = read_result(files["spectrum"])
    eig = np.asarray(spectrum["eigenvalues"], dtype=float).ravel()
    eig = eig[np.isfinite(eig)]
    fourier = read_result(files["fourier"])
    kinds = np.asarray(fourier["layer_kinds"]).astype(str)
    hf = np.asarray(fourier["high_frequency"], dtype=float)
    return ModelReport(
        model=model,
        seed=seed,
        checkpoint=ckpt,
        test_accuracy=float(metrics.get("test_accuracy", math.nan)),
        top_eigenvalue=float(eig.max()) if eig.size else math.nan,
        negative_share=float((eig < 0).mean()) if eig.size else math.nan,
        hf_msa=_mean_or_nan(hf[kinds == "msa"]),
        hf_conv=_mean_or_nan(hf[np.isin(kinds, ["conv", "downsample", "mlp"])]),
        figures=figures,
    )


#: the stages of the demo's cost table, in order
STAGES = (
    "train",
    "surface",
    "spectrum",
    "sharpness",
    "curvature",
    "fourier",
    "connect",
    "paper_b",
    "figures",
    "findings",
    "report",
)
#: the demo folder's record of what the last run cost (stage by stage; ``benchmarks/demo.py`` prints it)
TIMINGS_FILE = "timings.json"


@dataclass
class _Trained:
    """The models of every seed, analysed: the first seed's reports and files, and every seed's reports."""

    reports: list[ModelReport]
    seed_reports: list[ModelReport]
    first_files: dict[str, dict[str, Path]]


def _units(settings: DemoSettings, out: Path, *, device: str, force: bool, quiet: bool) -> list[Unit]:
    """Every independent piece of the demo, longest and most waited-for first.

    Paper B's seeds, the widened models of the width sweep, then each model and seed (the connected pair's two
    first), the line and curve once both exist, the data-size runs, and the width sweep's lines.
    """
    common = {"device": device, "force": force, "quiet": quiet}
    units: list[Unit] = []
    if settings.paper_b is not None:
        units += [
            Unit(f"paper_b/seed{seed}", paper_b_unit, (settings.paper_b, seed, out), common)
            for seed in paper_b_seeds(settings.paper_b, out)
        ]
    sweep = settings.widths
    for k in sorted((k for k in sweep.multipliers if k != 1), reverse=True) if sweep is not None else ():
        train = (sweep, k, settings.train[sweep.model], out)
        key = f"{sweep.model}_w{width_label(k)}x/seed"
        units += [Unit(f"{key}{s}", width_train_unit, train, {"seed": s, **common}) for s in settings.seeds]
    pair = settings.seeds[:2] if settings.connect is not None and len(settings.seeds) >= 2 else ()
    runs = [(m, s) for m in settings.models for s in settings.seeds]
    runs.sort(key=lambda run: run[0] != settings.connect_model or run[1] not in pair)
    for model, seed in runs:
        units.append(Unit(f"{model}/seed{seed}", model_unit, (model, settings, out), {"seed": seed, **common}))
        if pair and model == settings.connect_model and seed == pair[1]:
            after = tuple(f"{model}/seed{s}" for s in pair)
            units.append(Unit("connect", connect_unit, (settings, out), common, after=after))
    units += [
        Unit(f"vit_mini_data{f:g}/seed{seed}", data_size_unit, (f, settings, out), {"seed": seed, **common})
        for seed in settings.seeds
        for f in settings.data_fractions
    ]
    for k in sweep.multipliers if sweep is not None else ():
        trained = f"{sweep.model}/seed{{}}" if k == 1 else f"{sweep.model}_w{width_label(k)}x/seed{{}}"
        units += [
            Unit(
                f"{sweep.model}_w{width_label(k)}x/seed{a}-{b}",
                width_connect_unit,
                (sweep, k, (a, b), out),
                common,
                after=(trained.format(a), trained.format(b)),
            )
            for a, b in pairs(settings.seeds)
        ]
    return units


def _findings_text(settings: DemoSettings, out: Path, facts: dict[str, Any]) -> FindingsText:
    """The findings of the demo folder as the summary shows them; also written to :data:`FINDINGS_FILE`.

    Computed at the workers' thread count (the Fourier rows recompute profiles), so that they do not depend on the
    threads of this process.
    """
    with intra_op_threads(facts["torch_threads"]):
        rows = findings(
            out,
            settings.models,
            training_seeds=settings.seeds,
            fourier_unit=settings.fourier_unit,
            widths=settings.widths,
        )
    record = findings_record(rows, seeds=list(settings.seeds), **facts, written_by=WRITTEN_BY)
    write_text(out / FINDINGS_FILE, json.dumps(record, indent=1) + "\n", kind="record")
    return FindingsText(findings_markdown(rows), settings.seeds, settings.spectrum_batch, settings.fourier_unit)


def _write_timings(
    out: Path, records: list[StageTime], wall: float, jobs: int, facts: dict[str, Any]
) -> list[tuple[str, int, float, float]]:
    """Write :data:`TIMINGS_FILE`: the run's stage table, wall-clock time, workers and machine; return the table."""
    table = stage_table(records, STAGES)
    payload = {
        "jobs": jobs,
        "torch_threads_per_job": facts["torch_threads"],
        **facts,
        "wall_seconds": wall,
        "cpu_seconds": sum(row[3] for row in table),
        "stages": [{"stage": s, "units": n, "wall_seconds": w, "cpu_seconds": c} for s, n, w, c in table],
        "written_by": WRITTEN_BY,
    }
    write_text(out / TIMINGS_FILE, json.dumps(payload, indent=1) + "\n", kind="record")
    return table


def run_demo(
    out_dir: str | Path,
    *,
    quick: bool = False,
    device: str = "auto",
    force: bool = False,
    quiet: bool = False,
    jobs: int | None = None,
    settings: DemoSettings | None = None,
    seeds: Sequence[int] | None = None,
    threads: int = 1,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Run the whole demo into ``out_dir`` (see the module doc); every stage whose file is complete is skipped.

    The independent units (each model and seed, each of Paper B's seeds, each data-size run, the line and curve
    once its two models exist) run on ``jobs`` worker processes of ``threads`` (one) torch thread each
    (:func:`landscape.runtime.workers.run_units`): the files are those of a serial run at that many threads, bit for
    bit, whatever ``jobs`` is. What each stage cost goes to ``summary.md`` and :data:`TIMINGS_FILE`, and what the
    run computed on (torch, the CPU capability, threads, device) to both and to every result file.

    Args:
        out_dir: the demo folder (created).
        quick: the small settings :data:`QUICK` instead of :data:`FULL`.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: recompute and overwrite every file.
        quiet: no progress output.
        jobs: worker processes (None: the cores this process may use; 1: every unit here, in order).
        settings: the sizes (default: :data:`QUICK` or :data:`FULL`).
        seeds: the training seeds, replacing those of the settings and of their Paper B run (e.g. ``(3, 4, 5)``:
            the same demo on a second, disjoint set of seeds); None: the settings' own.
        threads: torch threads of every worker (1; more only to check that the verdicts do not depend on them:
            the last bits of the files do).
        log: where the stage lines go (default: stderr unless ``quiet``).

    Returns:
        The path of ``summary.md`` (``report.html`` is beside it).

    Raises:
        LandscapeError: no training seed, bad ``seeds``, ``jobs`` or ``threads`` below 1, or any stage's error.
    """
    began = time.perf_counter()
    settings = settings or (QUICK if quick else FULL)
    if seeds is not None:
        settings = with_seeds(settings, seeds)
    if not settings.seeds:
        raise LandscapeError("the demo needs at least one training seed")
    jobs = usable_cores() if jobs is None else jobs
    out = ensure_folder(out_dir)
    say = log or (lambda msg: None if quiet else print(msg, file=sys.stderr))
    units = _units(settings, out, device=device, force=force, quiet=quiet or jobs > 1)
    workers = "in this process" if jobs == 1 else f"on {min(jobs, len(units))} worker processes"
    facts = {**machine(resolve_device(device)), "torch_threads": threads}
    say(f"[demo] {len(units)} units ({', '.join(u.key for u in units)}) {workers}; each on {machine_line(facts)}")
    if settings.paper_b is not None and not paper_b_seeds(settings.paper_b, out):
        say(f"[demo] Paper B: keeping {out / 'paper_b.json'} (not written by the demo); its rows give the Paper B row")
    records: list[StageTime] = []

    def finished(unit: Unit, value: Any) -> None:
        records.extend(value[-1])
        say(f"[demo] done: {unit.key} ({sum(r.wall for r in value[-1]):.0f} s)")

    done = run_units(units, jobs, on_done=finished, threads=threads)
    watch = Stopwatch()
    trained = _Trained([], [], {})
    for model, seed in ((m, s) for m in settings.models for s in settings.seeds):
        report, files, _ = done[f"{model}/seed{seed}"]
        trained.seed_reports.append(report)
        if seed == settings.seeds[0]:
            trained.reports.append(report)
            trained.first_files[model] = files
    with watch("figures"):
        files = trained.first_files.values()
        shared = plot_files(
            [f["spectrum"] for f in files] + [f["fourier"] for f in files],
            ensure_subfolder(out, "figures", "overlay"),
            "png",
            force=True,
        )
    if settings.paper_b is not None and paper_b_seeds(settings.paper_b, out):
        rows = [done[f"paper_b/seed{seed}"][0] for seed in settings.paper_b.seeds]
        write_paper_b(settings.paper_b, out, rows, machine=facts)
    between = done["connect"][0] if "connect" in done else []
    say(f"[demo] findings: a verdict for every claim, intervals over {seeds_text(settings.seeds)}")
    with watch("findings"):
        text = _findings_text(settings, out, facts)
    summary_args = {
        "quick": quick,
        "findings_text": text,
        "seed_reports": trained.seed_reports,
        "jobs": jobs,
        "machine": facts,
        "between": between,
        "widths": read_barriers(out, settings.widths, settings.seeds) if settings.widths is not None else [],
        "force": force,
    }
    pngs = [p for p in shared if p.suffix == ".png"]
    with watch("report"):
        summary = write_summary(trained.reports, pngs, out, **summary_args)
        report = write_report(out, force=force, jobs=jobs)
    records += watch.records
    table = _write_timings(out, records, time.perf_counter() - began, jobs, facts)
    # the cost of the whole run, the report included, is the summary's last section (the report is built from the
    # summary written before it, which has every other section)
    write_summary(trained.reports, pngs, out, **summary_args, cost=(table, time.perf_counter() - began))
    say(f"[demo] wrote {summary}")
    say(f"[demo] wrote {report} (every figure embedded; open it in a browser)")
    return summary
