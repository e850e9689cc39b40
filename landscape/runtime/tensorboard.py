"""TensorBoard scalars of a run (``landscape train --tensorboard DIR``), written by torch's ``SummaryWriter``.

The folder is created and checked to take files before the run starts (:func:`~landscape.store.files.
ensure_folder`, as every output folder); each run adds an event file of its own to it
(``events.out.tfevents.<time>.<host>.<pid>.<n>``, a name no other run has), so nothing there is replaced.
TensorBoard itself is an optional extra (``pip install 'landscape-toolkit[tensorboard]'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from landscape.errors import missing_extra
from landscape.store.files import ensure_folder, os_error, temporary_path
from landscape.store.read import read_result

#: the option that names the folder, in the errors
OPTION = "--tensorboard"

#: the TensorBoard scalars of a run (``--tensorboard``), by what they are: their tags
BOARD_TAGS = {
    "loss": "train/loss",  # the mini-batch's training loss, every optimiser step
    "lr": "train/lr",  # the learning rate of that step
    "epoch_loss": "epoch/train_loss",  # the epoch's sample-weighted mean training loss, at its last step
    "epoch_accuracy": "epoch/train_accuracy",
    "test_loss": "test/loss",  # after the last epoch
    "test_accuracy": "test/accuracy",
    "sharpness": "sharpness/sharpness",  # each --track-sharpness record, at its step
    "threshold": "sharpness/threshold",
    "sharpness_lr": "sharpness/lr",
}


class Board:
    """Scalars by tag and step into a TensorBoard event file in ``folder``.

    Args:
        folder: the log folder (created when needed).

    Attributes:
        folder: the log folder.

    Raises:
        LandscapeError: the ``tensorboard`` package is not installed, or the folder cannot be created or
            written (before anything is logged).
    """

    def __init__(self, folder: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch raises it when the tensorboard package is missing
            raise missing_extra("--tensorboard needs the tensorboard package", "tensorboard") from None
        self.folder = ensure_folder(folder, OPTION)
        temporary_path(self.folder / "events", OPTION).unlink()  # the folder takes files: checked before the run
        self._make = SummaryWriter
        self._writer: Any = None  # the event file is made with the first scalar: a run that fails first leaves none

    def add(self, step: int, scalars: Mapping[str, float]) -> None:
        """Log each scalar at ``step`` (a NaN is logged as NaN).

        Args:
            step: the global step, e.g. optimiser steps taken so far.
            scalars: tag -> value, e.g. ``{"train/loss": 2.3}``.

        Raises:
            LandscapeError: the event file cannot be created.
        """
        if self._writer is None:
            try:
                self._writer = self._make(log_dir=str(self.folder))
            except OSError as exc:
                raise os_error(exc, self.folder, "write", OPTION) from exc
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, float(value), int(step))

    def close(self) -> None:
        """Write what is queued and close the event file (if any scalar was logged).

        Raises:
            LandscapeError: the event file cannot be written (full disk, ...).
        """
        if self._writer is None:
            return
        try:
            self._writer.close()
        except OSError as exc:
            raise os_error(exc, self.folder, "write", OPTION) from exc


def step_scalars(loss: float, lr: float, record: Any = None) -> dict[str, float]:
    """The TensorBoard scalars of one optimiser step: its loss and learning rate, and a sharpness record's.

    Args:
        loss: the step's mini-batch loss.
        lr: its learning rate.
        record: a sharpness record (with ``sharpness``, ``threshold`` and ``lr``) taken after the step, or None.

    Returns:
        The scalars by tag.
    """
    scalars = {BOARD_TAGS["loss"]: loss, BOARD_TAGS["lr"]: lr}
    if record is not None:
        scalars.update(
            {
                BOARD_TAGS["sharpness"]: record.sharpness,
                BOARD_TAGS["threshold"]: record.threshold,
                BOARD_TAGS["sharpness_lr"]: record.lr,
            }
        )
    return scalars


def log_sidecar(board: Board, sidecar: Path) -> None:
    """Log the records of a complete sharpness sidecar that a rerun keeps (and does not compute again).

    Args:
        board: the run's board.
        sidecar: the sidecar file.
    """
    track = read_result(sidecar)
    for i in np.flatnonzero(np.asarray(track["done"], dtype=bool)):
        board.add(
            int(track["step"][i]),
            {
                BOARD_TAGS["sharpness"]: track["sharpness"][i],
                BOARD_TAGS["threshold"]: track["threshold"][i],
                BOARD_TAGS["sharpness_lr"]: track["lr"][i],
            },
        )
