"""Paths between two networks of one architecture: the line and the quadratic Bezier curve.

A network's point is an :class:`Endpoint`: its (variable) parameters and its buffers, by name. Between two
endpoints ``theta_A`` and ``theta_B``:

- the line (linear mode connectivity; Frankle et al. 2020): ``theta(a) = (1 - a) theta_A + a theta_B``;
- the quadratic Bezier curve with bend ``theta_c`` (Garipov et al. 2018):
  ``phi(t) = (1 - t)^2 theta_A + 2 t (1 - t) theta_c + t^2 theta_B``.

Floating buffers (BatchNorm running statistics) are interpolated linearly on both paths,
``(1 - a) b_A + a b_B``; on the curve that is ``phi(t)``'s weights with a bend buffer at the midpoint
``(b_A + b_B) / 2`` (the bend carries no buffers of its own). Integer buffers (``num_batches_tracked``) are taken
from the nearer endpoint (``theta_A`` for ``a <= 0.5``). Re-estimating BatchNorm statistics at a point is
:mod:`landscape.analyses.connect.evaluate`'s job. The points' parameters are formed by
:func:`landscape.core.combine.combine`: new tensors (differentiable, e.g. for the bend's training), or, given a
:class:`~landscape.core.combine.PointBuffer`, written into its tensors, reused for every point (the same numbers);
the inputs are never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor, nn

from landscape.analyses.surface.directions import differences
from landscape.core.combine import PointBuffer, combine
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.options import checks


@dataclass(frozen=True)
class Endpoint:
    """A network's point in parameter space: its variable parameters and its buffers, by name.

    Attributes:
        params: the parameters, name -> tensor (the variable parameters of the objective it is evaluated with).
        buffers: the buffers (BatchNorm statistics, ...), name -> tensor.
        as_given: the point is one of the networks as given (an end of a path): it is evaluated with its own
            BatchNorm statistics, never re-estimated ones (``bn="recompute"`` is for the points between).
    """

    params: ParamDict
    buffers: ParamDict
    as_given: bool = False

    @classmethod
    def of(cls, module: nn.Module) -> Endpoint:
        """The point of ``module``: detached copies of every parameter and buffer (the module is not changed).

        Args:
            module: the network.

        Returns:
            The endpoint, in the order of ``named_parameters()`` and ``named_buffers()``.
        """
        return cls(
            {n: p.detach().clone() for n, p in module.named_parameters()},
            {n: b.detach().clone() for n, b in module.named_buffers()},
        )

    def like(self, params: Mapping[str, Tensor], buffers: Mapping[str, Tensor]) -> Endpoint:
        """This point on the devices and in the dtypes of a reference (floating tensors only change dtype).

        Args:
            params: reference parameters, name -> tensor (at least this point's names).
            buffers: reference buffers, name -> tensor (at least this point's names).

        Returns:
            A new endpoint; every tensor is on its reference's device, floating ones in its reference's dtype.
        """

        def cast(t: Tensor, ref: Tensor) -> Tensor:
            if t.is_floating_point() and ref.is_floating_point():
                return t.detach().to(ref.device, ref.dtype)
            return t.detach().to(ref.device)

        return Endpoint(
            {n: cast(t, params[n]) for n, t in self.params.items()},
            {n: cast(t, buffers[n]) for n, t in self.buffers.items()},
            self.as_given,
        )


def first_mismatch(a: Mapping[str, Tensor], b: Mapping[str, Tensor], names: tuple[str, str]) -> str | None:
    """The first difference of names or shapes between two dicts, described in words (None when they match).

    The names of ``a`` are gone through in order (a name ``b`` lacks, or a shape that differs), then the names
    only ``b`` has.

    Args:
        a: the first dict, name -> tensor.
        b: the second dict, name -> tensor.
        names: how the text calls ``a`` and ``b``, e.g. ``("theta_A", "theta_B")``.

    Returns:
        E.g. ``"'fc.weight' has shape (10, 8) in theta_A but (10, 4) in theta_B"`` or ``"'fc.bias' is in
        theta_A but not in theta_B"``; None when the names and shapes agree.
    """
    missing, extra, wrong = differences(a, b)
    differing = set(missing) | set(wrong)
    first_a = [n for n in a if n in differing]
    if first_a:
        n = first_a[0]
        if n in b:
            return f"{n!r} has shape {tuple(a[n].shape)} in {names[0]} but {tuple(b[n].shape)} in {names[1]}"
        return f"{n!r} is in {names[0]} but not in {names[1]}"
    if extra:
        return f"{extra[0]!r} is in {names[1]} but not in {names[0]}"
    return None


def check_same_architecture(a: Endpoint, b: Endpoint, names: tuple[str, str] = ("theta_A", "theta_B")) -> None:
    """Refuse two points of different architectures: the same parameter and buffer names and shapes are needed.

    Args:
        a: the first point.
        b: the second point.
        names: how the message calls them.

    Raises:
        LandscapeError: one line naming the first mismatch (parameters first, then buffers): the name, and both
            shapes or which side lacks it.
    """
    for kind, x, y in (("parameter", a.params, b.params), ("buffer", a.buffers, b.buffers)):
        found = first_mismatch(x, y, names)
        if found is not None:
            raise LandscapeError(
                f"{names[0]} and {names[1]} are not the same architecture: {kind} {found}; "
                "give networks of the same model and options"
            )


def check_coordinate(value: float, name: str = "alpha") -> float:
    """``value`` as a float; an error unless it is finite and in ``[0, 1]``.

    Args:
        value: a path coordinate (``alpha`` on the line, ``t`` on the curve).
        name: how the message names it.

    Returns:
        ``float(value)``.

    Raises:
        LandscapeError: ``value`` is not a number, is NaN or infinite, or lies outside ``[0, 1]``.
    """
    return checks.in_range(value, name, 0.0, 1.0)


def interpolate(
    a: Mapping[str, Tensor], b: Mapping[str, Tensor], alpha: float, buffer: PointBuffer | None = None
) -> ParamDict:
    """``(1 - alpha) a + alpha b`` for every name of ``a`` (exactly ``a`` at 0 and ``b`` at 1, for finite values).

    Args:
        a: the first dict, name -> floating tensor.
        b: the second, with ``a``'s names and shapes.
        alpha: the coordinate, in ``[0, 1]``.
        buffer: write the result into this buffer's tensors (rewritten at every call; no graph); None: new tensors.

    Returns:
        A dict of ``a``'s names (new tensors differentiable in ``a`` and ``b``, or ``buffer.tensors``).

    Raises:
        LandscapeError: ``alpha`` is not finite or lies outside ``[0, 1]``.
    """
    alpha = check_coordinate(alpha)
    return combine([(1.0 - alpha, a), (alpha, b)], buffer)


def interpolate_buffers(a: Mapping[str, Tensor], b: Mapping[str, Tensor], alpha: float) -> ParamDict:
    """Buffers at ``alpha``: floating ones ``(1 - alpha) a + alpha b``, others the nearer endpoint's.

    Args:
        a: the first network's buffers.
        b: the second network's, with ``a``'s names and shapes.
        alpha: the coordinate, in ``[0, 1]``; integer buffers come from ``a`` for ``alpha <= 0.5``, else ``b``.

    Returns:
        A new dict of ``a``'s names.

    Raises:
        LandscapeError: ``alpha`` is not finite or lies outside ``[0, 1]``.
    """
    alpha = check_coordinate(alpha)
    out: ParamDict = {}
    for n, t in a.items():
        if t.is_floating_point() or t.is_complex():
            out[n] = (1.0 - alpha) * t + alpha * b[n]
        else:
            out[n] = (t if alpha <= 0.5 else b[n]).clone()
    return out


def bezier_weights(t: float) -> tuple[float, float, float]:
    """The weights of ``theta_A``, ``theta_c`` and ``theta_B`` in ``phi(t)``: ``((1-t)^2, 2t(1-t), t^2)``.

    Args:
        t: the curve's coordinate, in ``[0, 1]``.

    Returns:
        The three weights (they sum to 1).

    Raises:
        LandscapeError: ``t`` is not finite or lies outside ``[0, 1]``.
    """
    t = check_coordinate(t, "t")
    return (1.0 - t) ** 2, 2.0 * t * (1.0 - t), t**2


def bezier(
    a: Mapping[str, Tensor],
    bend: Mapping[str, Tensor],
    b: Mapping[str, Tensor],
    t: float,
    buffer: PointBuffer | None = None,
) -> ParamDict:
    """``phi(t) = (1-t)^2 a + 2t(1-t) bend + t^2 b`` for every name of ``a`` (differentiable in the bend).

    Args:
        a: the first endpoint's parameters.
        bend: the bend ``theta_c``, with ``a``'s names and shapes.
        b: the second endpoint's parameters, with ``a``'s names and shapes.
        t: the coordinate, in ``[0, 1]``.
        buffer: write the result into this buffer's tensors (rewritten at every call; no graph); None: new tensors.

    Returns:
        A dict of ``a``'s names (new tensors, or ``buffer.tensors``).

    Raises:
        LandscapeError: ``t`` is not finite or lies outside ``[0, 1]``.
    """
    wa, wc, wb = bezier_weights(t)
    return combine([(wa, a), (wc, bend), (wb, b)], buffer)


def midpoint(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> ParamDict:
    """``(a + b) / 2``, the bend's initialisation (detached copies).

    Args:
        a: the first endpoint's parameters.
        b: the second endpoint's, with ``a``'s names and shapes.

    Returns:
        A new dict of ``a``'s names.
    """
    return {n: ((x + b[n]) / 2).detach().clone() for n, x in a.items()}


def linear_point(a: Endpoint, b: Endpoint, alpha: float, buffer: PointBuffer | None = None) -> Endpoint:
    """The network ``theta(alpha) = (1 - alpha) theta_A + alpha theta_B`` with interpolated buffers.

    Args:
        a: ``theta_A``.
        b: ``theta_B`` (same architecture, see :func:`check_same_architecture`).
        alpha: the coordinate, in ``[0, 1]``.
        buffer: where the parameters are written (rewritten by the next point); None: new tensors.

    Returns:
        The point (new buffers; parameters new or ``buffer.tensors``); at ``alpha`` 0 and 1, theta_A and theta_B as
        given (:attr:`Endpoint.as_given`).

    Raises:
        LandscapeError: ``alpha`` is not finite or lies outside ``[0, 1]``.
    """
    params = interpolate(a.params, b.params, alpha, buffer)
    return Endpoint(params, interpolate_buffers(a.buffers, b.buffers, alpha), as_given=alpha in (0.0, 1.0))


def bezier_point(
    a: Endpoint, bend: Mapping[str, Tensor], b: Endpoint, t: float, buffer: PointBuffer | None = None
) -> Endpoint:
    """The network ``phi(t)`` on the curve with bend ``theta_c``; buffers interpolated linearly in ``t``.

    Args:
        a: ``theta_A``.
        bend: the bend's parameters ``theta_c``.
        b: ``theta_B`` (same architecture).
        t: the coordinate, in ``[0, 1]``.
        buffer: where the parameters are written (rewritten by the next point); None: new tensors.

    Returns:
        The point (new buffers; parameters new or ``buffer.tensors``); at ``t`` 0 and 1, theta_A and theta_B as
        given (:attr:`Endpoint.as_given`).

    Raises:
        LandscapeError: ``t`` is not finite or lies outside ``[0, 1]``.
    """
    params = bezier(a.params, bend, b.params, t, buffer)
    return Endpoint(params, interpolate_buffers(a.buffers, b.buffers, t), as_given=t in (0.0, 1.0))


def check_finite_point(point: Endpoint, what: str) -> None:
    """Refuse a point whose parameters or floating buffers hold NaN or Inf, naming the first such tensor.

    Args:
        point: the point.
        what: how the message names it, e.g. ``"theta_A"``.

    Raises:
        LandscapeError: a tensor of ``point`` is not finite.
    """
    for kind, tensors in (("parameter", point.params), ("buffer", point.buffers)):
        for name, t in tensors.items():
            if (t.is_floating_point() or t.is_complex()) and not bool(t.isfinite().all()):
                raise LandscapeError(f"{what}'s {kind} {name!r} holds NaN or Inf; give a network with finite weights")
