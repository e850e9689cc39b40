"""The functional core: loss, accuracy, gradient and Hessian-vector products of a model over fixed batches.

The batches stream (:class:`~landscape.data.stream.BatchSource`): each is moved to the device when it is read,
so the device holds one batch at a time whatever the number of samples.

An :class:`Objective` never mutates the module it was given. It holds its own copy of the module on the
target device in eval mode, a params dict and a buffers dict, and evaluates the model through
``torch.func.functional_call``. For mean-reduced batch losses ``L_b`` over batches of sizes ``N_b``
(``N = sum_b N_b``) the full-data objective is

    L(theta) = sum_b (N_b / N) * L_b(theta) + R(theta)

and its gradient and Hessian-vector product are weighted the same way (never equally, never summed).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, grad_and_value, jvp
from torch.nn.attention import SDPBackend, sdpa_kernel

from landscape.core.criteria import (
    CRITERIA,
    Batch,
    Criterion,
    OutputSelector,
    batch_loss,
    calling_criterion,
    prediction_hits,
    select_logits,
)
from landscape.core.gradients import gradient_of
from landscape.core.params import ParamDict, weighted_sum
from landscape.core.regularizer import Regularizer
from landscape.core.second_order import AffineBatchNorm, SecondOrderFold, folded_loss_agrees
from landscape.data.labels import check_label_range, label_range
from landscape.data.stream import BatchSource, as_source
from landscape.errors import LandscapeError
from landscape.models.bn_fold import FoldedModel
from landscape.models.checkpoint import floating_dtype, require_finite
from landscape.models.external import calling_forward, unfuse_attention
from landscape.options.common import DETERMINISM_CHECKS


class _PointPart:
    """An attribute of an :class:`Objective` that is part of its point (``params``, ``fixed``, ``buffers``).

    Setting it moves the objective to another point (connect's points, tracking's refreshes): the first batch's loss
    measured at the old one (``first_batch_loss``) is forgotten.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: object, owner: type | None = None) -> ParamDict:
        return self if obj is None else obj.__dict__[self.slot]  # type: ignore[return-value]

    def __set__(self, obj: object, value: ParamDict) -> None:
        obj.__dict__[self.slot] = value
        obj.__dict__["first_batch_loss"] = None


@dataclass(frozen=True)
class Evaluation:
    """Loss (data loss + regulariser), data loss alone and accuracy at one point, each a float.

    Attributes:
        loss: L(theta) = sum_b (N_b/N) L_b(theta) + R(theta).
        data_loss: sum_b (N_b/N) L_b(theta).
        accuracy: the fraction of samples whose arg-max logit is the label; NaN when a logit is not finite.
        batch_losses: ``L_b(theta)`` of each batch, in order.
    """

    loss: float
    data_loss: float
    accuracy: float
    batch_losses: tuple[float, ...] = ()


