"""``landscape report DIR``: one self-contained HTML page of every result file in a folder.

:func:`write_report` reads every ``*.h5`` in the folder, draws the figures of each result file with
:func:`landscape.plot.plot_files` into ``DIR/report_figures/`` (``model-<name>/`` per model, ``all-models/`` for the
figures that overlay several models) and writes ``DIR/report.html``: the summary table (from ``DIR/summary.md`` when
there is one, else one built from the result files), every figure embedded (PNG as base64 ``data:`` URIs, SVG
inline), grouped by model and by kind, each captioned with what it draws (the caption its drawing code attached,
read from the figure file's metadata: :func:`landscape.plot.common.read_caption`) and enlarged to the page's width
by a click (no script), and each file's provenance (:func:`landscape.store.read.describe`) folded under its figures.
The result files of DIR's sub-folders (e.g. the demo's ``data_size/``) get a section each, with the figures that
overlay them. The page loads nothing from the network. With plotly installed (``pip install
'landscape-toolkit[interactive]'``) each 2D surface also gets a rotatable 3D view, plotly's JavaScript embedded
once.

Files that are not landscape results (not HDF5, no ``kind``, being written) and results whose figures cannot be
drawn are named in the page with a one-line note; they never stop the report.
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from landscape.analyses.numbers import MISSING
from landscape.analyses.registry import analyses, analysis_of, kinds, numbers_of
from landscape.errors import LandscapeError, missing_extra
from landscape.plot import UndrawableError, figures_of, one_of, plot_files
from landscape.plot.common import model_name, read_caption
from landscape.runtime.workers import Unit, run_units
from landscape.store.files import (
    WRITTEN_BY,
    check_replaceable,
    ensure_subfolder,
    leads_outside,
    read_regular,
    write_text,
)
from landscape.store.read import Result, describe, read_result
from landscape.version import __version__

#: an empty result: what a kind's ``numbers`` give for it names the summary table's columns
_EMPTY = Result(Path(""), {})
#: the figure formats a page can embed
REPORT_FORMATS = ("png", "svg")
#: the folder (inside DIR) that holds the report's figures
FIGURES_FOLDER = "report_figures"
ALL_MODELS = "All models"

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1400px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { border-bottom: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #bbb; padding: .3em .6em; text-align: left; }
th { background: #eee; }
.figures { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; border: 1px solid #ddd; padding: .5em; background: #fff; flex: 1 1 560px; max-width: 100%;
         box-sizing: border-box; cursor: zoom-in; }
figure:focus { flex-basis: 100%; cursor: zoom-out; outline: 2px solid #89a; }
figure img, figure svg { width: 100%; height: auto; display: block; }
figcaption { font-size: .9em; color: #333; margin-top: .3em; }
figcaption small { color: #777; }
details { margin: .5em 0 1.5em; }
summary { cursor: pointer; color: #345; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; font-size: .85em; }
.note { color: #a33; }
nav ul { columns: 2; }
"""


@dataclass
class _File:
    """One result file of the report: where it is, what it is, its figures, and notes about it."""

    path: Path
    kind: str
    model: str
    created: str
    result: Any
    section: str = ""
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The file's name in the page: ``NAME.h5``, or ``FOLDER/NAME.h5`` in a sub-folder."""
        return f"{self.section}/{self.path.name}" if self.section else self.path.name


