"""The life of an analysis's result file under one process or ``torchrun``: :class:`AnalysisFile`.

Every analysis opens its file on rank 0, tells every rank how far an earlier run got, does its work, marks the
file complete, closes it, waits for every rank, and hands the result to every rank. :class:`AnalysisFile` is
that sequence, once. Without a path (the Python API without ``out=``) the file lives in memory on rank 0 and
the result is sent to the other ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from landscape import store
from landscape.errors import LandscapeError
from landscape.runtime import distributed
from landscape.runtime.progress import Progress
from landscape.store.result import ResultFile

T = TypeVar("T")


class AnalysisFile(Generic[T]):
    """Open (or resume) a result file on rank 0 for a ``with`` body; mark it complete, close it, read it back.

    Rank 0 opens the file (:func:`landscape.store.open_result`, or a file in memory when ``out`` is None) and
    calls ``resume`` on it; ``resume``'s value (the resume state: what an earlier run finished; it must
    pickle) reaches every rank, and so does an error of opening or resuming
    (:func:`landscape.runtime.distributed.on_main`), after which rank 0 closes the file. The body gets
    ``(f, state)``: ``f`` the open file on rank 0 and ``None`` elsewhere, ``state`` the same on every rank.
    When the body ends normally rank 0 marks the file complete, the file is closed, every rank waits at the
    barrier and :attr:`result` holds the result on every rank; after an error the file is closed and the error
    raised as it comes, on each rank. The body must skip the work ``state`` says is done: a complete file is
    handed to it as it is, once its kind's check (the readers', ``Result.inconsistency``) finds it consistent;
    a complete file that contradicts itself (a point not done, say) is refused in one line.

    Args:
        out: the HDF5 result file, or None for a result held in memory only.
        kind: its result kind (its analysis declares it: :mod:`landscape.analyses.registry`).
        attrs: the root attributes of the run.
        force: replace a file of other options, and start again a file of this run that cannot be resumed (its
            ``resume`` refuses it: a file that fails its checks against itself or against the run).
        resume: the resume state of the opened file, computed on rank 0 (``None``: the state is ``None``).

    Attributes:
        result: the result, read back on every rank once the ``with`` block has ended normally (on a rank of
            another node, which cannot see rank 0's file, the attributes alone).

    Raises:
        LandscapeError: the file cannot be opened or resumed (on every rank), or the body's errors.
    """

    def __init__(
        self,
        out: str | Path | None,
        kind: str,
        attrs: Mapping[str, Any],
        *,
        force: bool = False,
        resume: Callable[[ResultFile], T] | None = None,
    ) -> None:
        self.out, self.kind, self.attrs, self.force, self.resume = out, kind, attrs, force, resume
        self.file: ResultFile | None = None
        self.result: store.Result | None = None

    def __enter__(self) -> tuple[ResultFile | None, T | None]:
        """Open the file on rank 0 and share its resume state; return ``(file or None, state)``."""
        opened: list[ResultFile] = []

        def open_file(again: bool = False) -> Any:
            if self.out is None:
                f = ResultFile.memory(self.kind, self.attrs)
            else:
                f = store.open_result(self.out, self.kind, self.attrs, force=self.force, again=again)
            opened[:] = [f]
            try:
                if self.out is not None and f.complete:
                    self._check_complete(f)
                return None if self.resume is None else self.resume(f)
            except LandscapeError:
                f.close()
                if not (self.force and f.resumed and not again):  # --force starts a refused file of this run again
                    raise
            except BaseException:
                f.close()
                raise
            return open_file(again=True)

        state = distributed.on_main(open_file)
        self.file = opened[0] if opened else None
        return self.file, state

    def _check_complete(self, f: ResultFile) -> None:
        """Refuse a complete file that contradicts itself, as the readers (``info``, ``plot``) refuse it.

        Raises:
            LandscapeError: the file is marked complete but its kind's check finds it inconsistent.
        """
        why = store.read_result(f.path).inconsistency()
        if why is not None:
            raise LandscapeError(
                f"{f.path} is marked complete but contradicts itself ({why}); it is left as it is: "
                "write the analysis elsewhere with --out"
            )

    def progress(
        self, desc: str, total: int | None, *, unit: str, done: int = 0, progress: bool | None = None
    ) -> Progress:
        """The :class:`~landscape.runtime.progress.Progress` of one phase of the work, recorded in the file's lock.

        Rank 0 records each change in the writer lock sidecar (:meth:`ResultFile.record_progress`), which
        ``landscape info`` reads while the run goes on; only rank 0 shows it.

        Args:
            desc: what the phase is, e.g. ``"surface"``.
            total: its units (None when unknown).
            unit: the unit's name, singular.
            done: units already done (a resumed file).
            progress: the run's tri-state (``False``: show nothing; the record is kept all the same).

        Returns:
            The progress, to use as a context manager.
        """
        record = self.file.record_progress if self.file is not None else None
        return Progress(desc, total, unit=unit, done=done, progress=progress, record=record)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Complete and close the file; after a normal end, wait for every rank and read the result back."""
        held: store.Result | None = None
        try:
            if error is None and self.file is not None:
                self.file.mark_complete()
                if self.out is None:
                    held = self.file.snapshot()
        finally:
            if self.file is not None:
                self.file.close()
        if error is not None:
            return
        distributed.barrier()
        if self.out is None:
            self.result = distributed.broadcast_object(held)
        elif Path(self.out).exists():
            self.result = store.read_result(self.out)
        else:  # a rank on another node: the file lives with rank 0, this rank gets its attributes only
            self.result = store.Result(Path(self.out), {"kind": self.kind, **self.attrs})
