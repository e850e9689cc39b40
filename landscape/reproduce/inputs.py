"""The inputs of the findings: the seed folders of a demo folder and the per-unit numbers read from their files.

A demo folder holds the files of the models trained with seed 0 (``MODEL.pt``, ``MODEL_spectrum.h5``,
``MODEL_fourier.h5``, ``data_size/``); the models trained with seed ``K >= 1`` have the same files in the
subfolder ``seedK/`` (:func:`seed_folder`). Every reader here returns the units of one seed's model: the rows of
a spectrum (mini-batches), per-batch sharpness values (mini-batches ``S``), per-image correctness (test images),
per-batch Fourier sums (batches of images).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from landscape.analyses.fourier.features import fourier_profile
from landscape.core.front import batches_for, load_inputs
from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.store.read import read_result

#: the subfolder of the models trained with seed K >= 1 (seed 0's files are in the demo folder itself)
SEED_DIR = "seed{seed}"
_SEED_DIR = re.compile(r"seed([1-9][0-9]*)")


# ------------------------------------------------------------------------------------------ seed folders
def seed_folder(folder: str | Path, seed: int) -> Path:
    """The folder of the files of the models trained with ``seed``: ``folder`` for seed 0, else ``folder/seedK``.

    Args:
        folder: the demo folder.
        seed: the training seed (non-negative).

    Returns:
        The path (not created).

    Raises:
        LandscapeError: a negative or non-integer seed.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise LandscapeError(f"a training seed is a non-negative integer, got {seed!r}")
    root = Path(folder)
    return root if seed == 0 else root / SEED_DIR.format(seed=int(seed))


def seed_folders(folder: str | Path, seeds: Sequence[int] | None = None) -> dict[int, Path]:
    """The training seeds of a demo folder and their folders (:func:`seed_folder`).

    Args:
        folder: the demo folder.
        seeds: the seeds; None: seed 0 and every ``seedK/`` subfolder there is.

    Returns:
        ``{seed: folder}`` in increasing seed order.
    """
    root = Path(folder)
    if seeds is None:
        found = [int(m.group(1)) for p in root.glob("seed*") if p.is_dir() and (m := _SEED_DIR.fullmatch(p.name))]
        seeds = [0, *found]
    return {int(s): seed_folder(root, s) for s in sorted(set(seeds))}


def seeds_text(seeds: Sequence[int]) -> str:
    """``"seed 0"`` or ``"seeds 0, 1, 2"``."""
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(str(s) for s in seeds)


# ------------------------------------------------------------------------------------------ spectra
def read_spectrum(path: Path) -> np.ndarray | None:
    """The rows of a spectrum file's ``eigenvalues`` that are done and finite, or None when there is no file."""
    if not path.is_file():
        return None
    res = read_result(path)
    eig = np.asarray(res["eigenvalues"], dtype=float)
    done = np.asarray(res["done"], bool) if "done" in res.arrays else np.ones(len(eig), bool)
    keep = done & np.isfinite(eig).any(1)
    return eig[keep]


@dataclass
class Grouped:
    """The units of several seeds' models stacked: rows of seed ``seeds[0]`` first, then of ``seeds[1]``, ...

    Attributes:
        units: the stacked units (rows).
        sizes: rows per seed.
        seeds: the seeds.
    """

    units: np.ndarray
    sizes: list[int]
    seeds: list[int]


def stack_seeds(per_seed: dict[int, np.ndarray | None]) -> Grouped | None:
    """Stack the units of the seeds that have any (None or empty: the seed is left out); None when none has."""
    kept = {s: u for s, u in per_seed.items() if u is not None and len(u)}
    if not kept:
        return None
    return Grouped(np.concatenate(list(kept.values())), [len(u) for u in kept.values()], list(kept))


def seed_spectra(folders: dict[int, Path], name: str) -> Grouped | None:
    """The done, finite rows of the spectrum ``name`` (a path inside each seed folder) of every seed that has it."""
    return stack_seeds({s: read_spectrum(d / name) for s, d in folders.items()})


def read_sharpness(path: Path) -> np.ndarray | None:
    """The per-batch values of a complete sharpness file at its largest radius, or None when there is none.

    Args:
        path: a ``landscape sharpness`` file (``values``: one row per batch ``S``, one column per radius).

    Returns:
        The finite values of the batches done (one per mini-batch), or None when the file is absent.
    """
    if not path.is_file():
        return None
    res = read_result(path)
    values = np.asarray(res["values"], dtype=float)
    done = np.asarray(res["done"], bool) if "done" in res.arrays else np.ones(len(values), bool)
    column = values[:, int(np.argmax(np.asarray(res["rho"], dtype=float)))]
    return column[done & np.isfinite(column)]


def seed_sharpness(folders: dict[int, Path], name: str) -> Grouped | None:
    """The per-batch values of the sharpness file ``name`` (:func:`read_sharpness`) of every seed that has it."""
    return stack_seeds({s: read_sharpness(d / name) for s, d in folders.items()})


