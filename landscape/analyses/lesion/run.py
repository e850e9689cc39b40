"""Lesion study (Paper A, Sec 4): accuracy and NLL when one residual branch is removed, one block at a time.

A block is *lesioned* by skipping its residual branch and keeping its shortcut: a forward hook on the last
module of the branch replaces that module's output by zeros, so the block computes ``shortcut(x) + 0``. The
model is never changed: the study works on a deep copy (:func:`lesion_study`) and every hook is removed when
its block is done (:func:`lesioned`).

Lesionable blocks (:func:`lesion_blocks`), in forward order:

- zoo ResNets (``resnet*``) and the conv blocks of AlterNets (``alternet*``): every
  :class:`~landscape.models.resnet.ResidualBlock` ``layer{s+1}.{i}`` (kind ``conv``, or ``downsample`` for
  the strided first block of a stage). The branch ends at ``conv{n}`` (pre-activation) or ``bn{n}``
  (post-activation, where the block then outputs ``relu(shortcut(x))``: ``x`` itself after an identity
  shortcut, since ``x`` is already a ReLU output). A block whose shortcut is a projection (1x1 conv, + BN
  post-activation; the first block of every stage that changes stride or width) keeps the *projected*
  shortcut, so its lesion removes the branch but not the whole block: such blocks are flagged
  ``projected_shortcut``.
- AlterNet's MSA blocks :class:`~landscape.models.alternet.MSABlock` (kind ``msa``): the branch ends at
  ``drop_path``; the shortcut is the identity.
- zoo ViTs (``vit*``, ``vit_rpe_*``, ``convvit_*``) and timm-style ViTs (any model whose ``blocks[i]`` hold
  ``attn``, ``mlp``, ``drop_path1`` and ``drop_path2``, as timm's ``VisionTransformer``): each transformer
  block gives two lesions, ``blocks.{i}.msa`` (kind ``msa``; ``conv`` for a ``convvit_*`` shift attention) ending
  at ``drop_path1`` and ``blocks.{i}.mlp`` (kind ``mlp``) ending at ``drop_path2``, both with identity shortcuts
  (timm's layer scale ``ls1`` / ``ls2`` sits inside the branch).

The stem, patch embedding, final norm and head are not residual and are never lesioned. Any other model is
refused with a one-line error.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from landscape import store
from landscape.core.calls import analysis_function
from landscape.core.criteria import hit_count, select_logits
from landscape.core.front import prepare, python_call, run_from_python
from landscape.errors import LandscapeError
from landscape.models.alternet import MSABlock
from landscape.models.resnet import ResidualBlock, ResNet
from landscape.models.vit import ViT
from landscape.models.vit_rpe import ShiftAttention
from landscape.options.lesion import LesionKeywords, LesionOptions
from landscape.runtime import distributed as D
from landscape.runtime.lifecycle import AnalysisFile

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

#: what :func:`lesion_blocks` supports, for the error message
SUPPORTED = (
    "the zoo's resnet*, alternet* and vit* models (vit_rpe_*, convvit_* included) and timm-style ViTs "
    "(blocks[i] with attn, mlp, drop_path1, drop_path2)"
)


@dataclass(frozen=True)
class LesionBlock:
    """One lesionable residual branch.

    Attributes:
        name: the block's name, as in ``block_features`` (``layer2.1``, ``blocks.3.msa``, ...).
        kind: ``conv``, ``downsample``, ``msa`` or ``mlp``.
        stage: the index of the block's stage (0 for models without stages).
        branch_end: dotted module path of the last module of the branch, whose output is replaced by zeros.
        projected_shortcut: the shortcut is a projection (kept when the branch is removed), not the identity.
    """

    name: str
    kind: str
    stage: int
    branch_end: str
    projected_shortcut: bool = False


def _resnet_blocks(model: nn.Module) -> list[LesionBlock]:

    out: list[LesionBlock] = []
    for s, stage in enumerate(model.stages()):  # type: ignore[operator]
        for i, blk in enumerate(stage):
            name = f"layer{s + 1}.{i}"
            if isinstance(blk, ResidualBlock):
                last = f"conv{blk.num_convs}" if blk.preact else f"bn{blk.num_convs}"
                out.append(LesionBlock(name, blk.kind, s, f"{name}.{last}", blk.shortcut is not None))
            elif isinstance(blk, MSABlock):
                out.append(LesionBlock(name, "msa", s, f"{name}.drop_path"))
            else:
                raise LandscapeError(
                    f"block {name} is a {type(blk).__name__}, whose residual branch the lesion study does not know; "
                    f"it supports {SUPPORTED}"
                )
    return out


def _is_transformer_block(blk: nn.Module) -> bool:
    return all(isinstance(getattr(blk, a, None), nn.Module) for a in ("attn", "mlp", "drop_path1", "drop_path2"))


def _vit_blocks(model: nn.Module) -> list[LesionBlock]:

    out: list[LesionBlock] = []
    for i, blk in enumerate(model.blocks):  # type: ignore[union-attr, arg-type]
        msa_kind = "conv" if isinstance(blk.attn, ShiftAttention) else "msa"
        out.append(LesionBlock(f"blocks.{i}.msa", msa_kind, 0, f"blocks.{i}.drop_path1"))
        out.append(LesionBlock(f"blocks.{i}.mlp", "mlp", 0, f"blocks.{i}.drop_path2"))
    return out


def lesion_blocks(model: nn.Module) -> list[LesionBlock]:
    """The lesionable residual branches of ``model``, in forward order (see the module doc for the rules).

    Args:
        model: a zoo ResNet / AlterNet / ViT, or a timm-style ViT.

    Returns:
        One :class:`LesionBlock` per branch.

    Raises:
        LandscapeError: the model is none of the supported ones, a ResNet holds a block of an unknown type, or
            two branches share their last module (a lesion would remove both).
    """
    blocks_attr = getattr(model, "blocks", None)
    if isinstance(model, ResNet):
        blocks = _resnet_blocks(model)
    elif isinstance(model, ViT) or (
        isinstance(blocks_attr, nn.Sequential | nn.ModuleList)
        and len(blocks_attr) > 0
        and all(_is_transformer_block(b) for b in blocks_attr)
    ):
        blocks = _vit_blocks(model)
    else:
        raise LandscapeError(f"the lesion study supports {SUPPORTED}; {type(model).__name__} is none of them")
    ends = [id(model.get_submodule(b.branch_end)) for b in blocks]
    if len(set(ends)) != len(ends):
        raise LandscapeError(
            f"two residual branches of {type(model).__name__} end in the same module instance, so one lesion "
            "would remove both; give each block its own drop_path modules"
        )
    return blocks


class _ZeroBranch:
    """A forward hook that replaces a module's output by zeros and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, module: nn.Module, args: Any, output: Any) -> Any:
        self.calls += 1
        if not isinstance(output, Tensor):
            raise LandscapeError(
                f"the residual branch ends in a {type(module).__name__} that returns {type(output).__name__}, "
                "not a tensor; it cannot be lesioned"
            )
        return torch.zeros_like(output)


