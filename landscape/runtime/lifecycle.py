"""The life of an analysis's result file under one process or ``torchrun``: :func:`analysis_file`.

Every analysis opens its file on rank 0, tells every rank how far an earlier run got, does its work, marks the
file complete, closes it and waits for every rank before the file is read back. :func:`analysis_file` is that
sequence, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from landscape import store
from landscape.runtime import distributed

T = TypeVar("T")


@contextmanager
def analysis_file(
    out: str | Path,
    kind: str,
    attrs: Mapping[str, Any],
    *,
    force: bool = False,
    resume: Callable[[store.ResultFile], T] | None = None,
) -> Iterator[tuple[store.ResultFile | None, T | None]]:
    """Open (or resume) ``out`` on rank 0 for the body, then mark it complete, close it and wait for every rank.

    Rank 0 opens the file (:func:`landscape.store.result.open_result`) and calls ``resume`` on it; ``resume``'s value
    (the resume state: what an earlier run finished; it must pickle) reaches every rank, and so does an error
    of opening or resuming (:func:`landscape.runtime.distributed.on_main`), after which rank 0 closes the file. The
    body gets ``(f, state)``: ``f`` the open file on rank 0 and ``None`` elsewhere, ``state`` the same on every
    rank. When the body ends normally rank 0 marks the file complete; the file is always closed; then every
    rank waits at the barrier (not after an error, which each rank raises as it comes). The body must skip
    the work ``state`` says is done: a complete file is handed to it as it is.

    Args:
        out: the HDF5 result file.
        kind: its result kind (its analysis declares it: :mod:`landscape.analyses.registry`).
        attrs: the root attributes of the run.
        force: replace a file of other options.
        resume: the resume state of the opened file, computed on rank 0 (``None``: the state is ``None``).

    Yields:
        ``(f, state)``.

    Raises:
        LandscapeError: the file cannot be opened or resumed (on every rank), or the body's errors.
    """
    opened: list[store.ResultFile] = []

    def open_file() -> Any:
        f = store.open_result(out, kind, attrs, force=force)
        opened.append(f)
        try:
            return None if resume is None else resume(f)
        except BaseException:
            f.close()
            raise

    state = distributed.on_main(open_file)
    f = opened[0] if opened else None
    try:
        yield f, state
        if f is not None:
            f.mark_complete()
    finally:
        if f is not None:
            f.close()
    distributed.barrier()
