"""The loss and accuracy along a path between two networks over fixed batches, and the path's barrier.

Each point of the line ``theta(a) = (1 - a) theta_A + a theta_B`` (or of the Bezier curve ``phi(t)``, see
:mod:`landscape.analyses.connect.path`) is evaluated by the :class:`~landscape.core.objective.Objective` (its
model, batches, criterion and regulariser: ``L = sum_b (N_b/N) L_b + R``). BatchNorm statistics:

- ``bn="recompute"`` (default): re-estimated at every point between the ends from the objective's batches
  (:meth:`~landscape.core.objective.Objective.recompute_bn_buffers`: the cumulative average of the batch means
  and unbiased variances in train mode, each batch counting once), as REPAIR (Jordan et al. 2022) does, since an
  interpolated network's interpolated statistics otherwise show barriers of their own; the ends, theta_A and
  theta_B as given, keep their own. On a model without BatchNorm it is the same as ``eval``.
- ``bn="eval"``: the endpoints' buffers interpolated with the point (:func:`~landscape.analyses.connect.path.
  interpolate_buffers`).

The barrier of values ``v`` along a path (Frankle et al. 2020; Entezari et al. 2022) is

    B = max_a [ v(a) - ((1 - a) v(0) + a v(1)) ]

over the evaluated coordinates (which include both ends, so ``B >= 0``), for the loss and for the error
``1 - accuracy``, with the coordinate where each peaks (the first, on a tie).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from torch import Tensor

from landscape.analyses.connect.barrier import Barrier, barrier, path_barrier  # noqa: F401 (re-exported)
from landscape.analyses.connect.path import (
    Endpoint,
    bezier_point,
    check_finite_point,
    check_same_architecture,
    first_mismatch,
    linear_point,
)
from landscape.core.combine import PointBuffer
from landscape.core.objective import Evaluation, Objective
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.connect import BN_MODES, DEFAULT_POINTS  # noqa: F401 (defined there; re-exported)


@dataclass(frozen=True)
class PathCurve:
    """The loss and accuracy at the points of one path.

    Attributes:
        kind: ``"linear"`` (coordinates are ``alpha``) or ``"bezier"`` (coordinates are ``t``).
        coords: the coordinates, ascending, from 0 to 1 (both included).
        loss: ``L`` (data loss + regulariser) at each point.
        data_loss: the data loss at each point.
        accuracy: the accuracy at each point (NaN where a logit is not finite).
        bn: the BatchNorm mode, ``"recompute"`` or ``"eval"``.
    """

    kind: str
    coords: np.ndarray
    loss: np.ndarray
    data_loss: np.ndarray
    accuracy: np.ndarray
    bn: str

    @property
    def error(self) -> np.ndarray:
        """The error ``1 - accuracy`` at each point."""
        return 1.0 - self.accuracy

    def barrier(self) -> Barrier:
        """The loss and error barriers of this path (see :func:`~landscape.analyses.connect.barrier.barrier`).

        Returns:
            The :class:`Barrier`.
        """
        return path_barrier(self.coords, self.loss, self.accuracy)


def path_coords(points: int | Sequence[float]) -> np.ndarray:
    """The coordinates of a path's points: ``n`` evenly spaced from 0 to 1, or the ones given.

    Args:
        points: a number ``n >= 2`` of evenly spaced points (``linspace(0, 1, n)``), or the coordinates
            themselves (each finite and in ``[0, 1]``, 0 and 1 among them; sorted and de-duplicated here).

    Returns:
        The coordinates, ascending, float64.

    Raises:
        LandscapeError: fewer than 2 points, a coordinate that is NaN, infinite or outside ``[0, 1]``, or no 0
            or no 1 among the coordinates.
    """
    if isinstance(points, (int, np.integer)) and not isinstance(points, bool):
        n = checks.positive_int(points, "points")
        if n < 2:
            raise LandscapeError(f"a path needs at least 2 points (its ends), got {n}")
        return np.linspace(0.0, 1.0, n)
    values = checks.finite_all(np.asarray(points, dtype=np.float64).reshape(-1), "path coordinate")
    for i, c in enumerate(values):
        checks.in_range(c, f"path coordinate [{i}]", 0.0, 1.0)
    a = np.unique(np.asarray(values, dtype=np.float64))
    if not (a.size and a[0] == 0.0 and a[-1] == 1.0):
        raise LandscapeError("the path coordinates must include both ends (0 and 1)")
    return a


def check_bn(bn: str) -> str:
    """``bn`` if it is a BatchNorm mode of a path (:data:`BN_MODES`); a one-line error otherwise.

    Args:
        bn: ``"recompute"`` or ``"eval"``.

    Returns:
        ``bn``.

    Raises:
        LandscapeError: an unknown mode.
    """
    if bn not in BN_MODES:
        raise LandscapeError(f"unknown BatchNorm mode {bn!r}; use recompute or eval")
    return bn


def prepare_path(
    objective: Objective, a: Endpoint, b: Endpoint, bend: Mapping[str, Tensor] | None = None
) -> tuple[Endpoint, Endpoint, ParamDict | None]:
    """Check that both ends (and the bend) fit the objective's model; return them on its device and dtype.

    Args:
        objective: the objective the path is evaluated with (its variable parameters and buffers).
        a: ``theta_A``.
        b: ``theta_B``.
        bend: the bend ``theta_c`` of a Bezier curve, or None.

    Returns:
        ``(a, b, bend)`` as new tensors on the objective's devices, floating ones in its dtypes.

    Raises:
        LandscapeError: the two ends are not the same architecture, the ends (or the bend) do not have the
            objective's variable parameters and buffers, or a tensor holds NaN or Inf; one line naming the first
            mismatch.
    """
    check_same_architecture(a, b)
    check_same_architecture(Endpoint(objective.params, objective.buffers), a, ("the objective's model", "theta_A"))
    for what, point in (("theta_A", a), ("theta_B", b)):
        check_finite_point(point, what)
    a, b = (p.like(objective.params, objective.buffers) for p in (a, b))
    if bend is None:
        return a, b, None
    found = first_mismatch(a.params, bend, ("theta_A", "the bend"))
    if found is not None:
        raise LandscapeError(f"the bend does not fit theta_A: parameter {found}; give a bend of the same model")
    check_finite_point(Endpoint(dict(bend), {}), "the bend")
    placed = Endpoint(dict(bend), {}).like(objective.params, objective.buffers)
    return a, b, placed.params


def point_buffers(objective: Objective, point: Endpoint, bn: str = "recompute") -> ParamDict:
    """The buffers a point is evaluated with: BatchNorm statistics re-estimated there, or its own.

    Args:
        objective: the objective (its batches re-estimate the statistics).
        point: the point (parameters and interpolated buffers), on the objective's device.
        bn: ``"recompute"``: :meth:`~landscape.core.objective.Objective.recompute_bn_buffers` at the point's
            parameters, starting from its buffers (only the BatchNorm statistics change), for every point but a
            network as given (an end: :attr:`~landscape.analyses.connect.path.Endpoint.as_given`, its own
            statistics); ``"eval"``: the point's buffers as they are.

    Returns:
        The buffers, name -> tensor (new tensors with ``recompute``).

    Raises:
        LandscapeError: an unknown ``bn``.
    """
    if check_bn(bn) == "recompute" and objective.has_batchnorm() and not point.as_given:
        return objective.recompute_bn_buffers(point.params, point.buffers)
    return point.buffers


def evaluate_point(objective: Objective, point: Endpoint, bn: str = "recompute") -> Evaluation:
    """Loss, data loss and accuracy of the objective at one point.

    Args:
        objective: the objective.
        point: the point, on the objective's device (see :func:`prepare_path`).
        bn: the BatchNorm mode (see :func:`point_buffers`).

    Returns:
        The :class:`~landscape.core.objective.Evaluation`.

    Raises:
        LandscapeError: an unknown ``bn``.
    """
    return objective.evaluate(point.params, point_buffers(objective, point, bn))


def evaluate_path(
    objective: Objective,
    a: Endpoint,
    b: Endpoint,
    *,
    bend: Mapping[str, Tensor] | None = None,
    points: int | Sequence[float] = DEFAULT_POINTS,
    bn: str = "recompute",
    on_point: Callable[[int, int], None] | None = None,
) -> PathCurve:
    """Loss and accuracy along the line from ``a`` to ``b``, or along the Bezier curve with ``bend``.

    Line: ``theta(alpha) = (1 - alpha) theta_A + alpha theta_B``; curve:
    ``phi(t) = (1-t)^2 theta_A + 2t(1-t) theta_c + t^2 theta_B``. Each point is evaluated with the objective's
    batches, criterion and regulariser, its BatchNorm statistics set by ``bn``. Nothing given is changed.

    Args:
        objective: the objective (model structure, batches, criterion, regulariser, device, dtype); its own
            parameters are not used, only their names, shapes, devices and dtypes.
        a: ``theta_A`` (e.g. ``Endpoint.of(model_a)``).
        b: ``theta_B``, of the same architecture.
        bend: the bend ``theta_c`` (a params dict of the objective's names) for a Bezier curve; None for the line.
        points: the number of evenly spaced points from 0 to 1, or their coordinates (see :func:`path_coords`).
        bn: ``"recompute"`` (default) or ``"eval"`` (see the module doc).
        on_point: called as ``on_point(done, total)`` after each point (e.g. a progress bar).

    Returns:
        The :class:`PathCurve`; its :meth:`PathCurve.barrier` gives the barriers.

    Raises:
        LandscapeError: an unknown ``bn``, bad ``points``, or ends (or a bend) that do not fit the objective's
            model (one line naming the first mismatch) or hold NaN or Inf.
    """
    check_bn(bn)
    coords = path_coords(points)
    a, b, theta_c = prepare_path(objective, a, b, bend)
    loss, data_loss, accuracy = (np.empty(coords.size) for _ in range(3))
    buffer = PointBuffer(a.params)  # every point's parameters are written here: one copy, however many points
    for i, c in enumerate(coords):
        if theta_c is None:
            point = linear_point(a, b, float(c), buffer)
        else:
            point = bezier_point(a, theta_c, b, float(c), buffer)
        ev = evaluate_point(objective, point, bn)
        loss[i], data_loss[i], accuracy[i] = ev.loss, ev.data_loss, ev.accuracy
        if on_point is not None:
            on_point(i + 1, coords.size)
    return PathCurve("linear" if theta_c is None else "bezier", coords, loss, data_loss, accuracy, bn)
