"""mkdocs hooks: the lists that come from the analysis registry, filled into the pages when they are built.

A page says where a list goes with a marker on a line of its own:

- ``<!-- analyses -->``: a table of every registered analysis (result kind, title, description, command, and a
  link to its section of the docs, the ``docs`` field of its :class:`~landscape.analyses.registry.Analysis`);
- ``<!-- analyses-python -->``: a table of the same analyses' functions (``landscape.surface``, ...), runners and
  options classes, linked to their API pages (a runner that is not on an API page fails the strict build).

It also writes the escaped pipes in the code of table cells (a backslash before the pipe, which GitHub needs)
as plain pipes, which is what Python-Markdown needs; and it marks where a name in inline code may break (a
``<wbr>`` after each dot or slash, so that ``landscape.analyses.surface.run`` breaks between its parts and never
inside one: docs/stylesheets/landscape.css).

The registry is read through ``landscape.analyses.registry.analyses()``, which imports no torch; so a new
analysis appears in the pages without editing them. An analysis whose ``docs`` page is not part of the site
fails the build (the link is checked like every other link of a strict build).
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path
from typing import Any

# this checkout's package, whichever landscape the environment has installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from landscape.analyses.registry import Analysis, analyses  # noqa: E402

MARKERS = ("<!-- analyses -->", "<!-- analyses-python -->")
CODE = re.compile(r"`[^`]*`")
#: inline code of plain text (a code block's <code> follows <pre> and its first <span>; highlighted code has tags)
INLINE_CODE = re.compile(r"(?<!<pre>)(?<!</span>)<code>([^<]*)</code>")
#: where a name breaks: after a dot or a slash that a letter or an underscore follows (not in 3.5)
BREAK = re.compile(r"([./])(?=[A-Za-z_])")


def _link(target: str, page: str) -> str:
    """``target`` (a path under docs/, with an optional #anchor) relative to the page ``page``."""
    path, _, anchor = target.partition("#")
    rel = posixpath.relpath(path, posixpath.dirname(page) or ".")
    return rel + (f"#{anchor}" if anchor else "")


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _ref(dotted: str | None) -> str:
    """A link to the API page of the object at ``dotted`` (an autorefs cross-reference), or a dash."""
    return f"[`{dotted}`][{dotted}]" if dotted else "–"


def analyses_table(items: list[Analysis], page: str) -> str:
    """The Markdown table of ``items``: kind, title, description, command, docs link."""
    rows = ["| kind | analysis | what it computes | command | definition |", "| --- | --- | --- | --- | --- |"]
    for a in items:
        command = f"[`landscape {a.command}`]({_link(f'cli.md#landscape-{a.command}', page)})" if a.command else "–"
        docs = f"[{_cell(a.title)}]({_link(a.docs, page)})" if a.docs else "–"
        rows.append(f"| `{a.kind}` | {_cell(a.title)} | {_cell(a.description)} | {command} | {docs} |")
    return "\n".join(rows)


def python_table(items: list[Analysis], page: str) -> str:
    """The Markdown table of ``items``: kind, ``landscape.<function>``, runner, options class, each linked."""
    rows = ["| kind | function | runner | options |", "| --- | --- | --- | --- |"]
    for a in items:
        function = f"[`landscape.{a.api.partition(':')[2]}`][{a.api.replace(':', '.')}]" if a.api else "–"
        runner = a.run.replace(":", ".") if a.run else None
        options = f"{a.options.__module__}.{a.options.__qualname__}" if a.options else None
        rows.append(f"| `{a.kind or a.command}` | {function} | {_ref(runner)} | {_ref(options)} |")
    return "\n".join(rows)


def table_code_pipes(markdown: str) -> str:
    """Every escaped pipe inside a code span of a table row, as a plain pipe.

    GitHub needs a pipe in a table cell's code escaped with a backslash and shows it without the backslash;
    Python-Markdown keeps the backslash in code but already ignores a bare pipe there. So the pages are written
    for GitHub and the site gets the bare pipe.
    """

    def row(line: str) -> str:
        if not line.lstrip().startswith("|"):
            return line
        return CODE.sub(lambda m: m.group(0).replace("\\|", "|"), line)

    return "\n".join(row(line) for line in markdown.split("\n"))


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Replace each marker line of a page by its table; unescape the pipes in the code of table cells."""
    markdown = table_code_pipes(markdown)
    if not any(marker in markdown for marker in MARKERS):
        return markdown
    items = analyses()
    where = page.file.src_uri
    markdown = markdown.replace(MARKERS[0], analyses_table(items, where))
    return markdown.replace(MARKERS[1], python_table(items, where))


def break_points(html: str) -> str:
    """Inline code of ``html`` with a ``<wbr>`` after each dot or slash inside a name (:data:`BREAK`).

    A line then breaks a long dotted name between its parts; the copied text is unchanged (``<wbr>`` is no
    character). Code blocks are left as they are.
    """
    return INLINE_CODE.sub(lambda m: "<code>" + BREAK.sub(r"\1<wbr>", m.group(1)) + "</code>", html)


def on_page_content(html: str, **kwargs: Any) -> str:
    """Mark the break points of names in inline code (:func:`break_points`)."""
    return break_points(html)
