"""Training's sharpness sidecar (``landscape train --track-sharpness N``): the tracker's records in an HDF5 file.

:func:`start_tracking` builds a :class:`~landscape.analyses.sharpness.tracking.SharpnessTracker` on a fixed
tracking batch and opens the sidecar ``run.sharpness.h5`` beside the checkpoint (kind ``sharpness_track``,
docs/schema.md); after every optimiser step the training loop calls :meth:`TrainingTrack.after_step`, which at
every N-th step computes the record and appends it (written, flushed and marked done; the file is closed
between records, so a killed run leaves a valid file). Training is not resumable, but it is reproducible from
its seed: a rerun of the same options reopens the sidecar and writes the same records again (a complete sidecar
of the same run is kept as it is, and nothing is computed); a sidecar of other options is refused before
training starts, unless ``force``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from landscape import store
from landscape.analyses.sharpness.tracking import SharpnessRecord, SharpnessTracker
from landscape.data.batches import fixed_batches
from landscape.data.loading import load_dataset
from landscape.options import checks
from landscape.options.sharpness import TRACK_BATCH_SIZE, TRACK_HVP, TRACK_MAXITER, TRACK_NCV, TRACK_TOL
from landscape.store.files import check_companion
from landscape.store.result import result_kind

#: the result kind of the sidecar
KIND = "sharpness_track"
#: the sidecar's arrays, one entry per record: dtype, value before the record is written, how it is read
COLUMNS: dict[str, tuple[str, Any, Callable[[SharpnessRecord], Any]]] = {
    "step": ("i8", -1, lambda r: r.step),
    "lr": ("f8", np.nan, lambda r: r.lr),
    "sharpness": ("f8", np.nan, lambda r: r.sharpness),
    "threshold": ("f8", np.nan, lambda r: r.threshold),
    "residual": ("f8", np.nan, lambda r: r.residual),
    "n_products": ("i8", 0, lambda r: r.n_products),
    "converged": ("?", False, lambda r: r.converged),
    "warm": ("?", False, lambda r: r.warm),
}


def sidecar_path(checkpoint: str | Path) -> Path:
    """The sidecar beside a checkpoint: ``run.pt`` -> ``run.sharpness.h5``.

    Args:
        checkpoint: the checkpoint's path.

    Returns:
        The sidecar's path.
    """
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(f"{checkpoint.stem}.sharpness.h5")


class TrainingTrack:
    """The tracker of a training run and its sidecar file; call :meth:`after_step` after every optimiser step.

    Args:
        tracker: the sharpness tracker (its ``every`` decides the tracking steps).
        path: the sidecar.
        attrs: the sidecar's root attributes besides the tracker's settings (``every``, ``track_batch_size``,
            ``tol``, ``ncv``, ``maxiter``, ``optimizer``, ``preconditioned``, ``track_mode``, ``tracked_function``,
            added here); with them, its identity.
        total_steps: the run's optimiser steps; the file holds ``total_steps // every`` records.
        force: replace a sidecar of other options.

    Attributes:
        path: the sidecar.
        kept: whether a complete sidecar of the same run was found (then nothing is computed or written).

    Raises:
        LandscapeError: a sidecar of other options without ``force`` (before any training), or one that cannot
            be written.
    """

    def __init__(
        self, tracker: SharpnessTracker, path: Path, attrs: Mapping[str, Any], total_steps: int, *, force: bool
    ) -> None:
        settings = {
            "every": tracker.every,
            "track_batch_size": int(tracker.objective.batches[0][1].shape[0]),
            "tol": tracker.tol,
            "ncv": tracker.ncv,
            "maxiter": tracker.maxiter,
            "hvp": tracker.mode,
            "optimizer": type(tracker.optimizer).__name__,
            "preconditioned": tracker.preconditioned,
            "track_mode": tracker.bn_mode,
            "tracked_function": tracker.tracked_function(),
        }
        self.tracker, self.path, self.attrs = tracker, path, {**attrs, **settings}
        self.n_records = int(total_steps) // tracker.every
        check_companion(
            path, "the sharpness record of this training run", ours=lambda p: result_kind(p) == KIND, force=force
        )
        with store.open_result(path, KIND, self.attrs, force=force) as f:
            self.kept = f.complete
            if not self.kept:
                for name, (dtype, fill, _) in COLUMNS.items():
                    f.allocate(name, (self.n_records,), dtype, fill=fill, axes=["record"])
                f.allocate("done", (self.n_records,), bool, fill=False, axes=["record"])
                f.flush()

    def after_step(self, step: int) -> SharpnessRecord | None:
        """At a tracking step (``step % every == 0``), compute the record and append it to the sidecar.

        Args:
            step: optimiser steps taken so far (1 after the first).

        Returns:
            The record, or None at another step (or when a complete sidecar was kept).
        """
        index = step // self.tracker.every - 1
        if self.kept or not self.tracker.due(step) or not 0 <= index < self.n_records:
            return None
        record = self.tracker.track(step)
        with store.open_result(self.path, KIND, self.attrs) as f:
            for name, (_, _, read) in COLUMNS.items():
                f.write_at(name, index, read(record))
            f.mark_done("done", index)
        return record

    def finish(self) -> store.Result:
        """Mark the sidecar complete (training ended normally) and read it back.

        Returns:
            The sidecar's result.
        """
        if not self.kept:
            with store.open_result(self.path, KIND, self.attrs) as f:
                f.mark_complete()
        return store.read_result(self.path)


def start_tracking(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    every: int,
    checkpoint: str | Path,
    data: str,
    subset: float | int | None,
    seed: int,
    preprocess: Any,
    total_steps: int,
    bn_mode: str | None = None,
    attrs: Mapping[str, Any],
    force: bool = False,
) -> TrainingTrack:
    """The tracking of a training run: a fixed tracking batch, the tracker, and its sidecar beside the checkpoint.

    The tracking batch is the first :data:`~landscape.options.sharpness.TRACK_BATCH_SIZE` images (or the whole
    training set, when smaller) of the un-augmented training split (the same ``subset``) in the ``seed``-ed
    order; the loss is the plain cross-entropy (no label smoothing or MixUp) plus the optimiser's coupled weight
    decay ``sum_g (lambda_g / 2) ||w_g||^2`` (SGD's and Adam's; AdamW's decoupled decay is no term of it), the model
    in eval mode with its BatchNorm layers in ``bn_mode`` (by default ``train`` where it has any: the tracking
    batch's own statistics, as training normalises); Lanczos runs with :data:`~landscape.options.sharpness.TRACK_TOL`,
    ``TRACK_NCV`` and ``TRACK_MAXITER``, warm-started from the previous record's eigenvector, its products made
    by ``TRACK_HVP``. Nothing here draws from the global random state, so training with tracking takes the same
    steps as training without it.

    Args:
        model: the network being trained (read, never changed).
        optimizer: its optimiser (SGD, Adam or AdamW).
        every: track every this many optimiser steps (>= 1).
        checkpoint: the checkpoint's path (the sidecar is :func:`sidecar_path` of it).
        data: the training dataset spec.
        subset: the training subset (as the run's).
        seed: the run's seed (the order of the tracking batch, the first start vector).
        preprocess: the model's preprocessing of the images (as training's).
        total_steps: the run's optimiser steps.
        bn_mode: the BatchNorm mode of the Hessian, ``train`` or ``eval`` (None: ``train`` for a model with
            BatchNorm, else ``eval``; the two are the same function without BatchNorm).
        attrs: what the sidecar records besides the tracking settings (the training options, the model's name).
        force: replace a sidecar of other options.

    Returns:
        The :class:`TrainingTrack`.

    Raises:
        LandscapeError: ``every < 1``, an unsupported optimiser or ``bn_mode``, or a sidecar of other options
            without ``force``.
    """
    every = checks.positive_int(every, "--track-sharpness")
    device = next(model.parameters()).device
    dataset = load_dataset(data, "train", subset=subset, seed=seed, preprocess=preprocess)
    size = min(TRACK_BATCH_SIZE, len(dataset))
    (batch,) = fixed_batches(dataset, size, size, seed=seed, device=device)
    tracker = SharpnessTracker(
        model,
        optimizer,
        batch,
        every=every,
        tol=TRACK_TOL,
        ncv=TRACK_NCV,
        maxiter=TRACK_MAXITER,
        seed=seed,
        mode=TRACK_HVP,
        bn_mode=bn_mode or ("train" if any(isinstance(m, _BatchNorm) for m in model.modules()) else "eval"),
    )
    return TrainingTrack(tracker, sidecar_path(checkpoint), attrs, total_steps, force=force)
