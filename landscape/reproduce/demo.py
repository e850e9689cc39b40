"""``landscape demo``: the main job on the bundled digits data, end to end, resumable.

For each of ``resnet_mini``, ``vit_mini`` and ``alternet_mini``: train (or reuse the checkpoint), compute a 2D
filter-normalised loss surface, Paper A's per-mini-batch max-eigenvalue spectrum and the Fourier profile of the
feature maps; draw every figure; write ``summary.md`` that puts the three models side by side and gives a verdict
on every claim of both papers with a bootstrap interval (:mod:`landscape.reproduce.findings`; with
``DemoSettings.data_fractions``, FULL only, ``vit_mini`` is also trained on shares of the data into ``data_size/``
for the data-size claim), and ``report.html``
(:func:`landscape.plot.report.write_report`: the table and every figure in one self-contained page). Every stage writes
its own file and is skipped when its file is complete, so a rerun resumes rather than recomputes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from landscape import __version__
from landscape.analyses.fourier.run import run_fourier
from landscape.analyses.hessian.run import run_spectrum
from landscape.analyses.surface.run import run_surface
from landscape.errors import LandscapeError
from landscape.models.checkpoint import read_checkpoint
from landscape.options.fourier import FourierOptions
from landscape.options.hessian import SpectrumOptions
from landscape.options.surface import SurfaceOptions
from landscape.plot import plot_files
from landscape.plot.report import write_report
from landscape.reproduce.findings import findings, findings_markdown
from landscape.store.files import WRITTEN_BY, ensure_folder, ensure_subfolder, write_text
from landscape.store.read import read_result
from landscape.train import TrainConfig, train_model

MODELS = ("resnet_mini", "vit_mini", "alternet_mini")


@dataclass(frozen=True)
class DemoSettings:
    """The sizes of one demo run: training per model, surface grid, spectrum and Fourier samples.

    ``data_fractions``: the shares of the training data on which ``vit_mini`` is trained again (same options
    otherwise) for Paper A's data-size claim; each gets a checkpoint and a spectrum in ``data_size/`` (the main
    models' files are not touched). ``resamples`` and ``fourier_unit``: the bootstrap of the findings table
    (:func:`landscape.reproduce.findings.findings`).
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
)


@dataclass
class ModelReport:
    """What the summary says about one model."""

    model: str
    checkpoint: Path
    test_accuracy: float
    top_eigenvalue: float
    negative_share: float
    hf_msa: float
    hf_conv: float
    figures: list[Path]


def _train_stage(
    model: str,
    settings: DemoSettings,
    out: Path,
    *,
    device: str,
    force: bool,
    quiet: bool,
    subset: float | None = None,
) -> Path:
    """Train ``model`` into ``out`` unless a checkpoint of the same model and options is already there.

    ``subset`` replaces the training share of the model's settings (the data-size runs).
    """
    train = dict(settings.train[model]) if subset is None else {**settings.train[model], "subset": subset}
    config = TrainConfig(model=model, data="digits", seed=0, device=device, **train)
    if out.exists() and not force:
        ckpt = read_checkpoint(out)
        options = ckpt.meta.get("train_options") or {}
        same = ckpt.model_name == model and all(options.get(k) == v for k, v in train.items() if k != "device")
        if not same:
            raise LandscapeError(f"{out} holds a checkpoint from other options; use --force or another --out")
        return out
    train_model(config, out, force=True, quiet=quiet)
    return out


def _mean_or_nan(values: np.ndarray) -> float:
    return float(np.mean(values)) if values.size else math.nan