def write_report(
    folder: str | Path,
    *,
    out: str | Path | None = None,
    fmt: str = "png",
    interactive: bool | None = None,
    force: bool = False,
    jobs: int = 1,
) -> Path:
    """Write one self-contained HTML page of every landscape result file in ``folder``.

    Figures are drawn into ``folder/report_figures/`` (the report's own folder: existing figures of the same
    names are replaced) and embedded in the page; the page is written atomically and needs no network to be
    viewed. Nothing is read or written outside ``folder`` (and ``out``): a result file or ``summary.md`` that is
    a symbolic link to a file outside it is skipped with a note, and a ``report_figures`` that is a link is
    refused.

    Args:
        folder: the folder holding the result files (``*.h5``, and those of its sub-folders, one level down;
            the report's own ``report_figures`` and hidden folders aside) and, optionally, a ``summary.md``
            whose Markdown table becomes the page's summary table.
        out: the page to write; default ``folder/report.html``.
        fmt: the figure format, ``"png"`` (embedded as base64) or ``"svg"`` (embedded inline).
        interactive: add a rotatable 3D view (plotly) of each 2D surface: ``None`` when plotly is installed,
            ``True`` always (plotly required), ``False`` never.
        force: replace an ``out`` that landscape did not write, or a symbolic link there (never followed).
        jobs: worker processes that draw the files' figures (:func:`landscape.runtime.workers.run_units`; 1: here).

    Returns:
        The path of the page written.

    Raises:
        LandscapeError: ``folder`` does not exist or is not a folder, it holds no landscape result files,
            ``fmt`` is not one of :data:`REPORT_FORMATS`, ``interactive=True`` without plotly installed, the page
            may not be replaced (:func:`landscape.store.files.check_replaceable`), ``report_figures`` is a link, or the
            figures or the page cannot be written.
    """
    one_of(fmt, "report figure format (--format)", REPORT_FORMATS)
    folder = Path(folder)
    if not folder.exists():
        raise LandscapeError(f"{folder} does not exist; give the folder that holds the result files (*.h5)")
    if not folder.is_dir():
        raise LandscapeError(f"{folder} is not a folder; give the folder that holds the result files (*.h5)")
    if not os.access(folder, os.W_OK | os.X_OK):  # the figures go into DIR whatever --out says
        raise LandscapeError(
            f"{folder} is read-only, and the report writes its figures into {folder / FIGURES_FOLDER}: make it "
            f"writable (chmod u+w), or copy the result files to a writable folder"
        )
    plotly = _plotly(interactive)
    page = Path(out) if out is not None else folder / "report.html"
    check_replaceable(page, force=force, kind="report")
    files, skipped = _read_files(folder)
    if not files:
        reason = f" ({len(skipped)} .h5 file(s) skipped; first: {skipped[0][1]})" if skipped else ""
        raise LandscapeError(
            f"no landscape result files (*.h5) in {folder}{reason}; run an analysis ('landscape --help' lists "
            "them) or `landscape demo` first"
        )
    top = [f for f in files if not f.section]
    models = _models_in_order(top)
    slugs = _slugs(models)
    sections = list(dict.fromkeys(f.section for f in files if f.section))
    section_slugs = _slugs(sections)
    where = [f"folder-{section_slugs[f.section]}" if f.section else f"model-{slugs[f.model]}" for f in files]
    units = [
        Unit(str(i), _draw, (entry.path, entry.kind, ensure_subfolder(folder, FIGURES_FOLDER, w), fmt))
        for i, (entry, w) in enumerate(zip(files, where))
    ]
    drawn = run_units(units, jobs)
    for i, entry in enumerate(files):
        entry.figures, notes = drawn[str(i)]
        entry.notes += notes
    shared = {"": _draw_overlays(top, ensure_subfolder(folder, FIGURES_FOLDER, "all-models"), fmt)}
    for section in sections:
        group = [f for f in files if f.section == section]
        # apart from the files' own figures: an overlay of the same name would replace one of them
        out_dir = ensure_subfolder(folder, FIGURES_FOLDER, f"folder-{section_slugs[section]}-overlaid")
        shared[section] = _draw_overlays(group, out_dir, fmt, models=1)
    summary = folder / "summary.md"
    if summary.is_symlink() and leads_outside(summary, folder):
        skipped.append((summary, f"is a symbolic link to a file outside {folder}; not read"))
    text = _page(folder, page, files, skipped, models, slugs, section_slugs, shared, plotly)
    write_text(page, text, force=force, kind="report")
    return page


# ------------------------------------------------------------------------------------------ reading and drawing
def _plotly(interactive: bool | None) -> Any:
    """The plotly module ``graph_objects`` when the 3D views are wanted and possible, else None."""
    if interactive is False:
        return None
    try:
        import plotly.graph_objects as go
    except ImportError:
        if interactive:
            raise missing_extra("the interactive 3D views need plotly", "interactive") from None
        return None
    return go


def _read_files(folder: Path) -> tuple[list[_File], list[tuple[Path, str]]]:
    """Every readable result file in ``folder`` and its sub-folders, by creation time then name; the skipped ones.

    A file, or a sub-folder, that leads outside ``folder`` (a symbolic link) is not read.
    """
    files: list[_File] = []
    skipped: list[tuple[Path, str]] = []
    below = sorted(
        p
        for p in folder.glob("*/*.h5")
        if p.parent.name != FIGURES_FOLDER and not p.parent.name.startswith(".") and not p.name.startswith(".")
    )
    for path in sorted(p for p in folder.glob("*.h5") if not p.name.startswith(".")) + below:
        if leads_outside(path, folder):
            skipped.append((path, f"is a symbolic link to a file outside {folder}; not read"))
            continue
        if not path.is_file():
            skipped.append((path, f"{path.name} is not a file"))
            continue
        try:
            result = read_result(path)
        except LandscapeError as exc:
            skipped.append((path, _reason(exc, path)))
            continue
        created = str(result.attrs.get("created", ""))
        section = "" if path.parent == folder else path.parent.name
        files.append(_File(path, result.kind, model_name(result), created, result, section))
    files.sort(key=lambda f: (f.created, f.path.name))
    return files, skipped


