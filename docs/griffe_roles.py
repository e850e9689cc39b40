"""A griffe extension for the API pages: the docstrings' Sphinx roles become links.

The package's docstrings name other objects the Sphinx way (``:func:`~landscape.core.objective.Objective```,
``:class:`RingAttention```); Markdown has no such syntax, so mkdocstrings would print the role as text. Each role
becomes an *optional* autorefs cross-reference, ``<autoref identifier="..." optional><code>...</code></autoref>``:
a link when the object is on an API page, plain code otherwise (an optional reference never fails the strict
build). A name without its module is looked up from the object that names it outwards (its class, its module,
the packages above), and an imported name is followed to where it is defined. Only the rendered docstrings
change; the package is not imported.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _find(root: griffe.Object, path: str) -> griffe.Object | None:
    """The object at dotted ``path`` below ``root`` (its own name first), or None."""
    head, _, rest = path.partition(".")
    if head != root.name:
        return None
    if not rest:
        return root
    try:
        return root[rest]
    except Exception:  # not there, or an alias to outside the package  # noqa: BLE001
        return None


def _resolve(root: griffe.Object, obj: griffe.Object, target: str) -> str:
    """The canonical path ``target`` names, seen from ``obj``; ``target`` itself when it is not in the package."""
    scope: griffe.Object | None = obj
    candidates = [target]
    while scope is not None:
        candidates.append(f"{scope.path}.{target}")
        scope = scope.parent
    for path in candidates:
        found = _find(root, path)
        if found is not None:
            try:
                return found.final_target.path if found.is_alias else found.path
            except Exception:  # an alias that does not resolve  # noqa: BLE001
                return path
    return target


def _rewrite(root: griffe.Object, obj: griffe.Object, text: str) -> str:
    """``text`` with every Sphinx role replaced by an optional cross-reference."""

    def one(match: re.Match[str]) -> str:
        short, target = match.group(1), match.group(2).strip()
        title = target.rsplit(".", 1)[-1] if short else target
        path = _resolve(root, obj, target.removesuffix("()"))
        return f'<autoref identifier="{html.escape(path)}" optional><code>{html.escape(title)}</code></autoref>'

    return ROLE.sub(one, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite the docstrings of ``pkg`` and of everything defined in it."""
        todo: list[griffe.Object] = [pkg]
        while todo:
            obj = todo.pop()
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = _rewrite(pkg, obj, obj.docstring.value)
            todo.extend(member for member in obj.members.values() if not member.is_alias)
