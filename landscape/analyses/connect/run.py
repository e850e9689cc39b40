"""Mode connectivity between two networks: the line, the trained Bezier curve and the plane, to HDF5 as it goes.

For two networks ``theta_A`` and ``theta_B`` of one architecture, on every split asked for:

1. the line ``theta(a) = (1 - a) theta_A + a theta_B`` at ``steps`` evenly spaced ``a`` (Frankle et al. 2020),
2. with ``curve="bezier"``: the quadratic Bezier curve ``phi(t) = (1-t)^2 theta_A + 2t(1-t) theta_c + t^2 theta_B``
   whose bend ``theta_c`` is trained first by SGD on ``E_t L(phi(t))`` over the training split (Garipov et al.
   2018; :mod:`landscape.analyses.connect.bezier`; ``bend_samples`` images of it when given), at ``steps``
   evenly spaced ``t``,
3. and the plane through ``theta_A``, ``theta_B`` and ``theta_c`` on a ``plane_steps x plane_steps`` grid
   (:mod:`landscape.analyses.connect.plane`),

each point's loss, data loss and accuracy (:mod:`landscape.analyses.connect.points`), and the loss and error
barriers of both paths, ``max_a [v(a) - ((1 - a) v(0) + a v(1))]`` with the coordinate where each peaks
(:mod:`landscape.analyses.connect.barrier`). BatchNorm statistics are re-estimated at every point between the ends
from the training samples by default (``bn="recompute"``; the ends are the networks as given, with their own), or
interpolated between the ends' (``bn="eval"``).

The file (docs/schema.md, connect) is written point by point and flushed: a killed run resumes from the ``done``
masks and from the bend saved after every epoch beside it (``NAME.bend.pt``, :mod:`landscape.analyses.connect.
bendfile`), with the same numbers. Under torchrun the points of each round are shared among ranks, rank 0 trains
the bend (its state is sent to every rank after each epoch) and only rank 0 writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from typing_extensions import Unpack

from landscape import store
from landscape.analyses.align.run import Alignment
from landscape.analyses.connect.barrier import path_barrier
from landscape.analyses.connect.bendfile import bend_network, bend_path, read_bend, save_bend
from landscape.analyses.connect.bezier import BendState, init_bend, train_bend_epoch
from landscape.analyses.connect.evaluate import path_coords, prepare_path
from landscape.analyses.connect.inputs import Inputs, load_connect_inputs
from landscape.analyses.connect.path import Endpoint, bezier_point, linear_point
from landscape.analyses.connect.plane import PlaneGrid, plane_grid, plane_point
from landscape.analyses.connect.points import allocate, run_points
from landscape.analyses.connect.summary import UNALIGNED
from landscape.core.calls import analysis_function
from landscape.core.combine import PointBuffer
from landscape.core.front import python_call, run_from_python
from landscape.errors import LandscapeError
from landscape.options.connect import ConnectKeywords, ConnectOptions
from landscape.runtime import distributed as D
from landscape.runtime.lifecycle import AnalysisFile
from landscape.runtime.progress import Progress
from landscape.store.files import refuse_input_as_output

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

#: what ``on_progress(stage, done, total)`` is told: the stages of a run, in order
STAGES = ("line", "unaligned_line", "bend", "curve", "plane")


# ------------------------------------------------------------------------------------------------- the file
def _resume(f: store.ResultFile, run: Inputs, o: ConnectOptions) -> dict[str, Any]:
    """Rank 0: allocate what a new file lacks; return how far an earlier run got (the same on every rank)."""
    if f.complete:
        return {"complete": True}
    f.write("splits", np.array(list(run.splits)), axes=["split"])
    state: dict[str, Any] = {"complete": False}
    if run.alignment is not None:
        _write_alignment(f, run.alignment)
    for group, stage in (("line", "point"), (UNALIGNED, "point"), ("curve", "curve_point")):
        if (group == "curve" and o.curve != "bezier") or (group == UNALIGNED and run.unaligned is None):
            continue
        f.write(f"{group}/coords", path_coords(o.steps), axes=[stage])
        allocate(f, group, len(run.splits), (o.steps,), [stage], run.evaluator.quantities(curvature=True))
        state[group] = f.read(f"{group}/done")
    state["plane"] = f.read("plane/done") if "plane/done" in f else None
    f.flush()
    return state


def _write_alignment(f: store.ResultFile, alignment: Alignment) -> None:
    """Rank 0: how theta_B was aligned: each permutation (``align/<name>``) and the matching's numbers."""
    for name, perm in alignment.permutations.items():
        f.write(f"align/{name}", np.asarray(perm, dtype=np.int64), axes=["unit"])
    m = alignment.matching
    f.set_attrs(
        {
            "align_sweeps": int(m.sweeps),
            "align_converged": bool(m.converged),
            "align_objective_before": float(m.objective_before),
            "align_objective_after": float(m.objective_after),
            "align_starts": [d.as_dict() for d in m.starts],
            "align_function_error": float(alignment.function_error),
            **({"align_weight_matched": list(m.weight_matched)} if m.weight_matched else {}),
        }
    )


