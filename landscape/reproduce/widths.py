"""The demo's width sweep: barriers between seeds before and after weight matching as a network widens.

Permuting a layer's hidden units does not change the function, so two trainings can share a basin up to a
permutation; Entezari et al. (2022) conjecture, and Ainsworth et al. (2023, "Git Re-Basin") measure, that the
barrier left after aligning the units shrinks as the network widens. The demo tests it on ``resnet_mini`` over
a fourfold range of widths: for each multiplier ``k`` of :attr:`WidthSweep.multipliers` (a quarter, a half and
all of the model's channels: 1x, 2x and 4x of the narrowest) every stage's channels are ``k`` times the model's
own (``k = 1`` is the model the demo trains anyway), a model is trained with each training seed (the demo's
options for that model), and for every pair of seeds the line between them is measured with
``align="weights"`` (:func:`landscape.analyses.connect.run.run_connect`): its loss barrier to theta_B as trained
(``unaligned_line``) and to theta_B aligned to theta_A (``line``), on the test split, BatchNorm statistics
re-estimated at every point.

The multipliers widen downwards because a model's cost grows with the square of its width: ``resnet_mini`` at
4x its channels trains in about 16 times the demo's time for it, a quarter of an hour of CPU per seed.

Files, in the demo folder: ``widths/MODEL_wKx_seedS.pt`` (``k != 1``; ``k = 1`` reads the demo's own checkpoints)
and ``widths/connect_MODEL_wKx_seedA-B.h5``. The finding
(:func:`landscape.reproduce.findings.findings`' width row): the aligned loss barrier at the widest multiplier
minus at the narrowest, a mean over seed pairs with an interval over the seeds (the pairs share seeds, so the
seeds are the independent units: :func:`width_estimate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from landscape.analyses.connect.run import run_connect
from landscape.analyses.connect.summary import path_barriers
from landscape.errors import LandscapeError
from landscape.models.checkpoint import load_model
from landscape.models.registry import count_parameters, create_model
from landscape.options import checks
from landscape.options.connect import ConnectOptions
from landscape.reproduce.inputs import seed_folder
from landscape.reproduce.statistics import Interval, seed_jackknife
from landscape.reproduce.training import train_on_digits
from landscape.runtime.workers import StageTime, Stopwatch
from landscape.store.files import ensure_folder
from landscape.store.read import read_result

#: the sweep's folder, in the demo folder
WIDTH_DIR = "widths"
#: a widened model's checkpoint and a pair's connect file, in :data:`WIDTH_DIR`
CHECKPOINT_FILE = "{model}_w{k}x_seed{seed}.pt"
CONNECT_FILE = "connect_{model}_w{k}x_seed{a}-{b}.h5"
#: the split whose barriers the sweep reports
SPLIT = "test"
#: images of each split: the whole digits test split, and as many training images for the BatchNorm statistics
#: re-estimated at every point (the whole training split gave loss barriers within 0.013 and the same verdict, at 2.5x
#: the cost: docs/measured.md, "Main job")
SAMPLES = 360


@dataclass(frozen=True)
class WidthSweep:
    """The width sweep's sizes.

    Attributes:
        model: the zoo model widened (its ``widths`` keyword scaled).
        multipliers: the multipliers of the model's channels (1 is the model as the demo trains it).
        connect: the line's options (one split, :data:`SAMPLES` images, ``align="weights"``, no curve).
    """

    model: str = "resnet_mini"
    multipliers: tuple[float, ...] = (0.25, 0.5, 1.0)
    connect: ConnectOptions = field(
        default_factory=lambda: ConnectOptions(split=SPLIT, samples=SAMPLES, steps=11, curve="none", align="weights")
    )

    def __post_init__(self) -> None:
        """Refuse multipliers that are not finite and positive, or repeated, in one line."""
        values = tuple(checks.positive(k, "a width multiplier") for k in self.multipliers)
        if len(set(values)) != len(values):
            raise LandscapeError(f"the width multipliers {list(values)} repeat one; give each once")
        object.__setattr__(self, "multipliers", values)


def pairs(seeds: Sequence[int]) -> list[tuple[int, int]]:
    """Every pair of distinct training seeds, in order: ``(0, 1), (0, 2), (1, 2)`` for three."""
    return list(combinations(seeds, 2))


def widened(model: str, k: float) -> dict[str, Any]:
    """The keyword arguments of ``model`` with every stage ``k`` times as wide (``{}`` for ``k = 1``).

    Args:
        model: a zoo model with a ``widths`` keyword and attribute (a :class:`~landscape.models.resnet.ResNet`).
        k: the multiplier; every width ``k * w`` must be a whole number of at least 1.

    Returns:
        ``{"widths": [k * w for w in the model's widths]}``, or ``{}``.

    Raises:
        LandscapeError: a width that ``k`` does not scale to a whole number of channels.
    """
    if k == 1:
        return {}
    own = create_model(model, num_classes=10, in_chans=1).widths
    if any(k * w != round(k * w) or k * w < 1 for w in own):
        raise LandscapeError(f"{model}'s widths {list(own)} times {k:g} are not whole numbers of channels")
    return {"widths": [round(k * w) for w in own]}


def width_label(k: float) -> str:
    """The multiplier as files and tables name it: ``0.25``, ``1``."""
    return f"{k:g}"


def checkpoint(out_dir: Path, model: str, k: float, seed: int) -> Path:
    """The checkpoint of ``model`` at ``k`` times its width trained with ``seed`` (at 1x the demo's own)."""
    if k == 1:
        return seed_folder(out_dir, seed) / f"{model}.pt"
    return Path(out_dir) / WIDTH_DIR / CHECKPOINT_FILE.format(model=model, k=width_label(k), seed=seed)


def connect_file(out_dir: Path, model: str, k: float, pair: tuple[int, int]) -> Path:
    """The connect file of the seed ``pair`` at ``k`` times the width."""
    return Path(out_dir) / WIDTH_DIR / CONNECT_FILE.format(model=model, k=width_label(k), a=pair[0], b=pair[1])


def train_unit(
    sweep: WidthSweep,
    k: float,
    train: dict[str, Any],
    out_dir: Path,
    *,
    seed: int,
    device: str,
    force: bool,
    quiet: bool,
) -> tuple[Path, list[StageTime]]:
    """Train the sweep's model ``k`` times as wide with ``seed`` and the demo's ``train`` options (or reuse it).

    Returns:
        The checkpoint and what it cost.
    """
    watch = Stopwatch()
    path = checkpoint(out_dir, sweep.model, k, seed)
    ensure_folder(path.parent)
    options = {**train, "model_kwargs": widened(sweep.model, k)}
    with watch("train"):
        train_on_digits(sweep.model, options, path, seed=seed, device=device, force=force, quiet=quiet)
    return path, watch.records


def connect_unit(
    sweep: WidthSweep, k: float, pair: tuple[int, int], out_dir: Path, *, device: str, force: bool, quiet: bool
) -> tuple[Path, list[StageTime]]:
    """The line between the two seeds' models of ``pair`` at ``k`` times the width, before and after alignment.

    Returns:
        The connect file and what it cost.
    """
    watch = Stopwatch()
    a, b = (checkpoint(out_dir, sweep.model, k, s) for s in pair)
    path = connect_file(out_dir, sweep.model, k, pair)
    ensure_folder(path.parent)
    with watch("connect"):
        run_connect(a, b, sweep.connect, out=path, device=device, force=force, progress=False if quiet else None)
    return path, watch.records


@dataclass(frozen=True)
class PairBarriers:
    """The test-split loss and error barriers of one seed pair at one width.

    Attributes:
        model: the model widened.
        k: the width multiplier.
        pair: the two training seeds.
        parameters: the model's parameter count.
        aligned: the loss barrier of the line to the aligned theta_B.
        unaligned: the loss barrier of the line to theta_B as trained.
        aligned_error: the error barrier of the aligned line.
        unaligned_error: the error barrier of the line as trained.
    """

    model: str
    k: float
    pair: tuple[int, int]
    parameters: int
    aligned: float
    unaligned: float
    aligned_error: float
    unaligned_error: float


def read_barriers(out_dir: Path, sweep: WidthSweep, seeds: Sequence[int]) -> list[PairBarriers]:
    """The barriers of every width and seed pair whose connect file is complete (others left out).

    Args:
        out_dir: the demo folder.
        sweep: the sweep.
        seeds: the training seeds.

    Returns:
        One entry per width and pair, widths in the sweep's order.
    """
    out = []
    for k in sweep.multipliers:
        parameters = None  # of the width's model, counted once
        for pair in pairs(seeds):
            path = connect_file(out_dir, sweep.model, k, pair)
            if not path.is_file():
                continue
            result = read_result(path)
            line, unaligned = path_barriers(result, "line"), path_barriers(result, "unaligned_line")
            if not line or not unaligned or SPLIT not in line:
                continue
            if parameters is None:
                parameters = count_parameters(load_model(checkpoint(out_dir, sweep.model, k, pair[0]))[0])
            out.append(
                PairBarriers(
                    sweep.model,
                    k,
                    pair,
                    parameters,
                    line[SPLIT].loss,
                    unaligned[SPLIT].loss,
                    line[SPLIT].error,
                    unaligned[SPLIT].error,
                )
            )
    return out


def width_change(rows: Sequence[PairBarriers]) -> tuple[float, float, list[tuple[int, int]], np.ndarray] | None:
    """The aligned loss barrier at the widest width minus at the narrowest, for every pair measured at both.

    Args:
        rows: the barriers (:func:`read_barriers`).

    Returns:
        ``(narrowest, widest, pairs, differences by pair)``, or None without two widths measured on a common pair.
    """
    widths = sorted({r.k for r in rows})
    if len(widths) < 2:
        return None
    narrow, wide = widths[0], widths[-1]
    by = {(r.k, r.pair): r.aligned for r in rows}
    common = sorted(p for (k, p) in by if k == narrow and (wide, p) in by)
    if not common:
        return None
    return narrow, wide, common, np.array([by[(wide, p)] - by[(narrow, p)] for p in common], dtype=float)


def width_estimate(rows: Sequence[PairBarriers]) -> tuple[float, float, int, int, Interval] | tuple[()]:
    """The mean over seed pairs of :func:`width_change` with its 95% interval over the seeds.

    The pairs share seeds (three seeds give three pairs), so the seed is the independent unit: leaving seed ``i``
    out drops every pair that holds it, and the delete-one-seed jackknife
    (:func:`landscape.reproduce.statistics.seed_jackknife`) of this mean of a U-statistic's kind is its usual
    variance estimate (Arvesen 1969, "Jackknifing U-statistics", Ann. Math. Statist. 40).

    Returns:
        ``(narrowest, widest, pairs, seeds, interval)``, or ``()`` when not measured.
    """
    change = width_change(rows)
    if change is None:
        return ()
    narrow, wide, common, d = change
    seeds = sorted({s for pair in common for s in pair})
    both = np.array([[seeds.index(a), seeds.index(b)] for a, b in common])

    def mean_over_pairs(keep: np.ndarray) -> np.ndarray:
        kept = keep[:, both[:, 0]] * keep[:, both[:, 1]]  # (r, pairs): a pair counts when both its seeds do
        with np.errstate(invalid="ignore", divide="ignore"):
            return (kept @ d) / kept.sum(1)

    return narrow, wide, len(d), len(seeds), seed_jackknife(len(seeds), mean_over_pairs)


def width_table(rows: Sequence[PairBarriers]) -> list[str]:
    """The summary's table: one row per width and seed pair, the barriers before and after weight matching."""
    lines = [
        "| width | parameters | seeds | loss barrier, as trained | after weight matching "
        "| error barrier, as trained | after weight matching |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {width_label(r.k)}x | {r.parameters} | {r.pair[0]}-{r.pair[1]} | {_g(r.unaligned)} | {_g(r.aligned)} "
            f"| {_g(r.unaligned_error)} | {_g(r.aligned_error)} |"
        )
    return lines


def _g(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.4g}"
