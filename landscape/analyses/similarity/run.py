"""Feature similarity: minibatch linear CKA between the block outputs of one model or of two models.

Linear CKA in the minibatch-unbiased form of Nguyen, Raghu & Kornblith (2021, "Do wide and deep networks learn
the same things?"). For a minibatch of ``n >= 4`` samples with flattened features ``X`` (n x p) and ``Y``
(n x q), ``K = X X^T`` and ``L = Y Y^T``, and ``K~``, ``L~`` the Gram matrices with their diagonals set to 0,

    HSIC_1(K, L) = 1/(n(n-3)) [ tr(K~ L~) + (1^T K~ 1)(1^T L~ 1)/((n-1)(n-2)) - 2/(n-2) 1^T K~ L~ 1 ]

and over the minibatches ``CKA = mean HSIC_1(K, L) / sqrt(mean HSIC_1(K, K) * mean HSIC_1(L, L))``. Memory stays
bounded: per batch the ``n x n`` Gram matrix of every layer, and over the run three running sums (a matrix for
the pairs and a vector per model for the self terms, which are shared by every pair of a layer).

File layout (kind ``similarity``; docs/schema.md, similarity): ``cka`` (n_layers_a, n_layers_b), ``names_a``,
``kinds_a``, ``names_b``, ``kinds_b``, the sums ``hsic_xy`` (n_layers_a, n_layers_b), ``hsic_xx``
(n_layers_a), ``hsic_yy`` (n_layers_b) and ``n_batches`` (0-d), so that the CKA can be continued from the sums.
The file is written at the end of the run, ``cka`` last; a run killed before that is redone as a whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from landscape import store
from landscape.core.calls import analysis_function
from landscape.core.front import (
    batch_images,
    batches_for,
    eval_model,
    load_inputs,
    prepare,
    python_call,
    run_from_python,
)
from landscape.errors import LandscapeError
from landscape.models.taps import FeatureTaps, as_grid
from landscape.options.similarity import MIN_BATCH, SimilarityKeywords, SimilarityOptions
from landscape.runtime import distributed as D
from landscape.runtime.lifecycle import AnalysisFile
from landscape.runtime.progress import Progress

if TYPE_CHECKING:
    from landscape.core.source import ModelSource


def gram(x: Tensor) -> Tensor:
    """The linear Gram matrix ``X X^T`` of a batch of features, flattened per sample, in float64.

    Args:
        x: features of shape ``(n, ...)``.

    Returns:
        The ``(n, n)`` float64 Gram matrix.
    """
    flat = x.reshape(x.shape[0], -1).to(torch.float64)
    return flat @ flat.T


@dataclass
class GramStats:
    """What the unbiased HSIC needs of a stack of Gram matrices of one minibatch (one per layer).

    Attributes:
        flat: ``K~`` (zero diagonal) of every layer, flattened: ``(layers, n * n)``.
        rows: the row sums ``K~ 1``: ``(layers, n)``.
        total: ``1^T K~ 1``: ``(layers,)``.
        n: the number of samples.
    """

    flat: Tensor
    rows: Tensor
    total: Tensor
    n: int

    @classmethod
    def of(cls, grams: Tensor) -> GramStats:
        """The statistics of ``grams``, a ``(layers, n, n)`` stack of symmetric Gram matrices.

        Args:
            grams: the Gram matrices (float64).

        Returns:
            Their :class:`GramStats`.

        Raises:
            LandscapeError: fewer than :data:`MIN_BATCH` samples.
        """
        n = int(grams.shape[-1])
        if n < MIN_BATCH:
            raise LandscapeError(f"the unbiased HSIC needs minibatches of at least {MIN_BATCH} samples, got {n}")
        tilde = grams.clone()
        tilde.diagonal(dim1=-2, dim2=-1).zero_()
        rows = tilde.sum(-1)
        return cls(tilde.reshape(tilde.shape[0], -1), rows, rows.sum(-1), n)


def hsic_matrix(a: GramStats, b: GramStats) -> Tensor:
    """The unbiased HSIC_1 of every pair of layers of ``a`` and ``b`` (the same minibatch).

    Uses ``tr(K~ L~) = <K~, L~>_F`` (both symmetric) and ``1^T K~ L~ 1 = (K~ 1) . (L~ 1)``.

    Args:
        a: the statistics of the first stack.
        b: the statistics of the second stack (same ``n``).

    Returns:
        ``(layers_a, layers_b)`` float64: entry ``(i, j)`` is ``HSIC_1(K_i, L_j)``.

    Raises:
        LandscapeError: the two stacks are of different minibatch sizes.
    """
    if a.n != b.n:
        raise LandscapeError(f"the two models saw minibatches of {a.n} and {b.n} samples; give them the same data")
    n = a.n
    trace = a.flat @ b.flat.T
    ones = torch.outer(a.total, b.total) / ((n - 1) * (n - 2))
    cross = a.rows @ b.rows.T * (2.0 / (n - 2))
    return (trace + ones - cross) / (n * (n - 3))


def hsic1(k: Tensor, l: Tensor) -> Tensor:  # noqa: E741
    """The unbiased HSIC_1 of two ``n x n`` Gram matrices of one minibatch (Nguyen et al. 2021).

    Args:
        k: the Gram matrix ``K`` of the first features.
        l: the Gram matrix ``L`` of the second features.

    Returns:
        A 0-dim float64 tensor.
    """
    return hsic_matrix(GramStats.of(k[None].to(torch.float64)), GramStats.of(l[None].to(torch.float64)))[0, 0]


def linear_cka(x: Tensor, y: Tensor) -> float:
    """The unbiased linear CKA of two feature batches treated as one minibatch.

    Args:
        x: features ``(n, ...)``, ``n >= 4``.
        y: features ``(n, ...)`` of the same samples.

    Returns:
        ``HSIC_1(K, L) / sqrt(HSIC_1(K, K) HSIC_1(L, L))``.
    """
    a, b = GramStats.of(gram(x)[None]), GramStats.of(gram(y)[None])
    return float(hsic_matrix(a, b)[0, 0] / torch.sqrt(hsic_matrix(a, a)[0, 0] * hsic_matrix(b, b)[0, 0]))


def biased_linear_cka(x: Tensor, y: Tensor) -> float:
    """The full-batch (biased) linear CKA ``||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)`` of centred features.

    Args:
        x: features ``(n, ...)``.
        y: features ``(n, ...)`` of the same samples.

    Returns:
        The biased linear CKA (Kornblith et al. 2019).
    """
    fx = x.reshape(x.shape[0], -1).to(torch.float64)
    fy = y.reshape(y.shape[0], -1).to(torch.float64)
    fx, fy = fx - fx.mean(0), fy - fy.mean(0)
    return float(torch.linalg.norm(fy.T @ fx) ** 2 / (torch.linalg.norm(fx.T @ fx) * torch.linalg.norm(fy.T @ fy)))


@dataclass
class SimilaritySums:
    """The running sums of a CKA analysis over minibatches.

    Attributes:
        names_a: block names of the first model, in forward order.
        kinds_a: their kinds (stem/conv/msa/mlp/downsample/embed).
        names_b: block names of the second model (the first's, within one model).
        kinds_b: their kinds.
        hsic_xy: sum over minibatches of ``HSIC_1(K_i, L_j)``: ``(layers_a, layers_b)`` float64.
        hsic_xx: sum of ``HSIC_1(K_i, K_i)``: ``(layers_a,)``.
        hsic_yy: sum of ``HSIC_1(L_j, L_j)``: ``(layers_b,)``.
        n_batches: the number of minibatches summed.
        n_samples: the number of samples in them.
    """

    names_a: list[str]
    kinds_a: list[str]
    names_b: list[str]
    kinds_b: list[str]
    hsic_xy: np.ndarray
    hsic_xx: np.ndarray
    hsic_yy: np.ndarray
    n_batches: int = 0
    n_samples: int = 0

    @property
    def cka(self) -> np.ndarray:
        """``mean HSIC(K, L) / sqrt(mean HSIC(K, K) mean HSIC(L, L))`` per pair (NaN where a self term is <= 0)."""
        denom = np.sqrt(np.outer(self.hsic_xx, self.hsic_yy))
        with np.errstate(divide="ignore", invalid="ignore"):
            out = self.hsic_xy / denom
        out[~(denom > 0)] = np.nan
        return out

    def add(self, other: SimilaritySums) -> SimilaritySums:
        """These sums plus those of a disjoint share of the minibatches (a new object).

        Args:
            other: sums over other minibatches of the same models.

        Returns:
            The combined sums.

        Raises:
            LandscapeError: the shares found different blocks.
        """
        if (self.names_a, self.names_b) != (other.names_a, other.names_b):
            raise LandscapeError("the processes found different feature maps; give every rank the same models")
        return SimilaritySums(
            self.names_a,
            self.kinds_a,
            self.names_b,
            self.kinds_b,
            self.hsic_xy + other.hsic_xy,
            self.hsic_xx + other.hsic_xx,
            self.hsic_yy + other.hsic_yy,
            self.n_batches + other.n_batches,
            self.n_samples + other.n_samples,
        )


def _grams(reader: FeatureTaps, x: Tensor, names: list[str] | None) -> tuple[list[str], list[str], Tensor]:
    features = reader(x)
    if not features:
        raise LandscapeError("the model gave no feature maps; name its blocks with --taps PATTERN=KIND")
    got = [f.name for f in features]
    if names is not None and got != names:
        raise LandscapeError("the model gave different feature maps between batches; use images of equal size")
    grams = torch.stack([gram(as_grid(f.tensor)) for f in features])
    return got, [f.kind for f in features], grams


def similarity_sums(
    model_a: nn.Module,
    batches_a: Iterable[Tensor | Sequence[Tensor]],
    model_b: nn.Module | None = None,
    batches_b: Iterable[Tensor | Sequence[Tensor]] | None = None,
    *,
    taps_a: Sequence[str] | Sequence[tuple[str, str]] | None = None,
    taps_b: Sequence[str] | Sequence[tuple[str, str]] | None = None,
    progress: bool | Progress = False,
) -> SimilaritySums:
    """Accumulate the unbiased HSIC sums between the block outputs of ``model_a`` and ``model_b`` over batches.

    Without ``model_b`` the blocks of ``model_a`` are compared with each other: the sums are symmetric and their
    diagonal is the self term, so the CKA matrix is symmetric with ones on the diagonal. The models run in eval
    mode under ``torch.no_grad`` (an eval copy is made if a module is in training mode). Batches yield inputs or
    ``(inputs, targets)``; ``batches_b`` (default: ``batches_a``) are the same samples as the model ``b`` takes
    them (its own preprocessing), batch by batch.

    Args:
        model_a: the first model (never changed).
        batches_a: its minibatches, each of at least :data:`MIN_BATCH` samples.
        model_b: the second model, or None for ``model_a`` against itself.
        batches_b: the second model's minibatches (same samples and sizes), or None for ``batches_a``.
        taps_a: ``'PATTERN=KIND'`` items choosing the first model's block outputs (None: its rule).
        taps_b: the same for the second model.
        progress: count the batches on this :class:`~landscape.runtime.progress.Progress`, or ``True`` to show
            one of its own (a bar on a terminal, lines elsewhere).

    Returns:
        The :class:`SimilaritySums` (float64, on the CPU).

    Raises:
        LandscapeError: no batches, a minibatch of fewer than 4 samples, the two models given batches of
            different sizes, or feature maps that cannot be tapped or change between batches.
    """
    within = model_b is None

    net_a = eval_model(model_a)
    net_b = net_a if within else eval_model(model_b)
    reader_a = FeatureTaps(net_a, taps_a)
    reader_b = None if within else FeatureTaps(net_b, taps_b)
    pairs: Iterable[Any] = zip(batches_a, batches_b) if (not within and batches_b is not None) else batches_a
    pairs = list(pairs)
    own = not isinstance(progress, Progress)
    bar = Progress("similarity", len(pairs), unit="batch", progress=None if progress else False) if own else progress
    sums: SimilaritySums | None = None
    names_a: list[str] | None = None
    names_b: list[str] | None = None
    with reader_a, torch.no_grad(), bar if own else contextlib.nullcontext():
        if reader_b is not None:
            reader_b.__enter__()
        try:
            for item in pairs:
                if within or batches_b is None:
                    xa = xb = batch_images(item)
                else:
                    xa, xb = batch_images(item[0]), batch_images(item[1])
                names_a, kinds_a, ga = _grams(reader_a, xa, names_a)
                sa = GramStats.of(ga)
                if reader_b is None:
                    names_b, kinds_b, sb = names_a, kinds_a, sa
                else:
                    names_b, kinds_b, gb = _grams(reader_b, xb, names_b)
                    sb = GramStats.of(gb)
                xy = hsic_matrix(sa, sb)
                if within:
                    xy = (xy + xy.T) / 2  # exactly symmetric, its diagonal unchanged
                    xx = yy = torch.diagonal(xy).clone()
                else:
                    xx, yy = torch.diagonal(hsic_matrix(sa, sa)), torch.diagonal(hsic_matrix(sb, sb))
                part = SimilaritySums(
                    names_a,
                    kinds_a,
                    names_b,
                    kinds_b,
                    xy.cpu().numpy(),
                    xx.cpu().numpy(),
                    yy.cpu().numpy(),
                    1,
                    int(xa.shape[0]),
                )
                sums = part if sums is None else sums.add(part)
                bar.update(1)
        finally:
            if reader_b is not None:
                reader_b.close()
    if sums is None:
        raise LandscapeError("no batches to analyse; give at least 4 samples")
    return sums


def write_sums(f: store.ResultFile, sums: SimilaritySums) -> None:
    """Write :class:`SimilaritySums` and the CKA matrix into an open ``similarity`` file, ``cka`` last, and flush.

    Args:
        f: the open result file (rank 0's).
        sums: the sums over every minibatch.
    """
    f.write("names_a", np.array(sums.names_a), axes=["layer_a"])
    f.write("kinds_a", np.array(sums.kinds_a), axes=["layer_a"])
    f.write("names_b", np.array(sums.names_b), axes=["layer_b"])
    f.write("kinds_b", np.array(sums.kinds_b), axes=["layer_b"])
    f.write("hsic_xy", sums.hsic_xy, axes=["layer_a", "layer_b"])
    f.write("hsic_xx", sums.hsic_xx, axes=["layer_a"])
    f.write("hsic_yy", sums.hsic_yy, axes=["layer_b"])
    f.write("n_batches", np.int64(sums.n_batches), axes=[])
    f.write("cka", sums.cka, axes=["layer_a", "layer_b"])  # written last: the marker
    f.mark_done()


def _other_attrs(inputs: Any) -> dict[str, Any]:
    """The second model's provenance, as ``other_*`` root attributes."""
    if inputs is None:
        return {"comparison": "within"}
    return {"comparison": "between", **inputs.other_provenance()}


def run_similarity(
    source: ModelSource | str | Path,
    options: SimilarityOptions | None = None,
    *,
    other: ModelSource | str | Path | None = None,
    out: str | Path = "similarity.h5",
    model_name: str | None = None,
    other_model_name: str | None = None,
    force: bool = False,
    device: str = "auto",
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
) -> store.Result:
    """Linear CKA between every pair of blocks of one model (or of two), written to ``out``; returns it read.

    Both models see the same ``options.samples`` images (the same seeded choice of the dataset of the first
    model, each with its own preprocessing) in the same minibatches. Root attributes are the first model's
    provenance (:meth:`AnalysisInputs.provenance`), :meth:`SimilarityOptions.attrs`, ``comparison``
    (``within`` or ``between``) and the second model's ``other_*`` provenance. A complete file of the same
    options is returned as is; an incomplete one is computed again; one of other options needs ``force``. Under
    torchrun the minibatches are shared among the ranks (the HSIC sums are additive) and rank 0 writes the file.

    Args:
        source: the first model: a checkpoint path or a :class:`~landscape.core.source.ModelSource`.
        options: every analysis option (validated when it was built); None: the defaults.
        other: the second model, or None to compare the first model's blocks with each other.
        out: the HDF5 result file.
        model_name: the model of a first checkpoint that does not name it.
        other_model_name: the model of a second checkpoint that does not name it.
        force: overwrite an existing file from other options.
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: show the progress on rank 0 (:mod:`landscape.runtime.progress`: a bar on a terminal, a line
            every 30 s elsewhere); False: nothing.
        command: how the run was asked for, recorded as ``command`` (default: this call).
        batches: the data as ``(x, y)`` batches (a ``DataLoader`` or a list), their first ``samples`` images instead of
            ``options.data`` (:func:`~landscape.core.front.prepare`).

    Returns:
        The file read back (:class:`landscape.store.read.Result`).

    Raises:
        LandscapeError: the options are not a :class:`SimilarityOptions`, a model or the data cannot be loaded,
            the blocks cannot be tapped, or the file belongs to other options.
    """
    options = SimilarityOptions() if options is None else options
    if not isinstance(options, SimilarityOptions):
        raise LandscapeError(f"run_similarity takes its options as a SimilarityOptions, got {type(options).__name__}")
    o = options
    call = command or python_call("run_similarity", source, o, other=other, out=out, model_name=model_name)
    given = batches is not None
    prepared = prepare(source, o, model_name=model_name, device=device, command=call, batches=batches)
    inputs, attrs, dev = prepared.inputs, prepared.attrs, prepared.inputs.device
    sizes = prepared.batches.sizes
    batches = prepared.batches.select([i for i, s in enumerate(sizes) if s >= MIN_BATCH])  # not a tiny last batch
    if not batches:
        raise LandscapeError(f"no minibatch of at least {MIN_BATCH} samples; give more --samples")
    inputs_b = None
    batches_b = None
    if other is not None:
        spec = (o.data or "digits") if given else inputs.dataset_spec  # the caller's batches go to both as they are
        inputs_b = load_inputs(other, model_name=other_model_name, data=spec, split=o.split, device=dev)
        if not given and inputs_b.preprocess != inputs.preprocess:
            batches_b = batches_for(inputs_b, batch_size=o.batch_size, n_samples=o.samples, seed=o.seed)
            batches_b = batches_b[: len(batches)]
            for j in range(len(batches)):
                ya, yb = batches.labels(j), batches_b.labels(j)
                if ya.shape != yb.shape or not torch.equal(ya.cpu(), yb.cpu()):
                    raise LandscapeError("the two models' preprocessing chose different samples; this is a bug")
        else:
            batches_b = batches
    attrs["n_samples"] = sum(batches.sizes)
    attrs.update(_other_attrs(inputs_b))
    plan = "similarity: CKA between the blocks of " + ("the model and itself" if other is None else "the two models")
    passes = 1 if other is None else 2  # a pass of each model over the samples
    prepared.announce(plan, passes, "pass", prepared.seconds_per_pass, progress)
    session = AnalysisFile(out, "similarity", attrs, force=force, resume=lambda f: f.complete)
    with session as (f, complete):
        if not complete:
            order = list(range(len(batches)))
            mine = D.shard(order)
            with session.progress("similarity", len(mine), unit="batch", progress=progress) as bar:
                part = (
                    similarity_sums(
                        inputs.model,
                        batches.select(mine),
                        None if inputs_b is None else inputs_b.model,
                        None if batches_b is None else batches_b.select(mine),
                        taps_a=o.taps,
                        taps_b=o.other_taps,
                        progress=bar,
                    )
                    if mine
                    else None
                )
            parts = [p for p in D.all_gather_objects(part) if p is not None]
            total = parts[0]
            for p in parts[1:]:
                total = total.add(p)
            if f is not None:
                write_sums(f, total)
    return session.result


@analysis_function(SimilarityOptions)
def similarity(
    model: Any,
    data: Any = None,
    *,
    other: Any = None,
    out: str | Path | None = None,
    options: SimilarityOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[SimilarityKeywords],
) -> store.Result:
    """Linear CKA between every pair of blocks of ``model`` (or of ``model`` and ``other``) on ``data``.

    See :class:`~landscape.options.similarity.SimilarityOptions` for every other keyword.

    Args:
        model: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...), a ``Dataset``, ``DataLoader`` or list of
            ``(x, y)`` batches (the first ``samples`` images, in order), or None for the checkpoint's dataset (else
            digits).
        other: the second model (module, checkpoint path or source); None compares ``model`` with itself.
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.similarity.SimilarityOptions`, instead of keywords.
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
        run_similarity,
        "landscape.similarity",
        SimilarityOptions,
        model,
        data,
        options=options,
        fields=fields,
        batch=batch,
        other=other,
        out=out,
        device=device,
        force=force,
        progress=progress,
    )
