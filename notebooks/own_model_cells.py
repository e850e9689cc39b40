"""The cells of ``own_model.ipynb``: every analysis from Python on a model of your own (make_notebooks.py writes it).

``CELLS`` lists ``(kind, text)`` pairs in order: ``"markdown"``, ``"parameters"`` (the tagged first code cell) or
``"code"``. The notebook is docs/guide/own-model.md as something to run.
"""

from __future__ import annotations

CELLS: list[tuple[str, str]] = [
    (
        "markdown",
        """
# Your own model

Every analysis of the toolkit on a network of your own, from Python: a small CNN with BatchNorm, trained by a plain
PyTorch loop on scikit-learn's handwritten digits (bundled with scikit-learn, nothing is downloaded), then
`landscape.surface`, `hessian`, `spectrum`, `sharpness`, `connect`, `fourier`, `similarity` and `trajectory` on
it. Each call takes the `nn.Module` (copied, never changed) and a `DataLoader` of `(x, y)` batches, the options
as keywords, and returns a `Result`: `.summary()` and its arrays (`result["loss"]`) are the numbers,
`.plot()` its figures. The same walk-through as a page: `docs/guide/own-model.md`.

`QUICK = True` (the committed default) trains for 2 epochs and uses small grids: tens of seconds on a CPU;
`QUICK = False` uses the guide's sizes (a few minutes).
""",
    ),
    (
        "parameters",
        """
# Parameters
import os
import tempfile

QUICK = True  # True: 2 epochs, small grids and sample counts (tens of seconds on a CPU); False: the guide's sizes
DATA_SAMPLES = 128 if QUICK else 512  # training images every analysis evaluates (one fixed, unshuffled DataLoader)
WORKDIR = os.environ.get("LANDSCAPE_NOTEBOOK_WORKDIR") or os.path.join(tempfile.gettempdir(), "landscape-notebooks")
""",
    ),
    (
        "code",
        """
%matplotlib inline
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

import landscape

EPOCHS = 2 if QUICK else 10
GRID = "-1:1:7" if QUICK else "-1:1:21"  # MIN:MAX:NUM of each axis of the surface
TOP_K = 3 if QUICK else 5  # eigenvalues per Hessian
TOL = 1e-2 if QUICK else 1e-4  # relative tolerance of each Lanczos eigenvalue
STEPS = 16 if QUICK else 64  # Lanczos steps of each probe of the spectral density
ROOT = Path(WORKDIR) / ("quick" if QUICK else "full")
FIGURES, SNAPSHOTS = ROOT / "figures" / "own_model", ROOT / "own_model_snapshots"
for folder in (FIGURES, SNAPSHOTS):
    folder.mkdir(parents=True, exist_ok=True)
""",
    ),
    (
        "markdown",
        """
## The data: digits in a plain DataLoader

The 1797 digits are 8 x 8 grey images; standardised with the training split's mean and standard deviation. The
analyses take whatever the loader yields, batch by batch and in order, as the data they evaluate: give them an
unshuffled loader (a shuffled one would hand each call other batches) over the images you mean.
""",
    ),
    (
        "code",
        """
digits = load_digits()
images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16  # (1797, 1, 8, 8) in [0, 1]
labels = torch.tensor(digits.target)
order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
train_idx, test_idx = order[:1437], order[1437:]
images = (images - images[train_idx].mean()) / images[train_idx].std()
train_set = TensorDataset(images[train_idx], labels[train_idx])
test_set = TensorDataset(images[test_idx], labels[test_idx])

loader = DataLoader(Subset(train_set, range(DATA_SAMPLES)), batch_size=64)  # what the analyses evaluate
""",
    ),
    (
        "markdown",
        """
## The model: a small CNN with BatchNorm, trained by a plain loop

Two trainings that differ only in their seed (`connect` and `similarity` compare them); the first one's weights
are saved before every epoch and at the end (`trajectory` reads them).
""",
    ),
    (
        "code",
        '''
class SmallCNN(nn.Module):
    """Three 3x3 convolution + BatchNorm + ReLU stages (the last one strided), average pooling, a linear head."""

    def __init__(self, width: int = 16, num_classes: int = 10):
        super().__init__()

        def stage(c_in, c_out, stride=1):
            return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())

        self.stem = stage(1, width)
        self.block1 = stage(width, width)
        self.block2 = stage(width, 2 * width, stride=2)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, num_classes))

    def forward(self, x):
        return self.head(self.block2(self.block1(self.stem(x))))


def train(seed, snapshots=None):
    """SmallCNN from seed `seed`, trained by Adam; with `snapshots`, its weights saved there at every epoch."""
    torch.manual_seed(seed)
    model = SmallCNN()
    batches = DataLoader(train_set, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(EPOCHS):
        if snapshots is not None:
            torch.save(model.state_dict(), snapshots / f"epoch{epoch}.pt")
        model.train()
        for x, y in batches:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    if snapshots is not None:
        torch.save(model.state_dict(), snapshots / f"epoch{EPOCHS}.pt")
    return model.eval()


def test_accuracy(model):
    x, y = test_set.tensors
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


model = train(0, snapshots=SNAPSHOTS)
other = train(1)
print(f"test accuracy: seed 0 {test_accuracy(model):.3f}, seed 1 {test_accuracy(other):.3f}")
''',
    ),
    (
        "markdown",
        """
## Loss surface

The loss on a plane of parameter space around the weights, `L(theta + a dx + b dy)` on the grid of `x` and `y`,
along two random directions normalised filter by filter (BatchNorm in eval mode). The result shows itself in a
few lines (and as HTML with its figure in Jupyter); `.plot()` gives its figures by name.
""",
    ),
    (
        "code",
        """
surface = landscape.surface(model, loader, x=GRID, y=GRID, progress=False)
print(surface.summary())
centre = surface["loss"].shape[0] // 2
print("loss at the weights themselves:", surface["loss"][centre, centre])
figures = surface.plot()
figures["contour"].savefig(FIGURES / "surface_contour.png")
figures["contour"]
""",
    ),
    (
        "markdown",
        """
## Hessian: top eigenvalues and spectral density

The top eigenvalues of the loss Hessian on the loader's data by Lanczos (Hessian-vector products, no Hessian is
formed), and its spectral density by stochastic Lanczos quadrature.
""",
    ),
    (
        "code",
        """
hessian = landscape.hessian(model, loader, top_k=TOP_K, tol=TOL, density=True, probes=2, steps=STEPS, progress=False)
print(hessian.summary())
print("top eigenvalues:", hessian["eigenvalues"])
hessian.plot()["density"]
""",
    ),
    (
        "markdown",
        """
## Spectrum: the top eigenvalues of every mini-batch

Paper A's max-eigenvalue spectrum: the top eigenvalues of each mini-batch's Hessian, pooled. The mini-batches are
the loader's batches, so this loader has batches of 16, as in the paper.
""",
    ),
    (
        "code",
        """
small_batches = DataLoader(Subset(train_set, range(DATA_SAMPLES // 4)), batch_size=16)
spectrum = landscape.spectrum(model, small_batches, top_k=TOP_K, which="LM", tol=TOL, progress=False)
print(spectrum.summary())
spectrum.plot()["spectrum"]
""",
    ),
    (
        "markdown",
        """
## Sharpness

Average-case adaptive sharpness: per batch `S`, `E[L_S(w + delta) - L_S(w)]` for Gaussian `delta` scaled by
`rho |w|` entry by entry, so that rescaling a layer does not change it; the mean over the batches with a
bootstrap interval, per radius.
""",
    ),
    (
        "code",
        """
sharpness = landscape.sharpness(model, loader, measure="average", rho=(0.05, 0.1), draws=4, progress=False)
print(sharpness.summary())
print("mean per radius:", sharpness["mean"])
sharpness.plot()["sharpness"]
""",
    ),
    (
        "markdown",
        """
## Between two trainings: mode connectivity

The loss on the line `(1 - a) theta_A + a theta_B` between the two trainings, with BatchNorm statistics
re-estimated at every point on the loader's data; the barrier is the highest rise above the straight line between
the two ends. `QUICK = False` also trains a Bezier curve between them (`curve="bezier"`).
""",
    ),
    (
        "code",
        """
connect = landscape.connect(model, other, loader, curve="none" if QUICK else "bezier", progress=False)
print(connect.summary())
connect.plot()["paths"]
""",
    ),
    (
        "markdown",
        """
## Fourier spectra of the feature maps

The toolkit finds the blocks of its own models and of the timm / torchvision families by itself; for a model of
your own, name the modules whose outputs are the feature maps, as `'PATTERN=KIND'` taps (an fnmatch pattern on
`model.named_modules()` names, a kind among stem, conv, msa, mlp, downsample, embed). Without taps the call
stops with a one-line error that lists the candidate modules.
""",
    ),
    (
        "code",
        """
TAPS = ["stem=stem", "block1=conv", "block2=downsample"]
fourier = landscape.fourier(model, loader, taps=TAPS, progress=False)
print(fourier.summary())
print("high-frequency Delta log amplitude per block:", fourier["high_frequency"])
fourier.plot()["delta_log_amplitude"]
""",
    ),
    (
        "markdown",
        """
## Similarity of the blocks of two trainings (CKA)

Linear CKA between every block of one training and every block of the other, on the same images; the taps name
the blocks of each model.
""",
    ),
    (
        "code",
        """
similarity = landscape.similarity(model, loader, other=other, taps=TAPS, other_taps=TAPS, progress=False)
print(similarity.summary())
similarity.plot()["similarity"]
""",
    ),
    (
        "markdown",
        """
## Training trajectory

The distance and angle of every saved epoch's weights from the initial weights. `trajectory` reads checkpoint
files and rebuilds the model of the first one, so it needs the model's class by an importable name: a
`py:module:factory` spec. Here the class lives in the notebook itself, which Python calls `__main__`; a class in
your package is `py:mypackage.models:SmallCNN`.
""",
    ),
    (
        "code",
        """
snapshots = [SNAPSHOTS / f"epoch{epoch}.pt" for epoch in range(EPOCHS + 1)]
trajectory = landscape.trajectory(snapshots, model="py:__main__:SmallCNN")
print(trajectory.summary())
trajectory.plot()["trajectory"]
""",
    ),
    (
        "markdown",
        """
## What does not apply: lesions

`landscape.lesion` removes one residual branch at a time; it knows where the branches of the toolkit's ResNets,
AlterNets and ViTs and of timm-style ViTs are, and refuses any other model in one line (this CNN has no residual
branch to remove).
""",
    ),
]
