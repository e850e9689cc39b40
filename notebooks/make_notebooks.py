"""Write the figure notebooks of ``notebooks/`` from the cells below (so that they stay reviewable as code).

    python notebooks/make_notebooks.py          # rewrite every notebook
    python notebooks/make_notebooks.py --check  # exit 1 if a committed notebook differs from what is generated

Every figure notebook starts with the same parameter cell (``QUICK``, ``DATA``, ``CHECKPOINTS``, ``DEVICE``,
``WORKDIR``, then the notebook's own parameters) and the same setup cell (settings per mode, train-or-reuse of
checkpoints under ``WORKDIR``, figure display glue). The analyses are library calls
(``landscape.analyses.surface.run``, ``landscape.analyses.hessian``, ``landscape.analyses.fourier``,
``landscape.models.conv_attention``, ``landscape.models.convert``); the figures are ``landscape.plot`` figure
functions. Result files live under ``WORKDIR`` with the same names and options in every notebook, so a notebook
run after another reuses its checkpoints and result files. ``own_model.ipynb`` (every analysis from Python on a
model of one's own) has cells of its own, in ``own_model_cells.py``; its parameter cell has ``QUICK`` and
``WORKDIR`` too. Notebooks are written without outputs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

PARAMETERS = """\
# Parameters
import os
import tempfile

