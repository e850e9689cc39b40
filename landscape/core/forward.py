"""An objective's eval-mode forward made fast once for many points: BatchNorm folded, inputs' layout chosen.

Analyses that evaluate the loss at many parameter points without differentiating it (a surface's grid points,
average-case sharpness' noise draws) run each forward through an :class:`EvalForward`. Two choices are made
once, at the objective's own point, and kept for every later point:

- :meth:`EvalForward.enable_fold`: eval-mode BatchNorms folded into the convolutions before them
  (:mod:`landscape.models.bn_fold`), computed from each point's own parameters and buffers; kept only when the
  folded loss equals the unfolded one at the objective's point (relative 1e-10 in float64, 1e-4 otherwise);
- :meth:`EvalForward.choose_memory_format`: channels-last inputs when a forward is faster so (and agrees),
  timed once per process for a model architecture and input.

Both give the unfolded, NCHW loss to rounding. Neither applies when BatchNorm statistics are re-estimated at
every point (``bn="recompute"``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping

import torch
from torch import Tensor
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

from landscape.core.criteria import batch_loss, hit_count, select_logits
from landscape.core.objective import Objective
from landscape.core.params import ParamDict
from landscape.core.second_order import folded_loss_agrees
from landscape.models.bn_fold import FoldedModel, fold_batchnorm
from landscape.options.common import LAYOUT_MIN_CONV_SHARE
from landscape.runtime import distributed as D
from landscape.runtime.devices import close, fastest

#: the layout measured faster per model architecture, input, device and threads, once per process
#: (:meth:`EvalForward.choose_memory_format`): two runs of one process evaluate alike, bit for bit
_LAYOUTS: dict[tuple, bool] = {}


class EvalForward:
    """The loss and hits of one batch at any full parameter point, by the objective's model in eval mode.

    Args:
        objective: the loss; its params are the point the choices are checked at.
        bn: ``eval`` (the objective's running statistics, or those given per call) or ``recompute`` (statistics
            re-estimated per point elsewhere: nothing is folded, the layout stays).

    Attributes:
        obj: the objective.
        bn: the BatchNorm mode.
        fold: the folded model after a successful :meth:`enable_fold`, else None.
        fold_notes: why BatchNorm layers were left unfolded (after :meth:`enable_fold`).
        fold_tried: whether :meth:`enable_fold` ran.
        batches: the objective's batches as evaluated, read onto the device one at a time (placed channels-last
            after :meth:`use_channels_last`).
        channels_last: whether the inputs are channels-last.
    """

    def __init__(self, objective: Objective, bn: str = "eval") -> None:
        self.obj, self.bn = objective, bn
        self.fold: FoldedModel | None = None
        self.fold_notes: list[str] = []
        self.fold_tried = False
        self.batches = objective.batches
        self.channels_last = False

    @property
    def n_folded(self) -> int:
        """The number of BatchNorm layers folded (0 when unfolded)."""
        return 0 if self.fold is None else self.fold.n_folded

    def attrs(self) -> dict[str, object]:
        """What was chosen, as result files record it (docs/schema.md).

        Returns:
            ``bn_folded``, ``bn_fold_notes`` (``off`` when folding was not tried) and ``channels_last``.
        """
        notes = "; ".join(self.fold_notes)[:2000] if self.fold_tried else "off"
        return {"bn_folded": self.n_folded, "bn_fold_notes": notes, "channels_last": self.channels_last}

    def at(self, objective: Objective) -> EvalForward:
        """This forward, its choices kept, for another objective of the same model and batches (another point).

        Args:
            objective: an objective sharing this one's model, batches and criterion (e.g. a shallow copy holding
                another point's params and BatchNorm buffers).

        Returns:
            A shallow copy reading ``objective``'s fixed params and buffers.
        """
        other = copy.copy(self)
        other.obj = objective
        return other

    def unfolded(self) -> EvalForward:
        """This forward without its fold (its layout kept): for a model that hooks are added to after the fold.

        The folded model is a copy made when :meth:`enable_fold` ran: hooks registered on the model's layers later
        (REPAIR's corrections) are not on it.

        Returns:
            A shallow copy whose :attr:`fold` is None.
        """
        other = copy.copy(self)
        other.fold = None
        return other

    def _point_state(self, params: Mapping[str, Tensor]) -> ParamDict:
        """The full state of the forward at ``params`` (fixed params and buffers added; folded when enabled)."""
        state = {**self.obj.fixed, **params, **self.obj.buffers}
        return state if self.fold is None else self.fold.state(state)

    def _batch_eval_state(self, state: ParamDict, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Mean loss and number of correct predictions of one batch for a full state (the function compiled)."""
        module = self.obj.module if self.fold is None else self.fold.module
        with sdpa_kernel(SDPBackend.MATH):
            out = select_logits(functional_call(module, state, (x,)), self.obj.output)
        hits = hit_count(out, y).to(out.dtype)
        return batch_loss(out, y, self.obj.criterion), torch.where(torch.isfinite(out).all(), hits, torch.nan)

    def batch_loss(self, index: int, params: Mapping[str, Tensor]) -> Tensor:
        """``L_b(params)``: the mean data loss of batch ``index`` at ``params`` (no regulariser).

        Args:
            index: the position of the batch in the objective's batches.
            params: the variable parameters (the objective's names; fixed params and buffers are the objective's).

        Returns:
            The batch's mean loss, a 0-dim tensor.
        """
        return self._batch_eval_state(self._point_state(params), *self.batches[index])[0]

    def tune(self, fold_bn: bool = True, channels_last: bool | None = None) -> None:
        """Make both choices: :meth:`enable_fold` (when ``fold_bn``), then :meth:`choose_memory_format`.

        Under torchrun rank 0 times the layouts and every rank takes its choice, so that all ranks evaluate alike.
        A run that resumes a file takes the layout the file records instead of timing it again: its numbers are
        then those of the run that began the file, bit for bit (a timing may choose otherwise, and the layouts
        agree only to rounding).

        Args:
            fold_bn: fold eval-mode BatchNorm where it can be.
            channels_last: the layout recorded by the run being resumed (rank 0's value counts); None: time it.
        """
        if fold_bn:
            self.enable_fold()
        chosen = (self.choose_memory_format() if channels_last is None else bool(channels_last)) if D.is_main() else 0
        if bool(D.broadcast_object(chosen)):
            self.use_channels_last()

    def enable_fold(self, check: bool = True) -> int:
        """Fold the model's eval-mode conv -> BatchNorm pairs (:func:`landscape.models.bn_fold.fold_batchnorm`).

        The folded forward is checked against the unfolded one (:meth:`check_fold`); it stays unfolded when that
        fails, when nothing can be folded, or with ``bn == "recompute"``. The objective's model is not modified
        (the fold works on a copy).

        Args:
            check: check the fold now; False leaves it to the caller (:meth:`check_fold`, or a check of its own
                against the unfolded forward).

        Returns:
            The number of BatchNorm layers folded (0 when unfolded; :attr:`fold_notes` says why).
        """
        self.fold, self.fold_notes, self.fold_tried = None, [], True
        if self.bn == "recompute":
            self.fold_notes = ["--bn recompute re-estimates the statistics at every point"]
            return 0
        try:
            folded = fold_batchnorm(self.obj.module)
        except Exception as exc:  # an unforeseen module structure: stay unfolded
            self.fold_notes = [f"folding failed ({type(exc).__name__})"]
            return 0
        self.fold_notes = list(folded.notes)
        if folded.n_folded == 0:
            return 0
        self.fold = folded
        return self.check_fold() if check else folded.n_folded

    def check_fold(self) -> int:
        """Keep the fold only if the folded loss equals the unfolded one at the objective's point on the first batch.

        Relative 1e-10 in float64, 1e-4 otherwise (:func:`landscape.core.second_order.folded_loss_agrees`).

        Returns:
            The number of BatchNorm layers folded (0 when the check unfolded the model; :attr:`fold_notes` says why).
        """
        folded = self.fold
        if folded is None:
            return 0
        x, y = self.batches[0]
        try:
            with torch.inference_mode():
                self.fold = None
                known = self.obj.first_batch_loss  # the same unfolded pass, made by the objective's checks
                if known is not None and self.batches is self.obj.batches:
                    want = torch.tensor(known, dtype=self.obj.dtype)
                else:
                    want = self._batch_eval_state(self._point_state(self.obj.params), x, y)[0]
                self.fold = folded
                got = self._batch_eval_state(self._point_state(self.obj.params), x, y)[0]
        except Exception as exc:  # the forward uses the folded modules in a way the trace did not show
            self.fold = None
            self.fold_notes.append(f"the folded model failed to run ({type(exc).__name__}); unfolded")
            return 0
        if not folded_loss_agrees(got, want):
            self.fold = None
            self.fold_notes.append("the folded loss differs from the unfolded one at the objective's point; unfolded")
            return 0
        return folded.n_folded

    def choose_memory_format(self, repeats: int = 2) -> bool:
        """Use channels-last inputs if a forward of the first batch at the objective's point is faster so (and agrees).

        Only for 4D float32/float16/bfloat16 inputs of a model with 2D convolutions, with ``bn == "eval"``
        (float64 stays as it is: its results are compared exactly). On CPU a channels-last convolution runs
        several times faster in oneDNN than an NCHW one of the same shape. Taken when it is under 0.95x the
        NCHW time and agrees to a relative 1e-4. Nothing is timed on a CPU when the convolutions take less than
        :data:`~landscape.options.common.LAYOUT_MIN_CONV_SHARE` of a forward (hooks time them in the first
        forward, which is NCHW's warm-up otherwise): a ViT's patch embedding. The timing is made once per process
        for a model architecture (its class and the names, shapes and dtypes of its tensors), input shape and dtype,
        device and thread count: later runs in the process take the same layout (checking the agreement again), so
        that their numbers are equal bit for bit rather than to rounding.

        Args:
            repeats: timed forwards of each layout (after a warm-up); the fastest counts.

        Returns:
            Whether the inputs are now channels-last (:attr:`channels_last`, :attr:`batches`).
        """
        x0, y0 = self.obj.batches[0]
        convs = any(isinstance(m, torch.nn.Conv2d) for m in self.obj.module.modules())
        if self.bn != "eval" or not convs or x0.ndim != 4:
            return False
        if x0.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return False
        cl = x0.contiguous(memory_format=torch.channels_last)
        state = self._point_state(self.obj.params)
        key = self._layout_key(x0)

        def run(x: Tensor, warm_up: bool) -> tuple[float, float]:
            with torch.inference_mode():
                return fastest(
                    lambda: float(self._batch_eval_state(state, x, y0)[0]), self.obj.device, repeats, warm_up=warm_up
                )

        try:
            if key not in _LAYOUTS and self._conv_share(state, x0, y0) < LAYOUT_MIN_CONV_SHARE:
                _LAYOUTS[key] = False  # the convolutions are too small a part of the forward for their layout to count
                return False
            if key in _LAYOUTS:  # measured before in this process: only the agreement is checked again
                if not _LAYOUTS[key]:
                    return False
                with torch.inference_mode():
                    want, got = (float(self._batch_eval_state(state, x, y0)[0]) for x in (x0, cl))
                faster = True
            else:
                (t_plain, want), (t_cl, got) = run(x0, False), run(cl, True)  # NCHW's warm-up: the share's forward
                faster = _LAYOUTS[key] = t_cl < 0.95 * t_plain
        except Exception:  # a model that cannot take channels-last inputs
            return False
        if not (faster and close(got, want, 1e-4)):
            return False
        self.use_channels_last()
        return True

    def _conv_share(self, state: ParamDict, x: Tensor, y: Tensor) -> float:
        """The share of one forward's wall time spent in its 2D convolutions (1.0 off the CPU: not measured there).

        Timed by hooks around each ``Conv2d`` of the module evaluated, in one forward of the first batch (the first
        timing's warm-up, so nothing is spent on a model whose convolutions are most of it).
        """
        if self.obj.device.type != "cpu":
            return 1.0
        module = self.obj.module if self.fold is None else self.fold.module
        convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
        spent, started = [0.0], [0.0]

        def before(*_: object) -> None:
            started[0] = time.perf_counter()

        def after(*_: object) -> None:
            spent[0] += time.perf_counter() - started[0]

        hooks = [h for m in convs for h in (m.register_forward_pre_hook(before), m.register_forward_hook(after))]
        try:
            start = time.perf_counter()
            with torch.inference_mode():
                self._batch_eval_state(state, x, y)
            whole = time.perf_counter() - start
        finally:
            for h in hooks:
                h.remove()
        return spent[0] / max(whole, 1e-12)

    def _layout_key(self, x: Tensor) -> tuple:
        """What the layouts' timing depends on: the model's class and tensors, the input, the device, the threads."""
        tensors = tuple((n, tuple(t.shape), str(t.dtype)) for n, t in self.obj.module.state_dict().items())
        model = type(self.obj.module)
        return (
            f"{model.__module__}.{model.__qualname__}",
            tensors,
            tuple(x.shape),
            str(x.dtype),
            self.obj.device.type,
            torch.get_num_threads(),
            self.fold is not None,
        )

    def use_channels_last(self) -> None:
        """Evaluate on channels-last inputs: each batch is converted as it is read (none is held converted)."""
        self.batches = self.obj.batches.placed(memory_format=torch.channels_last)
        self.channels_last = True
