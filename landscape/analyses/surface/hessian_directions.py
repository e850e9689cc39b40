"""Surface directions along the Hessian's eigenvectors: computed by Lanczos, or read from a hessian result file.

The x (and y) direction of such a surface is the top-1 (and top-2) unit eigenvector ``v_i`` of the Hessian of
the surface's own objective at its centre, "top" in the order of ``which`` (:func:`~landscape.analyses.hessian.
linalg.rank_ritz`: ``LA`` largest first, ``SA`` smallest first, ``LM`` largest magnitude first, ``BE``
alternately the largest and the smallest). The directions are unit vectors, so a surface's coordinates are
distances in parameter space, and along ``v_i`` the quadratic model of the loss is

    L(theta + a v_i) ~ L(theta) + lambda_i a^2 / 2

(:func:`~landscape.analyses.surface.quadratic.quadratic_model`). An eigenvector of a Hessian block
(``patterns``, or a file of ``landscape hessian --params``) is zero on every other parameter. An eigenvector's
sign is arbitrary; it is fixed so that its largest-magnitude entry is positive (as for PCA directions).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from landscape import store
from landscape.analyses.hessian.lanczos import converged as lanczos_converged
from landscape.analyses.hessian.linalg import rank_ritz
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.operators import curvature_operator, eigen_method, eigenpairs
from landscape.analyses.surface.directions import Directions
from landscape.analyses.surface.quadratic import quadratic_model  # noqa: F401 (re-exported)
from landscape.core import params as P
from landscape.core.criteria import criterion_name
from landscape.core.objective import Objective
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.models.kinks import kinked_operations
from landscape.store.attrs import decode, encode

#: the attributes of a hessian file that must equal the surface's for its eigenvectors to be the same
#: objective's: the checkpoint, model, data and samples, and the loss
PROVENANCE_ATTRS = (
    "checkpoint_sha256",
    "model",
    "model_kwargs",
    "num_classes",
    "pretrained",
    "model_output",
    "dataset",
    "split",
    "preprocess",
    "n_samples",
    "seed",
    "criterion",
    "regularizer",
    "augment",
    "augment_copies",
    "operator",
)
#: what an attribute a file does not record means (files without an augmentation record none, nor Hessian files
#: their operator)
PROVENANCE_DEFAULTS: dict[str, Any] = {"augment": "none", "augment_copies": 1, "operator": "hessian"}


@dataclass
class EigenDirections:
    """Unit Hessian eigenvectors as params dicts, most wanted first, with their eigenvalues.

    Attributes:
        eigenvalues: ``lambda_i``, most wanted first (in the order of ``which``).
        vectors: the unit eigenvectors ``v_i``, each a params dict of the centre's names and shapes (zero outside
            the Hessian block), in the same order.
        which: the kind of eigenpairs, ``LA``, ``SA``, ``LM`` or ``BE``.
        names: the parameters of the Hessian block, in flattening order.
        residuals: ``||H v_i - lambda_i v_i||`` of each pair, in the same order.
        source: ``"lanczos"`` (or ``"kronecker"``: K-FAC's exact pairs), or the path of the hessian file read.
        operator: the curvature operator whose eigenvectors they are (:data:`~landscape.options.hessian.OPERATORS`).
    """

    eigenvalues: list[float]
    vectors: list[ParamDict]
    which: str
    names: list[str]
    residuals: list[float]
    source: str
    operator: str = "hessian"

    def directions(self, ndim: int = 2) -> Directions:
        """The surface directions: x = ``v_1`` (and y = ``v_2`` for a plane).

        Args:
            ndim: 1 for a line, 2 for a plane.

        Returns:
            :class:`~landscape.analyses.surface.directions.Directions` of kind ``hessian``; ``meta`` holds
            ``direction_type``, ``norm`` (``none``), ``which``, ``direction_eigenvalues`` and ``direction_residuals``
            (of the directions used), ``operator`` (when not the Hessian),
            ``hessian_params`` (the block), ``eigen_source``, ``x_norm`` (``y_norm``, ``cosine``).

        Raises:
            LandscapeError: ``ndim`` is not 1 or 2, or fewer than ``ndim`` eigenvectors are held.
        """
        if isinstance(ndim, bool) or ndim not in (1, 2):
            raise LandscapeError(f"ndim must be 1 (a line) or 2 (a plane), got {ndim!r}")
        if len(self.vectors) < ndim:
            raise LandscapeError(
                f"a {ndim}D surface needs {ndim} eigenvectors, only {len(self.vectors)} are held; compute more "
                "(landscape hessian --top-k)"
            )
        meta: dict[str, Any] = {
            "direction_type": "hessian",
            "norm": "none",
            "which": self.which,
            "direction_eigenvalues": [float(v) for v in self.eigenvalues[:ndim]],
            "direction_residuals": [float(v) for v in self.residuals[:ndim]],
            "hessian_params": list(self.names),
            "eigen_source": self.source,
        }
        if self.operator != "hessian":  # files of Hessian directions made before operators existed still resume
            meta["operator"] = self.operator
        d = Directions(self.vectors[0], self.vectors[1] if ndim == 2 else None, "hessian", meta)
        for axis, direction in (("x", d.x), ("y", d.y)):
            if direction is not None:
                meta[f"{axis}_norm"] = float(P.norm({n: t.double() for n, t in direction.items()}))
        if d.y is not None:
            meta["cosine"] = d.cosine()
        return d


def _vectors(
    columns: Tensor, order: Sequence[int], names: Sequence[str], theta: Mapping[str, Tensor]
) -> list[ParamDict]:
    """Columns of ``columns`` (block entries, in ``names``' order) as unit params dicts of ``theta``, sign-fixed."""
    block = {n: theta[n].detach().cpu() for n in names}
    out = []
    for j in order:
        v = columns[:, j].detach().to("cpu", torch.float64)
        v = v / torch.linalg.vector_norm(v)
        if v[v.abs().argmax()] < 0:
            v = -v
        parts = P.unflatten(v, block)
        out.append(
            {
                n: parts[n].to(t.device, t.dtype) if n in parts else torch.zeros_like(t.detach())
                for n, t in theta.items()
            }
        )
    return out


def _check_converged(converged: Sequence[bool], order: Sequence[int], k: int, hint: str) -> None:
    for rank, j in enumerate(order[:k]):
        if not bool(converged[j]):
            raise LandscapeError(f"eigenpair {rank + 1} (in the order of which) did not converge; {hint}")


def hessian_eigendirections(
    objective: Objective,
    k: int = 2,
    *,
    which: str = "LA",
    patterns: Sequence[str] | str | None = None,
    tol: float = 1e-6,
    ncv: int | None = None,
    maxiter: int | None = None,
    seed: int = 0,
    hvp: str = "auto",
    operator: str = "hessian",
) -> EigenDirections:
    """The top-``k`` unit eigenvectors of the objective's Hessian at its parameters (thick-restart Lanczos).

    Args:
        objective: the objective; its :class:`~landscape.analyses.hessian.operator.HessianOperator` at
            ``objective.params`` (BatchNorm in eval mode, as every Hessian here), or with ``operator`` another
            curvature operator (:mod:`landscape.analyses.hessian.operators`; K-FAC's pairs exactly from its
            factors).
        k: how many eigenpairs.
        which: ``LA`` (default), ``SA``, ``LM`` or ``BE``; "top" in that order.
        patterns: parameter-name patterns of a Hessian block (see
            :func:`~landscape.options.names.select`); None: every parameter.
        tol: the Lanczos tolerance on each pair's relative residual ``||H y - lambda y|| / |lambda|``.
        ncv: the Lanczos basis size (None: the solver's default).
        maxiter: the most Lanczos restarts (None: the solver's default).
        seed: the seed of the Lanczos start vector (a private generator).
        hvp: how the products are made (``auto``, ``jvp``, ``graph``, ``linearize``).
        operator: the curvature operator, one of :data:`~landscape.options.hessian.OPERATORS`.

    Returns:
        The :class:`EigenDirections` (``source`` ``"lanczos"``, or ``"kronecker"`` for K-FAC's exact pairs).

    Raises:
        LandscapeError: a bad ``k``, ``which``, ``tol``, ``ncv``, ``hvp`` or ``patterns``, or a wanted pair that
            did not converge within ``maxiter`` restarts.
    """
    op = curvature_operator(objective, operator, patterns=patterns, mode=hvp)
    for part in (op, getattr(op, "hessian", None)):  # the Hessian, or the residual's Hessian part
        if isinstance(part, HessianOperator):
            part.dtype_option = False  # a surface has no --dtype: its advice names none
    res = eigenpairs(op, k, which, ncv=ncv, tol=tol, maxiter=maxiter, seed=seed, return_eigenvectors=True)
    assert res.eigenvectors is not None
    order = rank_ritz(res.eigenvalues, which).tolist()
    _check_converged(res.converged.tolist(), order, k, "raise maxiter or tol")
    return EigenDirections(
        eigenvalues=[float(res.eigenvalues[j]) for j in order],
        vectors=_vectors(res.eigenvectors, order, op.names, objective.params),
        which=which,
        names=list(op.names),
        residuals=[float(res.residuals[j]) for j in order],
        source=eigen_method(op),
        operator=operator,
    )


def hessian_directions(objective: Objective, *, ndim: int = 2, **lanczos_options: Any) -> Directions:
    """Surface directions x = ``v_1`` (and y = ``v_2``): the objective's top unit Hessian eigenvectors.

    Args:
        objective: the objective; its parameters are the surface's centre.
        ndim: 1 for a line, 2 for a plane.
        **lanczos_options: ``which``, ``patterns``, ``tol``, ``ncv``, ``maxiter``, ``seed``, ``hvp``, ``operator`` (see
            :func:`hessian_eigendirections`).

    Returns:
        :class:`~landscape.analyses.surface.directions.Directions` of kind ``hessian`` (see
        :meth:`EigenDirections.directions`).

    Raises:
        LandscapeError: ``ndim`` is not 1 or 2, or any error of :func:`hessian_eigendirections`.
    """
    if isinstance(ndim, bool) or ndim not in (1, 2):
        raise LandscapeError(f"ndim must be 1 (a line) or 2 (a plane), got {ndim!r}")
    return hessian_eigendirections(objective, ndim, **lanczos_options).directions(ndim)


def grid_step(coords: np.ndarray) -> float:
    """The step of a grid axis at its centre: the smallest gap between its coordinates (``1e-3`` for one point).

    Args:
        coords: the axis's coordinates, increasing.

    Returns:
        ``min(diff(coords))``, the distance the figure's curve takes between its points.
    """
    gaps = np.diff(np.asarray(coords, dtype=np.float64))
    return float(gaps.min()) if gaps.size else 1e-3


@torch.no_grad()
def second_difference(objective: Objective, direction: Mapping[str, Tensor], step: float) -> float:
    """The measured curvature of the loss along ``direction`` at the centre: its central second difference.

    ``(L(theta + h v) - 2 L(theta) + L(theta - h v)) / h^2``. Along a unit eigenvector of a smooth loss it is
    ``lambda + O(h^2)``; across the kinks of a piecewise-linear network it is not, and grows as ``h`` shrinks.

    Args:
        objective: the objective; its parameters are the centre theta.
        direction: the unit direction ``v``, a params dict of theta's names.
        step: ``h`` (> 0).

    Returns:
        The second difference, a float.
    """
    theta = objective.params

    def at(a: float) -> float:
        return float(objective.loss({n: t + a * direction[n].to(t.dtype) for n, t in theta.items()}))

    return (at(step) - 2 * at(0.0) + at(-step)) / step**2


def measure_curvature(objective: Objective, directions: Directions, steps: Sequence[float]) -> None:
    """Add what the quadratic model along Hessian directions needs to be read: kinks, and the measured curvature.

    Sets ``directions.meta``'s ``kinked_operations`` (:func:`~landscape.models.kinks.kinked_operations` of one
    forward pass on two samples: where there are any, the Hessian is the curvature of one linear piece only),
    ``second_difference_steps`` (``h`` of each axis) and ``direction_second_differences``
    (:func:`second_difference` along x, and y for a plane), beside ``direction_eigenvalues``.

    Args:
        objective: the surface's objective.
        directions: Hessian directions (unit eigenvectors); changed in place.
        steps: ``h`` of each axis, x first (:func:`grid_step` of the grid's coordinates).
    """
    params = {n: t.detach().requires_grad_(t.is_floating_point()) for n, t in objective.params.items()}
    x = objective.batches[0][0][:2]
    axes = [d for d in (directions.x, directions.y) if d is not None]
    directions.meta["kinked_operations"] = kinked_operations(lambda: objective.logits(params, x))
    directions.meta["second_difference_steps"] = [float(h) for h in steps[: len(axes)]]
    directions.meta["direction_second_differences"] = [second_difference(objective, d, h) for d, h in zip(axes, steps)]


def objective_attrs(objective: Objective) -> dict[str, Any]:
    """The attributes of the loss a hessian file records, for this objective (to check a file against).

    Args:
        objective: the objective.

    Returns:
        ``{"criterion", "regularizer", "n_samples"}`` as a hessian file records them; add the provenance of the
        model and data (:meth:`~landscape.core.front.AnalysisInputs.provenance`) to check a whole file.
    """
    return {
        "criterion": criterion_name(objective.criterion),
        "regularizer": objective.regularizer.describe(),
        "n_samples": int(objective.n_samples),
    }


def _comparable(value: Any) -> Any:
    """A value as it reads back from a result file (JSON strings decoded, tuples as lists)."""
    return decode(encode(value))


def _shown(value: Any) -> str:
    """A value for a message: dicts and lists as JSON with sorted keys, anything else as its repr."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else repr(value)


def check_provenance(attrs: Mapping[str, Any], expected: Mapping[str, Any], what: str = "the eigenvector file") -> None:
    """Refuse a file made for another checkpoint or objective: every :data:`PROVENANCE_ATTRS` key given must agree.

    Only the keys of :data:`PROVENANCE_ATTRS` that ``expected`` holds (or that have a default,
    :data:`PROVENANCE_DEFAULTS`) are compared, after both sides are put in the form a result file reads back
    in (a JSON regulariser description is compared as the dict it encodes).

    Args:
        attrs: the file's root attributes (as read by :func:`landscape.store.read_result`).
        expected: the attributes of this surface (model provenance and :func:`objective_attrs`).
        what: how the message names the file.

    Raises:
        LandscapeError: one line naming the first attribute that differs and both values.
    """
    for key in PROVENANCE_ATTRS:
        if key not in expected and key not in PROVENANCE_DEFAULTS:
            continue
        absent = object()
        mine = _comparable(expected.get(key, PROVENANCE_DEFAULTS.get(key, absent)))
        theirs = _comparable(attrs[key]) if key in attrs else PROVENANCE_DEFAULTS.get(key, absent)
        if mine != theirs:
            shown = "not recorded" if theirs is absent else _shown(theirs)
            raise LandscapeError(
                f"{what} was made for another model or objective: {key} is {shown} there but {_shown(mine)} here; "
                "compute the eigenvectors of this checkpoint and loss (landscape hessian --eigenvectors)"
            )


#: how far a stored eigenvector's norm may be from 1, and two of them from orthogonal (|cosine|)
UNIT_TOLERANCE = 1e-3


def _damaged(where: str, field: str, what: str) -> LandscapeError:
    return LandscapeError(f"{where}'s {field} {what}: the file is damaged; compute it again with landscape hessian")


def _file_tol(value: Any, where: str) -> float:
    """A hessian file's ``tol`` attribute: a finite number >= 0."""
    try:
        tol = float(value)
    except (TypeError, ValueError):
        raise _damaged(where, "tol", f"is {value!r}, not a number") from None
    if not math.isfinite(tol) or tol < 0:
        raise _damaged(where, "tol", f"is {tol}, not a finite number >= 0")
    return tol


def _column(res: store.Result, name: str, k: int, kind: type, default: list[Any]) -> list[Any]:
    """An optional per-pair array of a hessian file (``converged``, ``residuals``): ``k`` values of ``kind``."""
    if name not in res:
        return default
    try:
        values = [kind(v) for v in np.asarray(res[name]).reshape(-1).tolist()]
    except (TypeError, ValueError):
        raise _damaged(str(res.path), name, "are not values of its kind") from None
    if len(values) != k:
        raise _damaged(str(res.path), name, f"hold {len(values)} values for {k} eigenpairs")
    return values


def _checked_eigenvectors(
    res: store.Result, theta: Mapping[str, Tensor]
) -> tuple[list[str], np.ndarray, np.ndarray, str]:
    """The parameter names, eigenvectors, eigenvalues and ``which`` of a hessian file, each field checked.

    The names are distinct parameters of ``theta`` whose sizes add up to the vectors' rows and ``n_params``;
    the vectors are finite numbers, of unit norm and orthogonal (within :data:`UNIT_TOLERANCE`); there is one
    finite eigenvalue per vector; ``which`` is one of the solver's choices.

    Raises:
        LandscapeError: one line naming the file and the first field that is wrong.
    """
    from landscape.options.hessian import WHICH

    where = str(res.path)
    raw_names = res.attrs.get("parameter_names", [])
    if isinstance(raw_names, str) or not all(isinstance(n, str) for n in np.asarray(raw_names).reshape(-1).tolist()):
        raise _damaged(where, "parameter_names", "are not a list of names")
    names = [str(n) for n in raw_names]
    if len(set(names)) != len(names):
        repeated = next(n for n in names if names.count(n) > 1)
        raise _damaged(where, "parameter_names", f"repeat {repeated!r}")
    unknown = [n for n in names if n not in theta]
    if unknown:
        raise LandscapeError(f"{where} has eigenvectors of parameter {unknown[0]!r}, which the model lacks")
    try:
        vectors = np.asarray(res["eigenvectors"], dtype=np.float64)
    except (TypeError, ValueError):
        raise _damaged(where, "eigenvectors", "are not numbers") from None
    size = sum(theta[n].numel() for n in names)
    n_params = res.attrs.get("n_params", -1)
    if vectors.ndim != 2 or not names or vectors.shape[0] != size or n_params != size:
        rows = vectors.shape[0] if vectors.ndim else 0
        raise LandscapeError(
            f"{where}'s eigenvectors have {rows} rows and n_params={n_params!r}, but its parameters "
            f"{names[:3]} have {size} entries in this model; the file is damaged or of another model"
        )
    if not np.isfinite(vectors).all():
        raise LandscapeError(f"{where}'s eigenvectors hold NaN or Inf; compute them again")
    if "eigenvalues" not in res:
        raise _damaged(where, "eigenvalues", "are missing")
    try:
        eigenvalues = np.asarray(res["eigenvalues"], dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise _damaged(where, "eigenvalues", "are not numbers") from None
    if len(eigenvalues) != vectors.shape[1] or not len(eigenvalues):
        raise _damaged(where, "eigenvalues", f"are {len(eigenvalues)} for {vectors.shape[1]} eigenvector columns")
    if not np.isfinite(eigenvalues).all():
        raise _damaged(where, "eigenvalues", "hold NaN or Inf")
    which = res.attrs.get("which", "LA")
    if which not in WHICH:
        raise _damaged(where, "which", f"is {which!r}, not one of {', '.join(WHICH)}")
    with np.errstate(over="ignore", invalid="ignore"):
        gram = vectors.T @ vectors
    norms = np.sqrt(np.abs(np.diag(gram)))
    bad = next((j for j, n in enumerate(norms) if not abs(n - 1.0) <= UNIT_TOLERANCE), None)
    if bad is not None:
        raise _damaged(where, f"eigenvector {bad + 1}", f"has norm {norms[bad]:.6g}, not 1")
    off = np.abs(gram - np.diag(np.diag(gram)))
    if off.size and not off.max() <= UNIT_TOLERANCE:
        i, j = np.unravel_index(int(np.argmax(off)), off.shape)
        raise _damaged(
            where, f"eigenvectors {min(i, j) + 1} and {max(i, j) + 1}", f"have cosine {gram[i, j]:.3g}, not 0"
        )
    return names, vectors, eigenvalues, str(which)


def read_eigendirections(
    source: str | Path | store.Result,
    theta: Mapping[str, Tensor],
    *,
    expected: Mapping[str, Any],
    wanted: str | None = None,
) -> EigenDirections:
    """The eigenvectors of a ``landscape hessian --eigenvectors`` file as unit params dicts of ``theta``.

    The file's ``eigenvectors`` array is ``(n_params, pairs)``, its rows in the order of the ``parameter_names``
    attribute; its ``eigenvalues`` are ascending and ``which`` says which pairs it holds. The file must belong to
    the same checkpoint and objective (:func:`check_provenance`), and its parameters must be ``theta``'s.

    Args:
        source: the hessian result file, or the file already read.
        theta: the surface's centre, a params dict (the directions' names, shapes, devices and dtypes).
        expected: this surface's provenance and loss attributes (see :func:`check_provenance`).
        wanted: the ``which`` the surface asks for (``--which``); the file's must be the same. None: any.

    Returns:
        The :class:`EigenDirections` (``source`` = the file's path), every pair of the file, most wanted first.

    Raises:
        LandscapeError: the file cannot be read, is not a hessian result, holds no eigenvectors, was made for
            another checkpoint or objective, names parameters ``theta`` lacks or sizes that do not add up, holds
            NaN or Inf, vectors that are not orthonormal, eigenvalues that are missing, not finite or not one
            per vector, another ``which`` than ``wanted``, or a pair that did not converge (its flag, or its
            residual above the file's ``tol`` times ``|lambda|``: files of releases that flagged pairs by a gap
            estimate are judged again).
    """
    res = source if isinstance(source, store.Result) else store.read_result(source)
    where = str(res.path)
    if res.kind != "hessian":
        raise LandscapeError(f"{where} is a {res.kind} result, not a hessian one; give a landscape hessian file")
    if "eigenvectors" not in res:
        raise LandscapeError(f"{where} holds no eigenvectors; compute them with landscape hessian --eigenvectors")
    check_provenance(res.attrs, expected, f"the eigenvector file {where}")
    names, vectors, eigenvalues, which = _checked_eigenvectors(res, theta)
    if wanted is not None and which != wanted:
        raise LandscapeError(
            f"--which {wanted} asks for other eigenvectors than {where} holds (which={which}): give --which {which}, "
            f"or compute them with landscape hessian --which {wanted} --eigenvectors"
        )
    order = rank_ritz(torch.as_tensor(eigenvalues), which).tolist()
    k = len(order)
    converged = _column(res, "converged", k, bool, [True] * k)
    residuals = _column(res, "residuals", k, float, [float("nan")] * k)
    if "residuals" in res and "tol" in res.attrs:  # judged again: files of older releases flagged by a gap estimate
        tol = _file_tol(res.attrs["tol"], where)
        dtype = getattr(torch, str(res.attrs.get("dtype", "float32")), torch.float32)
        eps = torch.finfo(dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32).eps
        floor = eps ** (2 / 3) * float(np.abs(eigenvalues).max())
        again = lanczos_converged(torch.as_tensor(residuals), torch.as_tensor(eigenvalues), tol, floor)
        converged = [bool(c) and bool(a) for c, a in zip(converged, again)]
    _check_converged(converged, order, k, "compute the eigenvectors again with a larger --maxiter or --tol")
    return EigenDirections(
        eigenvalues=[float(eigenvalues[j]) for j in order],
        vectors=_vectors(torch.as_tensor(vectors), order, names, theta),
        which=which,
        names=names,
        residuals=[float(residuals[j]) for j in order],
        source=where,
        operator=str(res.attrs.get("operator", "hessian")),
    )


def file_hessian_directions(
    source: str | Path | store.Result,
    theta: Mapping[str, Tensor],
    *,
    expected: Mapping[str, Any],
    ndim: int = 2,
    wanted: str | None = None,
) -> Directions:
    """Surface directions from a hessian file's eigenvectors: x = ``v_1`` (and y = ``v_2``).

    Args:
        source: the hessian result file, or the file already read.
        theta: the surface's centre, a params dict.
        expected: this surface's provenance and loss attributes (see :func:`check_provenance`).
        ndim: 1 for a line, 2 for a plane.
        wanted: the ``which`` the surface asks for; the file's must be the same (None: any).

    Returns:
        :class:`~landscape.analyses.surface.directions.Directions` of kind ``hessian``.

    Raises:
        LandscapeError: any error of :func:`read_eigendirections`, or fewer than ``ndim`` eigenvectors.
    """
    return read_eigendirections(source, theta, expected=expected, wanted=wanted).directions(ndim)
