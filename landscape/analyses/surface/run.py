"""1D and 2D loss surfaces ``L(theta + a * dx + b * dy)`` over a grid, written to HDF5 as the run goes.

Every grid point is a new params dict ``theta + a*dx + b*dy`` evaluated by the :class:`~landscape.core.objective.
Objective` (sample-weighted mean over fixed batches, plus the regulariser). The file (docs/schema.md, surface)
holds ``xcoordinates`` (nx), ``ycoordinates`` (ny; ``[0]`` for a line), ``loss``, ``data_loss``,
``accuracy`` and ``done`` (ny, nx) and the directions: by default the recipe that draws random directions again
(``directions_recipe``), else the arrays ``directions/x/<param>`` (and ``directions/y/<param>``), always with
their fingerprint (``directions_digest``). Points are written and flushed as they finish, in groups at most
:data:`~landscape.options.surface.WRITE_EVERY_S` apart, so a killed run leaves a valid file; rerunning resumes
from the ``done`` mask with the directions drawn again or read back from the file (and checked against the
fingerprint), and ends with the same numbers. Under torchrun the points of each round are shared among ranks and
only rank 0 writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from typing_extensions import Unpack

from landscape import store
from landscape.analyses.surface import directions as dirs
from landscape.analyses.surface.background import spare_cores
from landscape.analyses.surface.directions import Directions
from landscape.analyses.surface.evaluator import PointEvaluator
from landscape.analyses.surface.file import (
    MEASURED_META,
    PendingPoints,
    as_stored,
    check_finite_surface,
    check_grid_size,
    direction_fingerprint,
    half_error,
    portable_state,
    read_grid,
    resume_surface,
    storage_of,
    write_points,
)
from landscape.analyses.surface.hessian_directions import (
    file_hessian_directions,
    grid_step,
    hessian_directions,
    measure_curvature,
    objective_attrs,
)
from landscape.analyses.surface.setup import SetUp, set_up, stop_background, switch_to_package
from landscape.core.calls import analysis_function
from landscape.core.front import build_objective, prepare, python_call, run_from_python
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.core.source import ModelSource
from landscape.errors import LandscapeError
from landscape.models.checkpoint import file_sha256, load_model
from landscape.options import checks
from landscape.options.surface import (  # noqa: F401 (re-exported)
    BN_MODES,
    COMPILE_MODES,
    MAX_POINTS,
    SurfaceKeywords,
    SurfaceOptions,
    compile_attr,
    compile_mode,
    parse_grid,
)
from landscape.runtime import distributed as D
from landscape.runtime.lifecycle import AnalysisFile
from landscape.runtime.progress import Progress


# ------------------------------------------------------------------------------------------ the run
def compute_surface(
    objective: Objective,
    directions: Directions,
    xcoords: Sequence[float] | np.ndarray,
    ycoords: Sequence[float] | np.ndarray | None = None,
    *,
    out: str | Path,
    attrs: Mapping[str, Any] | None = None,
    force: bool = False,
    bn: str = "eval",
    batch_points: int | str = "auto",
    progress: bool | None = None,
    on_round: Callable[[int, int], None] | None = None,
    compile: bool | str = "auto",
    fold_bn: bool = True,
    store_directions: str = "seed",
    on_ready: Callable[[float | None, int], None] | None = None,
) -> store.Result:
    """Evaluate ``L(theta + a*dx + b*dy)`` and accuracy on the grid ``xcoords x ycoords`` into ``out``.

    Args:
        objective: the loss (its params are the centre ``theta``).
        directions: ``x`` (and ``y`` for a plane: ``ycoords`` given). On resume the file's directions are used.
        xcoords: x grid coordinates (nx).
        ycoords: y grid coordinates (ny); None makes a 1D surface (ny = 1, stored as ``[0.0]``).
        out: the HDF5 file; an existing file of the same run is resumed, of other options refused.
        force: overwrite an existing file from other options.
        attrs: provenance and options recorded as root attributes (they decide whether a file is the same run).
        bn: ``eval`` (centre model's running statistics) or ``recompute`` (re-estimated at every point).
        batch_points: points per evaluation call: 1 = loop, k > 1 = vmap over k stacked points, ``auto`` =
            the faster of the two on a quick measurement (recorded, and reused on resume).
        progress: show the progress on rank 0 (:mod:`landscape.runtime.progress`: a bar on a terminal, a line
            every 30 s elsewhere); False: nothing.
        on_round: called on every rank after each round of points with ``(points done, total)``.
        compile: ``on`` (True): ``torch.compile`` the per-batch loss (one point at a time; eager if compiling
            fails); ``off`` (False): eager; ``auto``: compile only when the expected compile time pays back over
            the points left (:func:`landscape.runtime.compile_cache.pays_back`, with the eager time measured now and the
            compile and compiled times from the record of an earlier compile, else conservative defaults).
            The outcome and the decision's inputs are recorded (``compiled``, ``compile_decision``); the
            compiler's caches persist in the cache folder (:mod:`landscape.runtime.compile_cache`).
        fold_bn: fold eval-mode BatchNorm into the convolutions before them at every point where that can be
            proven (:mod:`landscape.models.bn_fold`; recorded as ``bn_folded``); the numbers agree to rounding.
        store_directions: how a new file keeps the directions (:data:`~landscape.options.surface.DIRECTION_STORAGE`):
            ``seed`` their recipe (directions without one, not random, in ``full``, and the file says so in
            ``directions_storage_note``), ``half`` float16 arrays (the grid is then evaluated along the rounded
            directions; ``directions_half_error`` records the rounding's relative error), ``full`` the arrays.
            Each records the fingerprint the directions are checked against on resume.
        on_ready: called once the evaluation is chosen and before the first point, with the seconds per point
            measured while choosing (None when nothing was measured) and the points left: where a run says what
            it will do and how long it will take, its set-up (tuning included) done.

    Returns:
        The file read back (:class:`landscape.store.read.Result`), on every rank.

    Raises:
        LandscapeError: an unknown ``bn`` (or ``recompute`` without BatchNorm layers), non-finite or empty
            coordinates, directions that do not match the coordinates (or, on resume, the model's parameters or
            the fingerprint recorded with them), a bad ``batch_points``, ``compile`` or ``store_directions``, a
            grid of more than :data:`MAX_POINTS` points, a file of other options (without ``force``), or, after
            the run, a surface whose finished points are all NaN or Inf.
    """
    if bn not in BN_MODES:
        raise LandscapeError(f"unknown BatchNorm mode {bn!r}; use eval or recompute")
    if bn == "recompute" and not objective.has_batchnorm():
        raise LandscapeError("--bn recompute needs a model with BatchNorm layers; use --bn eval")
    xs = np.asarray(checks.finite_all(np.asarray(xcoords, dtype=np.float64).reshape(-1), "x coordinate"))
    ys = (
        np.zeros(1)
        if ycoords is None
        else np.asarray(checks.finite_all(np.asarray(ycoords, dtype=np.float64).reshape(-1), "y coordinate"))
    )
    if (ycoords is None) != (directions.y is None):
        raise LandscapeError("a 2D surface needs two directions and y coordinates; a 1D surface one and none")
    if xs.size == 0 or ys.size == 0:
        raise LandscapeError("the grid is empty; give at least one point per axis")
    if isinstance(batch_points, str) and batch_points != "auto":
        raise LandscapeError(f"--batch-points must be a positive integer or auto, got {batch_points!r}")
    if not isinstance(batch_points, str) and int(batch_points) < 1:
        raise LandscapeError(f"--batch-points must be a positive integer or auto, got {batch_points!r}")
    mode = compile_mode(compile)
    ndim = directions.ndim
    storage, note = storage_of(directions, store_directions)
    evaluated = as_stored(directions, storage)
    extra: dict[str, Any] = {"directions_storage_note": note} if note else {}
    if storage == "half":
        extra["directions_half_error"] = half_error(directions, evaluated)
    full = {
        **(attrs or {}),
        **{k: v for k, v in directions.meta.items() if k not in MEASURED_META},
        "surface_ndim": ndim,
        "xgrid": [float(xs[0]), float(xs[-1]), int(xs.size)],
        "ygrid": None if ndim == 1 else [float(ys[0]), float(ys[-1]), int(ys.size)],
        "bn": bn,
        "criterion": objective.criterion,
        "regularizer": objective.regularizer.describe(),
        "n_samples": objective.n_samples,
        "direction_fingerprint": direction_fingerprint(directions),
        "compile": compile_attr(mode),
    }
    check_grid_size(objective, int(xs.size * ys.size), (int(ys.size), int(xs.size)))

    def resume(f: store.ResultFile) -> dict[str, Any]:
        return portable_state(resume_surface(f, evaluated, xs, ys, objective.params, storage, extra))

    session = AnalysisFile(out, "surface", full, force=force, resume=resume)
    with session as (f, state):
        assert state is not None
        dx, dy = state["dirs"] if state["dirs"] is not None else (evaluated.x, evaluated.y)
        if state["dirs"] is not None:
            dx, dy = (None if d is None else {n: t.to(objective.device) for n, t in d.items()} for d in (dx, dy))
        if not state["complete"]:
            evaluator = PointEvaluator(objective, dx, dy, bn)
            done = state["done"].astype(bool)
            todo = [(j, i) for j in range(ys.size) for i in range(xs.size) if not done[j, i]]
            first = (todo[0][0], todo[0][1], float(xs[todo[0][1]]), float(ys[todo[0][0]])) if todo else None
            left = -(-len(todo) // D.world_size())
            with session.progress("surface", done.size, unit="point", done=int(done.sum()), progress=progress) as bar:
                plan = set_up(
                    evaluator,
                    mode=mode,
                    batch_points=batch_points,
                    fixed_batch_points=state["bp"],
                    first=first,
                    points_left=left,
                    fold_bn=fold_bn,
                    note=bar.note,
                    recorded=D.broadcast_object({k: state.get(k) for k in ("channels_last", "compiled")}),
                    background=D.world_size() == 1 and spare_cores(objective.device) > 0,
                )
                if on_ready is not None:
                    on_ready(plan.point_seconds, len(todo))
                if f is not None:
                    f.set_attrs(
                        {
                            "batch_points_option": str(batch_points),
                            "compile_option": mode,
                            "has_batchnorm": objective.has_batchnorm(),
                            **_way_attrs(plan),
                            **evaluator.attrs(),
                        }
                    )
                    f.flush()
                _run_points(evaluator, xs, ys, todo, plan, f, bar, on_round)
    result = session.result
    if D.is_main():
        check_finite_surface(result)
    return result


def _run_points(
    evaluator: PointEvaluator,
    xs: np.ndarray,
    ys: np.ndarray,
    todo: list[tuple[int, int]],
    plan: SetUp,
    f: store.ResultFile | None,
    bar: Progress,
    on_round: Callable[[int, int], None] | None,
) -> None:
    """Write the set-up's points, then evaluate the others in rounds of ``batch_points * world_size``.

    Rank 0 writes the points, the first at once and the others in groups (:class:`PendingPoints`: at most
    :data:`~landscape.options.surface.WRITE_EVERY_S` seconds apart, and whatever waits when the run ends or is
    interrupted).
    """
    total = int(xs.size * ys.size)
    n_done = total - len(todo)
    made = {(j, i) for j, i, *_ in plan.first}
    todo = [p for p in todo if p not in made]
    grid = read_grid(f) if f is not None else None
    pending = PendingPoints(lambda group: None if f is None else write_points(f, group, grid))

    def finish(results: list[tuple[int, int, float, float, float]]) -> None:
        nonlocal n_done
        n_done += len(results)
        bar.update(len(results))
        pending.add(results)
        if on_round is not None:
            on_round(n_done, total)

    try:
        if plan.first:
            finish(list(plan.first))
        s = 0
        while s < len(todo):
            if plan.background is not None and plan.background.job.poll() is not None:
                _switch(evaluator, plan, (xs[todo[s][1]], ys[todo[s][0]]), n_done, pending, f)
            step = plan.batch_points * D.world_size()
            mine = D.shard(todo[s : s + step])
            values = evaluator.evaluate([(xs[i], ys[j]) for j, i in mine], plan.batch_points) if mine else []
            results = [(j, i, *v) for (j, i), v in zip(mine, values)]
            finish([r for part in D.all_gather_objects(results) for r in part])
            s += step
    except BaseException:
        stop_background(plan)
        with contextlib.suppress(LandscapeError):  # the points finished before the interruption are kept
            pending.write()
        raise
    pending.write()
    if plan.background is not None:
        stop_background(plan)
        if f is not None:
            f.set_attrs(_way_attrs(plan))


def _way_attrs(plan: SetUp) -> dict[str, Any]:
    """The file's record of how the points are evaluated: ``batch_points``, ``compiled``, ``compile_decision``."""
    decision = {**plan.decision, "setup_s": plan.seconds, "steps": plan.steps}
    return {"batch_points": plan.batch_points, "compiled": plan.compiled, "compile_decision": decision}


def _switch(
    evaluator: PointEvaluator,
    plan: SetUp,
    at: tuple[float, float],
    n_done: int,
    pending: PendingPoints,
    f: store.ResultFile | None,
) -> None:
    """The background build has ended: go on compiled when it pays (:func:`switch_to_package`), and record it.

    The points done so far are written before the file says ``compiled`` (with ``compiled_from``, the points done
    before the switch), so that a run resumed from it has only compiled points left, as this one would.
    """
    switched = switch_to_package(evaluator, plan, (float(at[0]), float(at[1])))
    if switched:
        plan.decision["compiled_from"] = n_done
        pending.write()
    if f is not None:
        f.set_attrs(_way_attrs(plan))
        f.flush()


# --------------------------------------------------------------------------------- from a checkpoint
def run_surface(
    source: ModelSource | str | Path,
    options: SurfaceOptions = SurfaceOptions(),
    *,
    out: str | Path = "surface.h5",
    model_name: str | None = None,
    force: bool = False,
    device: str = "auto",
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
) -> store.Result:
    """The ``landscape surface`` command: model source -> Objective -> directions -> :func:`compute_surface`.

    Directions: ``options.target`` (x = target - theta, alpha = 1 lands on it; y random for a plane), else
    ``options.trajectory`` snapshots (PCA plane of the trajectory around the centre), else with
    ``options.directions == "hessian"`` the top-1 (and top-2) unit eigenvectors of this objective's Hessian at
    theta (in the order of ``options.which``, by Lanczos; or read from ``options.eigenvectors``, a hessian file
    that must be of the same checkpoint and objective), else seeded random directions normalised by
    ``options.norm``. ``options.samples`` images of ``options.data``
    (``options.split``), picked and ordered by ``options.seed``, in fixed batches of ``options.batch_size``;
    with ``options.augment == "paper-a"`` the batches are Paper A's augmented data instead
    (``options.augment_copies`` copies of each sample, drawn once from the seed, see :mod:`landscape.data.augment`)
    and the loss is the soft-target cross-entropy.
    Works in one process or under torchrun (only rank 0 writes).

    Args:
        source: a checkpoint path or a :class:`~landscape.core.source.ModelSource` (published weights, a random
            init, ``timm:`` models, ...).
        options: every analysis option (validated when it was built); its :meth:`SurfaceOptions.attrs` are
            recorded in the file.
        out: the HDF5 file; an existing file of the same run is resumed, of other options refused.
        model_name: the model of a checkpoint that does not name it.
        force: overwrite an existing file from other options.
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: show what will run and the progress on rank 0 (:mod:`landscape.runtime.progress`); False:
            nothing.
        command: how the run was asked for, recorded as ``command`` (the CLI passes its command line; default:
            this call).
        batches: the data as ``(x, y)`` batches (a ``DataLoader`` or a list), their first ``samples`` images instead of
            ``options.data`` (:func:`~landscape.core.front.prepare`).

    Returns:
        The file read back (:class:`landscape.store.read.Result`), on every rank.

    Raises:
        LandscapeError: the options are not a :class:`SurfaceOptions`, the model, data, target, snapshots or
            eigenvector file cannot be loaded, the eigenvector file is of another checkpoint or objective (the
            first difference named), or the file belongs to other options (without ``force``).
    """
    if not isinstance(options, SurfaceOptions):
        raise LandscapeError(f"run_surface takes its options as a SurfaceOptions, got {type(options).__name__}")
    o = options
    xs, ys = o.xcoords, o.ycoords
    ndim = o.ndim
    reg = Regularizer.from_options(o.regularizer, o.reg_coef)
    call = command or python_call("run_surface", source, o, out=out, model_name=model_name)
    prepared = prepare(source, o, model_name=model_name, device=device, command=call, batches=batches)
    inputs, attrs = prepared.inputs, prepared.attrs
    differentiates = o.target is None and o.directions == "hessian" and o.eigenvectors is None
    objective = build_objective(
        inputs,
        prepared.batches,
        criterion=prepared.criterion,
        regularizer=reg,
        allow_stochastic=o.allow_stochastic,
        determinism="gradient" if differentiates else "loss",  # Lanczos' products, else losses alone
    )
    patterns = o.patterns
    attrs["fused_attention_off"] = objective.fused_attention_off
    if o.target is not None:
        other = dict(load_model(o.target, inputs.source.model, **inputs.source.model_kwargs)[0].named_parameters())
        directions = dirs.target_directions(
            objective.params, other, ndim=ndim, seed=o.seed, norm=o.norm, ignore_1d=o.ignore_1d, zero_patterns=patterns
        )
        attrs["target_sha256"] = file_sha256(o.target)
    elif o.directions == "hessian":
        directions = _hessian_directions(objective, o, {**attrs, **objective_attrs(objective)})
        measure_curvature(objective, directions, [grid_step(c) for c in (xs, ys) if c is not None])
    elif o.trajectory:
        snaps = [
            dict(load_model(p, inputs.source.model, **inputs.source.model_kwargs)[0].named_parameters())
            for p in o.trajectory
        ]
        directions = dirs.pca_directions(objective.params, snaps, ndim=ndim)
    else:
        directions = dirs.random_directions(
            objective.params, ndim=ndim, seed=o.seed, norm=o.norm, ignore_1d=o.ignore_1d, zero_patterns=patterns
        )
    per_pass = prepared.seconds_per_pass * (2 if o.bn == "recompute" else 1)  # + the re-estimation pass

    def ready(per_point: float | None, left: int) -> None:  # tuned: what the points left take, measured if it was
        prepared.announce(_plan(xs, ys), left, "point", per_pass if per_point is None else per_point, progress)

    return compute_surface(
        objective,
        directions,
        xs,
        ys,
        out=out,
        attrs=attrs,
        force=force,
        bn=o.bn,
        batch_points=o.batch_points,
        progress=progress,
        compile=o.compile,
        on_ready=ready,
        store_directions=o.store_directions,
    )


def _hessian_directions(objective: Objective, o: SurfaceOptions, expected: Mapping[str, Any]) -> Directions:
    """The directions along the top unit eigenvectors of the Hessian (or ``o.operator``), from a file or computed."""
    if o.eigenvectors is not None:
        return file_hessian_directions(o.eigenvectors, objective.params, expected=expected, ndim=o.ndim, wanted=o.which)
    return hessian_directions(
        objective, ndim=o.ndim, which=o.which, tol=o.eigen_tol, seed=o.seed, hvp=o.hvp, operator=o.operator
    )


def _plan(xs: np.ndarray, ys: np.ndarray | None) -> str:
    """What a surface run will compute, in words: its grid and number of points.

    An axis of evenly spaced coordinates is its range; coordinates given one by one, unevenly, are listed, so that
    a grid read otherwise than meant is seen before the work.
    """
    x = _axis_words(xs)
    if ys is None:
        return f"surface: a 1D line of {xs.size} points over {x}"
    return f"surface: {xs.size} x {ys.size} grid over {x} x {_axis_words(ys)} ({xs.size * ys.size} points)"


def _axis_words(values: np.ndarray, shown: int = 6) -> str:
    """``[MIN, MAX]`` for evenly spaced coordinates, else ``{c0, c1, ...} (the points as given)``."""
    steps = np.diff(values)
    if steps.size < 2 or np.allclose(steps, steps[0], rtol=1e-9, atol=0.0):
        return f"[{values[0]:g}, {values[-1]:g}]"
    listed = ", ".join(f"{v:g}" for v in values[:shown]) + (", ..." if values.size > shown else "")
    return f"{{{listed}}} (the points as given)"


@analysis_function(SurfaceOptions)
def surface(
    model: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: SurfaceOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[SurfaceKeywords],
) -> store.Result:
    """The loss and accuracy around ``model`` on a 1D line or 2D plane of parameter space (``landscape surface``).

    ``L(theta + a dx + b dy)`` on the grid of ``x`` and ``y`` (``"MIN:MAX:NUM"``), along directions normalised by
    ``norm`` (filter-wise by default), on fixed batches of ``data``; see
    :class:`~landscape.options.surface.SurfaceOptions` for every keyword.

    Args:
        model: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...), a ``Dataset``, ``DataLoader`` or list of
            ``(x, y)`` batches (the first ``samples`` images, in order), or None for the checkpoint's dataset (else
            digits).
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.surface.SurfaceOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file of other options at ``out``.
        progress: what will run and the progress on rank 0 (a bar on a terminal, lines elsewhere); False:
            nothing (:mod:`landscape.runtime.progress`).
        batch: a function from one batch of ``data`` (a ``Dataset`` or ``DataLoader`` you hold) to ``(inputs,
            labels)``, for batches that are dicts or longer tuples, e.g. ``lambda b: (b["image"], b["label"])``.
        **fields: the options as keywords (the fields of the options class).

    Returns:
        The result (:class:`~landscape.store.Result`): its ``attrs`` and arrays.

    Raises:
        LandscapeError: bad options, a model or data that cannot be used, or a file of other options at ``out``.
    """
    return run_from_python(
        run_surface,
        "landscape.surface",
        SurfaceOptions,
        model,
        data,
        options=options,
        fields=fields,
        batch=batch,
        out=out,
        device=device,
        force=force,
        progress=progress,
    )