@contextlib.contextmanager
def lesioned(model: nn.Module, block: LesionBlock) -> Iterator[_ZeroBranch]:
    """Within the ``with`` block, ``model`` runs with ``block``'s residual branch replaced by zeros.

    The hook is registered on ``model`` itself (pass a copy to keep a model untouched) and removed on exit,
    whatever happens.

    Args:
        model: the model whose :func:`lesion_blocks` include ``block``.
        block: the branch to remove.

    Yields:
        The hook, whose ``calls`` counts the branch's forward passes.
    """
    hook = _ZeroBranch()
    handle = model.get_submodule(block.branch_end).register_forward_hook(hook)
    try:
        yield hook
    finally:
        handle.remove()


def hits_and_nll(
    model: nn.Module, batches: Iterable[Sequence[Tensor]], output: str | int | None = None
) -> tuple[int, float, int]:
    """Correct top-1 predictions, summed cross-entropy (float64) and number of samples over ``batches``.

    Args:
        model: the classifier, in eval mode; run under ``torch.no_grad``.
        batches: ``(x, y)`` batches of images and integer labels.
        output: where the logits are in the model's output (:func:`~landscape.core.criteria.select_logits`).

    Returns:
        ``(correct, nll_sum, total)``.

    Raises:
        LandscapeError: no logits in the model's output.
    """
    correct, nll, total = 0, 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            logits = select_logits(model(x), output)
            correct += int(hit_count(logits, y))
            nll += float(F.cross_entropy(logits.double(), y, reduction="sum").item())
            total += int(y.numel())
    return correct, nll, total


