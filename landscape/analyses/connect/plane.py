"""The plane through theta_A, theta_B and the bend theta_c (Garipov et al. 2018, Fig. 1): its grid and points.

With ``d_B = theta_B - theta_A`` and ``d_c = theta_c - theta_A``, the plane has the orthonormal basis (Gram-Schmidt)

    u = d_B / ||d_B||,        v = (d_c - <d_c, u> u) / ||d_c - <d_c, u> u||,

and its point ``(x, y)`` is ``theta_A + x u + y v``: theta_A at ``(0, 0)``, theta_B at ``(||d_B||, 0)`` and the
bend at ``(<d_c, u>, ||d_c - <d_c, u> u||)``, so coordinates are distances in parameter space. Written as the
affine combination of the three points,

    theta(x, y) = w_A theta_A + w_B theta_B + w_c theta_c,   w_c = y / c_y,   w_B = (x - w_c c_x) / b_x,
    w_A = 1 - w_B - w_c

(``b_x = ||d_B||``, ``(c_x, c_y)`` the bend's coordinates). The curve ``phi(t)`` lies in the plane, at the
combination of its Bezier weights. Floating buffers of a plane point are ``(1 - s) b_A + s b_B`` with
``s = w_B + w_c / 2`` clipped to ``[0, 1]`` (the bend's buffers are the midpoint's, so inside the triangle this is
the same combination as of the weights); with ``bn="recompute"`` the BatchNorm statistics are re-estimated at the
point anyway. The grid covers the three points with a margin of :data:`~landscape.options.connect.PLANE_MARGIN`
of their extent on each side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from torch import Tensor

from landscape.analyses.connect.path import Endpoint, bezier_weights, interpolate_buffers
from landscape.core import params as P
from landscape.core.combine import PointBuffer, combine
from landscape.options.connect import PLANE_MARGIN

#: the bend's distance from the line, relative to ``||theta_B - theta_A||``, under which the plane is undefined
COLLINEAR_RTOL = 1e-9


@dataclass(frozen=True)
class PlaneGrid:
    """The plane's geometry and grid.

    Attributes:
        b_x: ``||theta_B - theta_A||``, theta_B's x coordinate.
        c_x: the bend's x coordinate ``<d_c, u>``.
        c_y: the bend's y coordinate (> 0).
        xs: the grid's x coordinates, ascending.
        ys: the grid's y coordinates, ascending.
    """

    b_x: float
    c_x: float
    c_y: float
    xs: np.ndarray
    ys: np.ndarray

    @property
    def points(self) -> np.ndarray:
        """The plane coordinates of theta_A, theta_B and the bend, rows in that order: ``(3, 2)``."""
        return np.array([[0.0, 0.0], [self.b_x, 0.0], [self.c_x, self.c_y]])

    def weights(self, x: float, y: float) -> tuple[float, float, float]:
        """``(w_A, w_B, w_c)``, the affine weights of the plane point ``(x, y)`` (they sum to 1).

        Args:
            x: the point's x coordinate.
            y: the point's y coordinate.

        Returns:
            The weights of theta_A, theta_B and the bend.
        """
        w_c = y / self.c_y
        w_b = (x - w_c * self.c_x) / self.b_x
        return 1.0 - w_b - w_c, w_b, w_c

    def curve(self, coords: np.ndarray) -> np.ndarray:
        """The plane coordinates of the curve's points ``phi(t)``: ``w_B(t) (b_x, 0) + w_c(t) (c_x, c_y)``.

        Args:
            coords: the curve's coordinates ``t`` in ``[0, 1]``.

        Returns:
            ``(n, 2)`` coordinates.
        """
        out = np.empty((len(coords), 2))
        for i, t in enumerate(coords):
            _, w_c, w_b = bezier_weights(float(t))
            out[i] = w_b * np.array([self.b_x, 0.0]) + w_c * np.array([self.c_x, self.c_y])
        return out


def _axis(values: list[float], steps: int) -> np.ndarray:
    lo, hi = min(values), max(values)
    pad = PLANE_MARGIN * (hi - lo)
    return np.linspace(lo - pad, hi + pad, steps)


def plane_grid(
    a: Mapping[str, Tensor], bend: Mapping[str, Tensor], b: Mapping[str, Tensor], steps: int
) -> PlaneGrid | str:
    """The plane through the three points and a ``steps x steps`` grid over them (inner products in float64).

    Args:
        a: theta_A's parameters.
        bend: the bend's parameters, of ``a``'s names and shapes.
        b: theta_B's parameters, of ``a``'s names and shapes.
        steps: grid points along each axis (at least 2).

    Returns:
        The :class:`PlaneGrid`, or why there is no plane (theta_A equals theta_B, or the bend lies on their line).
    """
    d_b = {n: (b[n] - t).double() for n, t in a.items()}
    d_c = {n: (bend[n] - t).double() for n, t in a.items()}
    b_x = float(P.norm(d_b))
    if b_x == 0.0:
        return "theta_A equals theta_B, so there is no plane through them and the bend"
    c_x = float(P.dot(d_c, d_b)) / b_x
    c_y = float(np.sqrt(max(float(P.dot(d_c, d_c)) - c_x * c_x, 0.0)))
    if c_y <= COLLINEAR_RTOL * b_x:
        return "the bend lies on the line through theta_A and theta_B, so the three points span no plane"
    xs = _axis([0.0, b_x, c_x], steps)
    ys = _axis([0.0, c_y], steps)
    return PlaneGrid(b_x, c_x, c_y, xs, ys)


def plane_point(
    a: Endpoint,
    bend: Mapping[str, Tensor],
    b: Endpoint,
    grid: PlaneGrid,
    x: float,
    y: float,
    buffer: PointBuffer | None = None,
) -> Endpoint:
    """The network at the plane point ``(x, y)``: ``w_A theta_A + w_B theta_B + w_c theta_c``, buffers as above.

    Args:
        a: theta_A (on the objective's device).
        bend: the bend's parameters.
        b: theta_B (same architecture).
        grid: the plane (:func:`plane_grid`).
        x: the point's x coordinate.
        y: the point's y coordinate.
        buffer: where the parameters are written (rewritten by the next point); None: new tensors.

    Returns:
        The point (new buffers; parameters new or ``buffer.tensors``).
    """
    w_a, w_b, w_c = grid.weights(x, y)
    params = combine([(w_a, a.params), (w_b, b.params), (w_c, bend)], buffer)
    s = min(max(w_b + w_c / 2.0, 0.0), 1.0)
    return Endpoint(params, interpolate_buffers(a.buffers, b.buffers, s))
