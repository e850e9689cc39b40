"""What a :class:`~landscape.store.read.Result` shows of itself, from its kind's registration (no figures here).

Its short ``repr`` (kind, one-line summary, arrays and their shapes), its summary and report cells, its tables
(:class:`~landscape.analyses.registry.Table`, as pandas) and the xarray dataset of every array that names its
axes. The store loads this module by name when a result is asked for one of them (it sits below the analyses).
pandas and xarray are optional (the ``xarray`` extra) and imported only here, when a table or a dataset is made.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from landscape.analyses.registry import Analysis, Table, analyses, summarize
from landscape.analyses.registry import inconsistency as registry_inconsistency
from landscape.errors import LandscapeError, one_line
from landscape.store.read import Result

#: the extra that brings pandas and xarray
EXTRA = "xarray"
#: a top-level group of more arrays than this is one entry of the repr (e.g. one array per parameter)
GROUP_ENTRIES = 6
#: the repr's lines are cut at this width
WIDTH = 110
#: the most array lines of the repr (the rest is counted)
ARRAY_LINES = 6


def _analysis(result: Result) -> Analysis | None:
    """The registered analysis of the result's kind, or None."""
    return next((a for a in analyses() if a.kind == result.kind), None)


def optional(module: str, what: str) -> Any:
    """Import the optional dependency ``module``, or a one-line error naming the extra that brings it.

    Args:
        module: ``"pandas"`` or ``"xarray"``.
        what: what needs it, e.g. ``"Result.table"``.

    Returns:
        The module.

    Raises:
        LandscapeError: it is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LandscapeError(
            f"{what} needs {module}, which is not installed; pip install 'landscape[{EXTRA}]' (or pip install {module})"
        ) from None


# ------------------------------------------------------------------------------------------------ text
def summary(result: Result) -> str:
    """The one-line summary of the result's analysis (:func:`landscape.analyses.registry.summarize`).

    Args:
        result: a result.

    Returns:
        The line.
    """
    return summarize(result)


def inconsistency(result: Result) -> str | None:
    """Why the result contradicts itself (:func:`landscape.analyses.registry.inconsistency`), or None.

    Args:
        result: a result.

    Returns:
        The first line of the contradiction, or None.
    """
    return registry_inconsistency(result)


def numbers(result: Result) -> dict[str, str]:
    """The result's cells of the report's summary table, by its analysis's ``numbers``.

    Args:
        result: a result.

    Returns:
        Column -> text; empty for a kind that declares none, or arrays its ``numbers`` cannot read.
    """
    item = _analysis(result)
    if item is None or item.numbers is None:
        return {}
    try:
        return dict(item.numbers(result))
    except (TypeError, ValueError, KeyError, IndexError, ArithmeticError):
        return {}


def shape_text(result: Result, name: str) -> str:
    """An array's shape, each length named by its axis where the array names them: ``(y: 21, x: 21)``.

    Args:
        result: a result.
        name: the array's path.

    Returns:
        The shape in words.
    """
    shape = result[name].shape
    axes = result.axes.get(name)
    if axes is None or len(axes) != len(shape):
        return str(tuple(shape))
    return "(" + ", ".join(f"{a}: {n}" for a, n in zip(axes, shape)) + ")"


def array_entries(result: Result) -> list[str]:
    """The arrays of a result in short: ``name (axis: length, ...)``; a big top-level group in one entry.

    A top-level group of more than :data:`GROUP_ENTRIES` arrays (one per parameter, per layer) is one entry,
    ``group/: N arrays, M values``.

    Args:
        result: a result.

    Returns:
        The entries, in the file's order.
    """
    groups: dict[str, list[str]] = {}
    for name in result.arrays:
        top = name.partition("/")[0] if "/" in name else ""
        groups.setdefault(top, []).append(name)
    entries: list[str] = []
    for top, names in groups.items():
        if top and len(names) > GROUP_ENTRIES:
            values = sum(result[n].size for n in names)
            entries.append(f"{top}/: {len(names)} arrays, {values} values")
        else:
            entries += [f"{n} {shape_text(result, n)}" for n in names]
    return entries


def _wrapped(entries: list[str], indent: str, lines: int) -> list[str]:
    """``entries`` joined by ``, `` into at most ``lines`` lines of :data:`WIDTH` characters; the rest counted."""
    out: list[str] = []
    line = ""
    for i, entry in enumerate(entries):
        piece = entry if not line else f"{line}, {entry}"
        if line and len(indent) + len(piece) > WIDTH:
            if len(out) + 1 == lines:
                out.append(f"{indent}{line}, ... ({len(entries) - i} more)")
                return out
            out.append(indent + line)
            piece = entry
        line = piece
    if line:
        out.append(indent + line)
    return out


def _cut(text: str, width: int = WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def short_repr(result: Result) -> str:
    """A result in a few lines: its kind and file, its one-line summary, its arrays with their shapes.

    Args:
        result: a result.

    Returns:
        At most about ten lines (never every value, however large the arrays), e.g.::

            <landscape.Result surface, complete: surface.h5>
              Loss surface: 21 x 21 plane, ...
              arrays: xcoordinates (x: 21), ycoordinates (y: 21), loss (y: 21, x: 21), ...
              tables: grid; .plot() .table() .to_xarray() .summary() .attr(name)
    """
    state = "complete" if result.attrs.get("complete") else "incomplete"
    item = _analysis(result)
    head = f"<landscape.Result {result.kind}, {state}: {result.path}>"
    line = summary(result)
    titled = item is None or line.startswith(item.title)  # the registry's note on a file it cannot summarise
    lines = [_cut(head), _cut(f"  {line}" if titled else f"  {item.title}: {line}")]
    entries = array_entries(result)
    lines += _wrapped(entries, "  arrays: ", ARRAY_LINES) if entries else ["  arrays: none"]
    names = table_names(result)
    views = ".plot() .table() .to_xarray() .summary() .attr(name)" if names else ".plot() .to_xarray() .summary()"
    lines.append(_cut(f"  tables: {', '.join(names)}; {views}" if names else f"  {views}"))
    return "\n".join(one_line(line) for line in lines)


# ---------------------------------------------------------------------------------------------- tables
def _tables(result: Result) -> dict[str, Table]:
    item = _analysis(result)
    return dict(item.tables) if item is not None else {}


def _holds(result: Result, table: Table) -> bool:
    """Whether the result holds the table: one of its columns, or (a rows table) a row."""
    if table.rows is not None:
        return bool(table.rows(result))
    return any(c in result for c in table.columns)


def table_names(result: Result) -> list[str]:
    """The tables of the result's kind that the result holds.

    Args:
        result: a result.

    Returns:
        Their names, in the kind's order.
    """
    return [name for name, t in _tables(result).items() if _holds(result, t)]


def _axes_of(result: Result, name: str, table: Table) -> list[str] | None:
    """The axes of column ``name``: its own ``axes``; for an array without them, the table's when it has as many."""
    arr = result[name]
    axes = result.axes.get(name)
    if axes is not None and len(axes) == arr.ndim:
        return list(axes)
    return list(table.axes) if arr.ndim == len(table.axes) else None