def _scores(counts: tuple[int, float, int]) -> tuple[float, float]:
    correct, nll, total = counts
    if total == 0:
        raise LandscapeError("no samples to evaluate; give --samples of at least 1")
    return correct / total, nll / total


def _local(counts: tuple[int, float, int]) -> tuple[int, float, int]:
    return counts


def lesion_scores(
    model: nn.Module,
    batches: Sequence[Sequence[Tensor]],
    blocks: Sequence[LesionBlock],
    *,
    output: str | int | None = None,
    skip: Iterable[int] = (),
    intact: bool = True,
    combine: Callable[[tuple[int, float, int]], tuple[int, float, int]] = _local,
) -> Iterator[tuple[int | None, float, float]]:
    """Yield ``(None, accuracy, nll)`` of the intact model, then ``(i, accuracy, nll)`` with block ``i`` lesioned.

    ``model`` is run as given (hooks are added and removed on it: pass a copy, as :func:`lesion_study` does).

    Args:
        model: the classifier in eval mode.
        batches: this rank's ``(x, y)`` batches.
        blocks: :func:`lesion_blocks` of ``model``.
        output: where the logits are in the model's output.
        skip: indices of blocks not to evaluate (already done).
        intact: evaluate the intact model first.
        combine: sums ``(correct, nll_sum, total)`` over the ranks (identity in one process).

    Yields:
        ``(index or None, accuracy, mean NLL)``.

    Raises:
        LandscapeError: no samples, no logits in the output, or a branch module that did not run exactly once per
            forward pass (the lesion would not be one branch removed).
    """
    if intact:
        yield (None, *_scores(combine(hits_and_nll(model, batches, output))))
    done = set(skip)
    for i, block in enumerate(blocks):
        if i in done:
            continue
        with lesioned(model, block) as hook:
            counts = hits_and_nll(model, batches, output)
        if hook.calls != len(batches):
            raise LandscapeError(
                f"the branch of {block.name} ({block.branch_end}) ran {hook.calls} times in {len(batches)} forward "
                "passes, not once per pass; it cannot be lesioned by zeroing its output"
            )
        yield (i, *_scores(combine(counts)))


@dataclass
class LesionTable:
    """The lesion study of one model in memory (what :func:`lesion_study` returns).

    Attributes:
        blocks: the lesioned branches, in forward order.
        accuracy: top-1 accuracy with each block lesioned, shape ``(n_blocks,)``.
        nll: mean cross-entropy with each block lesioned.
        intact_accuracy: accuracy of the model itself.
        intact_nll: its mean cross-entropy.
    """

    blocks: list[LesionBlock]
    accuracy: np.ndarray
    nll: np.ndarray
    intact_accuracy: float
    intact_nll: float

    @property
    def accuracy_drop(self) -> np.ndarray:
        """``intact_accuracy - accuracy`` per block."""
        return self.intact_accuracy - self.accuracy


def lesion_study(
    model: nn.Module, batches: Sequence[Sequence[Tensor]], *, output: str | int | None = None
) -> LesionTable:
    """Accuracy and NLL of ``model`` intact and with each residual branch removed in turn, on ``batches``.

    Works on an eval-mode deep copy: ``model`` (its parameters, buffers, modes and hooks) is never changed.

    Args:
        model: a supported model (see :func:`lesion_blocks`).
        batches: ``(x, y)`` batches on the model's device.
        output: where the logits are in the model's output.

    Returns:
        The :class:`LesionTable`.

    Raises:
        LandscapeError: an unsupported model, no samples, or no logits in the model's output.
    """
    net = copy.deepcopy(model).eval()
    blocks = lesion_blocks(net)
    acc, nll = np.full(len(blocks), np.nan), np.full(len(blocks), np.nan)
    intact = (np.nan, np.nan)
    for i, a, n in lesion_scores(net, batches, blocks, output=output):
        if i is None:
            intact = (a, n)
        else:
            acc[i], nll[i] = a, n
    return LesionTable(blocks, acc, nll, intact[0], intact[1])


