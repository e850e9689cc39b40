"""The regulariser added to the data term: none, ``l2`` or ``norm-sum`` (Paper A's plotted loss)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.common import REGULARIZERS


@dataclass(frozen=True)
class Regularizer:
    """A penalty on the parameters added to the data loss.

    - ``none``: R = 0
    - ``l2``: R = 0.5 * coef * sum_p ||theta_p||_2^2 (weight decay's quadratic form)
    - ``norm-sum``: R = coef * sum_p ||theta_p||_2 (Paper A's plotted term, unsquared per-tensor norms;
      Paper A uses coef = 0.05)

    The sum runs over every tensor of the params dict.

    Attributes:
        kind: one of :data:`REGULARIZERS`.
        coef: the coefficient, a finite number >= 0.

    Raises:
        LandscapeError: unknown ``kind``, or ``coef`` not a finite number >= 0 (on construction).
    """

    kind: str = "none"
    coef: float = 0.0

    def __post_init__(self) -> None:
        """Refuse an unknown kind and a coefficient that is negative, NaN or infinite.

        Raises:
            LandscapeError: unknown ``kind``, or ``coef`` not a finite number >= 0.
        """
        if self.kind not in REGULARIZERS:
            raise LandscapeError(f"unknown regulariser {self.kind!r}; choose one of {', '.join(REGULARIZERS)}")
        checks.non_negative(self.coef, "the regulariser coefficient (--reg-coef)")

    @classmethod
    def from_options(cls, kind: str = "none", coef: float | None = None) -> Regularizer:
        """Build from CLI-style options; ``norm-sum`` defaults to Paper A's 0.05, ``l2`` to 5e-4.

        Args:
            kind: one of :data:`REGULARIZERS`.
            coef: the coefficient; ``None`` for the kind's default (0 for ``none``).

        Returns:
            The :class:`Regularizer`.

        Raises:
            LandscapeError: unknown ``kind``, or ``coef`` not a finite number >= 0.
        """
        if coef is None:
            coef = {"none": 0.0, "l2": 5e-4, "norm-sum": 0.05}.get(kind, 0.0)
        return cls(kind, float(coef))

    @property
    def active(self) -> bool:
        """Whether the penalty contributes anything."""
        return self.kind != "none" and self.coef != 0.0

    def __call__(self, params: Mapping[str, Tensor]) -> Tensor:
        """Evaluate R(theta) for a params dict.

        Args:
            params: the parameter tensors theta_p by name.

        Returns:
            R(theta) as a 0-dim tensor on the params' device (zero when the penalty is not :attr:`active`; a CPU
            zero without parameters).
        """
        ref = next(iter(params.values()), None)
        if ref is None:  # no parameters: the empty sum
            return torch.zeros(())
        if not self.active:
            return ref.new_zeros(())
        if self.kind == "l2":
            return 0.5 * self.coef * sum((p**2).sum() for p in params.values())
        return self.coef * sum(torch.linalg.vector_norm(p) for p in params.values())

    def hessian_product(self, params: Mapping[str, Tensor], v: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """``d^2 R / d theta^2 v`` in closed form, tensor by tensor (no autograd).

        - ``l2``: ``coef v_p``;
        - ``norm-sum``: ``coef (v_p - u_p (u_p . v_p)) / ||theta_p||`` with ``u_p = theta_p / ||theta_p||`` (0 for a
          tensor that is all zeros, where the norm has no second derivative: the gradient's convention there).

        Args:
            params: the point theta by name.
            v: the vector by name (the names of ``params``).

        Returns:
            The product by name (zeros when the penalty is not :attr:`active`).
        """
        if not self.active:
            return {n: torch.zeros_like(t) for n, t in v.items()}
        if self.kind == "l2":
            return {n: self.coef * t for n, t in v.items()}
        out = {}
        for name, t in v.items():
            p = params[name]
            norm = torch.linalg.vector_norm(p)
            safe = torch.where(norm > 0, norm, torch.ones_like(norm))
            u = p / safe
            product = (t - u * (u * t).sum()) / safe
            out[name] = torch.where(norm > 0, self.coef * product, torch.zeros_like(product))
        return out

    def describe(self) -> str:
        """JSON description stored in result files.

        Returns:
            E.g. ``'{"kind": "l2", "coef": 0.0005}'``.
        """
        return json.dumps({"kind": self.kind, "coef": self.coef})