class Objective:
    """The full-data objective of a model over a fixed list of batches.

    Args:
        model: the module; it is copied, never modified.
        batches: a :class:`~landscape.data.stream.BatchSource` or a list of ``(inputs, targets)``; kept where
            they are held (on the host) in order, never augmented, each batch moved to ``device`` (and cast to
            ``dtype``) when it is read.
        criterion: ``"cross_entropy"``, ``"mse"`` or a callable ``(logits, targets) -> mean loss``.
        regularizer: penalty added to the data loss (default none).
        device: where the copy of the model, the params and the batches live (default: the params' device).
        dtype: cast floating params, buffers and inputs (``torch.float64`` for exact references); None keeps the
            model's own type, to which floating inputs are cast (a float64 model gets float64 inputs).
        param_names: names (of ``model.named_parameters()``) that form the variable params dict, in order;
            the remaining parameters are held fixed. Default: all parameters.
        allow_stochastic: skip the refusal of a model whose two evaluations differ.
        check: run the determinism check now (two passes must give the same loss, and gradient: ``determinism``)
            and check that every label is an output of the model.
        output: where the logits are in the model's output (see :func:`select_logits`).
        batch_statistics: BatchNorm layers normalise every batch by its own statistics, as in training, and
            neither use nor update running statistics (:func:`use_batch_statistics`); default: eval mode, the
            running statistics.
        determinism: what the check compares (:data:`~landscape.options.common.DETERMINISM_CHECKS`):
            ``gradient`` (default) the loss and its gradient, for every analysis that differentiates; ``loss`` the
            loss alone, two forward passes, for an analysis that only evaluates losses (a stochastic layer changes
            the loss as it changes the gradient).

    The copy of the model has fused attention switched off (:func:`~landscape.models.external.unfuse_attention`,
    counted in ``fused_attention_off``) and every forward pass runs with PyTorch's math attention backend, so that
    ``torch.func`` can differentiate any attention layer twice.

    Attributes:
        module: the model's copy on ``device``, in eval mode (its BatchNorm layers in batch-statistics mode with
            ``batch_statistics``).
        params: the variable parameters theta by name: detached views of :attr:`module`'s parameters (the copy's,
            never the caller's model); nothing changes them in place.
        fixed: the parameters held fixed, by name (detached views likewise).
        buffers: the module's buffers (e.g. BatchNorm statistics), by name.
        batches: the batches (a :class:`~landscape.data.stream.BatchSource` placed on ``device``: indexing or
            iterating it reads one batch at a time onto the device).
        n_samples: N = sum_b N_b.
        weights: N_b / N for each batch.
        first_batch_loss: ``L_0`` at the objective's point as its determinism check measured it, what a tuned
            forward is checked against without another pass; None when unchecked, and once ``params``, ``fixed`` or
            ``buffers`` are set to another point.

    Raises:
        LandscapeError: no batches, a model without parameters, an unknown criterion or parameter name, or (with
            ``check``) non-finite weights, labels the model cannot output, a non-finite loss or a stochastic model.
        ForeignError: (with ``check``) the model's forward raised on the first batch (:meth:`check_forward`).
    """

    def __init__(
        self,
        model: nn.Module,
        batches: Sequence[Batch] | BatchSource,
        *,
        criterion: Criterion = "cross_entropy",
        regularizer: Regularizer | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        param_names: Sequence[str] | None = None,
        allow_stochastic: bool = False,
        check: bool = True,
        output: OutputSelector = None,
        batch_statistics: bool = False,
        determinism: str = "gradient",
    ) -> None:
        if determinism not in DETERMINISM_CHECKS:
            raise LandscapeError(
                f"unknown determinism check {determinism!r}; choose one of {', '.join(DETERMINISM_CHECKS)}"
            )
        if not batches:
            raise LandscapeError("no data: the objective needs at least one batch (check --samples)")
        if not callable(criterion) and criterion not in CRITERIA:
            raise LandscapeError(f"unknown criterion {criterion!r}; choose one of {', '.join(CRITERIA)}")
        first = next(model.parameters(), None)
        self.device = (
            torch.device(device) if device is not None else (first.device if first is not None else torch.device("cpu"))
        )
        self.module = copy.deepcopy(model).to(self.device).eval()
        if batch_statistics:
            use_batch_statistics(self.module)
        self.fused_attention_off = unfuse_attention(self.module)
        self.output = output
        if dtype is not None:
            self.module = self.module.to(dtype)
        #: the computation's floating-point type: ``dtype``, else the model's own (its inputs are cast to it)
        self.dtype = dtype if dtype is not None else floating_dtype(self.module)
        self.dtype_chosen = dtype is not None  # by the caller's --dtype (advice may then name another)
        self.criterion = criterion
        self.regularizer = regularizer or Regularizer()
        named = dict(self.module.named_parameters())
        names = list(named) if param_names is None else list(param_names)
        unknown = [n for n in names if n not in named]
        if unknown:
            raise LandscapeError(f"unknown parameter names {unknown[:3]}; see model.named_parameters()")
        if not named:
            raise LandscapeError(
                f"the model ({type(model).__name__}) has no parameters (nothing to analyse); give a model with weights"
            )
        # views of the copy's own parameters, not clones: functional_call is always given them in full, so the
        # module never reads its parameters, and nothing writes into either (one copy of the weights, not two)
        self.params = {n: named[n].detach() for n in names}
        self.fixed = {n: p.detach() for n, p in named.items() if n not in self.params}
        self.buffers = {n: b.detach().clone() for n, b in self.module.named_buffers()}
        self.batches: BatchSource = as_source(batches).placed(self.device, self.dtype)
        sizes = self.batches.sizes
        self.n_samples = sum(sizes)
        self.weights = [s / self.n_samples for s in sizes]
        self.allow_stochastic = allow_stochastic
        #: the model's BatchNorms folded for Hessian products (built at the first; shared by shallow copies)
        self.second_order_fold = SecondOrderFold()
        if check:
            self.check_finite()
            output = self.check_forward()
            self.check_labels(output)
            self.check_determinism(gradients=determinism == "gradient", output=output)

    # setting one of these moves the objective to another point: the loss measured at the old one is forgotten
    params = _PointPart()
    fixed = _PointPart()
    buffers = _PointPart()

    # -- evaluation -------------------------------------------------------------------------------
    def logits(
        self,
        params: Mapping[str, Tensor],
        x: Tensor,
        buffers: Mapping[str, Tensor] | None = None,
        *,
        second_order: bool = False,
    ) -> Tensor:
        """Model output for inputs ``x`` at ``params`` (fixed parameters and buffers filled in).

        Args:
            params: the variable parameters by name (a subset of names overrides only those).
            x: a batch of inputs on :attr:`device`.
            buffers: buffers to use instead of the objective's own (e.g. from :meth:`recompute_bn_buffers`).
            second_order: evaluate eval-mode BatchNorm as its per-channel affine map, whose second derivatives
                are cheap (:mod:`landscape.core.second_order`; equal values to rounding); for Hessian products.

        Returns:
            The logits, shape ``(B, C)`` (see :func:`select_logits`).

        Raises:
            LandscapeError: the model's output holds no logits tensor.
        """
        state = {**self.fixed, **params, **(self.buffers if buffers is None else buffers)}
        return select_logits(self._output(state, x, second_order=second_order), self.output)

    def _output(self, state: Mapping[str, Tensor], x: Tensor, *, second_order: bool = False) -> object:
        """The model's own output for ``x`` with the parameters and buffers ``state`` (math attention kernels).

        With ``second_order`` the model's conv -> BatchNorm pairs are folded (:class:`SecondOrderFold`) and other
        eval-mode BatchNorms are affine maps (:class:`AffineBatchNorm`): the same values to rounding.
        """
        module = self.module
        if second_order and (folded := self.second_order_fold.get(self.module, self._fold_agrees)) is not None:
            module, state = folded.module, folded.state(state)
        with sdpa_kernel(SDPBackend.MATH), AffineBatchNorm() if second_order else nullcontext():
            return functional_call(module, dict(state), (x,))

    def prepare_second_order(self) -> None:
        """Fold the model's BatchNorms for second derivatives now, in this thread (:class:`SecondOrderFold`).

        Otherwise the first Hessian product folds them. Folding traces the model with ``torch.fx``, which patches
        torch's module calls process-wide while it runs: call this before threads evaluate models.
        """
        self.second_order_fold.get(self.module, self._fold_agrees)

    def _fold_agrees(self, folded: FoldedModel) -> bool:
        """Whether ``folded``'s loss on the first batch at this objective's point is the unfolded loss (FOLD_RTOL)."""
        x, y = self.batches[0]
        state = {**self.fixed, **self.params, **self.buffers}
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), AffineBatchNorm():
            want = batch_loss(select_logits(functional_call(self.module, state, (x,)), self.output), y, self.criterion)
            out = select_logits(functional_call(folded.module, folded.state(state), (x,)), self.output)
            got = batch_loss(out, y, self.criterion)
        return folded_loss_agrees(got, want)

    def batch_loss_fn(self, batch: Batch, *, second_order: bool = False) -> Callable[[ParamDict], Tensor]:
        """The function ``params -> L_b(params)`` (data loss of one batch, no regulariser).

        Args:
            batch: one ``(inputs, targets)`` pair on :attr:`device`.
            second_order: the function's second derivatives will be taken (Hessian products): eval-mode
                BatchNorm is evaluated as its affine map (:meth:`logits`); same values to rounding.

        Returns:
            A function of a params dict returning the batch's mean loss as a 0-dim tensor (for ``torch.func``).
        """
        x, y = batch

        def loss_fn(params: ParamDict) -> Tensor:
            return batch_loss(self.logits(params, x, second_order=second_order), y, self.criterion)

        return loss_fn

    def batch_loss_at(self, index: int, *, second_order: bool = False) -> Callable[[ParamDict], Tensor]:
        """The function ``params -> L_b(params)`` of batch ``index``, the batch read onto the device at each call.

        Unlike :meth:`batch_loss_fn` of a batch read once, nothing stays on the device between calls: a solver
        may hold one such function per batch.

        Args:
            index: the position of the batch in :attr:`batches`.
            second_order: the function's second derivatives will be taken (:meth:`batch_loss_fn`).

        Returns:
            A function of a params dict returning the batch's mean loss as a 0-dim tensor (for ``torch.func``).
        """

        def loss_fn(params: ParamDict) -> Tensor:
            return self.batch_loss_fn(self.batches[index], second_order=second_order)(params)

        return loss_fn

    def loss(self, params: Mapping[str, Tensor] | None = None) -> Tensor:
        """L(theta) = sum_b (N_b/N) L_b(theta) + R(theta), differentiable in ``params``.

        Args:
            params: the variable parameters theta; default :attr:`params`.

        Returns:
            The full-data loss, a 0-dim tensor.
        """
        params = self.params if params is None else params
        total = weighted_sum(self.weights, lambda b: self.batch_loss_at(b)(dict(params)))
        return total + self.regularizer(params)

    @torch.no_grad()
    def evaluate(
        self, params: Mapping[str, Tensor] | None = None, buffers: Mapping[str, Tensor] | None = None
    ) -> Evaluation:
        """Loss, data loss and accuracy at ``params`` (optionally with other BatchNorm buffers).

        Args:
            params: the variable parameters theta; default :attr:`params`.
            buffers: buffers to use instead of the objective's own (e.g. from :meth:`recompute_bn_buffers`).

        Returns:
            The :class:`Evaluation` (floats; accuracy NaN when any logit is not finite).

        Raises:
            ForeignError: the model's forward raised on a batch (named with its index and shape), or a callable
                criterion raised.
        """
        params = self.params if params is None else params
        correct = 0
        losses: list[float] = []

        def batch_term(b: int) -> float:
            nonlocal correct
            x, y = self.batches[b]
            with calling_forward(self.module, x, b):  # what the forward raises is the model's, on this batch
                out = self.logits(params, x, buffers)
            correct += prediction_hits(out, y)
            with calling_criterion(self.criterion):
                losses.append(float(batch_loss(out, y, self.criterion)))
            return losses[-1]

        data_loss = weighted_sum(self.weights, batch_term, start=0.0)
        reg = float(self.regularizer(params))
        return Evaluation(data_loss + reg, data_loss, correct / self.n_samples, tuple(losses))

    def gradient(self, params: Mapping[str, Tensor] | None = None) -> ParamDict:
        """Gradient of the full objective: sum_b (N_b/N) grad L_b + grad R.

        Args:
            params: the variable parameters theta; default :attr:`params`.

        Returns:
            The gradient by parameter name, each tensor of its parameter's shape.
        """
        params = dict(self.params if params is None else params)
        start = gradient_of(self.regularizer)(params) if self.regularizer.active else None
        return weighted_sum(self.weights, lambda b: gradient_of(self.batch_loss_at(b))(params), start=start)

    def hvp(self, vector: Mapping[str, Tensor], params: Mapping[str, Tensor] | None = None) -> ParamDict:
        """Hessian-vector product sum_b (N_b/N) H_b v + H_R v, forward-over-reverse (jvp of grad).

        Args:
            vector: v by parameter name, each tensor of its parameter's shape (the same names as ``params``).
            params: the point theta; default :attr:`params`.

        Returns:
            H v by parameter name, each tensor of its parameter's shape.
        """
        params = dict(self.params if params is None else params)
        vector = dict(vector)
        start = jvp(grad(self.regularizer), (params,), (vector,))[1] if self.regularizer.active else None

        def batch_hvp(b: int) -> ParamDict:
            return jvp(grad(self.batch_loss_at(b, second_order=True)), (params,), (vector,))[1]

        return weighted_sum(self.weights, batch_hvp, start=start)

    # -- BatchNorm ---------------------------------------------------------------------------------
    def has_batchnorm(self) -> bool:
        """Whether the model has BatchNorm layers that track running statistics.

        Returns:
            ``True`` when some ``_BatchNorm`` submodule has ``track_running_stats``.
        """
        return any(
            isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats for m in self.module.modules()
        )

    @torch.no_grad()
    def recompute_bn_buffers(
        self, params: Mapping[str, Tensor], buffers: Mapping[str, Tensor] | None = None
    ) -> ParamDict:
        """Re-estimate BatchNorm running statistics at ``params`` from this objective's batches.

        Every BatchNorm layer gets the cumulative average of its batch means and (unbiased) batch variances
        over all batches, each batch counting once, as with ``momentum=None``; the module is left untouched.

        Args:
            params: the variable parameters theta at which to estimate the statistics.
            buffers: the buffers to start from (default: the objective's own); their BatchNorm statistics are
                replaced, every other buffer is kept as it is (e.g. the buffers of an interpolated network).

        Returns:
            A new buffers dict (neither the objective's own buffers nor ``buffers`` are changed), for
            :meth:`evaluate`.
        """
        buffers = {n: b.clone() for n, b in (self.buffers if buffers is None else buffers).items()}
        for name, b in buffers.items():
            if name.endswith("running_mean"):
                b.zero_()
            elif name.endswith("running_var"):
                b.fill_(1.0)
            elif name.endswith("num_batches_tracked"):
                b.zero_()
        with bn_train_mode(self.module, cumulative=True):
            for x, _ in self.batches:
                functional_call(self.module, {**self.fixed, **params, **buffers}, (x,))
        return buffers

    # -- checks ------------------------------------------------------------------------------------
    @torch.no_grad()
    def check_finite(self) -> None:
        """Refuse parameters or buffers holding NaN or Inf: name the first such tensor and how many entries.

        Raises:
            LandscapeError: a floating or complex parameter or buffer holds a non-finite value.
        """
        require_finite({**self.params, **self.fixed}, "parameter")
        require_finite(self.buffers, "buffer")

    @torch.no_grad()
    def check_forward(self) -> object:
        """Run the model once on the first batch: an exception its forward raises is named as the model's.

        This first plain pass (no transform around it) is where a model that cannot run on the data is told
        apart from a fault of landscape: what it raises is quoted with the model's origin
        (`landscape.models.external.forward_origin`) and the shape of the inputs.

        Returns:
            The model's output (for :meth:`check_labels`).

        Raises:
            ForeignError: the model's forward raised.
        """
        x = self.batches[0][0]
        with calling_forward(self.module, x):
            return self._output({**self.fixed, **self.params, **self.buffers}, x)

    @torch.no_grad()
    def check_labels(self, output: object = None) -> None:
        """Refuse class labels the model cannot output: every integer target must lie in ``0..n_outputs-1``.

        Soft (floating) targets are not checked.

        Args:
            output: the model's output on the first batch when at hand (:meth:`check_forward`'s); None: computed.

        Raises:
            LandscapeError: an integer label is negative or ``>=`` the number of model outputs.
        """

        def labels() -> Iterator[Tensor]:  # the targets one batch at a time; no image is read
            return (self.batches.labels(i) for i in range(len(self.batches)))

        if label_range(labels()) is None:  # soft targets: nothing to check
            return
        if output is None:  # computed here only when not handed in
            output = self._output({**self.fixed, **self.params, **self.buffers}, self.batches[0][0])
        check_label_range(labels(), int(select_logits(output, self.output).shape[-1]))

    def check_determinism(self, gradients: bool = True, output: object = None) -> None:
        """Refuse a stochastic objective: two passes must give the same loss (and gradient, with ``gradients``).

        Both passes use the first batch; on CPU they must agree exactly, elsewhere to ``rtol=1e-5``. Nothing is
        checked with ``allow_stochastic``. Without ``gradients`` the passes are forward passes only: what an
        analysis that never differentiates needs to know (dropout and random layers change the loss itself).

        Args:
            gradients: compare the gradients too (each pass a forward and a backward pass).
            output: without ``gradients``, the model's output on the first batch when at hand (:meth:`check_forward`'s):
                the first pass.

        Raises:
            LandscapeError: the first batch's loss is not finite, or the two passes differ.
        """
        if self.allow_stochastic:
            return
        params = dict(self.params)
        batch = self.batches[0]
        fn = self.batch_loss_fn(batch)

        def one_pass() -> tuple[dict[str, Tensor], Tensor]:  # (the gradient, or none), the loss
            if gradients:
                return grad_and_value(fn)(params)  # the loss of the gradient's own forward: one pass, not two
            with torch.no_grad():
                return {}, fn(params)

        given = not gradients and output is not None
        g1, l1 = ({}, batch_loss(select_logits(output, self.output), batch[1], self.criterion)) if given else one_pass()
        if not math.isfinite(float(l1)):
            dtype = self.dtype
            wider = ", or --dtype float64" if self.dtype_chosen and dtype != torch.float64 else ""
            raise LandscapeError(
                f"the loss of the first batch is {float(l1)} although every weight is finite: the model overflows "
                f"on this data in {str(dtype).replace('torch.', '')} (check --data, --mean/--std{wider})"
            )
        self.first_batch_loss = float(l1)
        g2, l2 = one_pass()
        l1, l2 = float(l1), float(l2)
        exact = self.device.type == "cpu"
        same_grad = all(
            torch.equal(g1[n], g2[n]) if exact else torch.allclose(g1[n], g2[n], rtol=1e-5, atol=1e-7) for n in g1
        )
        if (l1 != l2 if exact else abs(l1 - l2) > 1e-5 * max(1.0, abs(l1))) or not same_grad:
            compared = "losses or gradients" if gradients else "losses"
            raise LandscapeError(
                f"the model is stochastic (two passes gave different {compared}: dropout, "
                "train-mode BatchNorm or random layers?); fix the model or pass --allow-stochastic"
            )