def _model_stages(
    model: str, settings: DemoSettings, out_dir: Path, *, device: str, force: bool, quiet: bool
) -> tuple[Path, list[Path]]:
    """Run train, surface, spectrum and Fourier for one model; return the checkpoint and the result files."""
    ckpt = _train_stage(model, settings, out_dir / f"{model}.pt", device=device, force=force, quiet=quiet)
    grid = f"-1:1:{settings.grid}"
    surface = out_dir / f"{model}_surface.h5"
    run_surface(
        ckpt,
        SurfaceOptions(
            x=grid,
            y=grid,
            samples=settings.surface_samples,
            norm="filter",
            regularizer="norm-sum",
            reg_coef=settings.reg_coef,
        ),
        out=surface,
        force=force,
        device=device,
        progress=False if quiet else None,
    )
    spectrum = out_dir / f"{model}_spectrum.h5"
    run_spectrum(
        ckpt,
        SpectrumOptions(batch_size=settings.spectrum_batch, fraction=settings.spectrum_fraction, top_k=5, which="LM"),
        out=spectrum,
        device=device,
        force=force,
        progress=False if quiet else None,
    )
    fourier = out_dir / f"{model}_fourier.h5"
    run_fourier(
        ckpt,
        FourierOptions(samples=settings.fourier_samples),
        out=fourier,
        device=device,
        force=force,
        progress=False if quiet else None,
    )
    return ckpt, [surface, spectrum, fourier]


def _data_size_stages(settings: DemoSettings, out_dir: Path, *, device: str, force: bool, quiet: bool) -> list[Path]:
    """Train ``vit_mini`` on each of ``settings.data_fractions`` of the data and take its spectrum (``data_size/``)."""
    model = "vit_mini"
    folder = out_dir / "data_size"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for fraction in settings.data_fractions:
        stem = f"{model}_data{fraction:g}"  # e.g. vit_mini_data0.06: a name, not a path with a suffix
        ckpt = _train_stage(
            model, settings, folder / f"{stem}.pt", device=device, force=force, quiet=quiet, subset=fraction
        )
        spectrum = folder / f"{stem}_spectrum.h5"
        run_spectrum(
            ckpt,
            SpectrumOptions(
                batch_size=settings.spectrum_batch, fraction=settings.spectrum_fraction, top_k=5, which="LM"
            ),
            out=spectrum,
            device=device,
            force=force,
            progress=False if quiet else None,
        )
        files.append(spectrum)
    return files


def _report(model: str, ckpt: Path, files: list[Path], figures: list[Path]) -> ModelReport:
    """Read the numbers the summary needs back from the files."""
    metrics = read_checkpoint(ckpt).meta.get("metrics") or {}
    spectrum = read_result(files[1])
    eig = np.asarray(spectrum["eigenvalues"], dtype=float).ravel()
    eig = eig[np.isfinite(eig)]
    fourier = read_result(files[2])
    kinds = np.asarray(fourier["layer_kinds"]).astype(str)
    hf = np.asarray(fourier["high_frequency"], dtype=float)
    return ModelReport(
        model=model,
        checkpoint=ckpt,
        test_accuracy=float(metrics.get("test_accuracy", math.nan)),
        top_eigenvalue=float(eig.max()) if eig.size else math.nan,
        negative_share=float((eig < 0).mean()) if eig.size else math.nan,
        hf_msa=_mean_or_nan(hf[kinds == "msa"]),
        hf_conv=_mean_or_nan(hf[np.isin(kinds, ["conv", "downsample", "mlp"])]),
        figures=figures,
    )


def _fmt(value: float, spec: str) -> str:
    return "–" if math.isnan(value) else format(value, spec)