# ------------------------------------------------------------------------------------------ Fourier sums
@dataclass
class BatchSums:
    """Per-batch running sums of a Fourier profile: one row per batch of images, one column per map.

    Attributes:
        kinds: the kind of every map.
        delta_sum: the sum over (sample, channel) of the Delta log amplitude at the highest frequency.
        variance_sum: the sum over (sample, channel) of the spatial variance.
        count: the (sample, channel) pairs of each batch and map.
        file_high_frequency: the file's ``high_frequency`` (to check the recomputation), or None.
    """

    kinds: list[str]
    delta_sum: np.ndarray
    variance_sum: np.ndarray
    count: np.ndarray
    file_high_frequency: np.ndarray | None = None

    def high_frequency(self, weights: np.ndarray) -> np.ndarray:
        """Per map, the pooled high-frequency value of each weighted resample, ``(r, L)``."""
        return (weights @ self.delta_sum) / (weights @ self.count)

    def variance(self, weights: np.ndarray) -> np.ndarray:
        """Per map, the pooled feature-map variance of each weighted resample, ``(r, L)``."""
        return (weights @ self.variance_sum) / (weights @ self.count)

    def matches_file(self) -> bool:
        """Whether the pooled high-frequency values of all batches agree with the file's (to 1e-3; True if none)."""
        if self.file_high_frequency is None:
            return True
        ones = np.ones((1, len(self.count)))
        return bool(np.allclose(self.high_frequency(ones)[0], self.file_high_frequency, atol=1e-3))


def fourier_batch_sums(fourier_file: Path, checkpoint: Path, *, unit: int = 16) -> BatchSums:
    """Recompute the Fourier file's profile batch by batch, on the file's own samples, from the checkpoint.

    Args:
        fourier_file: a ``fourier`` result file (its ``dataset``, ``split``, ``n_samples``, ``seed``,
            ``first_samples``, ``profile`` and ``taps`` attributes are used).
        checkpoint: the checkpoint the file was computed from.
        unit: images per batch (the bootstrap's unit).

    Returns:
        The per-batch sums (on the CPU; the torch random state is restored afterwards).
    """
    import torch

    res = read_result(fourier_file)
    attrs = res.attrs
    taps = attrs.get("taps") or None
    if isinstance(taps, str):
        taps = json.loads(taps) or None
    with torch.random.fork_rng(devices=[]):
        inputs = load_inputs(checkpoint, data=attrs.get("dataset"), split=attrs.get("split", "test"), device="cpu")
        batches = batches_for(
            inputs,
            batch_size=unit,
            n_samples=int(attrs["n_samples"]),
            seed=int(attrs.get("seed", 0)),
            first_samples=bool(attrs.get("first_samples", False)),
        )
        kinds: list[str] = []
        delta, var, count = [], [], []
        for batch in batches:
            p = fourier_profile(inputs.model, [batch], profile=str(attrs.get("profile", "diagonal")), taps=taps)
            kinds = p.kinds
            counts = np.array([layer.count for layer in p.layers], dtype=float)
            delta.append(p.high_frequency * counts)
            var.append(np.array([float(layer.variance_sum) for layer in p.layers]))
            count.append(counts)
    return BatchSums(
        kinds,
        np.array(delta),
        np.array(var),
        np.array(count),
        np.asarray(res["high_frequency"], dtype=float) if "high_frequency" in res.arrays else None,
    )


def stack_sums(per_seed: Sequence[BatchSums]) -> BatchSums:
    """The batches of several seeds' models of one architecture as one :class:`BatchSums` (rows stacked in order).

    Args:
        per_seed: one per seed (at least one), all with the same map kinds.

    Returns:
        The stacked sums (``file_high_frequency`` None: each seed's file is checked on its own).

    Raises:
        LandscapeError: the seeds' models have different maps.
    """
    kinds = per_seed[0].kinds
    if any(s.kinds != kinds for s in per_seed):
        raise LandscapeError("the seeds' Fourier files have different feature maps; are they of one model?")
    return BatchSums(
        kinds,
        np.concatenate([s.delta_sum for s in per_seed]),
        np.concatenate([s.variance_sum for s in per_seed]),
        np.concatenate([s.count for s in per_seed]),
    )


# ------------------------------------------------------------------------------------------ accuracy, Paper B
def per_image_correct(checkpoint: Path, *, split: str = "test", batch_size: int = 256) -> np.ndarray:
    """Whether the checkpoint's model classifies each image of ``split`` of its dataset correctly (eval mode, CPU).

    Args:
        checkpoint: a landscape checkpoint.
        split: the split.
        batch_size: images per forward pass.

    Returns:
        A bool array, one entry per image in the split's order (the torch random state is restored afterwards).
    """
    import torch

    with torch.random.fork_rng(devices=[]):
        inputs = load_inputs(checkpoint, split=split, device="cpu")

        x_all, y_all = load_dataset(inputs.dataset_spec, split, preprocess=inputs.preprocess).tensors()
        out = []
        with torch.no_grad():
            for i in range(0, len(y_all), batch_size):
                logits = inputs.model(x_all[i : i + batch_size])
                out.append((logits.argmax(-1) == y_all[i : i + batch_size]).numpy())
    return np.concatenate(out)


def read_paper_b(path: Path) -> list[dict]:
    """The rows of ``paper_b.json``, the per-run rows of ``benchmarks/cnn_init_vit.py`` or of the full demo.

    The file holds a list of dicts (or ``{"rows": [...]}``) with ``fraction``, ``seed``, ``vit_random_2x`` and
    ``vit_cnn_init`` (test accuracies; ``vit_random`` is used when there is no ``vit_random_2x``) and, optionally,
    ``steps`` (optimiser steps per stage).

    Args:
        path: the JSON file.

    Returns:
        The rows.

    Raises:
        LandscapeError: the file is not such a list.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data.get("rows") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise LandscapeError(f"{path} should hold a list of result rows (dicts)")
    return rows