def use_batch_statistics(module: nn.Module) -> int:
    """Put the BatchNorm layers of ``module`` in train mode without running statistics, for good.

    Each layer then normalises a batch by that batch's mean and biased variance, the function the optimiser
    follows in training, and its running statistics are neither read nor updated (a functional call through it
    changes no buffer). Only for a private copy of a model.

    Args:
        module: the copy to change.

    Returns:
        The number of BatchNorm layers changed.
    """
    layers = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in layers:
        m.train()
        m.track_running_stats = False
    return len(layers)


@contextmanager
def bn_train_mode(module: nn.Module, *, cumulative: bool = False) -> Iterator[None]:
    """Temporarily put the BatchNorm layers of ``module`` (and only those) in train mode.

    In train mode a BatchNorm layer normalises by the statistics of the batch it sees and updates the running
    statistics it is given. With ``cumulative`` the update is the cumulative average (``momentum=None``), the
    mechanism of :meth:`Objective.recompute_bn_buffers`. Every layer's mode and momentum are restored on exit.

    Args:
        module: the model (the caller's own copy: it is modified while the context is open).
        cumulative: also set ``momentum=None`` (each batch counts once in the running statistics).

    Yields:
        Nothing; the layers are in train mode inside the ``with`` block.
    """
    saved = []
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            saved.append((m, m.training, m.momentum))
            m.train()
            if cumulative:
                m.momentum = None
    try:
        yield
    finally:
        for m, training, momentum in saved:
            m.train(training)
            m.momentum = momentum