@dataclass(frozen=True)
class StageClaim:
    """Paper A's claim for one stage: does its last MSA have the largest accuracy drop of the stage?

    Attributes:
        stage: the stage index.
        last_msa: name of the stage's last MSA block.
        last_msa_drop: its accuracy drop.
        top_block: name of the block of the stage with the largest drop (the first of ties).
        top_drop: that drop.
        holds: ``last_msa_drop >= top_drop`` (ties count as holding).
    """

    stage: int
    last_msa: str
    last_msa_drop: float
    top_block: str
    top_drop: float
    holds: bool


def stage_claims(
    names: Sequence[str], kinds: Sequence[str], stages: Sequence[int], drops: Sequence[float]
) -> list[StageClaim]:
    """For each stage holding an MSA block, compare its last MSA's accuracy drop with every block of the stage.

    Blocks whose drop is NaN (not done) are left out.

    Args:
        names: block names.
        kinds: block kinds (``msa`` marks MSA blocks).
        stages: the stage of each block.
        drops: the accuracy drop of each block.

    Returns:
        One :class:`StageClaim` per stage with a finished MSA block, in stage order.
    """
    out: list[StageClaim] = []
    for s in sorted({int(v) for v in stages}):
        idx = [i for i in range(len(names)) if int(stages[i]) == s and np.isfinite(drops[i])]
        msas = [i for i in idx if str(kinds[i]) == "msa"]
        if not msas:
            continue
        last = msas[-1]
        top = max(idx, key=lambda i: (float(drops[i]), -i))
        out.append(
            StageClaim(
                s, str(names[last]), float(drops[last]), str(names[top]), float(drops[top]), drops[last] >= drops[top]
            )
        )
    return out


def _summed(counts: tuple[int, float, int]) -> tuple[int, float, int]:
    """``(correct, nll_sum, total)`` summed over the ranks."""
    parts = D.all_gather_objects(counts)
    return sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts)


