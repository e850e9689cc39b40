"""Training trajectories in polar coordinates (Paper A Fig 1b): distance and angle of each snapshot from the start.

For the initial weights ``theta_0`` and the snapshots ``theta_t`` of one training run, in training order,

- ``r_t = ||theta_t - theta_0||`` (the distance travelled from the start),
- ``phi_t``, the angle between ``theta_t`` and ``theta_0``: ``cos(phi_t) = <theta_t, theta_0> / (||theta_t||
  ||theta_0||)``, computed as ``atan2(||theta_t - p theta_0||, p ||theta_0||)`` with ``p = <theta_t, theta_0> /
  ||theta_0||^2`` (the same angle, accurate also when it is tiny, where ``arccos`` of a cosine near 1 is not),
- ``||theta_t||``,

all in float64, over the model's ``named_parameters()`` (the parameters the surface directions perturb; buffers
such as BatchNorm running statistics are left out) minus the ``--exclude`` patterns. The first entry is the
initial weights themselves (``r = 0``, ``phi = 0``). Each file is read with ``weights_only=True``
(:func:`landscape.models.checkpoint.read_checkpoint`); only the initial one is rebuilt as a model, to tell
the parameters from the buffers.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from typing_extensions import Unpack

from landscape import store
from landscape.core.calls import analysis_function
from landscape.core.front import python_call
from landscape.errors import LandscapeError
from landscape.models.checkpoint import Checkpoint, load_model, read_checkpoint, require_checkpoint_file, snapshot_path
from landscape.options import checks
from landscape.options.names import matches_any
from landscape.options.trajectory import TrajectoryKeywords, TrajectoryOptions
from landscape.runtime.lifecycle import AnalysisFile
from landscape.runtime.machine import machine

#: snapshot tags that ``landscape train`` writes beside ``run.pt`` (:func:`landscape.models.checkpoint.snapshot_path`)
SNAPSHOT_TAG = re.compile(r"(init|warmup|epoch(\d+))")


@dataclass(frozen=True)
class PolarPoint:
    """One snapshot's place relative to the initial weights.

    Attributes:
        distance: ``||theta_t - theta_0||``.
        angle: the angle between ``theta_t`` and ``theta_0``, radians in ``[0, pi]`` (NaN when ``theta_t = 0``).
        norm: ``||theta_t||``.
    """

    distance: float
    angle: float
    norm: float


def polar_point(theta0: Mapping[str, Tensor], theta: Mapping[str, Tensor]) -> PolarPoint:
    """Distance, angle and norm of ``theta`` relative to ``theta0``, in float64 over ``theta0``'s names.

    Args:
        theta0: the initial weights, name -> tensor (not all zero).
        theta: the snapshot, with (at least) ``theta0``'s names and shapes.

    Returns:
        The :class:`PolarPoint` of ``theta``.
    """
    dot = sq0 = sqt = sqd = 0.0
    for name, t0 in theta0.items():
        a, b = theta[name].detach().double(), t0.detach().double()
        dot += float((a * b).sum())
        sq0 += float((b * b).sum())
        sqt += float((a * a).sum())
        sqd += float(((a - b) ** 2).sum())
    norm0, norm = math.sqrt(sq0), math.sqrt(sqt)
    if norm == 0.0:
        return PolarPoint(math.sqrt(sqd), math.nan, 0.0)
    p = dot / sq0
    perp = math.sqrt(
        sum(float(((theta[n].detach().double() - p * t0.detach().double()) ** 2).sum()) for n, t0 in theta0.items())
    )
    return PolarPoint(math.sqrt(sqd), math.atan2(perp, p * norm0), norm)


def snapshots_of(checkpoint: str | Path) -> list[Path]:
    """The snapshots ``landscape train`` wrote beside ``checkpoint``, in training order, the checkpoint last.

    ``run.pt`` -> ``run.init.pt`` (required: it is ``theta_0``), then ``run.warmup.pt`` and ``run.epochNNN.pt``
    ordered by their epoch (the warm-up snapshot's epoch is read from its metadata; it goes before an epoch
    snapshot of the same epoch), then ``run.pt``.

    Args:
        checkpoint: the final checkpoint of a training run.

    Returns:
        The paths, the initial snapshot first.

    Raises:
        LandscapeError: ``checkpoint`` does not exist, or there is no initial snapshot beside it.
    """
    checkpoint = require_checkpoint_file(checkpoint)
    init = snapshot_path(checkpoint, "init")
    if not os.path.lexists(init):
        raise LandscapeError(
            f"no initial snapshot {init} beside {checkpoint}: theta_0 is the initial weights, so train with "
            "--snapshot-initial, or give the checkpoints with --ckpt (the first one is the start)"
        )
    run = _run_of(read_checkpoint(checkpoint))
    suffix = checkpoint.suffix or ".pt"
    pattern = re.compile(re.escape(checkpoint.stem) + r"\." + SNAPSHOT_TAG.pattern + re.escape(suffix))
    keyed: list[tuple[float, int, Path]] = []
    for path in sorted(checkpoint.parent.iterdir()):
        match = pattern.fullmatch(path.name)
        if match is None:
            continue
        snapshot = read_checkpoint(path, companion="the snapshot")  # found, not named: no link is followed
        if _run_of(snapshot) != run:
            raise LandscapeError(
                f"{path} is a snapshot of another training run than {checkpoint} (the files of two runs with one "
                "name share the folder); move the other run's files away, or give the snapshots with --ckpt"
            )
        if match.group(1) == "init":
            continue
        if match.group(1) == "warmup":
            epoch = snapshot.meta.get("epoch")
            keyed.append((float(epoch) if type(epoch) is int else 0.0, 0, path))
        else:
            keyed.append((float(match.group(2)), 1, path))
    return [init, *(p for *_, p in sorted(keyed)), checkpoint]


def _run_of(ckpt: Checkpoint) -> str | None:
    """The training run a checkpoint of ``landscape train`` belongs to (None for files written before runs had one)."""
    extra = ckpt.meta.get("extra")
    run = extra.get("run") if isinstance(extra, dict) else None
    return run if isinstance(run, str) else None


def _mismatch(reference: Mapping[str, Tensor], other: Mapping[str, Tensor]) -> str | None:
    """How ``other`` differs from ``reference`` in names or shapes (None when it does not)."""
    missing = [n for n in reference if n not in other]
    extra = [n for n in other if n not in reference]
    wrong = [n for n in reference if n in other and tuple(other[n].shape) != tuple(reference[n].shape)]
    if missing:
        return f"it lacks {', '.join(missing[:2])}{', ...' if len(missing) > 2 else ''}"
    if extra:
        return f"it has {', '.join(extra[:2])}{', ...' if len(extra) > 2 else ''} that the start has not"
    if wrong:
        n = wrong[0]
        return f"{n} has shape {tuple(other[n].shape)}, {tuple(reference[n].shape)} at the start"
    return None


def _meta_number(meta: Mapping[str, Any], *keys: str) -> float:
    """The first of ``keys`` in ``meta`` that holds a number, as a float; NaN when none does."""
    for key in keys:
        value = meta.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return math.nan


@dataclass
class Trajectory:
    """The polar coordinates of a run's snapshots, ready to be written.

    Attributes:
        paths: the checkpoint files, the initial weights first.
        distance: ``||theta_t - theta_0||`` per snapshot.
        angle: the angle between ``theta_t`` and ``theta_0`` per snapshot, radians.
        norm: ``||theta_t||`` per snapshot.
        epoch: the epoch recorded in each file (NaN when unknown).
        step: the optimisation step recorded in each file (NaN when unknown).
        sha256: SHA-256 of each file.
        model: the model of the initial checkpoint.
        model_kwargs: its constructor options.
        parameter_names: the parameters the vectors hold, in order.
        n_params: their number of entries.
    """

    paths: list[Path]
    distance: np.ndarray
    angle: np.ndarray
    norm: np.ndarray
    epoch: np.ndarray
    step: np.ndarray
    sha256: list[str]
    model: str
    model_kwargs: dict[str, Any]
    parameter_names: list[str]
    n_params: int


def compute_trajectory(
    checkpoints: Sequence[str | Path],
    options: TrajectoryOptions | None = None,
    *,
    model_name: str | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
) -> Trajectory:
    """Polar coordinates of each checkpoint relative to the first (the initial weights).

    Args:
        checkpoints: the checkpoint files in training order; the first is ``theta_0`` (at least two files).
        options: the parameter patterns to leave out (default: none).
        model_name: the model of a first file that names none (``--model``).
        model_kwargs: its constructor options (``--model-kw``).

    Returns:
        The :class:`Trajectory`, one entry per file (the first is ``r = 0``, ``phi = 0``).

    Raises:
        LandscapeError: fewer than two files, an unreadable file, a snapshot of another architecture (other
            parameter names or shapes than the first), no parameter left after ``--exclude``, initial weights
            that are all zero, or weights that are not finite.
    """
    options = options or TrajectoryOptions()
    paths = [Path(p) for p in checkpoints]
    if len(paths) < 2:
        raise LandscapeError(
            f"a trajectory needs the initial weights and at least one snapshot, got {len(paths)} checkpoint(s); "
            "give --ckpt INIT --ckpt SNAPSHOT ... or --snapshots-of RUN.pt"
        )
    model, first = load_model(paths[0], model_name, **dict(model_kwargs or {}))
    names = [n for n, _ in model.named_parameters() if not matches_any(n, options.exclude)]
    if not names:
        raise LandscapeError(
            f"--exclude {' '.join(options.exclude)} leaves no parameter of {first.model_name or model_name}; "
            "exclude fewer patterns"
        )
    theta0 = {n: first.state_dict[n] for n in names}
    model_spec = str(getattr(model, "model_name", None) or first.model_name or model_name)
    kwargs = dict(getattr(model, "model_kwargs", None) or first.model_kwargs)
    del model
    if float(sum(float((t.double() ** 2).sum()) for t in theta0.values())) == 0.0:
        raise LandscapeError(f"the initial weights {paths[0]} are all zero, so the angle to them is undefined")
    points, epochs, steps, shas = [], [], [], []
    for i, path in enumerate(paths):
        ck = first if i == 0 else read_checkpoint(path)
        if i > 0:
            problem = _mismatch(first.state_dict, ck.state_dict)
            if problem is not None:
                models = f" ({ck.model_name} vs {model_spec})" if ck.model_name and ck.model_name != model_spec else ""
                raise LandscapeError(
                    f"{path} is not a snapshot of the same architecture as {paths[0]}{models}: {problem}; "
                    "give the snapshots of one training run"
                )
        theta = {n: ck.state_dict[n] for n in names}
        bad = next((n for n, t in theta.items() if not torch.isfinite(t).all()), None)
        if bad is not None:
            raise LandscapeError(f"{path}: parameter {bad!r} has NaN or infinite entries; leave that snapshot out")
        points.append(polar_point(theta0, theta))
        epochs.append(_meta_number(ck.meta, "epoch"))
        steps.append(_meta_number(ck.meta, "step", "global_step"))
        shas.append(ck.sha256)
    return Trajectory(
        paths=paths,
        distance=np.array([p.distance for p in points], dtype=np.float64),
        angle=np.array([p.angle for p in points], dtype=np.float64),
        norm=np.array([p.norm for p in points], dtype=np.float64),
        epoch=np.array(epochs, dtype=np.float64),
        step=np.array(steps, dtype=np.float64),
        sha256=shas,
        model=model_spec,
        model_kwargs=kwargs,
        parameter_names=names,
        n_params=int(sum(t.numel() for t in theta0.values())),
    )


def run_trajectory(
    checkpoints: Sequence[str | Path],
    options: TrajectoryOptions | None = None,
    *,
    out: str | Path = "trajectory.h5",
    model_name: str | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    force: bool = False,
    command: str | None = None,
) -> store.Result:
    """The ``landscape trajectory`` command: checkpoints in, a ``trajectory`` result file out.

    Every file is read and checked before the result file is touched. A complete file of the same run (same
    files by content, same options) is returned as it is.

    Args:
        checkpoints: the checkpoint files in training order, the initial weights first (see
            :func:`snapshots_of` for the files of a ``landscape train`` run).
        options: the parameter patterns to leave out (default: none).
        out: the HDF5 file.
        model_name: the model of a first file that names none.
        model_kwargs: its constructor options.
        force: overwrite an existing file of other options.
        command: how the run was asked for, recorded as ``command`` (default: this call).

    Returns:
        The file read back (:class:`landscape.store.read.Result`).

    Raises:
        LandscapeError: see :func:`compute_trajectory`; also a file of other options at ``out`` (without
            ``force``).
    """
    options = options or TrajectoryOptions()
    if not isinstance(options, TrajectoryOptions):
        raise LandscapeError(f"run_trajectory takes its options as a TrajectoryOptions, got {type(options).__name__}")
    traj = compute_trajectory(checkpoints, options, model_name=model_name, model_kwargs=model_kwargs)
    attrs = {
        "command": command or python_call("run_trajectory", list(checkpoints), options, out=out),
        "model": traj.model,
        "model_kwargs": traj.model_kwargs,
        "checkpoint": str(traj.paths[0]),
        "checkpoint_sha256": traj.sha256[0],
        "snapshots_sha256": traj.sha256,
        "n_snapshots": len(traj.paths),
        "n_params": traj.n_params,
        **machine("cpu"),
        **options.attrs(),
    }
    axes = ["snapshot"]
    session = AnalysisFile(out, "trajectory", attrs, force=force)
    with session as (f, _):
        if f is not None and not f.complete:
            f.write("distance", traj.distance, axes=axes)
            f.write("angle", traj.angle, axes=axes)
            f.write("norm", traj.norm, axes=axes)
            f.write("epoch", traj.epoch, axes=axes)
            f.write("step", traj.step, axes=axes)
            f.write("snapshots", np.array([p.name for p in traj.paths], dtype=str), axes=axes)
            f.write("paths", np.array([str(p) for p in traj.paths], dtype=str), axes=axes)
            f.set_attrs({"parameter_names": traj.parameter_names})
            f.mark_done()
    return session.result


@analysis_function(TrajectoryOptions)
def trajectory(
    checkpoints: Sequence[str | Path],
    *,
    out: str | Path | None = None,
    options: TrajectoryOptions | None = None,
    model: str | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    force: bool = False,
    **fields: Unpack[TrajectoryKeywords],
) -> store.Result:
    """Training snapshots in polar coordinates around the initial weights (Paper A's Fig 1b, ``landscape trajectory``).

    For each snapshot ``theta_t``: the distance ``||theta_t - theta_0||`` from the initial weights ``theta_0`` and
    the angle between ``theta_t`` and ``theta_0``; see
    :class:`~landscape.options.trajectory.TrajectoryOptions` for every keyword.

    Args:
        checkpoints: the run's final checkpoint (its snapshots are found beside it) or the snapshots themselves.
        out: the HDF5 file to write; None keeps the result in memory.
        options: a :class:`~landscape.options.trajectory.TrajectoryOptions`, instead of keywords.
        model: the model of checkpoints that do not name it.
        model_kwargs: its constructor options.
        force: replace a file of other options at ``out``.
        **fields: the options as keywords.

    Returns:
        The result (:class:`~landscape.store.Result`).

    Raises:
        LandscapeError: both ``options`` and keywords, bad options, or snapshots that cannot be read.
    """
    if options is not None and fields:
        raise LandscapeError("landscape.trajectory: give the options as options=... or as keywords, not both")
    if out is not None:
        checks.output_file(out, "--out", "trajectory.h5")
    options = options if options is not None else TrajectoryOptions(**fields)
    record = python_call("landscape.trajectory", list(checkpoints), out=out, **fields)
    return run_trajectory(
        checkpoints, options, out=out, model_name=model, model_kwargs=model_kwargs, force=force, command=record
    )
