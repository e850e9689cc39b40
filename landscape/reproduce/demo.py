"""``landscape demo``: the main job on the bundled digits data, end to end, resumable.

For each of ``resnet_mini``, ``vit_mini`` and ``alternet_mini`` and each training seed of
``DemoSettings.seeds`` (FULL: 0, 1, 2; QUICK: 0, 1): train (or reuse the checkpoint), compute Paper A's
per-mini-batch max-eigenvalue spectrum and the Fourier profile of the feature maps; for the first seed's models
also a 2D filter-normalised loss surface and every figure. Seed 0's files are in the demo folder, seed K's in
``seedK/`` (:func:`landscape.reproduce.inputs.seed_folder`). With ``DemoSettings.data_fractions`` (FULL only),
``vit_mini`` is also trained on shares of the data into ``data_size/`` of each seed's folder (the data-size
claim); with ``DemoSettings.paper_b`` (FULL only) Paper B's low-data experiment runs at a small size
(:mod:`landscape.reproduce.paper_b`, ``paper_b/`` and ``paper_b.json``). Then ``summary.md`` puts the models side
by side and gives a verdict on every claim of both papers with a hierarchical bootstrap interval over seeds and
units (:mod:`landscape.reproduce.findings`), and ``report.html`` (:func:`landscape.plot.report.write_report`: the
tables and every figure in one self-contained page). Every stage writes its own file and is skipped when its
file is complete, so a rerun resumes rather than recomputes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
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
from landscape.options.connect import ConnectOptions
from landscape.options.fourier import FourierOptions
from landscape.options.hessian import SpectrumOptions
from landscape.options.sharpness import SharpnessOptions
from landscape.options.surface import SurfaceOptions
from landscape.plot import plot_files
from landscape.plot.report import write_report
from landscape.reproduce.findings import SHARPNESS_FILE, findings, findings_markdown
from landscape.reproduce.inputs import seed_folder, seeds_text
from landscape.reproduce.paper_b import PaperBSettings, measure_paper_b
from landscape.reproduce.summary import FindingsText, ModelReport, write_summary
from landscape.reproduce.training import train_or_reuse
from landscape.runtime.progress import Progress
from landscape.store.files import ensure_folder, ensure_subfolder
from landscape.store.read import read_result
from landscape.train import TrainConfig

MODELS = ("resnet_mini", "vit_mini", "alternet_mini")
#: the models whose sharpness the demo measures (the findings compare ViT with ResNet)
SHARPNESS_MODELS = ("resnet_mini", "vit_mini")
#: the demo's connect file, in the demo folder
CONNECT_FILE = "connect_{model}.h5"


@dataclass(frozen=True)
class DemoSettings:
    """The sizes of one demo run: training per model, surface grid, spectrum and Fourier samples.

    ``seeds``: the training seeds; every model is trained with each, and its spectrum and Fourier profile
    computed (the findings' hierarchical bootstrap resamples them); the surface and the figures are of the first
    seed's models. ``data_fractions``: the shares of the training data on which ``vit_mini`` is trained again
    (same options otherwise, each seed) for Paper A's data-size claim; each gets a checkpoint and a spectrum in
    ``data_size/`` (the main models' files are not touched). ``paper_b``: the size of Paper B's run, or None to
    leave it out (its row is then "not measured" unless a ``paper_b.json`` is there). ``resamples`` and
    ``fourier_unit``: the bootstrap of the findings table (:func:`landscape.reproduce.findings.findings`).
    ``sharpness``: the m-sharpness runs of ``vit_mini`` and ``resnet_mini`` of every seed, one per options
    object (one per measure: ``MODEL_sharpness_MEASURE.h5``), for the findings' rescaling-invariant flatness
    rows. ``connect``: the line (and curve) between ``connect_model`` trained with the first two seeds
    (``connect_MODEL.h5``), or None to leave it out.
    """

    train: dict[str, dict[str, Any]]
    grid: int
    surface_samples: int
    spectrum_fraction: float
    spectrum_batch: int
    fourier_samples: int
    reg_coef: float = 0.05
    models: tuple[str, ...] = MODELS
    data_fractions: tuple[float, ...] = ()
    resamples: int = 1000
    fourier_unit: int = 16
    seeds: tuple[int, ...] = (0, 1, 2)
    paper_b: PaperBSettings | None = None
    sharpness: tuple[SharpnessOptions, ...] = ()
    connect: ConnectOptions | None = None
    connect_model: str = "resnet_mini"


FULL = DemoSettings(
    train={
        "resnet_mini": {"epochs": 6, "batch_size": 64, "lr": 2e-3},
        "vit_mini": {"epochs": 20, "batch_size": 32, "lr": 1e-3},
        "alternet_mini": {"epochs": 8, "batch_size": 64, "lr": 2e-3},
    },
    grid=11,
    surface_samples=256,
    spectrum_fraction=0.1,
    spectrum_batch=16,
    fourier_samples=256,
    data_fractions=(0.06, 0.3),
    paper_b=PaperBSettings(),
    sharpness=(
        SharpnessOptions(samples=256, batch_size=32, measure="average", rho=(0.1,), draws=4),
        SharpnessOptions(samples=256, batch_size=32, measure="worst", rho=(0.005,), p="inf"),  # the default ascent
    ),
    connect=ConnectOptions(split="both", samples=360, steps=11, curve="bezier", bend_epochs=5, plane_steps=7),
)
QUICK = DemoSettings(
    train={m: {"epochs": 1, "batch_size": 64, "lr": 2e-3, "subset": 0.25} for m in MODELS},
    grid=3,
    surface_samples=32,
    spectrum_fraction=0.02,
    spectrum_batch=16,
    fourier_samples=32,
    resamples=200,
    fourier_unit=4,
    seeds=(0, 1),
    sharpness=(
        SharpnessOptions(samples=32, batch_size=16, measure="average", rho=(0.1,), draws=2, resamples=100),
        SharpnessOptions(
            samples=32, batch_size=16, measure="worst", rho=(0.005,), p="inf", steps=2, restarts=1, resamples=100
        ),
    ),
    connect=ConnectOptions(samples=64, batch_size=32, steps=3, curve="bezier", bend_epochs=1, plane_steps=3),
)


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
    config = TrainConfig(model=model, data="digits", seed=seed, device=device, **train)
    return train_or_reuse(config, out, force=force, quiet=quiet)


def _mean_or_nan(values: np.ndarray) -> float:
    return float(np.mean(values)) if values.size else math.nan


def _spectrum_stage(ckpt: Path, settings: DemoSettings, out: Path, *, device: str, force: bool, quiet: bool) -> Path:
    """Paper A's per-mini-batch top-5 spectrum of ``ckpt`` into ``out``."""
    options = SpectrumOptions(
        batch_size=settings.spectrum_batch, fraction=settings.spectrum_fraction, top_k=5, which="LM"
    )
    run_spectrum(ckpt, options, out=out, device=device, force=force, progress=_progress(quiet))
    return out


def _model_stages(
    model: str, settings: DemoSettings, out_dir: Path, *, seed: int = 0, device: str, force: bool, quiet: bool
) -> tuple[Path, dict[str, Path]]:
    """Run train, spectrum and Fourier (and the surface for the first seed) for one model and seed.

    Returns:
        The checkpoint and the result files by analysis (``surface``, ``spectrum``, ``fourier``).
    """
    folder = ensure_folder(seed_folder(out_dir, seed))
    ckpt = _train_stage(model, settings, folder / f"{model}.pt", seed=seed, device=device, force=force, quiet=quiet)
    files: dict[str, Path] = {}
    if seed == settings.seeds[0]:
        grid = f"-1:1:{settings.grid}"
        files["surface"] = folder / f"{model}_surface.h5"
        options = SurfaceOptions(
            x=grid,
            y=grid,
            samples=settings.surface_samples,
            norm="filter",
            regularizer="norm-sum",
            reg_coef=settings.reg_coef,
        )
        run_surface(ckpt, options, out=files["surface"], force=force, device=device, progress=_progress(quiet))
    spectrum = folder / f"{model}_spectrum.h5"
    files["spectrum"] = _spectrum_stage(ckpt, settings, spectrum, device=device, force=force, quiet=quiet)
    for options in settings.sharpness if model in SHARPNESS_MODELS else ():
        name = f"sharpness_{options.measure}"
        files[name] = folder / SHARPNESS_FILE.format(model=model, measure=options.measure)
        run_sharpness(ckpt, options, out=files[name], device=device, force=force, progress=_progress(quiet))
    files["fourier"] = folder / f"{model}_fourier.h5"
    run_fourier(
        ckpt,
        FourierOptions(samples=settings.fourier_samples),
        out=files["fourier"],
        device=device,
        force=force,
        progress=_progress(quiet),
    )
    return ckpt, files


def _data_size_stages(
    settings: DemoSettings, out_dir: Path, *, seed: int = 0, device: str, force: bool, quiet: bool
) -> list[Path]:
    """Train ``vit_mini`` on each of ``settings.data_fractions`` of the data and take its spectrum (``data_size/``).

    The files go to ``data_size/`` of the seed's folder (:func:`landscape.reproduce.inputs.seed_folder`).
    """
    model = "vit_mini"
    folder = ensure_folder(seed_folder(out_dir, seed) / "data_size")
    files = []
    for fraction in settings.data_fractions:
        stem = f"{model}_data{fraction:g}"  # e.g. vit_mini_data0.06: a name, not a path with a suffix
        ckpt = _train_stage(
            model, settings, folder / f"{stem}.pt", seed=seed, device=device, force=force, quiet=quiet, subset=fraction
        )
        spectrum = folder / f"{stem}_spectrum.h5"
        files.append(_spectrum_stage(ckpt, settings, spectrum, device=device, force=force, quiet=quiet))
    return files


def _connect_stage(settings: DemoSettings, out_dir: Path, *, device: str, force: bool, quiet: bool) -> Path:
    """The line and curve between ``settings.connect_model`` trained with the first two seeds (``settings.connect``).

    Returns:
        The connect file, ``connect_MODEL.h5`` in the demo folder.
    """
    assert settings.connect is not None
    model = settings.connect_model
    a, b = (seed_folder(out_dir, s) / f"{model}.pt" for s in settings.seeds[:2])
    path = out_dir / CONNECT_FILE.format(model=model)
    run_connect(a, b, settings.connect, out=path, device=device, force=force, progress=_progress(quiet))
    return path


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


def _threads() -> int:
    import torch

    return torch.get_num_threads()


@dataclass
class _Trained:
    """The models of every seed, analysed: the first seed's reports and files, and every seed's reports."""

    reports: list[ModelReport]
    seed_reports: list[ModelReport]
    first_files: dict[str, dict[str, Path]]


def _train_and_analyse(
    settings: DemoSettings, out: Path, *, device: str, force: bool, quiet: bool, say: Callable[[str], None]
) -> _Trained:
    """Every model with every seed: train, analyse, read back; the first seed's surfaces drawn."""
    first = settings.seeds[0]
    done = _Trained([], [], {})
    runs = [(model, seed) for model in settings.models for seed in settings.seeds]
    with Progress("demo", len(runs), unit="model", progress=_progress(quiet), last_line=False) as bar:
        for model, seed in runs:
            bar.note(f"{model}, seed {seed}")
            sharp = ", sharpness" if settings.sharpness and model in SHARPNESS_MODELS else ""
            say(f"[demo] {model}, seed {seed}: train, {'surface, ' if seed == first else ''}spectrum, fourier{sharp}")
            ckpt, files = _model_stages(model, settings, out, seed=seed, device=device, force=force, quiet=quiet)
            figures: list[Path] = []
            if seed == first:
                # the demo's own figures folder: its figures are replaced, also those of releases without the mark
                drawn = plot_files([files["surface"]], ensure_subfolder(out, "figures", model), "png", force=True)
                figures = [p for p in drawn if p.suffix == ".png"]
                done.first_files[model] = files
            report = _report(model, seed, ckpt, files, figures)
            done.seed_reports.append(report)
            bar.update(1)
            if seed == first:
                done.reports.append(report)
    return done


def _findings_text(settings: DemoSettings, out: Path) -> FindingsText:
    """The findings of the demo folder as the summary shows them."""
    rows = findings(
        out,
        settings.models,
        training_seeds=settings.seeds,
        seed=0,
        resamples=settings.resamples,
        fourier_unit=settings.fourier_unit,
    )
    return FindingsText(
        findings_markdown(rows), settings.seeds, settings.resamples, settings.spectrum_batch, settings.fourier_unit
    )


def run_demo(
    out_dir: str | Path,
    *,
    quick: bool = False,
    device: str = "auto",
    force: bool = False,
    quiet: bool = False,
    settings: DemoSettings | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Run the whole demo into ``out_dir`` (see the module doc); every stage whose file is complete is skipped.

    Args:
        out_dir: the demo folder (created).
        quick: the small settings :data:`QUICK` instead of :data:`FULL`.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: recompute and overwrite every file.
        quiet: no progress output.
        settings: the sizes (default: :data:`QUICK` or :data:`FULL`).
        log: where the stage lines go (default: stderr unless ``quiet``).

    Returns:
        The path of ``summary.md`` (``report.html`` is beside it).

    Raises:
        LandscapeError: no training seed in the settings, or any stage's error.
    """
    settings = settings or (QUICK if quick else FULL)
    if not settings.seeds:
        raise LandscapeError("the demo needs at least one training seed")
    out = ensure_folder(out_dir)
    say = log or (lambda msg: None if quiet else print(msg, file=sys.stderr))
    trained = _train_and_analyse(settings, out, device=device, force=force, quiet=quiet, say=say)
    say("[demo] figures of all models overlaid")
    files = trained.first_files.values()
    shared = plot_files(
        [f["spectrum"] for f in files] + [f["fourier"] for f in files],
        ensure_subfolder(out, "figures", "overlay"),
        "png",
        force=True,
    )
    if settings.data_fractions:
        fractions = ", ".join(f"{f:g}" for f in settings.data_fractions)
        for seed in settings.seeds:
            say(f"[demo] vit_mini on {fractions} of the data, seed {seed}: train, spectrum")
            _data_size_stages(settings, out, seed=seed, device=device, force=force, quiet=quiet)
    between: list[Path] = []
    if settings.connect is not None and len(settings.seeds) >= 2:
        first, second = settings.seeds[:2]
        say(f"[demo] {settings.connect_model} of seeds {first} and {second}: the line and the curve between them")
        connect = _connect_stage(settings, out, device=device, force=force, quiet=quiet)
        drawn = plot_files([connect], ensure_subfolder(out, "figures", "connect"), "png", force=True)
        between = [connect, *(p for p in drawn if p.suffix == ".png")]
    if settings.paper_b is not None:
        say(f"[demo] Paper B: {settings.paper_b.describe()}")
        measure_paper_b(settings.paper_b, out, device=device, force=force, quiet=quiet, log=say)
    say(f"[demo] findings: a verdict for every claim, hierarchical bootstrap over {seeds_text(settings.seeds)}")
    summary = write_summary(
        trained.reports,
        [p for p in shared if p.suffix == ".png"],
        out,
        quick=quick,
        findings_text=_findings_text(settings, out),
        seed_reports=trained.seed_reports,
        threads=_threads(),
        between=between,
        force=force,
    )
    say(f"[demo] wrote {summary}")
    say(f"[demo] wrote {write_report(out, force=force)} (every figure embedded; open it in a browser)")
    return summary
