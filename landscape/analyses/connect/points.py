"""The points of a connect run: each evaluated on every split, shared among ranks, written as they finish.

A point (of the line, the curve or the plane) is one network, :class:`~landscape.analyses.connect.path.Endpoint`.
Its BatchNorm statistics are set once (:func:`~landscape.analyses.connect.evaluate.point_buffers`: re-estimated
from the BatchNorm objective's batches, the training samples, or the point's own) and every split's objective
evaluates it with them, so the test split is never used to estimate statistics. REPAIR's corrections of a line
point (:mod:`landscape.analyses.connect.repair`) are hooked on for all of it, and a path point's curvature
(:mod:`landscape.analyses.connect.curvature`) is measured on every split when the run asks for it. The points
left are taken in rounds of one per rank; rank 0 writes each round's values, flushes them, then marks them done,
so a run killed at any moment leaves a file whose done points are final and whose others are NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from landscape import store
from landscape.analyses.connect.curvature import CurvatureSettings, point_curvature
from landscape.analyses.connect.evaluate import point_buffers
from landscape.analyses.connect.path import Endpoint
from landscape.analyses.connect.repair import Correction, corrected
from landscape.core.forward import EvalForward
from landscape.core.objective import Objective
from landscape.options.connect import CURVATURE_QUANTITIES
from landscape.runtime import distributed as D
from landscape.runtime.progress import Progress

#: the values of one point on one split: loss (data loss + regulariser), data loss, accuracy, and with curvature
#: those of :data:`~landscape.options.connect.CURVATURE_QUANTITIES`
Values = tuple[float, ...]
#: the quantities of a path or plane, in the order of :data:`Values`
QUANTITIES = ("loss", "data_loss", "accuracy")


@dataclass
class SplitEvaluator:
    """Evaluates a point on every split with BatchNorm statistics from one source.

    Attributes:
        objectives: one objective per split, in the file's order (the same model, device and dtype).
        bn_source: the objective whose batches re-estimate BatchNorm statistics (the training samples).
        bn: ``recompute`` or ``eval``.
        curvature: how a point's curvature is measured when it is asked for; None: never.
        forwards: one tuned :class:`~landscape.core.forward.EvalForward` per objective for the curvature's
            sharpness draws (:meth:`tune_curvature`); None: the plain forward.
    """

    objectives: Sequence[Objective]
    bn_source: Objective
    bn: str
    curvature: CurvatureSettings | None = None
    forwards: Sequence[EvalForward] | None = None

    def tune_curvature(self) -> None:
        """Tune each split's forward for the curvature's sharpness draws (every rank together; once per run)."""
        if self.curvature is None:
            return
        forwards = [EvalForward(objective) for objective in self.objectives]
        for forward in forwards:
            forward.tune()
        self.forwards = forwards

    def __call__(
        self, point: Endpoint, corrections: Sequence[Correction] = (), curvature: bool = False
    ) -> list[Values]:
        """The loss, data loss and accuracy of ``point`` on each split (and its curvature there).

        Args:
            point: the network, on the objectives' device and dtype.
            corrections: REPAIR's corrections of the point's channels (:mod:`landscape.analyses.connect.repair`),
                hooked on while its statistics are re-estimated and it is evaluated; none by default.
            curvature: also the point's curvature (:func:`~landscape.analyses.connect.curvature.point_curvature`)
                when the evaluator measures curvature (:attr:`curvature`).

        Returns:
            One :data:`Values` per split.
        """
        with corrected([*self.objectives, self.bn_source], corrections):
            buffers = point_buffers(self.bn_source, point, self.bn)
            out = []
            for k, objective in enumerate(self.objectives):
                ev = objective.evaluate(point.params, buffers)
                values: Values = (ev.loss, ev.data_loss, ev.accuracy)
                if curvature and self.curvature is not None:
                    forward = None if self.forwards is None else self.forwards[k]
                    if forward is not None and corrections:
                        forward = forward.unfolded()  # the fold's copy of the model does not carry REPAIR's hooks
                    values += point_curvature(
                        objective, point.params, buffers, self.curvature, forward, ev.batch_losses
                    )
                out.append(values)
        return out

    def quantities(self, curvature: bool) -> tuple[str, ...]:
        """The names of a point's values (:data:`Values`), with or without curvature."""
        return QUANTITIES + (CURVATURE_QUANTITIES if curvature and self.curvature is not None else ())