def _reason(exc: BaseException, path: Path) -> str:
    """Why ``path`` was skipped: the first clause of the error, without the path and the advice to rerun."""
    text = _one_line(exc)
    text = text[len(str(path)) :].lstrip(": ") if text.startswith(str(path)) else text
    return text.split("; ", 1)[0]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _models_in_order(files: Sequence[_File]) -> list[str]:
    """The models in the order of their first result file."""
    return list(dict.fromkeys(f.model for f in files))


def _slugs(models: Sequence[str]) -> dict[str, str]:
    """A distinct, path- and id-safe name for each model (model names come from files: never used as paths)."""
    slugs: dict[str, str] = {}
    used: set[str] = set()
    for model in models:
        base = re.sub(r"[^A-Za-z0-9_-]+", "_", model).strip("_") or "model"
        slug, n = base, 2
        while slug in used:
            slug, n = f"{base}_{n}", n + 1
        used.add(slug)
        slugs[model] = slug
    return slugs


def _is_figure(path: Path, fmt: str) -> bool:
    return path.suffix == f".{fmt}"


def _draw(path: Path, kind: str, out_dir: Path, fmt: str) -> tuple[list[Path], list[str]]:
    """Draw the figures of one file; a file its kind's check refuses, or whose values fail while drawn, gets a note.

    Returns:
        The figures written, and the file's notes.

    Raises:
        LandscapeError: the figures cannot be written (folder, permissions, full disk, ...).
    """
    try:
        result = read_result(path)
        figures_of(kind, result).check(result)
    except LandscapeError as exc:
        return [], [f"no figures: {_one_line(exc)}"]
    try:
        written = plot_files([path], out_dir, fmt, vtp=False, force=True)
    except UndrawableError as exc:  # values the check did not foresee: this file's note, never the report's end
        return [], [f"no figures: {_one_line(exc)}"]
    return [p for p in written if _is_figure(p, fmt)], []


def _draw_overlays(files: Sequence[_File], out_dir: Path, fmt: str, models: int = 2) -> list[tuple[Path, str]]:
    """The figures that overlay several files (one plot call per kind), with their kind; one file's are left out.

    A kind is overlaid when at least two files of at least ``models`` models have figures (several models for
    DIR's own files; a sub-folder's files, e.g. one model trained on shares of the data, with one) and its figure
    module lets them join (``overlaid(result)``, e.g. a 1D surface but not a 2D one, whose figures are per
    file). A figure of the overlay call that has the name of a file's own figure (a per-file figure drawn again)
    is removed, so every figure is shown once.

    Raises:
        LandscapeError: the figures cannot be written.
    """
    shared: list[tuple[Path, str]] = []
    for kind in _kinds_in_order(files):
        group = [f for f in files if f.kind == kind and f.figures]
        joins = getattr(figures_of(kind), "overlaid", None)
        if joins is not None:
            group = [f for f in group if joins(f.result)]
        if len(group) < 2 or len({f.model for f in group}) < models:
            continue
        own = {p.name for f in group for p in f.figures}
        try:
            written = plot_files([f.path for f in group], out_dir, fmt, vtp=False, force=True)
        except UndrawableError as exc:
            for f in group:
                f.notes.append(f"no figure with the other models: {_one_line(exc)}")
            continue
        for path in written:
            if not _is_figure(path, fmt):
                continue
            if path.name in own:
                path.unlink(missing_ok=True)
            else:
                shared.append((path, kind))
    return shared


# ------------------------------------------------------------------------------------------ the summary table
def _split_row(line: str) -> list[str]:
    r"""The cells of a Markdown table row (``\|`` is a literal bar)."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", body)]


def _is_separator(cells: Sequence[str]) -> bool:
    return bool(cells) and all(re.fullmatch(r":?-{3,}:?", c) for c in cells)


def _inline(text: str) -> str:
    """Escape ``text``; Markdown code spans become ``<code>``."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _tables(lines: Sequence[str]) -> list[tuple[int, int]]:
    """``(header line, end)`` of every Markdown table in ``lines`` (a header row followed by a separator row)."""
    out, i = [], 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and _is_separator(_split_row(lines[i + 1])):
            end = i + 2
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            out.append((i, end))
            i = end
        else:
            i += 1
    return out