def write_summary(
    reports: list[ModelReport],
    shared_figures: list[Path],
    out_dir: Path,
    *,
    quick: bool,
    findings_table: str | None = None,
    force: bool = False,
) -> Path:
    """Write ``summary.md``: a table of the models side by side, the findings table, then every figure embedded.

    Args:
        reports: the numbers of each model.
        shared_figures: the figures that overlay the models.
        out_dir: the demo folder.
        quick: the quick demo (said in the title).
        findings_table: the Markdown table of :func:`landscape.reproduce.findings.findings_markdown` (a
            "Findings" section after the main table), or None to leave it out.
        force: replace a ``summary.md`` that landscape did not write (see
            :func:`landscape.store.files.check_replaceable`).

    Returns:
        The path of ``summary.md``.
    """
    lines = [
        "# landscape demo" + (" (quick)" if quick else ""),
        "",
        "Digits data (scikit-learn, 1x32x32). Surfaces: loss = NLL + 0.05 * sum_p ||theta_p|| (Paper A's plotted",
        "loss) on filter-normalised directions. Spectrum: top-5 largest-magnitude Hessian eigenvalues of the NLL of",
        "every mini-batch of 16 (BN in eval mode; the norm-sum term is left out because its Hessian, 0.05/||theta_p||",
        "on each tensor, swamps the data term for small tensors). High-frequency value: Delta log amplitude at the",
        "highest frequency, averaged over the blocks of each kind (MSA vs Conv/MLP; downsampling counts as Conv).",
        "",
        "| model | test accuracy | top Hessian eigenvalue | share of negative eigenvalues "
        "| high-freq Delta log amp, MSA | high-freq Delta log amp, Conv/MLP |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in reports:
        lines.append(
            f"| {r.model} | {_fmt(r.test_accuracy, '.4f')} | {_fmt(r.top_eigenvalue, '.4g')} "
            f"| {_fmt(r.negative_share, '.3f')} | {_fmt(r.hf_msa, '.3f')} | {_fmt(r.hf_conv, '.3f')} |"
        )
    lines.append("")
    if findings_table:
        lines += [
            "## Findings",
            "",
            "A verdict for each claim of Paper A and Paper B (landscape.reproduce.findings): the value on all units",
            "and its 95% percentile bootstrap interval over the units (mini-batches, test images, batches of images",
            "or seeds);",
            "reproduced when the interval lies on the claimed side of zero (or of the stated threshold),",
            "contradicted when it lies on the other side, inconclusive when it contains it.",
            "",
            findings_table,
            "",
        ]
    for r in reports:
        lines += [f"## {r.model}", ""]
        lines += [f"![{p.stem}]({p.relative_to(out_dir).as_posix()})" for p in r.figures]
        lines.append("")
    if shared_figures:
        lines += ["## All models", ""]
        lines += [f"![{p.stem}]({p.relative_to(out_dir).as_posix()})" for p in shared_figures]
        lines.append("")
    lines.append(f"<!-- landscape {__version__} ({WRITTEN_BY}) -->")
    path = out_dir / "summary.md"
    write_text(path, "\n".join(lines) + "\n", force=force)
    return path


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
    """Run the whole demo into ``out_dir`` and return the path of ``summary.md`` (``report.html`` is beside it)."""
    from tqdm.auto import tqdm

    settings = settings or (QUICK if quick else FULL)
    out = ensure_folder(out_dir)
    say = log or (lambda msg: None if quiet else print(msg, file=sys.stderr))
    reports: list[ModelReport] = []
    all_files: dict[str, list[Path]] = {}
    bar = tqdm(settings.models, desc="demo", disable=quiet or not sys.stderr.isatty())
    for model in bar:
        bar.set_postfix(model=model)
        say(f"[demo] {model}: train, surface, spectrum, fourier")
        ckpt, files = _model_stages(model, settings, out, device=device, force=force, quiet=quiet)
        # the demo's own figures folder: its figures are replaced, also those of releases without the mark
        figures = plot_files([files[0]], ensure_subfolder(out, "figures", model), "png", force=True)
        all_files[model] = files
        reports.append(_report(model, ckpt, files, [p for p in figures if p.suffix == ".png"]))
    say("[demo] figures of all models overlaid")
    shared = plot_files(
        [files[1] for files in all_files.values()] + [files[2] for files in all_files.values()],
        ensure_subfolder(out, "figures", "overlay"),
        "png",
        force=True,
    )
    if settings.data_fractions:
        say(f"[demo] vit_mini on {', '.join(f'{f:g}' for f in settings.data_fractions)} of the data: train, spectrum")
        _data_size_stages(settings, out, device=device, force=force, quiet=quiet)

    say("[demo] findings: a verdict for every claim, bootstrap intervals")
    table = findings_markdown(
        findings(out, settings.models, seed=0, resamples=settings.resamples, fourier_unit=settings.fourier_unit)
    )
    shared_png = [p for p in shared if p.suffix == ".png"]
    summary = write_summary(reports, shared_png, out, quick=quick, findings_table=table, force=force)
    say(f"[demo] wrote {summary}")
    say(f"[demo] wrote {write_report(out, force=force)} (every figure embedded; open it in a browser)")
    return summary