def allocate(
    f: store.ResultFile,
    group: str,
    n_splits: int,
    shape: tuple[int, ...],
    axes: Sequence[str],
    quantities: Sequence[str] = QUANTITIES,
) -> None:
    """Allocate ``group/<quantity>`` (NaN, or False for a flag; ``(n_splits, *shape)``) and ``group/done``.

    Args:
        f: the connect file, open for writing.
        group: ``line``, ``curve`` or ``plane``.
        n_splits: how many splits are measured.
        shape: the points' shape (``(n,)`` for a path, ``(ny, nx)`` for the plane).
        axes: the names of the points' axes.
        quantities: the values of a point (default the loss, data loss and accuracy).
    """
    for name in quantities:
        flag = name.endswith("_converged")
        f.allocate(
            f"{group}/{name}",
            (n_splits, *shape),
            bool if flag else "f8",
            fill=False if flag else np.nan,
            axes=["split", *axes],
        )
    f.allocate(f"{group}/done", shape, bool, fill=False, axes=list(axes))


def run_points(
    evaluate: Callable[[tuple[int, ...]], list[Values]],
    done: np.ndarray,
    f: store.ResultFile | None,
    group: str,
    *,
    progress: bool | None = None,
    on_point: Callable[[int, int], None] | None = None,
) -> None:
    """Evaluate every point of ``group`` not yet done, one per rank per round; rank 0 writes each round.

    Args:
        evaluate: the values of the point at an index of ``done`` (on every split).
        done: the points' done mask, the same on every rank.
        f: the open file on rank 0, None elsewhere.
        group: ``line``, ``curve`` or ``plane``.
        progress: a progress bar on rank 0 (None: only when stderr is a terminal).
        on_point: called on every rank after each round with ``(points done, total)``.
    """
    todo = [tuple(int(i) for i in idx) for idx in np.argwhere(~done.astype(bool))]
    total = int(done.size)
    n_done = total - len(todo)
    step = D.world_size()
    record = f.record_progress if f is not None else None
    with Progress(group, total, unit="point", done=n_done, progress=progress, record=record) as bar:
        for s in range(0, len(todo), step):
            mine = [(idx, evaluate(idx)) for idx in D.shard(todo[s : s + step])]
            gathered = [item for part in D.all_gather_objects(mine) for item in part]
            if f is not None:
                write_round(f, group, gathered)
            n_done += len(gathered)
            bar.update(len(gathered))
            if on_point is not None:
                on_point(n_done, total)


def write_round(f: store.ResultFile, group: str, results: Sequence[tuple[tuple[int, ...], list[Values]]]) -> None:
    """Write the values of some points, flush, then mark them done (a kill in between leaves them not done).

    Args:
        f: the connect file, open for writing.
        group: ``line``, ``curve`` or ``plane``.
        results: ``(index, values per split)`` of each point: :data:`QUANTITIES`, then with curvature
            :data:`~landscape.options.connect.CURVATURE_QUANTITIES`.
    """
    for idx, values in results:
        names = QUANTITIES + (CURVATURE_QUANTITIES if len(values[0]) > len(QUANTITIES) else ())
        for k, name in enumerate(names):
            column = np.array([v[k] for v in values], dtype=np.float64)
            f.write_at(
                f"{group}/{name}", (slice(None), *idx), column.astype(bool) if name.endswith("_converged") else column
            )
    f.flush()
    for idx, _ in results:
        f.write_at(f"{group}/done", idx, True)
    f.mark_done()