def run_lesion(
    source: ModelSource | str | Path,
    options: LesionOptions | None = None,
    *,
    out: str | Path = "lesion.h5",
    model_name: str | None = None,
    force: bool = False,
    device: str = "auto",
    progress: bool | None = None,
    on_block: Callable[[int], None] | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
) -> store.Result:
    """Lesion study of a model on ``options.samples`` images, written to ``out``; returns the file read back.

    The intact model's accuracy and NLL are written first (root attributes ``intact_accuracy``,
    ``intact_nll``), then each block's row (``accuracy``, ``nll``, ``accuracy_drop``), flushed and marked in
    ``done`` as it finishes, so a killed run resumes at the next block (docs/schema.md, lesion). A complete file
    of the same options is returned as is; one of other options needs ``force``. Under torchrun the batches
    are shared among the ranks (the counts are summed) and rank 0 writes the file.

    Args:
        source: a checkpoint path or a :class:`~landscape.core.source.ModelSource`.
        options: every analysis option (validated when it was built); None: the defaults.
        out: the HDF5 result file.
        model_name: the model of a checkpoint that does not name it.
        force: overwrite an existing file from other options.
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: show the progress on rank 0 (:mod:`landscape.runtime.progress`: a bar on a terminal, a line
            every 30 s elsewhere); False: nothing.
        on_block: called with a block's index after its row is written (for progress reports and tests).
        command: how the run was asked for, recorded as ``command`` (default: this call).
        batches: the data as ``(x, y)`` batches (a ``DataLoader`` or a list), their first ``samples`` images instead of
            ``options.data`` (:func:`~landscape.core.front.prepare`).

    Returns:
        The file read back (:class:`landscape.store.read.Result`).

    Raises:
        LandscapeError: the options are not a :class:`LesionOptions`, the model is not supported or cannot be
            loaded, the labels do not fit the model's outputs, or the file belongs to other options.
    """
    if options is None:
        options = LesionOptions()
    if not isinstance(options, LesionOptions):
        raise LandscapeError(f"run_lesion takes its options as a LesionOptions, got {type(options).__name__}")
    o = options
    call = command or python_call("run_lesion", source, o, out=out, model_name=model_name)
    prepared = prepare(source, o, model_name=model_name, device=device, command=call, labels=True, batches=batches)
    inputs, batches, attrs = prepared.inputs, prepared.batches, prepared.attrs
    net = copy.deepcopy(inputs.model).eval()
    blocks = lesion_blocks(net)
    n = len(blocks)

    def resume(f: store.ResultFile) -> dict:
        state: dict[str, Any] = {"complete": f.complete, "intact": None, "done": []}
        if f.complete:
            return state
        if f.attr("intact_accuracy") is not None and "done" in f:
            state["intact"] = (float(f.attr("intact_accuracy")), float(f.attr("intact_nll")))
            state["done"] = [int(i) for i in np.flatnonzero(f.read("done"))]
        f.write("block_names", np.array([b.name for b in blocks]), axes=["block"])
        f.write("block_kinds", np.array([b.kind for b in blocks]), axes=["block"])
        f.write("depth", np.arange(n) / max(n - 1, 1), axes=["block"])
        f.write("stage", np.array([b.stage for b in blocks], dtype=np.int64), axes=["block"])
        f.write("projected_shortcut", np.array([b.projected_shortcut for b in blocks]), axes=["block"])
        for name in ("accuracy", "nll", "accuracy_drop"):
            f.allocate(name, (n,), "f8", fill=np.nan, axes=["block"])
        f.allocate("done", (n,), bool, fill=False, axes=["block"])
        return state

    plan = f"lesion: {n} blocks removed one at a time, each scored over the samples"
    prepared.announce(plan, n + 1, "pass", prepared.seconds_per_pass, progress)  # + the intact model's pass
    mine = batches.select(D.shard(range(len(batches))))  # read onto the device one at a time
    session = AnalysisFile(out, "lesion", attrs, force=force, resume=resume)
    with session as (f, state):
        assert state is not None
        if not state["complete"]:
            intact = state["intact"]
            with session.progress("lesions", n, unit="block", done=len(state["done"]), progress=progress) as bar:
                scores = lesion_scores(
                    net,
                    mine,
                    blocks,
                    output=inputs.source.output,
                    skip=state["done"],
                    intact=intact is None,
                    combine=_summed,
                )
                for i, acc, nll in scores:
                    if i is None:
                        intact = (acc, nll)
                        if f is not None:
                            f.set_attrs({"intact_accuracy": acc, "intact_nll": nll})
                            f.mark_done()
                        continue
                    if f is not None:
                        f.write_at("accuracy", i, acc)
                        f.write_at("nll", i, nll)
                        f.write_at("accuracy_drop", i, intact[0] - acc)
                        f.mark_done("done", i)
                    bar.update(1)
                    if on_block is not None:
                        on_block(i)
    return session.result


@analysis_function(LesionOptions)
def lesion(
    model: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: LesionOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[LesionKeywords],
) -> store.Result:
    """Accuracy and NLL of ``model`` with each residual block removed, one at a time (``landscape lesion``).

    See :class:`~landscape.options.lesion.LesionOptions` for every keyword.

    Args:
        model: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...), a ``Dataset``, ``DataLoader`` or list of
            ``(x, y)`` batches (the first ``samples`` images, in order), or None for the checkpoint's dataset (else
            digits).
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.lesion.LesionOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file of other options at ``out``.
        progress: what will run and the progress on rank 0 (a bar on a terminal, lines elsewhere); False:
            nothing (:mod:`landscape.runtime.progress`).
        batch: a function from one batch of ``data`` (a ``Dataset`` or ``DataLoader`` you hold) to ``(inputs,
            labels)``, for batches that are dicts or longer tuples, e.g. ``lambda b: (b["image"], b["label"])``.
        **fields: the options as keywords (the fields of the options class).

    Returns:
        The result (:class:`~landscape.store.Result`): its ``attrs`` and arrays.

    Raises:
        LandscapeError: bad options, a model or data that cannot be used, or a file of other options at ``out``.
    """
    return run_from_python(
        run_lesion,
        "landscape.lesion",
        LesionOptions,
        model,
        data,
        options=options,
        fields=fields,
        batch=batch,
        out=out,
        device=device,
        force=force,
        progress=progress,
    )