QUICK = True  # True: bundled digits, *_mini models, CPU, smoke-test sizes; False: CIFAR-100 and the papers' settings
DATA = "cifar100:/path/to/cifar-100-python"  # QUICK = False only (QUICK always uses "digits")
CHECKPOINTS = {}  # QUICK = False: {"resnet50": "...pt", "vit_ti": ..., "alternet50": ...}; missing ones are trained
DEVICE = "auto"  # QUICK = False: "cuda" for the papers' sizes; QUICK always runs on the CPU
WORKDIR = os.environ.get("LANDSCAPE_NOTEBOOK_WORKDIR") or os.path.join(tempfile.gettempdir(), "landscape-notebooks")
"""

SETUP = '''\
# Setup: settings of the mode, train-or-reuse of checkpoints under WORKDIR, figure display.
from pathlib import Path

from IPython.display import Image, Markdown, display

from landscape.train import TrainConfig, train_model

MODE = "quick" if QUICK else "full"
if QUICK:
    DATA, DEVICE, CHECKPOINTS = "digits", "cpu", {}
MODELS = ["resnet_mini", "vit_mini", "alternet_mini"] if QUICK else ["resnet50", "vit_ti", "alternet50"]
# Analysis sizes. Full: Paper A's (grid 21 x 21 on [-1, 1]^2, top-5 eigenvalues of batches of 16 on 10% of the
# training set, 256 images for Fourier); QUICK: the smallest sizes that still draw every figure.
SIZES = {
    "grid": 5 if QUICK else 21,
    "surface_samples": 32 if QUICK else 10_000,
    "reg_coef": 0.05,  # Paper A: NLL + 0.05 * sum_p ||theta_p||
    "spectrum_batch": 16,
    "spectrum_fraction": None if QUICK else 0.1,
    "spectrum_samples": 16 if QUICK else None,
    "top_k": 3 if QUICK else 5,
    "spectrum_tol": 1e-2 if QUICK else 1e-3,
    "fourier_samples": 32 if QUICK else 256,
}
# QUICK training: two short epochs (the first is the warm-up, snapshotted) on a quarter of digits.
QUICK_TRAIN = {"epochs": 2, "warmup_epochs": 1, "subset": 0.25, "batch_size": 64, "lr": 2e-3}

ROOT = Path(WORKDIR) / MODE
CKPT_DIR, RESULTS, FIGURES = ROOT / "checkpoints", ROOT / "results", ROOT / "figures" / NOTEBOOK
for folder in (CKPT_DIR, RESULTS, FIGURES):
    folder.mkdir(parents=True, exist_ok=True)


def trained(name, config):
    """Train `config` into CKPT_DIR/<name>.pt once; later calls (and other notebooks) reuse the file."""
    path = CKPT_DIR / f"{name}.pt"
    if not path.exists():
        train_model(config, path, quiet=True)
    return path


def checkpoint(model):
    """CHECKPOINTS[model] if given, else `model` trained (QUICK sizes or Paper A's recipe), warm-up snapshotted."""
    if model in CHECKPOINTS:
        return Path(CHECKPOINTS[model])
    if QUICK:
        config = TrainConfig(model=model, data=DATA, device=DEVICE, snapshot_warmup=True, **QUICK_TRAIN)
    else:
        config = TrainConfig.paper_a(model, data=DATA, device=DEVICE, snapshot_warmup=True)
    return trained(model, config)


def show_figure(fig, name):
    """Save a matplotlib Figure to FIGURES/<name>.png and display it."""
    path = FIGURES / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    display(Image(filename=str(path)))
    return path


def table(header, rows):
    """Display rows as a markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    display(Markdown("\\n".join(lines)))
'''

SURFACES = """\
# 2D filter-normalised loss surfaces (BatchNorm in eval mode), one HDF5 file per model; a complete file is reused.
from landscape.analyses.surface.run import run_surface
from landscape.options.surface import SurfaceOptions

GRID = f"-1:1:{SIZES['grid']}"
SURFACE_OPTIONS = SurfaceOptions(
    data=DATA, x=GRID, y=GRID, samples=SIZES["surface_samples"], norm=NORM, regularizer=REGULARIZER,
    reg_coef=SIZES["reg_coef"] if REGULARIZER == "norm-sum" else None,
)
surfaces = {}
for model in MODELS:
    surfaces[model] = run_surface(
        checkpoint(model), SURFACE_OPTIONS, out=RESULTS / f"{model}_surface_{REGULARIZER}_{NORM}.h5", device=DEVICE,
        progress=False,
    )
"""

SPECTRA = '''\
# Per-mini-batch top-k Hessian eigenvalues (largest magnitude) of NLL + the SPECTRUM_REGULARIZER term.
from landscape.analyses.hessian.run import run_spectrum
from landscape.options.hessian import SpectrumOptions

SPECTRUM = SpectrumOptions(
    data=DATA, batch_size=SIZES["spectrum_batch"], fraction=SIZES["spectrum_fraction"],
    samples=SIZES["spectrum_samples"], top_k=SIZES["top_k"], which="LM", tol=SIZES["spectrum_tol"],
    regularizer=SPECTRUM_REGULARIZER, reg_coef=SIZES["reg_coef"] if SPECTRUM_REGULARIZER == "norm-sum" else None,
)


def spectrum(model, stage):
    """The max-eigenvalue spectrum of `model` after warm-up (stage "warmup") or at the end ("final")."""
    from landscape.models.checkpoint import snapshot_path

    ckpt = checkpoint(model)
    if stage == "warmup":
        ckpt = Path(WARMUP_CHECKPOINTS.get(model) or snapshot_path(ckpt, "warmup"))
        if not ckpt.exists():
            raise FileNotFoundError(f"no warm-up checkpoint {ckpt}; set WARMUP_CHECKPOINTS[{model!r}]")
    return run_spectrum(
        ckpt, SPECTRUM, out=RESULTS / f"{model}_spectrum_{stage}_{SPECTRUM_REGULARIZER}.h5", device=DEVICE,
        progress=False,
    )
'''

FOURIER = """\
# Fourier profile, high-frequency value, feature-map variance and band-noise accuracy of every block's output.
from landscape.analyses.fourier.run import run_fourier
from landscape.options.fourier import FourierOptions

FOURIER_OPTIONS = FourierOptions(data=DATA, samples=SIZES["fourier_samples"], noise_bands=True)
fourier = {
    model: run_fourier(checkpoint(model), FOURIER_OPTIONS, out=RESULTS / f"{model}_fourier.h5", device=DEVICE,
                       progress=False)
    for model in MODELS
}
"""

SPECTRUM_TABLE = '''\
def spectrum_row(model, stage, result):
    """Model, stage, top eigenvalue, most negative eigenvalue and share of negative eigenvalues."""
    ev = result["eigenvalues"][result["done"].astype(bool)].ravel()
    return [model, stage, f"{ev.max():.4g}", f"{ev.min():.4g}", f"{(ev < 0).mean():.2f}"]
'''


SWEEP_SPECTRUM = """\
# The sweeps' spectra: the SPECTRUM options on two QUICK batches of 16 (so that each pool holds more than one
# batch); full mode: 10% of the training set, as above.
from dataclasses import replace

from landscape.models.checkpoint import read_checkpoint

SWEEP_SPECTRUM = replace(SPECTRUM, samples=2 * SIZES["spectrum_batch"] if QUICK else None)


def sweep_spectrum(name, ckpt):
    \"\"\"The max-eigenvalue spectrum of checkpoint `ckpt` (sweep options), RESULTS/<name>_spectrum_*.h5.\"\"\"
    return run_spectrum(
        ckpt, SWEEP_SPECTRUM, out=RESULTS / f"{name}_spectrum_sweep_{SPECTRUM_REGULARIZER}.h5", device=DEVICE,
        progress=False,
    )


def spectrum_stats(result):
    \"\"\"Top eigenvalue, most negative eigenvalue and share of negative eigenvalues of the done mini-batches.\"\"\"
    ev = result["eigenvalues"][result["done"].astype(bool)].ravel()
    return float(ev.max()), float(ev.min()), float((ev < 0).mean())


def stored_accuracy(ckpt):
    \"\"\"The test accuracy train_model stored in the checkpoint (None for a checkpoint without it).\"\"\"
    return (read_checkpoint(ckpt).meta.get("metrics") or {}).get("test_accuracy")
"""

DATA_SWEEP_NOTE = """
## Data size: more training data suppresses ViT's negative eigenvalues (Paper A, Fig 4)

Paper A's claim: a ViT trained on less data has more (and larger) negative Hessian eigenvalues, a less convex
loss; a larger training set suppresses them. Protocol: the same ViT (`vit_mini` in QUICK, `vit_ti` in full mode)
trained on `DATA_FRACTIONS` (6%, 30% and 100%) of the training set (`TrainConfig(subset=...)`, the same recipe
and number of epochs for each, so a smaller subset also means fewer steps), then the per-mini-batch top-k
spectrum of each final checkpoint on the same training images (the sweep's spectrum options: 2 batches of 16 in
QUICK, 10% of the training set in full mode), overlaid. Full mode trains the subsets with Paper A's recipe and
uses the notebook's own `vit_ti` checkpoint (or `CHECKPOINTS["vit_ti"]`) for 100%.

How to read it: the claim holds if the negative panel's mass and the share of negative eigenvalues in the table
fall as the fraction grows. QUICK trains each model for one epoch on digits, a smoke run whose numbers say
nothing about the claim.
"""

DATA_SWEEP = """\
VIT = "vit_mini" if QUICK else "vit_ti"
# QUICK: one epoch on digits per fraction (no warm-up); full: Paper A's recipe.
QUICK_SWEEP_TRAIN = {"epochs": 1, "warmup_epochs": 0, "batch_size": 64, "lr": 2e-3}


def data_sweep_checkpoint(fraction):
    \"\"\"VIT trained on `fraction` of the training set (full mode, 100%: the notebook's own VIT checkpoint).\"\"\"
    subset = None if fraction >= 1 else fraction
    if QUICK:
        config = TrainConfig(model=VIT, data=DATA, device=DEVICE, subset=subset, **QUICK_SWEEP_TRAIN)
    elif subset is None:
        return checkpoint(VIT)
    else:
        config = TrainConfig.paper_a(VIT, data=DATA, device=DEVICE, subset=subset)
    return trained(f"{VIT}_data{fraction:g}", config)


data_ckpts = {fraction: data_sweep_checkpoint(fraction) for fraction in DATA_FRACTIONS}
data_spectra = {fraction: sweep_spectrum(f"{VIT}_data{fraction:g}", ckpt) for fraction, ckpt in data_ckpts.items()}
"""

DATA_SWEEP_REPORT = """\
show_figure(spectrum_figure(list(data_spectra.values())), f"{VIT}_data_size_spectrum")
rows = []
for fraction, result in data_spectra.items():
    top, low, share = spectrum_stats(result)
    accuracy = stored_accuracy(data_ckpts[fraction])
    rows.append([f"{fraction:g}", "–" if accuracy is None else f"{accuracy:.4f}", f"{top:.4g}", f"{low:.4g}",
                 f"{share:.2f}"])
table(["data fraction", "test accuracy", "top eigenvalue", "most negative", "share negative"], rows)
"""

WINDOW_SWEEP_NOTE = """
## Window size: local attention against negative eigenvalues and accuracy (Paper A, local MSAs)

Paper A's claim: constraining MSAs to local windows (a locality inductive bias) suppresses the negative Hessian
eigenvalues and helps accuracy, compared with global attention. Protocol: the notebook's AlterNet
(`alternet_mini` in QUICK, `alternet50` in full mode) with its MSAs attending in windows of each size in
`WINDOWS` (`create_model(..., window=w)`, the window capped at each stage's map size; `"global"` is a window of
the input size, so every MSA attends over its whole map). Each variant is trained with the notebook's recipe
(QUICK: two epochs on a quarter of digits; full: Paper A's); window 4 is the zoo's default, so that variant is the
notebook's AlterNet checkpoint itself. For each: the test accuracy stored by `train_model` and the per-mini-batch
top-k spectrum of the final checkpoint (the sweep's spectrum options).

How to read it: the claim holds if the share of negative eigenvalues rises with the window (global last) while
the accuracy of the local windows is at least that of global attention. QUICK models are barely trained, a smoke
run whose numbers say nothing about the claim.
"""

WINDOW_SWEEP = """\
ALTERNET = "alternet_mini" if QUICK else "alternet50"
DEFAULT_WINDOW = 4  # the zoo's AlterNet window: that variant is checkpoint(ALTERNET)
IMG_SIZE = 32  # digits and CIFAR: a window this size covers every stage's map (global attention)
if WINDOWS is None:
    WINDOWS = [2, 4, "global"] if QUICK else [2, 4, 8, "global"]


def window_checkpoint(window):
    \"\"\"ALTERNET with its MSAs attending in `window` x `window` windows, trained (or reused) like checkpoint().\"\"\"
    side = IMG_SIZE if window == "global" else window
    if side == DEFAULT_WINDOW:
        return checkpoint(ALTERNET)
    if QUICK:
        config = TrainConfig(model=ALTERNET, data=DATA, device=DEVICE, model_kwargs={"window": side}, **QUICK_TRAIN)
    else:
        config = TrainConfig.paper_a(ALTERNET, data=DATA, device=DEVICE, model_kwargs={"window": side})
    return trained(f"{ALTERNET}_window{window}", config)


window_ckpts = {window: window_checkpoint(window) for window in WINDOWS}
window_spectra = {window: sweep_spectrum(f"{ALTERNET}_window{window}", ckpt) for window, ckpt in window_ckpts.items()}
"""

WINDOW_SWEEP_REPORT = """\
from matplotlib.figure import Figure

stats = {window: spectrum_stats(result) for window, result in window_spectra.items()}
accuracies = {window: stored_accuracy(ckpt) for window, ckpt in window_ckpts.items()}
table(["window", "test accuracy", "share negative", "top eigenvalue", "most negative"],
      [[window, "–" if accuracies[window] is None else f"{accuracies[window]:.4f}", f"{stats[window][2]:.2f}",
        f"{stats[window][0]:.4g}", f"{stats[window][1]:.4g}"] for window in WINDOWS])

fig = Figure(figsize=(8.0, 3.2), layout="constrained")
share_ax, acc_ax = fig.subplots(1, 2)
ticks = range(len(WINDOWS))
share_ax.plot(ticks, [stats[w][2] for w in WINDOWS], "o-")
share_ax.set_ylabel("share of negative eigenvalues")
acc_ax.plot(ticks, [float("nan") if accuracies[w] is None else accuracies[w] for w in WINDOWS], "s-", color="C1")
acc_ax.set_ylabel("test accuracy")
for ax in (share_ax, acc_ax):
    ax.set_xticks(list(ticks), [str(w) for w in WINDOWS])
    ax.set_xlabel("MSA window")
fig.suptitle(f"{ALTERNET}: window size sweep")
show_figure(fig, f"{ALTERNET}_window_sweep")
show_figure(spectrum_figure(list(window_spectra.values())), f"{ALTERNET}_window_spectra")
"""


def md(text: str) -> nbformat.NotebookNode:
    """A markdown cell."""
    return new_markdown_cell(text.strip())


def code(*parts: str) -> nbformat.NotebookNode:
    """A code cell made of ``parts`` joined by a blank line."""
    return new_code_cell("\n\n".join(p.strip("\n") for p in parts))


def parameters(extra: str = "") -> nbformat.NotebookNode:
    """The parameter cell: the shared parameters, then the notebook's own."""
    cell = code(PARAMETERS, extra) if extra else code(PARAMETERS)
    cell.metadata["tags"] = ["parameters"]
    return cell


def setup(name: str) -> nbformat.NotebookNode:
    """The setup cell of notebook ``name`` (its figures go to FIGURES = WORKDIR/<mode>/figures/<name>)."""
    return code(f'NOTEBOOK = "{name}"\n' + SETUP)


RUN_NOTE = """
Run with `QUICK = True` (the default) for a CPU smoke run on the bundled digits data, or set `QUICK = False`,
`DATA = "cifar100:/path"` and optionally `CHECKPOINTS` for the papers' settings on a GPU. Checkpoints and
result files are kept under `WORKDIR` and reused by every notebook; delete them to recompute.
"""


def nb_loss_landscapes() -> list[nbformat.NotebookNode]:
    """01: Paper A Fig 1a."""
    return [
        md(
            """
# 1. Loss landscapes of ResNet, ViT and AlterNet (Paper A, Fig 1a)

Two seeded Gaussian directions, filter-normalised (`NORM = "filter"`, Li et al. 2018; `"dim0"` is the official
code's variant), zero on 1-D tensors and position tables; BatchNorm in eval mode; the loss is NLL + 0.05 x the sum
of the parameter tensors' L2 norms (`REGULARIZER = "norm-sum"`, as the paper plots it; `"none"` for the plain
NLL). Paper A's claim: the MSA models (ViT, AlterNet) have flatter landscapes than the ResNet.
"""
            + RUN_NOTE
        ),
        parameters(
            'REGULARIZER = "norm-sum"  # "norm-sum" (Paper A), "none" (NLL only) or "l2"\n'
            'NORM = "filter"  # "filter" (Li et al.) or "dim0" (Paper A\'s official code)'
        ),
        setup("01_loss_landscapes"),
        code(SURFACES),
        md("The paper's 3D view (z = loss - min(loss), plasma wireframe), then contours of each model."),
        code("""
from landscape.plot.surface import contour_figure, surface3d_figure

for model, result in surfaces.items():
    show_figure(surface3d_figure(result, style="paper"), f"{model}_3d")
    show_figure(contour_figure(result, filled=True), f"{model}_contour")
"""),
    ]


def nb_hessian_spectra() -> list[nbformat.NotebookNode]:
    """02: Paper A Fig 1c / Fig 4."""
    return [
        md(
            """
# 2. Hessian max-eigenvalue spectra after warm-up and at the end of training (Paper A, Fig 1c / Fig 4)

For every mini-batch of 16 training images (10% of the training set in the full run) the top-k Hessian
eigenvalues of largest magnitude of that batch's loss (NLL + 0.05 sum_p ||theta_p||, BatchNorm in eval mode) by
Lanczos; the eigenvalues of all batches are pooled and drawn as densities, negative and positive panels.
Checkpoints are trained with `snapshot_warmup=True`, so every model has a snapshot taken right after warm-up.
Paper A's claim: ViT has many negative eigenvalues (a non-convex loss), most at the start of training;
AlterNet's spectrum is the narrowest (flattest).

Note: the norm-sum term c sum_p ||theta_p|| has curvature c / ||theta_p|| across each tensor, so a tensor of
tiny norm (a bias that has barely moved from zero, common in a short QUICK run) puts a cluster of eigenvalues
near c / ||theta_p|| at the top of the spectrum. `SPECTRUM_REGULARIZER = "none"` shows the NLL's curvature alone.
"""
            + RUN_NOTE
        ),
        parameters(
            "WARMUP_CHECKPOINTS = {}  # QUICK = False with CHECKPOINTS: the matching warm-up checkpoints\n"
            'SPECTRUM_REGULARIZER = "norm-sum"  # "norm-sum" (Paper A: NLL + 0.05 sum_p ||theta_p||) or "none"\n'
            "DATA_FRACTIONS = [0.06, 0.3, 1.0]  # data size sweep: shares of the training set (Paper A, Fig 4)"
        ),
        setup("02_hessian_spectra"),
        code(SPECTRA),
        code("""
spectra = {(model, stage): spectrum(model, stage) for model in MODELS for stage in ("warmup", "final")}
"""),
        md("Each model after warm-up and at the end of training, then all models at each stage."),
        code("""
from landscape.plot.hessian import spectrum_figure

for model in MODELS:
    show_figure(spectrum_figure([spectra[model, "warmup"], spectra[model, "final"]]), f"{model}_spectrum")
for stage in ("warmup", "final"):
    show_figure(spectrum_figure([spectra[model, stage] for model in MODELS]), f"all_{stage}_spectrum")
"""),
        code(
            SPECTRUM_TABLE,
            """
table(["model", "checkpoint", "top eigenvalue", "most negative", "share negative"],
      [spectrum_row(model, stage, result) for (model, stage), result in spectra.items()])
""",
        ),
        md(DATA_SWEEP_NOTE),
        code(SWEEP_SPECTRUM, DATA_SWEEP),
        code(DATA_SWEEP_REPORT),
    ]


FOURIER_TIMM = """\
# Paper A drew these figures on ImageNet-1K pretrained timm models at 224 px (resnet50, vit_tiny_patch16_224) with
# each model's own preprocessing; CIFAR images are too small for them. QUICK runs the same code on small
# random-init timm models and digits. Blocks are found by landscape.models.taps.FeatureTaps (timm's ResNet and ViT
# rules).
from landscape.analyses.fourier.run import run_fourier
from landscape.core.source import ModelSource
from landscape.options.fourier import FourierOptions

if QUICK:
    FOURIER_MODELS = {
        "timm_resnet18": ModelSource(model="timm:resnet18", random_init=True),
        "timm_vit_tiny": ModelSource(model="timm:vit_tiny_patch16_224", random_init=True,
                                     model_kwargs={"img_size": 32, "patch_size": 4, "depth": 4}),
    }
    FOURIER_DATA = "digits"
else:
    FOURIER_MODELS = {
        "resnet50": ModelSource(model="timm:resnet50", pretrained=True),
        "vit_tiny_patch16_224": ModelSource(model="timm:vit_tiny_patch16_224", pretrained=True),
    }
    FOURIER_DATA = f"imagefolder:{IMAGENET_VAL}"

fourier = {
    name: run_fourier(
        source, FourierOptions(data=FOURIER_DATA, split="test", samples=SIZES["fourier_samples"], noise_bands=True),
        out=RESULTS / f"{name}_fourier_timm.h5", device=DEVICE, progress=False,
    )
    for name, source in FOURIER_MODELS.items()
}
"""


def nb_fourier() -> list[nbformat.NotebookNode]:
    """03: Paper A Fig 2a, Fig 8, Fig 2b on timm models (pretrained on ImageNet in full mode)."""
    return [
        md(
            """
# 3. Fourier analysis of feature maps (Paper A, Fig 2a, Fig 8, Fig 2b)

For the output of every block (ViT: every MSA and MLP sub-block, CLS token dropped, tokens on their grid):
log |FFT2| averaged over images and channels, read along the half diagonal from 0 to pi; Delta log amplitude =
log A(f) - log A(0). Fig 2a: one curve per block coloured by depth; Fig 8: the high-frequency end against depth
(MSA blocks shaded grey, downsampling blue); Fig 2b: accuracy drop under random noise band-passed to a square
annulus of frequencies. Paper A's claim: MSAs are low-pass (they lower the high-frequency amplitude), Convs
high-pass; ViT is robust to high-frequency noise, ResNet is not.

Full mode (`QUICK = False`) runs Paper A's own setting: timm `resnet50` and `vit_tiny_patch16_224` with their
ImageNet-1K weights (`--pretrained`, downloaded once: needs a network), 256 ImageNet validation images from
`IMAGENET_VAL` (one folder per class, the usual `val/` layout), each model's own preprocessing (224 px,
its interpolation, crop and mean/std). QUICK mode runs the same code on random-init timm models and digits.
The zoo models' profiles are in notebook 4's result files.
"""
            + RUN_NOTE
        ),
        parameters('IMAGENET_VAL = "/path/to/imagenet/val"  # QUICK = False: ImageNet-1K validation, a class a folder'),
        setup("03_fourier"),
        code(FOURIER_TIMM),
        md("Fig 2a: Delta log amplitude per block."),
        code("""
from landscape.plot.fourier import depth_figure, noise_figure, profile_figure

for model, result in fourier.items():
    show_figure(profile_figure(result), f"{model}_delta_log_amplitude")
"""),
        md("Fig 8: high-frequency Delta log amplitude by depth; Fig 2b: accuracy drop per noise band."),
        code("""
results = list(fourier.values())
show_figure(depth_figure(results, "high_frequency", "Δ log amplitude at the highest frequency",
                         "high-frequency amplitude by depth"), "high_frequency")
show_figure(noise_figure(results), "noise")
"""),
    ]


def nb_feature_variance() -> list[nbformat.NotebookNode]:
    """04: Paper A Fig 9."""
    return [
        md(
            """
# 4. Feature-map variance by depth (Paper A, Fig 9)

The unbiased variance of every block's output over spatial positions, per image and channel, averaged; against
normalised depth with MSA blocks shaded grey and downsampling blocks blue. Paper A's claim: MSAs reduce the
variance of feature maps, Convs (and MLPs) increase it. Computed by the same Fourier run as notebook 3 (the same
result files are reused).
"""
            + RUN_NOTE
        ),
        parameters(),
        setup("04_feature_variance"),
        code(FOURIER),
        code("""
from landscape.plot.fourier import depth_figure

for model, result in fourier.items():
    show_figure(depth_figure([result], "variance", "feature-map variance", f"{model}: variance by depth"),
                f"{model}_variance")
"""),
    ]


def nb_alternet() -> list[nbformat.NotebookNode]:
    """05: AlterNet against ResNet and ViT."""
    return [
        md(
            """
# 5. AlterNet against ResNet and ViT: accuracy, landscape, spectrum (Paper A, Sec 4)

AlterNet replaces the Conv blocks at the end of each stage of a pre-activation ResNet with MSA blocks. Paper A's
claim: it is more accurate than both, with a flatter landscape and a narrower Hessian spectrum than the ResNet and
without the ViT's negative eigenvalues. Uses the same checkpoints and result files as notebooks 1 and 2.
"""
            + RUN_NOTE
        ),
        parameters(
            'REGULARIZER = "norm-sum"  # the landscape\'s loss, as in notebook 1\nNORM = "filter"\n'
            "WARMUP_CHECKPOINTS = {}  # as in notebook 2\n"
            'SPECTRUM_REGULARIZER = "norm-sum"  # as in notebook 2\n'
            'WINDOWS = None  # window sweep: sides and/or "global"; None: [2, 4, "global"] QUICK, [2, 4, 8, "global"]'
        ),
        setup("05_alternet"),
        code("""
from landscape.models.checkpoint import read_checkpoint

rows = []
for model in MODELS:
    metrics = read_checkpoint(checkpoint(model)).meta.get("metrics") or {}
    accuracy = metrics.get("test_accuracy")
    rows.append([model, "–" if accuracy is None else f"{accuracy:.4f}"])
table(["model", "test accuracy"], rows)
"""),
        code(SURFACES),
        code("""
from landscape.plot.surface import surface3d_figure

for model, result in surfaces.items():
    show_figure(surface3d_figure(result, style="paper"), f"{model}_3d")
"""),
        code(
            SPECTRA,
            """
finals = {model: spectrum(model, "final") for model in MODELS}
""",
        ),
        code(
            SPECTRUM_TABLE,
            """
from landscape.plot.hessian import spectrum_figure

show_figure(spectrum_figure(list(finals.values())), "spectra")
table(["model", "checkpoint", "top eigenvalue", "most negative", "share negative"],
      [spectrum_row(model, "final", result) for model, result in finals.items()])
""",
        ),
        md(WINDOW_SWEEP_NOTE),
        code(SWEEP_SPECTRUM, WINDOW_SWEEP),
        code(WINDOW_SWEEP_REPORT),
    ]


def nb_paper_b() -> list[nbformat.NotebookNode]:
    """06: Paper B."""
    return [
        md(
            """
# 6. Paper B: a ViT layer can perform convolution; CNN-initialised ViTs on little data

**Construction** (Li et al. 2021): one multi-head self-attention layer with relative position bias on P x P
patch tokens computes any 3x3 (up to (2P+1)x(2P+1)) convolution with 9 heads: zero content term, head h's bias
peaks at its neighbour offset with margin c (the sharpness), identity values, W_O = the convolution's map, a ring
of zero tokens for the borders. The error falls like n e^{-c}; fewer than 9 heads cannot be exact (lower bound).

**Low-data experiment**: the CNN counterpart `convvit_*` (every MSA a fixed shift attention) is trained, converted
into a `vit_rpe_*` ViT by the construction (`landscape.models.convert`) and fine-tuned; compared with the same ViT
from a
random initialisation, on subsets of the training set.
"""
            + RUN_NOTE
        ),
        parameters(
            "PATCH = 2  # patch size of the construction check\n"
            "SHARPNESS = [2, 4, 6, 8, 10, 12, 15, 20, 25, 30]  # bias margins c to check\n"
            "FRACTIONS = None  # training fractions of the low-data experiment; None: per mode"
        ),
        setup("06_paper_b_conv_to_attention"),
        md("## The construction, checked numerically (float64)"),
        code("""
import torch
from torch import nn

from landscape.models.conv_attention import best_fit_fewer_heads, construction_error, head_lower_bound

torch.manual_seed(0)
conv = nn.Conv2d(3, 4, 3, padding=1).double()  # a generic 3x3 convolution
x = torch.randn(8, 3, 16, 16, dtype=torch.float64)
reports = [construction_error(conv, PATCH, x, sharpness=c) for c in SHARPNESS]
table(["c", "heads", "off-target mass", "predicted (n-1)e^-c / (1+(n-1)e^-c)", "max |attn - conv|", "relative"],
      [[r.sharpness, r.heads, f"{r.off_target_mass:.2e}", f"{r.predicted_mass:.2e}", f"{r.max_abs_error:.2e}",
        f"{r.max_rel_error:.2e}"] for r in reports])
assert reports[-1].max_rel_error < 1e-8, "the construction should be exact at a large sharpness"
"""),
        code("""
from matplotlib.figure import Figure

fig = Figure(figsize=(5.2, 3.6), layout="constrained")
ax = fig.add_subplot()
ax.semilogy(SHARPNESS, [r.max_rel_error for r in reports], "o-", label="relative error max|attn - conv| / max|conv|")
ax.semilogy(SHARPNESS, [r.off_target_mass for r in reports], "s-", label="off-target attention mass")
ax.semilogy(SHARPNESS, [r.predicted_mass for r in reports], "k--", lw=1, label="predicted mass")
ax.set_xlabel("sharpness c (bias margin)")
ax.set_title(f"conv -> attention, {reports[0].heads} heads, patch {PATCH}")
ax.legend(fontsize=8)
show_figure(fig, "error_vs_sharpness")
"""),
        md("""
Fewer heads: with content-independent attention every per-offset map lies in the span of H matrices, so the
relative error is at least the Eckart-Young tail of the singular values (`head_lower_bound`); the best
least-squares fit of W_O over every choice of 8 of the 9 offsets (on white-noise images) stays near that bound,
far from exact; 9 heads fit exactly.
"""),
        code("""
heads = list(range(1, 10))
bounds = [head_lower_bound(conv, PATCH, h) for h in heads]
x_fit = torch.randn(64, 3, 16, 16, dtype=torch.float64)  # many queries: the fit barely overfits
fit8, subset8 = best_fit_fewer_heads(conv, PATCH, 8, x_fit)
fit9, _ = best_fit_fewer_heads(conv, PATCH, 9, x_fit)
fig = Figure(figsize=(5.2, 3.6), layout="constrained")
ax = fig.add_subplot()
ax.plot(heads, bounds, "o-", label="lower bound on the relative error")
ax.plot([8, 9], [fit8, fit9], "s", ms=8, label="best least-squares fit (8 or 9 offsets)")
ax.set_xlabel("heads")
ax.set_ylabel("relative error")
ax.set_title("a 3x3 convolution on patch tokens needs 9 heads")
ax.legend(fontsize=8)
show_figure(fig, "head_lower_bound")
table(["heads", "lower bound", "best fit"],
      [[8, f"{bounds[7]:.3f}", f"{fit8:.3f}"], [9, f"{bounds[8]:.1e}", f"{fit9:.1e}"]])
assert bounds[7] > 0.05 and fit8 > 0.05 and fit9 < 1e-8
"""),
        md("""
## Low-data experiment: CNN-initialised ViT against a randomly initialised ViT

Same optimiser and steps for each model; the CNN-initialised ViT also had the CNN's training (the two-stage
pipeline). QUICK: `convvit_mini`/`vit_rpe_mini` on a quarter of digits for a few steps (a smoke run, not a
result); full: `convvit_ti`/`vit_rpe_ti` on CIFAR-100 subsets (for a multi-seed table run
`benchmarks/cnn_init_vit.py`).
"""),
        code("""
from landscape.data.loading import load_dataset
from landscape.models.checkpoint import load_model, read_checkpoint
from landscape.models.convert import convert_checkpoint
from landscape.runtime.distributed import resolve_device
from landscape.train import evaluate_model

SIZE = "mini" if QUICK else "ti"
device = resolve_device(DEVICE)
if FRACTIONS is None:
    FRACTIONS = [0.25] if QUICK else [0.1, 0.25, 1.0]
if QUICK:
    LOW_DATA = {"epochs": 2, "warmup_epochs": 0.2, "batch_size": 48, "lr": 2e-3}
else:
    LOW_DATA = {"epochs": 100, "warmup_epochs": 5, "batch_size": 96, "lr": 5e-4, "label_smoothing": 0.1,
                "clip_grad": 5.0}


def accuracy(path):
    \"\"\"Test accuracy stored in a checkpoint by train_model.\"\"\"
    return read_checkpoint(path).meta["metrics"]["test_accuracy"]


rows = []
for fraction in FRACTIONS:
    common = dict(data=DATA, device=DEVICE, subset=None if fraction >= 1 else fraction, **LOW_DATA)
    tag = f"{SIZE}_f{fraction:g}"
    cnn = trained(f"convvit_{tag}", TrainConfig(model=f"convvit_{SIZE}", **common))
    vit = trained(f"vit_rpe_random_{tag}", TrainConfig(model=f"vit_rpe_{SIZE}", **common))
    init = CKPT_DIR / f"vit_rpe_converted_{tag}.pt"
    if not init.exists():
        convert_checkpoint(cnn, init, data=DATA, samples=256)
    converted, _ = load_model(init)
    before = evaluate_model(converted.to(device), load_dataset(DATA, "test"), device)
    tuned = trained(f"vit_rpe_cnn_init_{tag}", TrainConfig(model=f"vit_rpe_{SIZE}", init=str(init), **common))
    diff = read_checkpoint(init).meta["metrics"]["max_logit_difference"]
    rows.append([fraction, f"{accuracy(cnn):.3f}", f"{accuracy(vit):.3f}", f"{before['accuracy']:.3f}",
                 f"{accuracy(tuned):.3f}", f"{diff:.1e}"])
table(["fraction", "convvit (CNN)", "vit_rpe, random init", "converted, before fine-tuning",
       "vit_rpe, CNN init + fine-tuned", "max logit difference CNN vs converted"], rows)
"""),
    ]


def nb_findings() -> list[nbformat.NotebookNode]:
    """07: a verdict for every claim of both papers (the demo's findings table)."""
    return [
        md(
            """
# 7. A verdict for every claim

`landscape demo` trains `resnet_mini`, `vit_mini` and `alternet_mini` on digits, computes their surfaces, spectra
and Fourier profiles, and `landscape.reproduce.findings` turns the files into one row per claim of Paper A and Paper
B: the
statistic measured on every seed's trained model, a 95% interval over the seeds (training randomness enters once
per seed: the delete-one-seed jackknife with a t quantile of seeds - 1 degrees of freedom) and a verdict:
reproduced (the interval lies on the claimed side), contradicted (on the other side), inconclusive (it contains
the threshold) or not measured (the inputs are absent; the row names the command).

`QUICK = True` runs the quick demo (two seeds, smoke sizes: the verdicts mean little; no Paper B row);
`QUICK = False` runs the full demo on the CPU (three seeds per model and a small Paper B run of its own). With
`PAPER_B_JSON`, the rows of `benchmarks/cnn_init_vit.py --json FILE` give Paper B's row instead. The verdicts hold
for these small models on digits, not for the papers' models.
"""
        ),
        parameters("PAPER_B_JSON = None  # the rows file of `benchmarks/cnn_init_vit.py --json FILE` (Paper B)"),
        setup("07_findings"),
        code("""
import shutil

from landscape.reproduce.demo import run_demo

DEMO_DIR = ROOT / "demo"
if PAPER_B_JSON:
    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copy(PAPER_B_JSON, DEMO_DIR / "paper_b.json")
summary = run_demo(DEMO_DIR, quick=QUICK, quiet=True)
text = summary.read_text()
display(Markdown(text[text.index("## Findings") :]))
"""),
        md("The per-mini-batch spectra behind the Hessian rows, overlaid:"),
        code("""
from landscape.plot.hessian import spectrum_figure
from landscape.store.read import read_result

show_figure(spectrum_figure([read_result(DEMO_DIR / f"{m}_spectrum.h5") for m in MODELS]), "spectra")
"""),
    ]


def nb_own_model() -> list[nbformat.NotebookNode]:
    """own_model: every analysis from Python on a small CNN of one's own (the cells of own_model_cells.py)."""
    spec = importlib.util.spec_from_file_location("own_model_cells", HERE / "own_model_cells.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = {"markdown": md, "code": code, "parameters": parameters_only}
    return [made[kind](text) for kind, text in module.CELLS]


def parameters_only(text: str) -> nbformat.NotebookNode:
    """A parameter cell of ``text`` alone (tagged ``parameters``), for a notebook without the shared parameters."""
    cell = code(text)
    cell.metadata["tags"] = ["parameters"]
    return cell


NOTEBOOKS = {
    "01_loss_landscapes.ipynb": nb_loss_landscapes,
    "02_hessian_spectra.ipynb": nb_hessian_spectra,
    "03_fourier.ipynb": nb_fourier,
    "04_feature_variance.ipynb": nb_feature_variance,
    "05_alternet.ipynb": nb_alternet,
    "06_paper_b_conv_to_attention.ipynb": nb_paper_b,
    "07_findings.ipynb": nb_findings,
    "own_model.ipynb": nb_own_model,
}


def build(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` (a key of NOTEBOOKS), without outputs, with stable cell ids."""
    nb = new_notebook(cells=NOTEBOOKS[name]())
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    """The file text of notebook ``name``."""
    return nbformat.writes(build(name)) + "\n"


def main(argv: list[str]) -> int:
    """Write every notebook, or with ``--check`` report the ones that differ from the generated text."""
    check = "--check" in argv
    stale = []
    for name in NOTEBOOKS:
        path = HERE / name
        text = render(name)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    for name in stale:
        print(f"{name} differs from make_notebooks.py; run python notebooks/make_notebooks.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
