"""Curvature per block: the top eigenvalue and the trace of each diagonal Hessian block ``H[block, block]``.

A block is a named group of parameters: the parameters of one block of the model as
:class:`~landscape.models.taps.FeatureTaps` finds them (:func:`model_blocks`), or the parameters matching
name patterns (:func:`pattern_blocks`). For each block :func:`block_curvature` builds the
:class:`~landscape.analyses.hessian.operator.HessianOperator` restricted to the block's parameters (every other
parameter held at the evaluation point), which is exactly the diagonal block ``H[block, block]`` of the full
Hessian, and runs :func:`~landscape.analyses.hessian.lanczos.lanczos` (top eigenvalue, with residual and error
estimate) and :func:`~landscape.analyses.hessian.trace.trace` (Hutch++ by default, with a standard error) on it.

How the blocks of a model map to parameter names (:func:`model_blocks`), in the features' forward order:

- a feature named after a module (``layer1.0``, ``stem``, ``patch_embed``) owns every parameter under that module
  path (``layer1.0.*``);
- the two halves of a transformer block ``X`` (features ``X.msa`` and ``X.mlp``, as the zoo's ViTs and the timm and
  torchvision rules name them): the MLP half owns ``X``'s children from the first of ``norm2``, ``ln_2`` or ``mlp``
  in registration order onwards (``norm2``, ``mlp``, ``ls2``, ...; the same split as the taps' MSA site), and ``X``'s
  own parameters whose names end in ``2`` (BEiT's ``gamma_2``); the MSA half owns the rest of ``X`` (``norm1``,
  ``attn``, ...);
- a stem or embedding feature whose module holds no parameter (timm ResNets' stem is read at the input of
  ``layer1`` and named after ``maxpool``) owns the unassigned parameters registered before the first parameter of
  the next block (``conv1``, ``bn1``); any other feature without parameters (a tapped activation) owns none;
- a module called several times (``name[1]``, ...) is one block;
- each parameter belongs to the first block in forward order that claims it (nested taps: the inner block first);
- the parameters outside every block (a ViT's ``cls_token``, ``pos_embed``, final ``norm`` and ``head``, a ResNet's
  ``fc``) form a last block named ``other`` (kind ``"other"``), or are left out with ``other=None``;
- a block left without parameters is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from landscape.analyses.hessian.operators import curvature_operator, eigenpairs
from landscape.analyses.hessian.trace import trace
from landscape.core.objective import Objective
from landscape.errors import LandscapeError
from landscape.models.taps import FeatureTaps
from landscape.options.names import select

#: the children of a transformer block from which on its MLP half runs (the first of them in registration order)
MLP_HALF_STARTS = ("norm2", "ln_2", "mlp")
#: the kinds of feature that own the parameters registered before the next block when their module holds none
STEM_KINDS = ("stem", "embed")
#: the block kind of the parameters outside every block
OTHER_KIND = "other"


@dataclass(frozen=True)
class ParameterBlock:
    """A named group of parameters whose diagonal Hessian block is analysed.

    Attributes:
        name: the block's name (a FeatureTaps feature name, a pattern group's name, or ``other``).
        kind: the feature's kind (``stem``, ``conv``, ``msa``, ``mlp``, ...), ``"pattern"`` or ``"other"``.
        names: the parameter names (of ``model.named_parameters()``), in the model's order.
    """

    name: str
    kind: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class BlockCurvature:
    """The top eigenvalue and the trace of one diagonal Hessian block.

    Attributes:
        block: the block.
        size: the number of parameter entries ``n_block`` (the block is ``n_block x n_block``).
        top_eigenvalue: ``lambda_max(H[block, block])`` (Lanczos, largest algebraic).
        residual: ``||H y - lambda y||`` of the Ritz pair.
        error: the estimated eigenvalue error ``min(r, r^2 / gap)``.
        converged: whether the eigenvalue met the tolerance.
        eigen_products: the block products Lanczos used.
        trace: the estimate of ``tr(H[block, block])``.
        trace_stderr: its standard error.
        trace_products: the block products the trace used.
        trace_method: ``"hutch++"`` or ``"hutchinson"``.
        symmetry_defect: the largest relative asymmetry of the block's products Lanczos measured.
        finite_difference_step: the step of the block's central differences (NaN for exact products).
        finite_difference_error: their predicted relative error, the two-step estimate (NaN for exact products).
    """

    block: ParameterBlock
    size: int
    top_eigenvalue: float
    residual: float
    error: float
    converged: bool
    eigen_products: int
    trace: float
    trace_stderr: float
    trace_products: int
    trace_method: str
    symmetry_defect: float = float("nan")
    finite_difference_step: float = float("nan")
    finite_difference_error: float = float("nan")


# ------------------------------------------------------------------------------------------------ blocks
def pattern_blocks(
    names: Sequence[str], groups: Mapping[str, Sequence[str] | str], *, other: str | None = OTHER_KIND
) -> list[ParameterBlock]:
    """Blocks from parameter-name patterns: ``{block name: patterns}``, each parameter in the first group matching it.

    Patterns are those of :func:`~landscape.options.names.select` (globs, names, dotted
    prefixes).

    Args:
        names: the parameter names, in order (e.g. ``list(objective.params)``).
        groups: block name -> one pattern or a list of patterns, in the blocks' order.
        other: the name of the block of the parameters no group matches; None leaves them out.

    Returns:
        The blocks (kind ``"pattern"``; the rest ``"other"``), each with its names in the order of ``names``.

    Raises:
        LandscapeError: a group named as the block of the rest (``other``), a group whose patterns match no
            parameter, or only parameters of earlier groups.
    """
    if other is not None and other in groups:
        raise LandscapeError(
            f"block {other!r} is the name of the block of the parameters no group matches; give your block another name"
        )
    taken: set[str] = set()
    blocks = []
    for block, patterns in groups.items():
        if not (patterns if isinstance(patterns, str) else list(patterns)):
            raise LandscapeError(f"block {block!r} has no patterns; give it parameter names or globs")
        chosen = [n for n in select(names, patterns) if n not in taken]
        if not chosen:
            raise LandscapeError(f"block {block!r}: every parameter its patterns match belongs to an earlier block")
        taken.update(chosen)
        blocks.append(ParameterBlock(block, "pattern", tuple(chosen)))
    return blocks + _other(names, taken, other)


def _other(names: Sequence[str], taken: set[str], other: str | None) -> list[ParameterBlock]:
    rest = tuple(n for n in names if n not in taken)
    return [ParameterBlock(other, OTHER_KIND, rest)] if rest and other is not None else []


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Every submodule in eval mode for the duration, each one's own mode restored afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.train(training)


def _under(names: Sequence[str], prefix: str) -> list[str]:
    return [n for n in names if n.startswith(prefix + ".")]


def _halves(model: nn.Module, block: str, names: Sequence[str]) -> dict[str, list[str]]:
    """The parameters of transformer block ``block`` split into its MSA half and its MLP half."""
    module = model.get_submodule(block)
    children = [c for c, _ in module.named_children()]
    start = next((i for i, c in enumerate(children) if c in MLP_HALF_STARTS), len(children))
    mlp_children = set(children[start:])
    mlp = []
    for n in _under(names, block):
        head = n[len(block) + 1 :].split(".", 1)[0]
        own = "." not in n[len(block) + 1 :]
        if head in mlp_children or (own and head.endswith("2")):
            mlp.append(n)
    return {"mlp": mlp, "msa": [n for n in _under(names, block) if n not in set(mlp)]}


def model_blocks(
    model: nn.Module,
    inputs: Tensor,
    *,
    taps: Sequence[str] | Sequence[tuple[str, str]] | None = None,
    other: str | None = OTHER_KIND,
) -> list[ParameterBlock]:
    """The blocks :class:`~landscape.models.taps.FeatureTaps` finds in ``model``, as groups of parameter names.

    Runs ``model(inputs)`` once through the taps, in eval mode and without gradients (every submodule's mode is
    restored; parameters and buffers are not changed), and maps each feature to parameter names by module prefix
    as the module docstring describes.

    Args:
        model: the network.
        inputs: a batch of inputs the model accepts (one sample is enough), on the model's device and dtype.
        taps: ``'PATTERN=KIND'`` items that replace the family rules (see :class:`FeatureTaps`).
        other: the name of the block of the parameters outside every block; None leaves them out.

    Returns:
        The blocks in forward order (then ``other``), each with its parameter names in the model's order.

    Raises:
        LandscapeError: the model is of no known family and no taps are given (FeatureTaps' message), or a
            tapped output cannot be read.
    """
    names = [n for n, _ in model.named_parameters()]
    with _eval_mode(model), torch.no_grad():
        features = [(f.name, f.kind) for f in FeatureTaps(model, taps)(inputs)]
    modules = dict(model.named_modules())
    seen: dict[str, str] = {}
    for name, kind in features:
        seen.setdefault(re.sub(r"\[\d+\]$", "", name), kind)
    claims: dict[str, list[str]] = {}
    for name in seen:
        parent, _, half = name.rpartition(".")
        if half in ("msa", "mlp") and parent in modules and {f"{parent}.msa", f"{parent}.mlp"} <= seen.keys():
            claims[name] = _halves(model, parent, names)[half]
        else:
            claims[name] = _under(names, name) if name in modules else []
    owner: dict[str, str] = {}
    for name, claimed in claims.items():
        for n in claimed:
            owner.setdefault(n, name)
    order = list(seen)
    position = {n: i for i, n in enumerate(names)}
    for i, name in enumerate(order):
        if claims[name] or seen[name] not in STEM_KINDS:
            continue
        later = [position[n] for n, o in owner.items() if o in order[i + 1 :]]
        limit = min(later) if later else -1
        for n in names[: max(limit, 0)]:
            owner.setdefault(n, name)
    blocks = [
        ParameterBlock(name, seen[name], tuple(n for n in names if owner.get(n) == name))
        for name in order
        if any(owner.get(n) == name for n in names)
    ]
    return blocks + _other(names, set(owner), other)


def objective_blocks(
    objective: Objective,
    *,
    taps: Sequence[str] | Sequence[tuple[str, str]] | None = None,
    other: str | None = OTHER_KIND,
) -> list[ParameterBlock]:
    """:func:`model_blocks` of an objective's model (its own copy, run on two inputs of its first batch).

    Args:
        objective: the objective; only its variable params are kept in the blocks.
        taps: ``'PATTERN=KIND'`` items that replace the family rules.
        other: the name of the block of the variable params outside every block; None leaves them out.

    Returns:
        The blocks restricted to ``objective.params`` (blocks left empty dropped).

    Raises:
        LandscapeError: as :func:`model_blocks`.
    """
    blocks = model_blocks(objective.module, objective.batches[0][0][:2], taps=taps, other=other)
    return restrict_blocks(blocks, list(objective.params))


def restrict_blocks(blocks: Sequence[ParameterBlock], names: Sequence[str]) -> list[ParameterBlock]:
    """The blocks with only the given parameter names (e.g. an objective's variable params); empty ones dropped.

    Args:
        blocks: the blocks.
        names: the parameter names to keep.

    Returns:
        The restricted blocks, in order.
    """
    keep = set(names)
    out = [ParameterBlock(b.name, b.kind, tuple(n for n in b.names if n in keep)) for b in blocks]
    return [b for b in out if b.names]


# --------------------------------------------------------------------------------------------- curvature
def block_curvature(
    objective: Objective,
    blocks: Sequence[ParameterBlock],
    *,
    tol: float = 1e-6,
    ncv: int | None = None,
    maxiter: int | None = None,
    trace_samples: int = 60,
    trace_method: str = "hutch++",
    seed: int = 0,
    mode: str = "auto",
    batches: Sequence[int] | None = None,
    operator: str = "hessian",
) -> list[BlockCurvature]:
    """``lambda_max(H[B, B])`` and ``tr(H[B, B])`` for every block ``B``, ``H`` the objective's Hessian at its params.

    ``H[B, B]`` is the :class:`~landscape.analyses.hessian.operator.HessianOperator` over the block's parameters
    (all others held fixed): ``sum_b (N_b / N) d^2 L_b / d theta_B^2 + d^2 R / d theta_B^2``; with ``operator``
    another curvature operator's diagonal block (:mod:`landscape.analyses.hessian.operators`). Lanczos
    (largest algebraic, ``k = 1``; K-FAC's exactly from its factors) gives the top eigenvalue with its residual; the
    trace estimator spends
    ``trace_samples`` products (Hutch++ is exact once ``trace_samples // 3 >= n_block``: its sketch then spans
    the block).

    Args:
        objective: the loss and the evaluation point.
        blocks: the blocks (:func:`model_blocks`, :func:`objective_blocks`, :func:`pattern_blocks`); every name must
            be one of ``objective.params``.
        tol: Lanczos' tolerance on the relative residual ``||H y - lambda y|| / |lambda|``.
        ncv: Lanczos' basis size (default ``min(n_block, 20)``).
        maxiter: Lanczos' restarts at most.
        trace_samples: products per trace estimate (Hutch++ >= 6, Hutchinson >= 2).
        trace_method: ``"hutch++"`` or ``"hutchinson"``.
        seed: seed of the start vectors and probes (private generators).
        mode: how the Hessian-vector products are made (see ``HessianOperator``).
        batches: the objective's batches to use (default all).
        operator: the curvature operator, one of :data:`~landscape.options.hessian.OPERATORS`.

    Returns:
        One :class:`BlockCurvature` per block, in order.

    Raises:
        LandscapeError: no blocks, a block with no names or with a name not among the objective's params, or
            any error of the operator, Lanczos or the trace estimator.
    """
    if not blocks:
        raise LandscapeError("no blocks to analyse; give at least one group of parameter names")
    results = []
    for block in blocks:
        unknown = [n for n in block.names if n not in objective.params]
        if not block.names or unknown:
            what = f"names not among the objective's parameters: {unknown[:3]}" if unknown else "no parameters"
            raise LandscapeError(f"block {block.name!r} has {what}")
        op = curvature_operator(objective, operator, patterns=list(block.names), mode=mode, batches=batches)
        if set(op.names) != set(block.names):  # a name with glob characters matched others too
            raise LandscapeError(f"block {block.name!r}: its parameter names select other parameters as globs")
        eig = eigenpairs(op, 1, "LA", tol=tol, ncv=ncv, maxiter=maxiter, seed=seed, return_eigenvectors=False)
        estimate = trace(op, trace_samples, trace_method, seed=seed)
        hessian = getattr(op, "hessian", op)  # the residual's products by differences are its Hessian part's
        step = getattr(getattr(hessian, "costs", None), "step", None)  # None for exact products and other operators
        results.append(
            BlockCurvature(
                block=block,
                size=op.shape[0],
                top_eigenvalue=float(eig.eigenvalues[-1]),
                residual=float(eig.residuals[-1]),
                error=float(eig.errors[-1]),
                converged=bool(eig.converged[-1]),
                eigen_products=eig.n_matvec,
                trace=estimate.estimate,
                trace_stderr=estimate.stderr,
                trace_products=estimate.n_matvec,
                trace_method=trace_method,
                symmetry_defect=eig.symmetry_defect,
                finite_difference_step=step.step if step is not None else float("nan"),
                finite_difference_error=step.error if step is not None else float("nan"),
            )
        )
        op.clear_cache()
    return results
