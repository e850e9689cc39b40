"""Paper B's low-data experiment as the full demo runs it: the rows of ``paper_b.json``, resumable.

A smaller run than ``benchmarks/cnn_init_vit.py``'s README run (1000 steps): for each seed, on a stratified
``fraction`` of the digits training split, with the same AdamW settings and about ``steps`` optimiser steps per
stage (whole epochs; warm-up 10% of them):

1. ``convvit_SIZE`` (the CNN counterpart) is trained from scratch (``cnn.pt``);
2. it is converted into a ``vit_rpe_SIZE`` (:func:`landscape.models.convert.convert_checkpoint`, ``init.pt``) and
   fine-tuned for as many steps (``cnn_init.pt``): the CNN-initialised ViT, two stages;
3. ``vit_rpe_SIZE`` is trained from a random initialisation for twice the steps (``random_2x.pt``): the control
   with the same total steps.

The checkpoints are kept in ``paper_b/seedK/``, each reused by a rerun; the rows (test accuracies on the whole
test split) go to ``paper_b.json``, the file the findings read. A ``paper_b.json`` the demo did not write (e.g.
the benchmark's rows copied there) is kept and read instead.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.models.checkpoint import read_checkpoint
from landscape.models.convert import DEFAULT_SHARPNESS, convert_checkpoint
from landscape.reproduce.training import train_or_reuse
from landscape.runtime.machine import machine as current_machine
from landscape.store.files import WRITTEN_BY, write_text
from landscape.train import TrainConfig

PAPER_B_FILE = "paper_b.json"
PAPER_B_DIR = "paper_b"
#: the ``measured_by`` of a ``paper_b.json`` the demo wrote
MEASURED_BY = "landscape demo"


@dataclass(frozen=True)
class PaperBSettings:
    """The size of the demo's Paper B run.

    Attributes:
        fraction: the share of the training split (stratified, drawn with the seed).
        steps: optimiser steps per stage (rounded to whole epochs).
        seeds: one row per seed.
        batch_size: images per step.
        lr: the AdamW learning rate of every stage.
        size: the ``convvit_SIZE`` / ``vit_rpe_SIZE`` models.
        sharpness: the conversion's position-bias margin.
    """

    fraction: float = 0.1
    steps: int = 100
    seeds: tuple[int, ...] = (0, 1, 2)
    batch_size: int = 32
    lr: float = 2e-3
    size: str = "mini"
    sharpness: float = DEFAULT_SHARPNESS

    def describe(self) -> str:
        """One line: models, data, steps and seeds."""
        seeds = ", ".join(map(str, self.seeds))
        return (
            f"convvit_{self.size} / vit_rpe_{self.size} on {self.fraction:g} of the digits training split, "
            f"about {self.steps} AdamW steps per stage (batch {self.batch_size}, lr {self.lr:g}), seeds {seeds}"
        )


def _accuracy(path: Path) -> float:
    return float((read_checkpoint(path).meta.get("metrics") or {}).get("test_accuracy", math.nan))


def paper_b_row(settings: PaperBSettings, seed: int, out_dir: Path, *, device: str, force: bool, quiet: bool) -> dict:
    """Train (or reuse) one seed's three models in ``out_dir/paper_b/seedK/`` and return its row.

    Args:
        settings: the run's size.
        seed: seeds the data subset and every training.
        out_dir: the demo folder (the seed's folder is created in it).
        device: the training device.
        force: train again whatever is there.
        quiet: no progress output.

    Returns:
        ``fraction``, ``seed``, ``n_train``, ``epochs``, ``steps`` (per stage), the test accuracies ``cnn``,
        ``vit_cnn_init`` and ``vit_random_2x``, and ``logit_diff`` (the conversion's largest logit difference).
    """
    folder = out_dir / PAPER_B_DIR / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    n_train = len(load_dataset("digits", "train", subset=settings.fraction, seed=seed))
    per_epoch = math.ceil(n_train / settings.batch_size)
    epochs = max(1, round(settings.steps / per_epoch))
    common = dict(
        data="digits",
        epochs=epochs,
        batch_size=settings.batch_size,
        lr=settings.lr,
        seed=seed,
        subset=settings.fraction,
        warmup_epochs=0.1 * epochs,
        device=device,
    )
    cnn_model, vit_model = f"convvit_{settings.size}", f"vit_rpe_{settings.size}"
    cnn = train_or_reuse(TrainConfig(model=cnn_model, **common), folder / "cnn.pt", force=force, quiet=quiet)
    init = folder / "init.pt"
    if force or not init.exists():
        convert_checkpoint(cnn, init, sharpness=settings.sharpness, data="digits", samples=256, seed=seed, force=True)
    tuned_config = TrainConfig(model=vit_model, init=str(init), **common)
    tuned = train_or_reuse(tuned_config, folder / "cnn_init.pt", force=force, quiet=quiet)
    twice = {**common, "epochs": 2 * epochs, "warmup_epochs": 0.2 * epochs}
    control = train_or_reuse(TrainConfig(model=vit_model, **twice), folder / "random_2x.pt", force=force, quiet=quiet)
    logit = (read_checkpoint(init).meta.get("metrics") or {}).get("max_logit_difference", math.nan)
    return {
        "fraction": settings.fraction,
        "seed": seed,
        "n_train": n_train,
        "epochs": epochs,
        "steps": epochs * per_epoch,
        "cnn": _accuracy(cnn),
        "vit_cnn_init": _accuracy(tuned),
        "vit_random_2x": _accuracy(control),
        "logit_diff": float(logit),
    }


def written_by_demo(path: Path) -> bool:
    """Whether ``path`` is a ``paper_b.json`` the demo wrote (its ``measured_by`` is :data:`MEASURED_BY`)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("measured_by") == MEASURED_BY


def paper_b_seeds(settings: PaperBSettings, out_dir: Path) -> tuple[int, ...]:
    """The seeds whose rows the demo computes: all of ``settings.seeds``, or none.

    None when ``out_dir`` holds a ``paper_b.json`` the demo did not write (that file is kept and read instead).

    Raises:
        LandscapeError: no seed in the settings.
    """
    if not settings.seeds:
        raise LandscapeError("Paper B's run needs at least one seed")
    path = out_dir / PAPER_B_FILE
    return () if path.exists() and not written_by_demo(path) else settings.seeds


def write_paper_b(
    settings: PaperBSettings, out_dir: Path, rows: list[dict], *, machine: dict[str, Any] | None = None
) -> Path:
    """Write ``out_dir/paper_b.json``: the rows of every seed, the settings, what it ran on and the demo's mark.

    Args:
        settings: the run's size.
        out_dir: the demo folder.
        rows: :func:`paper_b_row` of each seed, in the order of ``settings.seeds``.
        machine: what the rows were computed on (:func:`landscape.runtime.machine.machine`: torch version, CPU
            capability, threads, device); None: this process's, on the CPU.

    Returns:
        The path of ``paper_b.json``.
    """
    path = out_dir / PAPER_B_FILE
    payload = {
        "measured_by": MEASURED_BY,
        "settings": dataclasses.asdict(settings),
        "description": settings.describe(),
        "rows": rows,
        **(machine if machine is not None else current_machine()),
        "written_by": WRITTEN_BY,
    }
    write_text(path, json.dumps(payload, indent=1) + "\n", kind="record")
    return path


def measure_paper_b(
    settings: PaperBSettings,
    out_dir: Path,
    *,
    device: str = "auto",
    force: bool = False,
    quiet: bool = False,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Run (or resume) the demo's Paper B experiment in ``out_dir`` and write ``out_dir/paper_b.json``.

    A ``paper_b.json`` the demo did not write is kept as it is (and nothing is trained).

    Args:
        settings: the run's size.
        out_dir: the demo folder (checkpoints in ``paper_b/seedK/``).
        device: the training device.
        force: train again whatever is there.
        quiet: no progress output.
        log: where progress lines go (default: nowhere).

    Returns:
        The path of ``paper_b.json``.

    Raises:
        LandscapeError: no seed in the settings.
    """
    say = log or (lambda msg: None)
    seeds = paper_b_seeds(settings, out_dir)
    if not seeds:
        kept = out_dir / PAPER_B_FILE
        say(f"[demo] Paper B: keeping {kept} (not written by the demo); its rows give the Paper B row")
        return out_dir / PAPER_B_FILE
    rows = []
    for seed in seeds:
        say(f"[demo] Paper B, seed {seed}: convvit, conversion, fine-tuning, random-init control (2x steps)")
        rows.append(paper_b_row(settings, seed, out_dir, device=device, force=force, quiet=quiet))
    return write_paper_b(settings, out_dir, rows)