def table_columns(result: Result, table: Table) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The index and the columns of an array table (:class:`Table` with ``axes``), flat, one entry per row.

    Args:
        result: a result that holds one of the table's columns.
        table: the table.

    Returns:
        ``(index, columns)``: each axis -> its coordinate at every row (the kind's ``coords``, else the entry's
        number), and each column's name -> its value at every row (repeated along the axes it lacks).

    A column without ``axes`` of fewer dimensions than the table's is left out (its axes are unknown).

    Raises:
        LandscapeError: two columns disagree on an axis's length, or a column has an axis not among the
            table's (the file does not fit its kind).
    """
    coords = _analysis(result).coords  # type: ignore[union-attr]
    sizes: dict[str, int] = {}
    held: list[tuple[str, list[str]]] = []
    for name in table.columns:
        if name not in result:
            continue
        axes = _axes_of(result, name, table)
        if axes is None:
            continue
        if not set(axes) <= set(table.axes):
            raise LandscapeError(
                f"{result.path}: array {name!r} has axes {axes}, not among the table's {list(table.axes)}"
            )
        for axis, n in zip(axes, result[name].shape):
            if sizes.setdefault(axis, n) != n:
                raise LandscapeError(f"{result.path}: array {name!r} has {n} entries along {axis}, not {sizes[axis]}")
        held.append((name, axes))
    shape = tuple(sizes.get(a, 1) for a in table.axes)
    grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    index: dict[str, np.ndarray] = {}
    for axis, grid, n in zip(table.axes, grids, shape):
        labels = result[coords[axis]] if axis in coords and coords[axis] in result else None
        values = np.asarray(labels) if labels is not None and np.shape(labels) == (n,) else np.arange(n)
        index[axis] = values[grid.ravel()]
    columns: dict[str, np.ndarray] = {}
    for name, axes in held:
        arr = np.asarray(result[name])
        order = [axes.index(a) for a in table.axes if a in axes]
        view = np.transpose(arr, order).reshape([sizes[a] if a in axes else 1 for a in table.axes])
        columns[name.rpartition("/")[2]] = np.broadcast_to(view, shape).ravel()
    return index, columns


def table(result: Result, name: str | None = None) -> Any:
    """One of the tables the result's kind declares, as a ``pandas.DataFrame`` indexed by its axes.

    Args:
        result: a result.
        name: the table's name (see :func:`table_names`); None for the kind's first that the result holds.

    Returns:
        The table.

    Raises:
        LandscapeError: pandas is missing, the kind declares no such table, or the result does not hold it.
    """
    pd = optional("pandas", "Result.table")
    declared = _tables(result)
    if not declared:
        raise LandscapeError(f"{result.path}: a {result.kind} result has no tables; see .to_xarray() for its arrays")
    if name is None:
        held = table_names(result)
        name = held[0] if held else next(iter(declared))
    if name not in declared:
        raise LandscapeError(
            f"{result.path}: a {result.kind} result has no table {name!r}; its tables are {', '.join(declared)}"
        )
    spec = declared[name]
    if not _holds(result, spec):
        what = "rows" if spec.rows is not None else f"arrays ({', '.join(spec.columns)})"
        raise LandscapeError(
            f"{result.path}: this {result.kind} result has no {name!r} table ({spec.description}): "
            f"it holds none of its {what}"
        )
    if spec.rows is not None:
        frame = pd.DataFrame(spec.rows(result))
        return frame.set_index(list(spec.index)) if spec.index else frame
    index, columns = table_columns(result, spec)
    rows = pd.MultiIndex.from_arrays(list(index.values()), names=list(index)) if len(index) > 1 else None
    if rows is None:
        axis, values = next(iter(index.items()))
        rows = pd.Index(values, name=axis)
    return pd.DataFrame(columns, index=rows)


# ---------------------------------------------------------------------------------------------- xarray
def dimensions(result: Result) -> dict[str, tuple[str, ...]]:
    """The dimension names of every array that names its axes, made unique where lengths differ.

    An axis keeps its name when every array that names it gives it one length. Otherwise it is named after
    each array's group (``density/probe``, ``trace/probe``; an array of the root keeps the bare name) and, where
    that is not enough either, after the array's path (``maps/000/fy``).

    Args:
        result: a result.

    Returns:
        Array path -> its dimensions (arrays without ``axes``, or with as many as it has not, are left out).
    """
    named = {p: list(a) for p, a in result.axes.items() if p in result.arrays and len(a) == result[p].ndim}

    def level(path: str, axis: str, depth: int) -> str:
        group = path.rpartition("/")[0]
        return axis if depth == 0 or (depth == 1 and not group) else f"{group if depth == 1 else path}/{axis}"

    chosen: dict[str, int] = {}
    for axis in {a for axes in named.values() for a in axes}:
        uses = [(p, result[p].shape[i]) for p, axes in named.items() for i, a in enumerate(axes) if a == axis]
        for depth in (0, 1, 2):
            lengths: dict[str, set[int]] = {}
            for path, n in uses:
                lengths.setdefault(level(path, axis, depth), set()).add(n)
            if all(len(v) == 1 for v in lengths.values()):
                break
        chosen[axis] = depth
    return {p: tuple(level(p, a, chosen[a]) for a in axes) for p, axes in named.items()}


def to_xarray(result: Result) -> Any:
    """Every array of the result that names its axes, as one ``xarray.Dataset`` (see :func:`dimensions`).

    The kind's coordinates (:attr:`Analysis.coords`) become the dataset's coordinates of their axes; the root
    attributes are the dataset's, a group's attributes are there too as ``group/name``, an array's own are its
    variable's.

    Args:
        result: a result.

    Returns:
        The dataset, its variables named by the arrays' paths.

    Raises:
        LandscapeError: xarray is missing.
    """
    xr = optional("xarray", "Result.to_xarray")
    dims = dimensions(result)
    data = {p: (d, result[p], dict(result.attrs_at.get(p, {}))) for p, d in dims.items()}
    attrs = dict(result.attrs)
    for path, values in result.attrs_at.items():
        if path not in result.arrays:
            attrs.update({f"{path}/{k}": v for k, v in values.items()})
    ds = xr.Dataset(data, attrs=attrs)
    item = _analysis(result)
    coords = {}
    for axis, path in (item.coords if item is not None else {}).items():
        if axis in ds.dims and path in result and result[path].shape == (ds.sizes[axis],):
            coords[axis] = result[path]
    return ds.assign_coords(coords)
