"""Edge-of-stability tracking: the sharpness of the training loss every N optimiser steps, against its threshold.

A :class:`SharpnessTracker` keeps a fixed tracking batch and, when asked at a step, computes by Lanczos the top
eigenvalue of the Hessian ``H`` of the loss on that batch at the model's current weights:

- SGD (``torch.optim.SGD``): ``lambda_max(H)`` against the stability threshold of the quadratic model,
  ``2 / eta`` without momentum; heavy-ball momentum ``beta`` (dampening ``d``): ``(2 + 2 beta) / ((1 - d) eta)``;
  Nesterov momentum: ``(2 + 2 beta) / ((1 + 2 beta) eta)`` (Cohen et al. 2021, "Gradient Descent on Neural
  Networks Typically Occurs at the Edge of Stability", appendix on momentum);
- Adam / AdamW: the preconditioned sharpness ``lambda_max(P^-1 H)``, computed as ``lambda_max(P^-1/2 H P^-1/2)``
  (same eigenvalues, symmetric, so Lanczos applies), against ``(2 + 2 beta1) / ((1 - beta1) eta)`` (``38 / eta``
  at ``beta1 = 0.9``; Cohen et al. 2022, "Adaptive Gradient Methods at the Edge of Stability").

Adam's preconditioner, per parameter entry with its own step count ``t`` (``state["step"]``)::

    P = (1 - beta1^t) * (sqrt(v_t / (1 - beta2^t)) + eps)

with ``v_t = exp_avg_sq`` (``max_exp_avg_sq`` with ``amsgrad``). This is the convention of Cohen et al. 2022:
PyTorch's update is ``w <- w - eta m_hat / (sqrt(v_hat) + eps) = w - eta P^-1 m_t`` with ``m_t`` the raw
(not bias-corrected) EMA of the gradients, and the threshold above is that of the EMA recursion
``m_t = beta1 m_{t-1} + (1 - beta1) g_t``, ``w <- w - eta P^-1 m_t``. The first-moment factor ``(1 - beta1^t)``
tends to 1; it matters only in the first few hundred steps.

Each Lanczos run after the first starts from the previous top eigenvector (``v0``), so it usually needs a few
products only. The tracker never changes the model, the optimiser or any random state: its Hessian is that of its
own copy of the model, at detached copies of the current weights, in eval mode (no dropout) with BatchNorm
either in eval mode too (``bn_mode="eval"``: the running statistics, as every other Hessian of this toolkit) or,
with ``bn_mode="train"``, normalising the tracking batch by its own statistics as training does (the function the
optimiser follows; running statistics neither used nor updated); products are made with ``torch.func``
(nothing reaches ``.grad``); start vectors come from private generators.

**The function tracked is the one the optimiser descends.** A coupled weight decay ``lambda`` (``weight_decay``
of ``torch.optim.SGD``, and of ``Adam`` without ``decoupled_weight_decay``) adds ``lambda w`` to the gradient:
the optimiser descends ``L(w) + sum_g (lambda_g / 2) ||w_g||^2`` over its param groups ``g``, whose Hessian is
``H + D`` with ``D`` diagonal, ``lambda_g`` on the entries of group ``g`` (0 on a group without decay). The
tracked matrix is ``H + D`` (SGD) or ``P^-1/2 (H + D) P^-1/2`` (Adam), with each group's ``lambda`` at the
step tracked. A decoupled decay (``AdamW``, or ``Adam(decoupled_weight_decay=True)``) shrinks the weights outside
the gradient, ``w <- (1 - eta lambda) w - eta P^-1 m``: it is no term of a loss, and the tracked matrix is
``P^-1/2 H P^-1/2`` of the loss alone. :meth:`SharpnessTracker.tracked_function` says which, in words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.linalg import DenseOperator, EigenResult
from landscape.analyses.hessian.operator import HessianOperator
from landscape.core.criteria import Batch, Criterion, OutputSelector
from landscape.core.objective import Objective
from landscape.core.params import ParamDict, flatten
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.common import choice
from landscape.options.train import TRACK_MODES

#: the optimisers whose stability threshold is known here
SGD_OPTIMIZERS = (torch.optim.SGD,)
ADAM_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)


@dataclass(frozen=True)
class SharpnessRecord:
    """The sharpness at one step and its stability threshold.

    Attributes:
        step: the caller's step count.
        lr: the learning rate ``eta`` at that step.
        sharpness: ``lambda_max(H)`` (SGD) or ``lambda_max(P^-1/2 H P^-1/2)`` (Adam, AdamW).
        threshold: the stability threshold of the optimiser (see the module docstring).
        n_products: the Hessian-vector products Lanczos used.
        residual: ``||M y - lambda y||`` of the Ritz pair (``M`` the matrix whose eigenvalue is reported).
        error: the estimated eigenvalue error ``min(r, r^2 / gap)``.
        converged: whether the residual met the tolerance, ``residual <= tol * |sharpness|`` (ARPACK's test).
        preconditioned: whether the sharpness is Adam's preconditioned one.
        warm: whether Lanczos started from the previous eigenvector.
    """

    step: int
    lr: float
    sharpness: float
    threshold: float
    n_products: int
    residual: float
    error: float
    converged: bool
    preconditioned: bool
    warm: bool

    @property
    def ratio(self) -> float:
        """``sharpness / threshold`` (1 at the edge of stability)."""
        return self.sharpness / self.threshold


# ------------------------------------------------------------------------------------------ hyperparameters
def _groups_of(optimizer: torch.optim.Optimizer, ids: set[int]) -> list[dict]:
    """The param groups holding any of the tracked parameters (by id)."""
    return [g for g in optimizer.param_groups if any(id(p) in ids for p in g["params"])]


def _common(groups: Sequence[Mapping], keys: Sequence[str]) -> dict[str, object]:
    """The values of ``keys``, which every group must share (else the threshold is not one number)."""
    first = {k: groups[0].get(k) for k in keys}
    for g in groups[1:]:
        for k in keys:
            if _value(g.get(k)) != _value(first[k]):
                raise LandscapeError(
                    f"the optimiser's param groups differ in {k} ({_value(first[k])} vs {_value(g.get(k))}): "
                    "sharpness tracking needs one learning rate and one set of momentum parameters"
                )
    return {k: _value(v) for k, v in first.items()}


def _value(v: object) -> object:
    if isinstance(v, Tensor):
        return v.item() if v.numel() == 1 else tuple(v.tolist())
    if isinstance(v, tuple):
        return tuple(_value(x) for x in v)
    return v


def stability_threshold(optimizer: torch.optim.Optimizer, params: Sequence[nn.Parameter] | None = None) -> float:
    """The largest stable sharpness of ``optimizer`` on a quadratic, from its hyperparameters.

    SGD: ``(2 + 2 beta) / ((1 - d) eta)`` (heavy ball, dampening ``d``; ``2 / eta`` at ``beta = 0``), Nesterov
    ``(2 + 2 beta) / ((1 + 2 beta) eta)``; Adam/AdamW (of the preconditioned sharpness):
    ``(2 + 2 beta1) / ((1 - beta1) eta)``.

    Args:
        optimizer: a ``torch.optim.SGD``, ``Adam`` or ``AdamW``.
        params: the parameters whose groups count (default every group).

    Returns:
        The threshold, a float (``inf`` at ``eta = 0``).

    Raises:
        LandscapeError: another optimiser, or groups that differ in learning rate or momentum parameters.
    """
    ids = {id(p) for g in optimizer.param_groups for p in g["params"]} if params is None else {id(p) for p in params}
    groups = _groups_of(optimizer, ids)
    if not groups:
        raise LandscapeError("none of the tracked parameters is in the optimiser's param groups")
    if isinstance(optimizer, SGD_OPTIMIZERS):
        h = _common(groups, ("lr", "momentum", "dampening", "nesterov"))
        lr, beta, damp = float(h["lr"]), float(h["momentum"] or 0.0), float(h["dampening"] or 0.0)
        scale = (1 + 2 * beta) if h["nesterov"] else (1 - damp) if beta else 1.0
        return (2 + 2 * beta) / (scale * lr) if lr > 0 else math.inf
    if isinstance(optimizer, ADAM_OPTIMIZERS):
        h = _common(groups, ("lr", "betas", "eps", "amsgrad"))
        lr, beta1 = float(h["lr"]), float(h["betas"][0])
        return (2 + 2 * beta1) / ((1 - beta1) * lr) if lr > 0 else math.inf
    raise LandscapeError(
        f"no stability threshold for {type(optimizer).__name__}; sharpness tracking supports SGD, Adam and AdamW"
    )


def adam_preconditioner(optimizer: torch.optim.Optimizer, params: Mapping[str, nn.Parameter]) -> ParamDict:
    """Adam's diagonal preconditioner ``P = (1 - beta1^t) (sqrt(v_t / (1 - beta2^t)) + eps)`` per parameter.

    ``t`` is each parameter's ``state["step"]``, ``v_t`` its ``exp_avg_sq`` (``max_exp_avg_sq`` with
    ``amsgrad``), ``beta1, beta2, eps`` its group's; so ``eta P^-1 m_t`` is exactly the step PyTorch takes with the
    raw first moment ``m_t = exp_avg`` (weight decay aside). Nothing of the optimiser is changed.

    Args:
        optimizer: a ``torch.optim.Adam`` or ``AdamW``.
        params: the parameters by name.

    Returns:
        ``P`` by name (detached new tensors of each parameter's shape).

    Raises:
        LandscapeError: not an Adam optimiser, a parameter outside its groups, or one without state yet (track
            after the first optimiser step).
    """
    if not isinstance(optimizer, ADAM_OPTIMIZERS):
        raise LandscapeError(f"{type(optimizer).__name__} is not Adam or AdamW: it has no Adam preconditioner")
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    out: ParamDict = {}
    for name, p in params.items():
        group = group_of.get(id(p))
        if group is None:
            raise LandscapeError(f"parameter {name!r} is not in the optimiser's param groups")
        state = optimizer.state.get(p, {})
        if "exp_avg_sq" not in state or float(_value(state.get("step", 0))) < 1:
            raise LandscapeError(
                f"Adam has no state for parameter {name!r} yet (its preconditioner is undefined before the first "
                "step that updates it): track after the first optimiser step"
            )
        t = float(_value(state["step"]))
        beta1, beta2 = (float(_value(b)) for b in group["betas"])
        v = state["max_exp_avg_sq"] if group.get("amsgrad") else state["exp_avg_sq"]
        v = v.detach().to(torch.float64)
        out[name] = ((1 - beta1**t) * (torch.sqrt(v / (1 - beta2**t)) + float(group["eps"]))).to(p.dtype)
    return out


def coupled_decay(optimizer: torch.optim.Optimizer, params: Mapping[str, nn.Parameter]) -> dict[str, float]:
    """Each parameter's coupled weight decay ``lambda``, the ``lambda w`` the optimiser adds to its gradient.

    Its group's ``weight_decay`` for SGD and for Adam without ``decoupled_weight_decay``; 0 for AdamW's.

    Args:
        optimizer: a ``torch.optim.SGD``, ``Adam`` or ``AdamW``.
        params: the tracked parameters by name.

    Returns:
        Name -> ``lambda`` (0.0 for a decoupled decay, or none).

    Raises:
        LandscapeError: a parameter outside the optimiser's param groups.
    """
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    out = {}
    for name, p in params.items():
        group = group_of.get(id(p))
        if group is None:
            raise LandscapeError(f"parameter {name!r} is not in the optimiser's param groups")
        decoupled = isinstance(optimizer, ADAM_OPTIMIZERS) and bool(group.get("decoupled_weight_decay", False))
        out[name] = 0.0 if decoupled else float(_value(group.get("weight_decay", 0.0)) or 0.0)
    return out


# ------------------------------------------------------------------------------------------------ tracker
class SharpnessTracker:
    """Tracks the (preconditioned) sharpness of a training run on a fixed batch, every ``every`` steps.

    Use: build it once before training; after an optimiser step call ``tracker.maybe_track(step)`` (it tracks when
    ``step % every == 0``) or ``tracker.track(step)``; the records accumulate in :attr:`records`.

    Args:
        model: the network being trained (read, never changed).
        optimizer: its optimiser (read, never changed): ``torch.optim.SGD``, ``Adam`` or ``AdamW``; the tracked
            parameters are the model's parameters in its param groups.
        batch: the fixed tracking batch ``(inputs, targets)``.
        every: track every this many steps (>= 1).
        criterion: the loss (as :class:`~landscape.core.objective.Objective` takes it).
        regularizer: a penalty added to the loss (default none), besides the optimiser's coupled weight decay,
            which is always part of the tracked function (module doc).
        dtype: compute the Hessian in this dtype (default the model's).
        device: where (default the model's).
        output: where the logits are in the model's output.
        tol: Lanczos' tolerance: a record is flagged converged when ``||M y - lambda y|| <= tol |lambda|``.
        ncv: Lanczos' basis size.
        maxiter: Lanczos' restarts at most.
        seed: seed of the first (cold) start vector.
        warm_start: start each run from the previous eigenvector.
        mode: how Hessian-vector products are made (see ``HessianOperator``; default ``jvp``: nothing kept).
        bn_mode: ``eval`` (BatchNorm by its running statistics) or ``train`` (by the tracking batch's own, as in
            training; :data:`~landscape.options.train.TRACK_MODES`).

    Attributes:
        records: the :class:`SharpnessRecord` s so far.
        vector: the last top eigenvector (of ``H`` or of ``P^-1/2 H P^-1/2``), flat, or None.
        names: the tracked parameter names, in the model's order.
        objective: the loss on the tracking batch (its own copy of the model).
        preconditioned: whether the sharpness is Adam's preconditioned one.
        bn_mode: the BatchNorm mode of the Hessian.

    Raises:
        LandscapeError: an unsupported optimiser or ``bn_mode``, ``every < 1``, no tracked parameters, or an error
            of the objective's checks.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: Batch,
        *,
        every: int = 1,
        criterion: Criterion = "cross_entropy",
        regularizer: Regularizer | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        output: OutputSelector = None,
        tol: float = 1e-6,
        ncv: int | None = None,
        maxiter: int | None = None,
        seed: int = 0,
        warm_start: bool = True,
        mode: str = "jvp",
        bn_mode: str = "eval",
    ) -> None:
        self.bn_mode = choice(bn_mode, "--track-mode", TRACK_MODES)
        if not isinstance(optimizer, SGD_OPTIMIZERS + ADAM_OPTIMIZERS):
            raise LandscapeError(f"sharpness tracking supports SGD, Adam and AdamW, not {type(optimizer).__name__}")
        self.every = checks.positive_int(every, "every")
        self.model, self.optimizer = model, optimizer
        optimized = {id(p) for g in optimizer.param_groups for p in g["params"]}
        self.names = [n for n, p in model.named_parameters() if id(p) in optimized]
        if not self.names:
            raise LandscapeError("none of the model's parameters is in the optimiser's param groups")
        self.preconditioned = isinstance(optimizer, ADAM_OPTIMIZERS)
        self.objective = Objective(
            model,
            [batch],
            criterion=criterion,
            regularizer=regularizer,
            device=device,
            dtype=dtype,
            param_names=self.names,
            output=output,
            batch_statistics=self.bn_mode == "train",
        )
        self.tol, self.ncv, self.maxiter, self.seed = tol, ncv, maxiter, int(seed)
        self.warm_start, self.mode = bool(warm_start), mode
        self.records: list[SharpnessRecord] = []
        self.vector: Tensor | None = None

    def due(self, step: int) -> bool:
        """Whether ``step`` is a tracking step (``step % every == 0``).

        Args:
            step: the caller's step count.

        Returns:
            True when the tracker should record at this step.
        """
        return int(step) % self.every == 0

    def maybe_track(self, step: int) -> SharpnessRecord | None:
        """:meth:`track` at a tracking step, else nothing.

        Args:
            step: the caller's step count.

        Returns:
            The new record, or None when ``step`` is not a tracking step.
        """
        return self.track(step) if self.due(step) else None

    def _refresh(self) -> ParamDict:
        """Copy the model's current weights and buffers into the objective; return the evaluation point."""
        obj = self.objective
        live = dict(self.model.named_parameters())

        def copy_like(t: Tensor, like: Tensor) -> Tensor:
            return t.detach().to(device=like.device, dtype=like.dtype).clone()

        obj.params = {n: copy_like(live[n], obj.params[n]) for n in self.names}
        obj.fixed = {n: copy_like(live[n], t) for n, t in obj.fixed.items()}
        buffers = dict(self.model.named_buffers())
        obj.buffers = {n: copy_like(buffers[n], t) if n in buffers else t for n, t in obj.buffers.items()}
        return obj.params

    def track(self, step: int) -> SharpnessRecord:
        """Compute the sharpness at the model's current weights and append the record.

        Args:
            step: the caller's step count (recorded as it is).

        Returns:
            The :class:`SharpnessRecord`.

        Raises:
            LandscapeError: groups with different learning rates or momentum parameters, Adam without state yet, or
                a Lanczos error (non-finite products).
        """
        live = dict(self.model.named_parameters())
        tracked = [live[n] for n in self.names]
        threshold = stability_threshold(self.optimizer, tracked)
        lr = float(_value(_groups_of(self.optimizer, {id(p) for p in tracked})[0]["lr"]))
        point = self._refresh()
        hessian = HessianOperator(self.objective, point, mode=self.mode)
        op: HessianOperator | DenseOperator = hessian
        decay = coupled_decay(self.optimizer, {n: live[n] for n in self.names})
        if any(decay.values()):  # H + D: the coupled decay's (lambda / 2) ||w||^2 (module doc)
            d = flatten({n: torch.full_like(point[n], decay[n]) for n in self.names})
            op = DenseOperator(
                fn=lambda u: hessian.matvec(u) + d * u, n=hessian.shape[0], dtype=hessian.dtype, device=hessian.device
            )
        if self.preconditioned:
            P = adam_preconditioner(self.optimizer, {n: live[n] for n in self.names})
            scale = flatten({n: P[n].to(device=hessian.device, dtype=hessian.dtype) for n in self.names}).rsqrt()
            curvature = op
            op = DenseOperator(
                fn=lambda u: scale * curvature.matvec(scale * u),
                n=hessian.shape[0],
                dtype=hessian.dtype,
                device=hessian.device,
            )
        warm = self.warm_start and self.vector is not None
        result = self._solve(op, self.vector if warm else None)
        self.vector = result.eigenvectors[:, -1].clone() if result.eigenvectors is not None else None
        record = SharpnessRecord(
            step=int(step),
            lr=lr,
            sharpness=float(result.eigenvalues[-1]),
            threshold=threshold,
            n_products=hessian.n_matvec,
            residual=float(result.residuals[-1]),
            error=float(result.errors[-1]),
            converged=bool(result.converged[-1]),
            preconditioned=self.preconditioned,
            warm=warm,
        )
        self.records.append(record)
        return record

    def tracked_function(self) -> str:
        """The function whose (preconditioned) Hessian is tracked, in words, with the optimiser's decay as it is now.

        Returns:
            E.g. ``"the tracking batch's loss + sum over param groups of (lambda / 2) ||w||^2 (the optimiser's
            coupled weight decay, lambda 0.05)"`` (module doc).
        """
        live = dict(self.model.named_parameters())
        decay = coupled_decay(self.optimizer, {n: live[n] for n in self.names})
        function = "the tracking batch's loss" + (" + the regulariser" if self.objective.regularizer.active else "")
        coupled = sorted({v for v in decay.values() if v})
        if coupled:
            values = ", ".join(f"{v:g}" for v in coupled)
            return f"{function} + sum over param groups of (lambda / 2) ||w||^2 (coupled weight decay, lambda {values})"
        groups = _groups_of(self.optimizer, {id(live[n]) for n in self.names})
        decoupled = sorted({float(_value(g.get("weight_decay", 0.0)) or 0.0) for g in groups} - {0.0})
        if decoupled:
            values = ", ".join(f"{v:g}" for v in decoupled)
            return f"{function} (the decoupled weight decay, lambda {values}, is no term of it)"
        return function

    def _solve(self, op: HessianOperator | DenseOperator, v0: Tensor | None) -> EigenResult:
        return lanczos(op, k=1, which="LA", ncv=self.ncv, tol=self.tol, maxiter=self.maxiter, v0=v0, seed=self.seed)
