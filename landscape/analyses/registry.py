"""The registry of analyses: each analysis declares itself once, and ``plot``, ``info`` and ``report`` read it.

An analysis registers an :class:`Analysis` in its package's ``__init__`` (which imports nothing heavier than its
options and its summary, so that reading the registry never imports torch)::

    register_analysis(Analysis(kind="surface", title="Loss surface", ...))

What an entry declares: the result kind its files carry, its title and one-sentence description, its command
and options class, its runner and Python function (``"module:function"`` references, imported when used), the
module that draws its figures (``check(result)``, ``figures(results, **options)`` and ``plot(results, out_dir,
fmt, **options)``), the one-line summary of a result file for ``landscape info``, the command line and the report,
its docs page, and what a :class:`~landscape.store.read.Result` of its kind offers in Python: the coordinates of
its axes and its tables (:class:`Table`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from landscape.errors import LandscapeError

if TYPE_CHECKING:
    from landscape.store.read import Result


@dataclass(frozen=True)
class Table:
    """A table of a result kind (``Result.table(name)``): one row per entry of some axes, one column per array.

    Either ``axes`` and ``columns`` (arrays) or ``rows`` (a function of the result) make it. The rows of an
    array table are every combination of its ``axes`` (in that order, the first varying slowest), indexed by
    each axis's coordinates (the kind's :attr:`Analysis.coords`; numbered from 0 for an axis without them);
    each column is an array whose ``axes`` are among them (repeated along the others), named by the last part
    of its path. A column the result lacks is left out; a result that lacks them all has no such table.

    Attributes:
        description: what a row is, one phrase (named when a result lacks the table).
        axes: the axes whose entries are the rows, e.g. ``("split", "point")``.
        columns: the arrays, by path, e.g. ``("line/loss", "line/accuracy", "line/done")``.
        rows: instead of arrays, a function of the result that returns its rows (dicts of the same keys);
            no rows (``[]``): the result has no such table.
        index: the keys of ``rows`` that name a row (the table's index).
    """

    description: str
    axes: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    rows: Callable[[Result], list[dict[str, Any]]] | None = None
    index: tuple[str, ...] = ()


@dataclass(frozen=True)
class Analysis:
    """One analysis, as the rest of the toolkit sees it.

    Attributes:
        kind: the result kind its files carry (their ``kind`` attribute), e.g. ``"surface"``; for an analysis
            whose output is not a result file (:attr:`output`), just its name.
        title: its name in the report and the docs, e.g. ``"Loss surface"``.
        description: one sentence of what it computes.
        summary: one line on a result file of this kind (what it holds, its key numbers), for ``landscape
            info``, the command line and the report; it must accept an unfinished file.
        numbers: the report's summary-table cells of a file (column name -> text), or None; the table's
            columns are those of every registered analysis, in order.
        figures: the module that draws its figures, or its dotted name, imported when figures are drawn:
            ``check(result)`` raises a one-line error for a file whose arrays do not fit, optionally
            ``consistent(result)`` the part of it that an unfinished file passes too (its arrays agree with each
            other and its attributes; read by :func:`summarize`), ``figures(results, **options)`` yields each
            ``(name, matplotlib Figure)`` (the name is its file's, without the suffix; the first is the kind's
            main figure) and ``plot(results, out_dir, fmt, **options)`` writes them and returns the paths
            written; optionally ``overlaid(result)`` (may the file
            join a figure of several models; default yes) and ``interactive(result, plotly) -> str | None`` (an
            HTML view for the report).
        options: its options class (torch-free, validated when built), or None.
        run: ``"module:function"`` of its runner (a model source and options in, a result file out).
        api: ``"module:function"`` of its Python function, offered as ``landscape.<name>``; None for none.
        command: its command line (``landscape <command>``), or None.
        docs: its page in the docs, e.g. ``"analyses.md#surface"``.
        order: its place in the report's sections and the docs' list (smaller first).
        coords: the array that holds the coordinates of each of its axes, axis -> path (e.g. ``{"x":
            "xcoordinates"}``): the coordinates of ``Result.to_xarray`` and the index of its tables.
        tables: its tables by name (``Result.table``), the first the default.
        output: None when it writes result files of :attr:`kind`; else what it writes instead (e.g. ``"a
            checkpoint"``): it then has no result kind (:func:`kinds`), nothing to summarise or draw.
    """

    kind: str
    title: str
    description: str
    summary: Callable[[Result], str] | None = None
    figures: str | ModuleType | Any = None
    numbers: Callable[[Result], dict[str, str]] | None = None
    options: type | None = None
    run: str | None = None
    api: str | None = None
    command: str | None = None
    docs: str = ""
    order: int = 100
    extra: dict[str, Any] = field(default_factory=dict)
    coords: dict[str, str] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    output: str | None = None

    def figure_module(self) -> Any:
        """The module (or object) with ``check`` and ``plot`` that draws this kind's figures."""
        return importlib.import_module(self.figures) if isinstance(self.figures, str) else self.figures

    def runner(self) -> Callable[..., Any]:
        """The runner function (imported on first use).

        Raises:
            LandscapeError: the analysis declares no runner.
        """
        if self.run is None:
            raise LandscapeError(f"analysis {self.kind!r} has no runner")
        return load(self.run)


_REGISTRY: dict[str, Analysis] = {}


def register_analysis(analysis: Analysis) -> Analysis:
    """Add ``analysis`` to the registry (once per kind); return it.

    Args:
        analysis: the declaration.

    Returns:
        ``analysis``.

    Raises:
        ValueError: another analysis already declared the same kind.
    """
    held = _REGISTRY.get(analysis.kind)
    if held is not None and held != analysis:
        raise ValueError(f"result kind {analysis.kind!r} is declared twice")
    _REGISTRY[analysis.kind] = analysis
    return analysis


def unregister_analysis(kind: str) -> None:
    """Remove the analysis of ``kind`` (for tests that register their own).

    Args:
        kind: the result kind.
    """
    _REGISTRY.pop(kind, None)


def analyses() -> list[Analysis]:
    """Every registered analysis, in report order (then registration order).

    Returns:
        The declarations.
    """
    _load_builtin()
    ordered = list(_REGISTRY.values())
    return sorted(ordered, key=lambda a: a.order)


def kinds() -> tuple[str, ...]:
    """The result kinds of every registered analysis that writes result files, in report order.

    Returns:
        The kinds, e.g. ``("surface", "hessian", ...)``.
    """
    return tuple(a.kind for a in analyses() if a.output is None)


def _writer(kind: str) -> Analysis | None:
    """The registered analysis that writes result files of ``kind``, or None."""
    _load_builtin()
    item = _REGISTRY.get(kind)
    return item if item is not None and item.output is None else None


def analysis_of(kind: str) -> Analysis:
    """The analysis that writes result files of ``kind``.

    Args:
        kind: the result kind (a file's ``kind`` attribute).

    Returns:
        The declaration.

    Raises:
        LandscapeError: no registered analysis writes that kind.
    """
    item = _writer(kind)
    if item is None:
        instead = _REGISTRY.get(kind)
        what = f"landscape {instead.command or kind} writes {instead.output}, not a result file; " if instead else ""
        raise LandscapeError(f"no analysis writes result kind {kind!r} ({what}the kinds are {', '.join(kinds())})")
    return item


def inconsistency(result: Result) -> str | None:
    """Why a result file contradicts itself, by its kind's ``consistent(result)``; None when it does not.

    Args:
        result: a result file read into memory.

    Returns:
        The first line of the error ``consistent`` raises (e.g. a ``loss`` of another shape than its
        coordinates, or a file marked complete with points not done), or None (also for a kind no analysis
        writes, or whose figure module has no ``consistent``).
    """
    item = _writer(result.kind)
    consistent = getattr(item.figure_module(), "consistent", None) if item is not None else None
    if consistent is None:
        return None
    try:
        consistent(result)
    except LandscapeError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def summarize(result: Result) -> str:
    """The one-line summary of a result file by its analysis, or why there is none.

    Args:
        result: a result file read into memory.

    Returns:
        The analysis's summary; for a kind no analysis writes, a file that contradicts itself
        (:func:`inconsistency`), or arrays its summary cannot read, a line that says so.
    """
    item = _writer(result.kind)
    if item is None:
        return f"no analysis writes result kind {result.kind!r}"
    why = inconsistency(result)
    if why is not None:
        return f"{item.title}: inconsistent file, not summarised: {why}"
    try:
        return item.summary(result)
    except (TypeError, ValueError, KeyError, IndexError, ArithmeticError) as exc:
        return f"{item.title}: the arrays do not fit ({type(exc).__name__})"


def numbers_of(result: Result) -> dict[str, str]:
    """The key numbers of a result file by its analysis (the report's summary-table cells), or none.

    Args:
        result: a result file read into memory.

    Returns:
        Column name -> text (see :attr:`Analysis.numbers`); ``{}`` for a kind no analysis writes, an analysis
        without numbers, a file that contradicts itself (:func:`inconsistency`) or arrays that do not fit.
    """
    item = _writer(result.kind)
    if item is None or item.numbers is None or inconsistency(result) is not None:
        return {}
    try:
        return item.numbers(result)
    except (TypeError, ValueError, KeyError, IndexError, ArithmeticError):
        return {}


def load(ref: str) -> Callable[..., Any]:
    """The object a ``"module:name"`` reference names (the module imported when needed).

    Args:
        ref: e.g. ``"landscape.analyses.surface.run:run_surface"``.

    Returns:
        The object.
    """
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _load_builtin() -> None:
    """Import the toolkit's own analyses (their packages register them; none imports torch)."""
    importlib.import_module("landscape.analyses")