def _summary_from_markdown(path: Path) -> str | None:
    """The description and the first table of ``summary.md`` as HTML, then the later tables (None: no table).

    Each later table (e.g. the demo's "Findings") comes under its ``##`` heading (an ``<h3>``) and its prose.
    """
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    tables = _tables(lines)
    if not tables:
        return None
    start = tables[0][0]
    prose = [ln.strip() for ln in lines[:start] if ln.strip() and not ln.lstrip().startswith(("#", "!["))]
    parts = [f"<p>{_inline(' '.join(prose))}</p>"] if prose else []
    previous_end = 0
    for k, (first, end) in enumerate(tables):
        if k:
            before = lines[previous_end:first]
            heading = next((ln[3:].strip() for ln in reversed(before) if ln.startswith("## ")), None)
            text = [ln.strip() for ln in before if ln.strip() and not ln.lstrip().startswith(("#", "![", "|"))]
            if heading:
                parts.append(f"<h3>{_inline(heading)}</h3>")
            if text:
                parts.append(f"<p>{_inline(' '.join(text))}</p>")
        rows = [_split_row(line) for line in lines[first + 2 : end]]
        parts.append(_table(_split_row(lines[first]), rows, markdown=True))
        previous_end = end
    parts.append(f"<p><small>From {html.escape(path.name)}.</small></p>")
    return "\n".join(parts)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, markdown: bool = False) -> str:
    cell = _inline if markdown else html.escape
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{cell(h)}</th>" for h in header) + "</tr></thead>", "<tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>")
    out += ["</tbody>", "</table>"]
    return "\n".join(out)


def _summary_from_files(files: Sequence[_File]) -> str:
    """The summary table: model, kind, file, then the key numbers of every analysis of ``files`` that has any."""
    present = {f.kind for f in files}
    columns: list[str] = []
    for item in analyses():
        if item.numbers is not None and item.kind in present:
            columns += [c for c in item.numbers(_EMPTY) if c not in columns]
    models = _models_in_order(files)
    order = {kind: i for i, kind in enumerate(_kinds_in_order(files))}
    ordered = sorted(files, key=lambda f: (f.section, models.index(f.model), order[f.kind], f.path.name))
    rows = []
    for f in ordered:
        cells = numbers_of(f.result)  # none for a file that contradicts itself: its note says why
        rows.append([f.model, f.kind, f.name, *(cells.get(c, MISSING) for c in columns)])
    return _table(["model", "kind", "file", *columns], rows)


def _kinds_in_order(files: Sequence[_File]) -> list[str]:
    """The kinds of ``files``: the registered ones in report order, then any other in name order."""
    present = {f.kind for f in files}
    known = [k for k in kinds() if k in present]
    return known + sorted(present - set(known))


# ------------------------------------------------------------------------------------------ the page
def _embed(path: Path, folder: Path, kind: str) -> str:
    """One figure as a ``<figure>`` (a click enlarges it): PNG as a base64 ``data:`` URI, SVG inline.

    Its caption says what it draws (:func:`~landscape.plot.common.read_caption`), then its file name.
    """
    rel = html.escape(path.relative_to(folder).as_posix())
    name = html.escape(path.name)
    content = read_regular(path, "the report's figure")  # written just now; still never read through a link
    caption = read_caption(content, path.suffix[1:])  # what its drawing code said it draws
    if path.suffix == ".svg":
        svg = content.decode("utf-8", errors="replace")
        body = svg[svg.find("<svg") :]
    else:
        data = base64.b64encode(content).decode("ascii")
        body = f'<img alt="{html.escape(caption) or name}" src="data:image/png;base64,{data}">'
    text = f"{html.escape(caption)}<br><small>{name}</small>" if caption else name
    attributes = f'data-file="{rel}" tabindex="0" title="click to enlarge"'
    return f"<figure {attributes}>{body}<figcaption>{text}</figcaption></figure>"


def _figures_block(figures: Sequence[tuple[Path, str]], folder: Path) -> str:
    """The figures ``(path, kind)`` side by side."""
    if not figures:
        return ""
    return '<div class="figures">\n' + "\n".join(_embed(p, folder, kind) for p, kind in figures) + "\n</div>"