def _barriers(f: store.ResultFile, splits: tuple[str, ...]) -> dict[str, dict[str, dict[str, float]]]:
    """The loss and error barriers of each path on each split, from the file's arrays."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for group in ("line", UNALIGNED, "curve"):
        if f"{group}/done" not in f:
            continue
        coords, loss, acc = (f.read(f"{group}/{n}") for n in ("coords", "loss", "accuracy"))
        out[group] = {s: path_barrier(coords, loss[k], acc[k]).as_dict() for k, s in enumerate(splits)}
    return out


# --------------------------------------------------------------------------------------------- the bend
def _train_bend(
    run: Inputs,
    o: ConnectOptions,
    saved: BendState | None,
    path: Path | None,
    identity: str,
    force: bool,
    on_progress: Callable[[str, int, int], None] | None,
    progress: bool | None = None,
) -> BendState:
    """Train the bend to ``o.bend_epochs`` epochs from ``saved`` (or the midpoint); rank 0 trains and saves."""
    assert run.bend is not None
    state = init_bend(run.a, run.b) if saved is None else saved
    first = run.objective
    outputs = int(first.logits(first.params, first.batches[0][0][:1]).shape[-1])
    meta = {
        "model_name": run.inputs.model_name,
        "model_kwargs": run.inputs.model_kwargs,
        "num_classes": run.attrs.get("num_classes") or outputs,
        "dataset": run.inputs.dataset_spec,
    }
    options = {"lr": o.bend_lr, "momentum": o.bend_momentum, "weight_decay": o.bend_weight_decay, "seed": int(o.seed)}
    train = run.bend
    recorded = {**options, "epochs": o.bend_epochs, "samples": run.attrs["bend_data"]}

    def epoch(before: BendState) -> dict[str, Any]:
        new = train_bend_epoch(train, run.a, run.b, before, **options)  # type: ignore[arg-type]
        if path is not None:
            network = bend_network(run.inputs.model, new, run.a, run.b)
            save_bend(path, network, new, identity, meta=meta, train_options=recorded, force=force)
        return new.state_dict()

    with Progress("bend", o.bend_epochs, unit="epoch", done=state.epoch, progress=progress) as bar:
        while state.epoch < o.bend_epochs:
            state = BendState.from_state_dict(D.on_main(lambda s=state: epoch(s)))
            bar.update(1)
            if on_progress is not None:
                on_progress("bend", state.epoch, o.bend_epochs)
    return state


def _plane(run: Inputs, bend: BendState, steps: int) -> PlaneGrid | str:
    """The plane through the ends and the bend (rank 0's, sent to every rank)."""
    theta_c = {n: t.to(run.a.params[n]) for n, t in bend.bend.items()}
    return D.on_main(lambda: plane_grid(run.a.params, theta_c, run.b.params, steps))


# ---------------------------------------------------------------------------------------------- the run
def run_connect(
    source_a: ModelSource | str | Path,
    source_b: ModelSource | str | Path,
    options: ConnectOptions | None = None,
    *,
    out: str | Path | None = "connect.h5",
    model_name: str | None = None,
    other_model_name: str | None = None,
    force: bool = False,
    device: str = "auto",
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> store.Result:
    """The ``landscape connect`` command: two model sources -> the line (and curve, plane) -> ``out``.

    Both ends are rebuilt from their sources (:func:`~landscape.core.front.prepare` for theta_A, whose dataset
    and preprocessing both take; :func:`~landscape.core.front.load_inputs` for theta_B) and must be the same
    architecture. Each split's data are ``options.samples`` images (seeded by ``options.seed``) in fixed batches.
    See the module doc for what is computed and written.

    Args:
        source_a: theta_A: a checkpoint path, a :class:`~landscape.core.source.ModelSource` or an ``nn.Module``.
        source_b: theta_B, of the same architecture.
        options: every analysis option (validated when it was built); None: the defaults.
        out: the HDF5 file (resumed when it holds the same run, refused when it holds another, unless
            ``force``); the bend is saved beside it as ``NAME.bend.pt``. None keeps the result in memory.
        model_name: the model of a first checkpoint that does not name it.
        other_model_name: the model of a second checkpoint that does not name it (default: ``model_name``).
        force: replace a file of other options (and a bend of another run beside it).
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: progress bars on rank 0 (None: only when stderr is a terminal).
        command: how the run was asked for, recorded as ``command`` (default: this call).
        batches: the data as ``(x, y)`` batches (a ``DataLoader`` or a list), their first ``samples`` images instead of
            ``options.data`` for evaluating, re-estimating BatchNorm statistics and training the bend.
        on_progress: called on every rank as ``on_progress(stage, done, total)`` after each round of points
            (stages ``line``, ``curve``, ``plane``) and each epoch of the bend (``bend``).

    Returns:
        The file read back (:class:`landscape.store.read.Result`), on every rank.

    Raises:
        LandscapeError: the options are not a :class:`ConnectOptions`, a model or the data cannot be loaded, the
            ends are not the same architecture, the file (or the bend beside it) belongs to other options
            (without ``force``), or the bend's training diverged.
    """
    options = ConnectOptions() if options is None else options
    if not isinstance(options, ConnectOptions):
        raise LandscapeError(f"run_connect takes its options as a ConnectOptions, got {type(options).__name__}")
    o = options
    call = command or python_call("run_connect", source_a, source_b, o, out=out, model_name=model_name)
    inputs = [getattr(s, "checkpoint", s) for s in (source_a, source_b)]
    if out is not None:
        refuse_input_as_output(out, inputs)
        if o.curve == "bezier":
            refuse_input_as_output(bend_path(out), inputs, "the bend")
    run = load_connect_inputs(
        source_a,
        source_b,
        o,
        model_name=model_name,
        other_model_name=other_model_name or model_name,
        device=device,
        command=call,
        batches=batches,
        progress=progress,
    )
    identity = store.identity_of({"kind": "connect", **run.attrs})
    path = None if out is None else bend_path(out)
    saved = None
    if o.curve == "bezier" and path is not None:
        found = D.on_main(lambda: _portable(read_bend(path, identity, force=force, params=run.a.params)))
        saved = None if found is None else BendState.from_state_dict(found)

    def tell(stage: str) -> Callable[[int, int], None] | None:
        return None if on_progress is None else (lambda done, total: on_progress(stage, done, total))

    session = AnalysisFile(out, "connect", run.attrs, force=force, resume=lambda f: _resume(f, run, o))
    with session as (f, state):
        assert state is not None
        if not state["complete"]:
            a, b, _ = prepare_path(run.objective, run.a, run.b)
            coords = path_coords(o.steps)
            run_points(
                _line_values(run, a, b, coords, "line"),
                state["line"],
                f,
                "line",
                progress=progress,
                on_point=tell("line"),
            )
            if run.unaligned is not None:
                _, unaligned, _ = prepare_path(run.objective, run.a, run.unaligned)
                run_points(
                    _line_values(run, a, unaligned, coords, UNALIGNED),
                    state[UNALIGNED],
                    f,
                    UNALIGNED,
                    progress=progress,
                    on_point=tell(UNALIGNED),
                )
            if o.curve == "bezier":
                _curve_and_plane(run, o, state, f, saved, path, identity, force, progress, on_progress, tell)
            if f is not None:
                f.set_attrs({"barriers": _barriers(f, run.splits)})
                f.flush()
    return session.result


def _line_values(
    run: Inputs, a: Endpoint, b: Endpoint, coords: np.ndarray, group: str
) -> Callable[[tuple[int, ...]], list[Any]]:
    """The values of the line's point ``i`` on every split (REPAIRed when the run repairs ``group``)."""
    repair = run.repairs.get(group)
    buffer = PointBuffer(a.params)  # every point's parameters are written here, one point at a time

    def values(i: tuple[int, ...]) -> list[Any]:
        alpha = float(coords[i[0]])
        point = linear_point(a, b, alpha, buffer)
        return run.evaluator(point, () if repair is None else repair.corrections(point, alpha), curvature=True)

    return values


def _portable(state: BendState | None) -> dict[str, Any] | None:
    """A bend state as plain data on the CPU (it is sent to every rank), or None."""
    return None if state is None else state.state_dict()


def _curve_and_plane(
    run: Inputs,
    o: ConnectOptions,
    state: dict[str, Any],
    f: store.ResultFile | None,
    saved: BendState | None,
    path: Path | None,
    identity: str,
    force: bool,
    progress: bool | None,
    on_progress: Callable[[str, int, int], None] | None,
    tell: Callable[[str], Callable[[int, int], None] | None],
) -> None:
    """Train the bend (or take it from its checkpoint), then evaluate the curve and the plane."""
    bend = _train_bend(run, o, saved, path, identity, force, on_progress, progress)
    if f is not None:
        f.write("bend/history", np.asarray(bend.history, dtype=np.float64), axes=["epoch"])
        f.set_attrs({"bend_checkpoint": None if path is None else str(path), "bend_epochs_done": bend.epoch})
        f.flush()
    a, b, theta_c = prepare_path(run.objective, run.a, run.b, bend.bend)
    assert theta_c is not None
    coords = path_coords(o.steps)
    buffer = PointBuffer(a.params)  # the curve's and the plane's points, one at a time
    run_points(
        lambda i: run.evaluator(bezier_point(a, theta_c, b, float(coords[i[0]]), buffer), curvature=True),
        state["curve"],
        f,
        "curve",
        progress=progress,
        on_point=tell("curve"),
    )
    grid = _plane(run, bend, o.plane_steps)
    if isinstance(grid, str):
        if f is not None:
            f.set_attrs({"plane_note": f"no plane: {grid}"})
        return
    done = state["plane"]
    if f is not None:
        f.write("plane/x", grid.xs, axes=["x"])
        f.write("plane/y", grid.ys, axes=["y"])
        f.write("plane/points", grid.points, axes=["end", "xy"])
        f.write("plane/curve", grid.curve(coords), axes=["curve_point", "xy"])
        allocate(f, "plane", len(run.splits), (grid.ys.size, grid.xs.size), ["y", "x"])
        f.flush()
    if done is None:
        done = np.zeros((grid.ys.size, grid.xs.size), dtype=bool)
    run_points(
        lambda ji: run.evaluator(
            plane_point(a, theta_c, b, grid, float(grid.xs[ji[1]]), float(grid.ys[ji[0]]), buffer)
        ),
        done,
        f,
        "plane",
        progress=progress,
        on_point=tell("plane"),
    )


@analysis_function(ConnectOptions)
def connect(
    model_a: Any,
    model_b: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: ConnectOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[ConnectKeywords],
) -> store.Result:
    """Loss, accuracy and barriers on the line (and curve) between ``model_a`` and ``model_b`` (``landscape connect``).

    ``theta(a) = (1 - a) theta_A + a theta_B`` at ``steps`` points, with ``curve="bezier"`` also the trained
    Bezier curve and the plane through the three points; see
    :class:`~landscape.options.connect.ConnectOptions` for every keyword.

    Args:
        model_a: theta_A: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        model_b: theta_B, of the same architecture.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...), a ``Dataset``, ``DataLoader`` or list of
            ``(x, y)`` batches (the first ``samples`` images, in order), or None for the first checkpoint's dataset
            (else digits).
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.connect.ConnectOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file of other options at ``out``.
        progress: a progress display (None: on a terminal only).
        batch: a function from one batch of ``data`` (a ``Dataset`` or ``DataLoader`` you hold) to ``(inputs,
            labels)``, for batches that are dicts or longer tuples, e.g. ``lambda b: (b["image"], b["label"])``.
        **fields: the options as keywords (the fields of the options class).

    Returns:
        The result (:class:`~landscape.store.Result`): its ``attrs`` and arrays.

    Raises:
        LandscapeError: bad options, models or data that cannot be used, ends of different architectures, or a
            file of other options at ``out``.
    """
    return run_from_python(
        run_connect,
        "landscape.connect",
        ConnectOptions,
        model_a,
        data,
        others=(model_b,),
        options=options,
        fields=fields,
        batch=batch,
        out=out,
        device=device,
        force=force,
        progress=progress,
    )
