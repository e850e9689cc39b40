"""The data term: criteria (cross-entropy, soft-target cross-entropy, MSE) on a model's logits, and hits."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import grad, jvp

from landscape.errors import LandscapeError, calling
from landscape.options.common import ALL_CRITERIA as CRITERIA

Batch = tuple[Tensor, Tensor]


Criterion = str | Callable[[Tensor, Tensor], Tensor]


OutputSelector = str | int | Callable[[object], Tensor] | None


#: string criteria: ``soft_cross_entropy`` takes soft targets (floating ``(B, C)`` label distributions)


def soft_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """The soft-target cross-entropy ``mean_i sum_c -t_ic log softmax(z_i)_c`` of one batch.

    Computed by ``torch.nn.functional.cross_entropy`` with class-probability targets (a log-softmax through
    logsumexp: finite wherever the logits are). Integer labels are taken as one-hot distributions.

    Args:
        logits: the model's output ``z``, shape ``(B, C)``.
        targets: label distributions ``t``, floating ``(B, C)`` (e.g. Mixup/CutMix with label smoothing), or
            integer labels ``(B,)``.

    Returns:
        The batch's mean loss, a 0-dim tensor.

    Raises:
        LandscapeError: floating targets whose shape is not that of the logits.
    """
    if targets.is_floating_point() and targets.shape != logits.shape:
        raise LandscapeError(
            f"soft targets of shape {tuple(targets.shape)} do not fit logits of shape {tuple(logits.shape)}: "
            "give one label distribution over the model's outputs per sample"
        )
    return F.cross_entropy(logits, targets.to(logits.dtype) if targets.is_floating_point() else targets)


def calling_criterion(criterion: Criterion) -> AbstractContextManager[None]:
    """The context of a loss computed by ``criterion``: what a callable criterion raises is named as the caller's.

    Args:
        criterion: a string criterion (landscape's own: nothing is renamed) or the caller's callable.

    Returns:
        `landscape.errors.calling` naming the callable, or a context that does nothing.
    """
    if not callable(criterion):
        return nullcontext()
    return calling(f"your criterion ({criterion_name(criterion)})", "it must return the batch's mean loss")


def batch_loss(logits: Tensor, targets: Tensor, criterion: Criterion) -> Tensor:
    """Mean-reduced loss of one batch: cross-entropy, MSE between logits and one-hot targets, or a callable.

    A callable ``criterion(logits, targets)`` must return the batch's mean loss as a scalar tensor (e.g. label
    smoothing: ``lambda z, y: F.cross_entropy(z, y, label_smoothing=0.1)``).

    Args:
        logits: the model's output, shape ``(B, C)``.
        targets: class labels, shape ``(B,)`` (integer; ``mse`` compares with their one-hot encoding), or for
            ``soft_cross_entropy`` label distributions, floating ``(B, C)``.
        criterion: ``"cross_entropy"``, ``"mse"``, ``"soft_cross_entropy"`` (:func:`soft_cross_entropy`) or a
            callable ``(logits, targets) -> mean loss``.

    Returns:
        The batch's mean loss L_b, a 0-dim tensor.

    Raises:
        LandscapeError: ``criterion`` is a string other than those of :data:`CRITERIA`, or (a string criterion)
            the logits have another number of rows than the targets.
    """
    if callable(criterion):
        return criterion(logits, targets)
    if logits.shape[0] != targets.shape[0]:
        raise LandscapeError(
            f"the model returned logits of shape {tuple(logits.shape)} for a batch of {targets.shape[0]} samples: "
            "its output must have one row of class scores per input"
        )
    if criterion == "cross_entropy":
        return F.cross_entropy(logits, targets)
    if criterion == "mse":
        onehot = F.one_hot(targets, logits.shape[-1]).to(logits.dtype)
        return F.mse_loss(logits, onehot)
    if criterion == "soft_cross_entropy":
        return soft_cross_entropy(logits, targets)
    raise LandscapeError(f"unknown criterion {criterion!r}; choose one of {', '.join(CRITERIA)}")


def _target_mass(logits: Tensor, targets: Tensor) -> Tensor:
    """``s_n = sum_c t_nc`` of soft targets, shape ``(B, 1)`` (1 for integer labels)."""
    if targets.is_floating_point() and targets.shape == logits.shape:
        return targets.to(logits.dtype).sum(-1, keepdim=True)
    return logits.new_ones(logits.shape[0], 1)


def _named(criterion: Criterion, what: str) -> str:
    """``criterion`` if it is one of the named criteria; a one-line refusal of a callable for ``what``."""
    if callable(criterion) or criterion not in CRITERIA:
        raise LandscapeError(
            f"{what} needs the Hessian of the loss in the logits per sample, known for the criteria "
            f"{', '.join(CRITERIA)}; a callable criterion has none: use one of them"
        )
    return str(criterion)


def logit_hessian_product(logits: Tensor, targets: Tensor, criterion: Criterion, u: Tensor) -> Tensor:
    """``H_z u``: the Hessian of the batch's mean loss ``L_b`` in the logits times ``u`` (``(B, C)`` each).

    With ``L_b = (1/B) sum_n l(z_n, y_n)`` the Hessian is block-diagonal over the samples, ``(1/B) d^2 l / dz_n^2``:

    - ``cross_entropy``: ``d^2 l / dz^2 = diag(p) - p p^T``, ``p = softmax(z)``;
    - ``soft_cross_entropy``: ``s (diag(p) - p p^T)`` with ``s = sum_c t_c`` (1 for label distributions);
    - ``mse`` (``F.mse_loss`` against one-hot targets, the mean over ``B C`` entries): ``(2 / C) I``;
    - a callable: the second derivative of ``criterion(z, targets)`` in ``z`` by ``jvp(grad)``.

    None depends on the network: this is the middle factor of the generalised Gauss-Newton ``J^T H_z J``.

    Args:
        logits: ``z``, shape ``(B, C)``.
        targets: the batch's targets (integer labels or label distributions).
        criterion: as :func:`batch_loss`.
        u: the vector, shape ``(B, C)``.

    Returns:
        ``H_z u``, shape ``(B, C)``.
    """
    batch, classes = logits.shape[0], logits.shape[-1]
    if callable(criterion):
        return jvp(grad(lambda z: criterion(z, targets)), (logits.detach(),), (u,))[1]
    if criterion == "mse":
        return u * (2.0 / (batch * classes))
    _named(criterion, "the Gauss-Newton product")
    p = torch.softmax(logits.detach(), dim=-1)
    mass = _target_mass(logits, targets) if criterion == "soft_cross_entropy" else 1.0
    return mass * (p * u - p * (p * u).sum(-1, keepdim=True)) / batch


def logit_hessian_sqrt(logits: Tensor, targets: Tensor, criterion: Criterion) -> Tensor:
    """Per-sample square roots ``Q_n`` of the loss's Hessian in the logits: ``Q_n Q_n^T = d^2 l(z_n) / dz_n^2``.

    ``l`` is the per-sample loss whose mean over the batch is :func:`batch_loss` (so ``H_z = (1/B) diag_n(Q_n
    Q_n^T)``, :func:`logit_hessian_product`):

    - ``cross_entropy``: ``Q = diag(sqrt(p)) - p sqrt(p)^T`` (``Q Q^T = diag(p) - p p^T`` since ``sum p = 1``);
    - ``soft_cross_entropy``: ``sqrt(s)`` times that, ``s = sum_c t_c``;
    - ``mse``: ``sqrt(2 / C) I``.

    Args:
        logits: ``z``, shape ``(B, C)``.
        targets: the batch's targets.
        criterion: ``cross_entropy``, ``soft_cross_entropy`` or ``mse``.

    Returns:
        ``Q``, shape ``(B, C, C)`` (detached).

    Raises:
        LandscapeError: a callable criterion (its per-sample Hessian is not known).
    """
    name = _named(criterion, "K-FAC")
    z = logits.detach()
    classes = z.shape[-1]
    if name == "mse":
        eye = torch.eye(classes, dtype=z.dtype, device=z.device)
        return (2.0 / classes) ** 0.5 * eye.expand(z.shape[0], classes, classes)
    p = torch.softmax(z, dim=-1)
    root = p.sqrt()
    q = torch.diag_embed(root) - p.unsqueeze(-1) * root.unsqueeze(-2)
    if name == "soft_cross_entropy":
        q = q * _target_mass(z, targets).sqrt().unsqueeze(-1)
    return q


def sample_logit_gradients(logits: Tensor, targets: Tensor, criterion: Criterion) -> Tensor:
    """``e_n = dl(z_n, y_n) / dz_n``, the gradient of each sample's loss in its logits, shape ``(B, C)``.

    Computed as ``B`` times the gradient of the batch's mean loss: for a loss that is a mean over samples, each
    ``z_n`` enters only its own term. The per-sample parameter gradient is then ``g_n = J_n^T e_n``.

    Args:
        logits: ``z``, shape ``(B, C)``.
        targets: the batch's targets.
        criterion: as :func:`batch_loss`.

    Returns:
        ``e``, shape ``(B, C)`` (detached).
    """
    z = logits.detach()
    return grad(lambda w: batch_loss(w, targets, criterion))(z) * z.shape[0]


def criterion_name(criterion: Criterion) -> str:
    """The name recorded for a criterion: the string itself, or a callable's qualified name.

    Args:
        criterion: ``"cross_entropy"``, ``"mse"`` or a callable.

    Returns:
        The string, or ``"callable:QUALNAME"`` for a callable.
    """
    if callable(criterion):
        return f"callable:{getattr(criterion, '__qualname__', type(criterion).__name__)}"
    return str(criterion)


def select_logits(output: object, selector: OutputSelector = None) -> Tensor:
    """The logits in a model's output.

    ``selector`` None: a tensor is the logits; a mapping's ``"logits"`` entry, an object's ``.logits`` attribute
    or a tuple's first element otherwise. A str or int indexes the output (``output[selector]``); a callable is
    applied to it.

    Args:
        output: what the model's forward returned.
        selector: ``None``, a key or index into ``output``, or a callable ``output -> logits``.

    Returns:
        The logits tensor.

    Raises:
        LandscapeError: no logits tensor is found in ``output``, ``selector`` cannot be applied to it, what it
            selects is not a tensor, or the logits are not 2-D ``(batch, classes)`` (a 0-d loss, a feature map).
    """
    if selector is None:
        if isinstance(output, Tensor):
            return _as_logits(output)
        if isinstance(output, Mapping) and isinstance(output.get("logits"), Tensor):
            return _as_logits(output["logits"])
        if isinstance(getattr(output, "logits", None), Tensor):
            return _as_logits(output.logits)  # type: ignore[attr-defined]
        if isinstance(output, (tuple, list)) and output and isinstance(output[0], Tensor):
            return _as_logits(output[0])
        raise LandscapeError(
            f"the model returned {type(output).__name__}, not logits: name them with --model-output (a key, an "
            "index or an attribute of the output)"
        )
    try:
        chosen = selector(output) if callable(selector) else output[selector]  # type: ignore[index]
    except (KeyError, IndexError, TypeError) as exc:
        raise LandscapeError(
            f"cannot take {selector!r} from the model's {type(output).__name__} output "
            f"({type(exc).__name__}); check --model-output"
        ) from None
    if not isinstance(chosen, Tensor):
        raise LandscapeError(f"output {selector!r} of the model is {type(chosen).__name__}, not a logits tensor")
    return _as_logits(chosen)


def _as_logits(logits: Tensor) -> Tensor:
    """``logits``, when it has the shape of logits: ``(batch, classes)``."""
    if logits.ndim != 2:
        raise LandscapeError(
            f"the model's logits have shape {tuple(logits.shape)}, not (batch, classes): give a classifier whose "
            "output holds one row of class scores per input (or pick them with --model-output)"
        )
    return logits


def hit_count(logits: Tensor, targets: Tensor) -> Tensor:
    """Number of rows whose arg-max logit is the target class, as a 0-dim tensor (vmap- and compile-friendly).

    With soft targets (floating ``(B, C)`` label distributions) the target class is the arg-max of the
    distribution: a prediction is right when ``argmax z_i == argmax t_i``.

    Args:
        logits: shape ``(B, C)``.
        targets: class labels ``(B,)``, or label distributions ``(B, C)``.

    Returns:
        The count (an integer tensor).
    """
    if targets.is_floating_point() and targets.ndim == logits.ndim:
        targets = targets.argmax(-1)
    return (logits.argmax(-1) == targets).sum()


def prediction_hits(logits: Tensor, targets: Tensor) -> int | float:
    """Number of rows whose arg-max equals the target; NaN when any logit is not finite (no prediction).

    Args:
        logits: shape ``(B, C)``.
        targets: class labels, shape ``(B,)``, or label distributions ``(B, C)`` (see :func:`hit_count`).

    Returns:
        ``sum_i [argmax_c logits[i, c] == targets[i]]`` as an int, or ``math.nan``.
    """
    if not bool(torch.isfinite(logits).all()):
        return math.nan
    return int(hit_count(logits, targets))
