"""The ``blocks/`` section of a hessian file (``landscape hessian --per-block``): curvature per block, block by block.

For every block ``B`` (the model's blocks as its feature taps find them, or ``--block NAME=PATTERNS`` groups;
:mod:`landscape.analyses.hessian.blocks`) the top eigenvalue ``lambda_max(H[B, B])`` and the trace
``tr(H[B, B])`` of the diagonal Hessian block are written to one row of the section's arrays and flushed, and
``blocks/done[i]`` is set: a killed run resumes at the next block with the same numbers (every block's start
vector and probes come from the run's seed alone). Under torchrun the blocks are shared among ranks and only
rank 0 writes. Arrays: docs/schema.md (hessian).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from landscape import store
from landscape.analyses.hessian.blocks import (
    BlockCurvature,
    ParameterBlock,
    block_curvature,
    objective_blocks,
    pattern_blocks,
    restrict_blocks,
)
from landscape.core.objective import Objective
from landscape.errors import LandscapeError
from landscape.options.hessian import HessianOptions
from landscape.options.names import matches_any
from landscape.runtime import distributed as D
from landscape.runtime.progress import Progress
from landscape.store.attrs import as_str

#: the group of the section in the hessian file
GROUP = "blocks"
#: the per-block numbers written, by array name: how each is read from a :class:`BlockCurvature`
COLUMNS: dict[str, tuple[str, Callable[[BlockCurvature], float]]] = {
    "size": ("i8", lambda c: c.size),
    "top_eigenvalue": ("f8", lambda c: c.top_eigenvalue),
    "residual": ("f8", lambda c: c.residual),
    "converged": ("?", lambda c: c.converged),
    "eigen_n_matvec": ("i8", lambda c: c.eigen_products),
    "trace": ("f8", lambda c: c.trace),
    "trace_stderr": ("f8", lambda c: c.trace_stderr),
    "trace_n_matvec": ("i8", lambda c: c.trace_products),
    "symmetry_defect": ("f8", lambda c: c.symmetry_defect),
    "finite_difference_step": ("f8", lambda c: c.finite_difference_step),
    "finite_difference_error": ("f8", lambda c: c.finite_difference_error),
}


def hessian_blocks(objective: Objective, options: HessianOptions, names: Sequence[str]) -> list[ParameterBlock]:
    """The blocks of ``--per-block``: the ``--block`` groups, else the model's blocks by its feature taps (``--taps``).

    Args:
        objective: the loss (its model and first batch find the taps' blocks).
        options: the ``--block`` groups or the ``--taps``, if any.
        names: the parameters of the Hessian (``--params``); the blocks keep only these.

    Returns:
        The blocks, in the model's forward order (taps) or the order given (groups), the rest as ``other``.

    Raises:
        LandscapeError: a group that matches no parameter or only parameters outside ``--params``, or no block
            left among ``names``.
    """
    groups = options.block_groups
    if groups:
        for block, patterns in groups.items():  # a group of the model's parameters that --params leaves out
            inside = [n for n in names if matches_any(n, patterns)]
            outside = [n for n in objective.params if matches_any(n, patterns) and n not in names]
            if not inside and outside:
                raise LandscapeError(
                    f"--block {block}: its patterns match only parameters outside --params {options.params} "
                    f"(such as {outside[0]!r}); widen --params or drop the block"
                )
        blocks = pattern_blocks(list(names), groups)
    else:
        blocks = restrict_blocks(objective_blocks(objective, taps=list(options.taps) or None), names)
    if not blocks:
        raise LandscapeError("--per-block found no block among the Hessian's parameters; widen --params")
    return blocks


def write_blocks(
    f: store.ResultFile | None,
    objective: Objective,
    blocks: Sequence[ParameterBlock],
    options: HessianOptions,
    *,
    on_block: Callable[[int], None] | None = None,
    progress: bool | None = None,
) -> None:
    """Compute and write every block's curvature not yet in ``f`` (rank 0's file; None on the other ranks).

    Each block's Lanczos (largest algebraic, ``--tol``, ``--ncv``, ``--maxiter``) and trace (``--trace-samples``
    by ``--trace-method``) run with the seed ``--seed``; the products of ``--operator`` by ``--hvp``.

    Args:
        f: the open hessian file on rank 0, else None.
        objective: the loss and the evaluation point.
        blocks: the blocks (:func:`hessian_blocks`), the same on every rank.
        options: the solver options.
        on_block: called on every rank with a block's index once its row is written.
        progress: the run's progress tri-state (:class:`~landscape.runtime.progress.Progress`; ``False``: none).

    Raises:
        LandscapeError: a file whose blocks differ from ``blocks`` (another model), or an error of the solvers.
    """
    done = D.broadcast_object(_allocate(f, blocks) if f is not None else None)
    todo = [i for i in range(len(blocks)) if not done[i]]
    record = f.record_progress if f is not None else None
    with Progress(
        "blocks", len(blocks), unit="block", done=len(blocks) - len(todo), progress=progress, record=record
    ) as bar:
        for start in range(0, len(todo), D.world_size()):
            mine = D.shard(todo[start : start + D.world_size()])
            rows = [(i, _curvature(objective, blocks[i], options)) for i in mine]
            for i, row in sorted((r for part in D.all_gather_objects(rows) for r in part), key=lambda r: r[0]):
                if f is not None:
                    for name, value in row.items():
                        f.write_at(f"{GROUP}/{name}", i, value)
                    f.mark_done(f"{GROUP}/done", i)
                bar.update(1)
                if on_block is not None:
                    on_block(i)


def _curvature(objective: Objective, block: ParameterBlock, options: HessianOptions) -> dict[str, float]:
    """One block's numbers, by array name."""
    (c,) = block_curvature(
        objective,
        [block],
        tol=options.tol,
        ncv=options.ncv,
        maxiter=options.maxiter,
        trace_samples=options.trace_samples,
        trace_method=options.trace_method,
        seed=options.seed,
        mode=options.hvp,
        operator=options.operator,
    )
    return {name: read(c) for name, (_, read) in COLUMNS.items()}


def _allocate(f: store.ResultFile, blocks: Sequence[ParameterBlock]) -> list[bool]:
    """Rank 0: the section's arrays (kept when resuming, checked against ``blocks``); which blocks are done."""
    n = len(blocks)
    names = [b.name for b in blocks]
    if f"{GROUP}/names" in f:
        held = [as_str(x) for x in f.read(f"{GROUP}/names")]
        if held != names:
            raise LandscapeError(f"the blocks of {f.path} are not this model's; recompute it with --force")
    else:
        f.write(f"{GROUP}/names", np.asarray(names, dtype=str), axes=["block"])
        f.write(f"{GROUP}/kinds", np.asarray([b.kind for b in blocks], dtype=str), axes=["block"])
        f.write(f"{GROUP}/depth", np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1), axes=["block"])
        f.set_attrs({"parameters": {b.name: list(b.names) for b in blocks}}, at=GROUP)
    for name, (dtype, _) in COLUMNS.items():
        fill = np.nan if dtype == "f8" else (False if dtype == "?" else 0)
        f.allocate(f"{GROUP}/{name}", (n,), dtype, fill=fill, axes=["block"])
    f.allocate(f"{GROUP}/done", (n,), bool, fill=False, axes=["block"])
    return [bool(x) for x in f.read(f"{GROUP}/done")]