def _provenance(entry: _File) -> str:

    try:
        text = describe(entry.path)
    except LandscapeError as exc:
        text = _one_line(exc)
    return (
        f'<details data-file="{html.escape(entry.path.name)}"><summary>Provenance of '
        f"{html.escape(entry.path.name)}</summary>\n<pre>{html.escape(text)}</pre>\n</details>"
    )


def _kind_blocks(files: Sequence[_File], folder: Path, plotly: _Plotly | None, where: str) -> list[str]:
    """The files' blocks under one heading per kind (in report order), ``where`` after each kind's title."""
    out = []
    for kind in _kinds_in_order(files):
        title = analysis_of(kind).title if kind in kinds() else kind
        out.append(f"<h3>{html.escape(title)}{where}</h3>")
        out += [_file_block(f, folder, plotly) for f in files if f.kind == kind]
    return out


class _Plotly:
    """Interactive views (a figure module's ``interactive``); plotly's JavaScript is embedded with the first one."""

    def __init__(self, go: Any) -> None:
        self.go = go
        self.first = True

    def view(self, entry: _File) -> str:
        """The interactive view of one file, or ``""`` when its kind has none (or the file has no figures)."""
        make = getattr(figures_of(entry.kind), "interactive", None) if entry.kind in kinds() else None
        if make is None or not entry.figures:
            return ""
        fig = make(entry.result, self.go, f"{entry.model}: {entry.path.name} (drag to rotate)")
        if fig is None:
            return ""
        include = self.first
        self.first = False
        div = fig.to_html(include_plotlyjs=include, full_html=False, config={"displaylogo": False})
        return f'<div class="interactive" data-file="{html.escape(entry.path.name)}">{div}</div>'


def _file_block(entry: _File, folder: Path, plotly: _Plotly | None) -> str:
    parts = [f"<h4>{html.escape(entry.name)}</h4>"]
    parts += [f'<p class="note">{html.escape(note)}</p>' for note in entry.notes]
    parts.append(_figures_block([(p, entry.kind) for p in entry.figures], folder))
    if plotly is not None:
        parts.append(plotly.view(entry))
    parts.append(_provenance(entry))
    return "\n".join(p for p in parts if p)


def _page(
    folder: Path,
    page: Path,
    files: Sequence[_File],
    skipped: Sequence[tuple[Path, str]],
    models: Sequence[str],
    slugs: dict[str, str],
    section_slugs: dict[str, str],
    shared: dict[str, list[tuple[Path, str]]],
    go: Any,
) -> str:
    plotly = _Plotly(go) if go is not None else None
    top = [f for f in files if not f.section]
    title = f"landscape report: {folder.resolve().name or folder}"
    md = folder / "summary.md"
    summary = _summary_from_markdown(md) if md.is_file() and not leads_outside(md, folder) else None
    body = [f"<h1>{html.escape(title)}</h1>", "<nav><ul>"]
    body += [f'<li><a href="#model-{slugs[m]}">{html.escape(m)}</a></li>' for m in models]
    if shared[""]:
        body.append(f'<li><a href="#all-models">{ALL_MODELS}</a></li>')
    body += [f'<li><a href="#folder-{slug}">{html.escape(name)}/</a></li>' for name, slug in section_slugs.items()]
    if skipped:
        body.append('<li><a href="#skipped">Skipped files</a></li>')
    body += ["</ul></nav>", '<h2 id="summary">Summary</h2>', summary or _summary_from_files(files)]
    for model in models:
        body.append(f'<h2 id="model-{slugs[model]}">{html.escape(model)}</h2>')
        body += _kind_blocks([f for f in top if f.model == model], folder, plotly, f" ({html.escape(model)})")
    if shared[""]:
        body += [f'<h2 id="all-models">{ALL_MODELS}</h2>', _figures_block(shared[""], folder)]
    for section, slug in section_slugs.items():
        body += [f'<h2 id="folder-{slug}">{html.escape(section)}/</h2>', _figures_block(shared[section], folder)]
        body += _kind_blocks([f for f in files if f.section == section], folder, plotly, f" ({html.escape(section)}/)")
    if skipped:
        body += ['<h2 id="skipped">Skipped files</h2>', "<ul>"]
        body += [f"<li>{html.escape(p.name)}: {html.escape(note)}</li>" for p, note in skipped]
        body.append("</ul>")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="generator" content="landscape {__version__} ({WRITTEN_BY})">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )
