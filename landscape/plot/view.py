"""A result's figures in memory (``Result.plot()``) and its HTML view in Jupyter (``Result._repr_html_()``).

Both come from the registry: the kind's figure module draws the figures of ``landscape plot``
(:func:`landscape.plot.draw_figures`), and the HTML view shows the result's summary, its report cells, its arrays
and its kind's main figure (the first it draws) as an embedded PNG. The store loads this module by name when a
result is asked for one of them.
"""

from __future__ import annotations

import base64
import html as html_text
import io
from typing import Any

from matplotlib.figure import Figure

from landscape.analyses.registry import analysis_of, kinds
from landscape.analyses.view import array_entries, numbers, summary, table_names
from landscape.errors import LandscapeError
from landscape.plot import check_options, draw_figures, figures_of, iter_figures, named
from landscape.store.read import Result

#: the resolution of the HTML view's figure (smaller than the files' :data:`landscape.plot.common.DPI`)
HTML_DPI = 80


def figures(result: Result, **options: Any) -> dict[str, Figure]:
    """The figures ``landscape plot`` draws of ``result``, in memory, by name without the file's stem.

    Args:
        result: a result (read from a file or held in memory).
        **options: the drawing options of :func:`landscape.plot.plot_files`.

    Returns:
        Each figure by its name after the stem, e.g. ``{"contour": ..., "contourf": ..., "heatmap": ...,
        "3d": ...}``; the first is the kind's main figure.

    Raises:
        LandscapeError: the result cannot be drawn (its arrays do not fit, see the kind's ``check``), or an
            option is invalid.
    """
    stem = named([result])[0].path.stem
    drawn = draw_figures([result], **options)
    return {name.removeprefix(f"{stem}_"): fig for name, fig in drawn.items()}


def main_figure(result: Result) -> tuple[str, Figure]:
    """The first figure of the result's kind (drawn alone, the others not).

    Args:
        result: a result.

    Returns:
        Its name (as in :func:`figures`) and the figure.

    Raises:
        LandscapeError: the result cannot be drawn, or its kind draws no figure of it.
    """
    held = named([result])[0]
    module = figures_of(held.kind, held)
    module.check(held)
    for name, fig in iter_figures(held.kind, module, [held], **check_options("png", {})):
        return name.removeprefix(f"{held.path.stem}_"), fig
    raise LandscapeError(f"{result.path}: no {result.kind} figure to draw")


def png_base64(fig: Figure, dpi: int = HTML_DPI) -> str:
    """A figure as a base64-encoded PNG.

    Args:
        fig: the figure.
        dpi: its resolution.

    Returns:
        The PNG's bytes in base64 (ASCII), for a ``data:image/png;base64,`` address.
    """
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _rows(cells: dict[str, str]) -> str:
    esc = html_text.escape
    return "".join(f"<tr><th style='text-align:left'>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in cells.items())


def html(result: Result) -> str:
    """The result as HTML: its kind, model and file, its summary, its report cells and arrays, its main figure.

    Every text is escaped (:func:`html.escape`); the figure is embedded as a base64 PNG (``<img>``). A result
    that cannot be drawn shows why in place of the figure.

    Args:
        result: a result.

    Returns:
        The HTML fragment (Jupyter shows it for ``_repr_html_``).
    """
    esc = html_text.escape
    title = analysis_of(result.kind).title if result.kind in kinds() else result.kind
    state = "complete" if result.attrs.get("complete") else "incomplete"
    of = f" of <b>{esc(str(result.attrs['model']))}</b>" if "model" in result.attrs else ""
    parts = [
        "<div class='landscape-result'>",
        f"<p><b>{esc(title)}</b>{of} ({esc(result.kind)}, {state}): <code>{esc(str(result.path))}</code></p>",
        f"<p>{esc(summary(result))}</p>",
    ]
    cells = numbers(result)
    if cells:
        parts.append(f"<table>{_rows(cells)}</table>")
    parts.append(f"<p>arrays: {esc(', '.join(array_entries(result)) or 'none')}</p>")
    held = table_names(result)
    if held:
        parts.append(f"<p>tables: {esc(', '.join(held))} (<code>.table(name)</code>)</p>")
    try:
        name, fig = main_figure(result)
    except LandscapeError as exc:
        parts.append(f"<p><i>no figure: {esc(str(exc).splitlines()[0])}</i></p>")
    else:
        parts.append(f"<img src='data:image/png;base64,{png_base64(fig)}' alt='{esc(name)}' title='{esc(name)}'/>")
    parts.append("</div>")
    return "\n".join(parts)
