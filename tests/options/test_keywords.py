"""Each analysis function's keywords are typed per option for a type checker: a TypedDict beside its options class.

The options class stays the one source of the fields (and of the runtime signature); its ``...Keywords``
TypedDict, which ``**fields: Unpack[...]`` names, must list the same fields and take at least the types the class
holds (wider where the class normalises what it is given, e.g. one radius or a list of radii).
"""

import dataclasses
import importlib
import inspect
import re

import pytest

import landscape
from landscape.analyses.registry import analyses

FUNCTIONS = sorted(a.api.partition(":")[2] for a in analyses() if a.api)


def _members(annotation: str) -> set[str]:
    """The members of a union written as text, split at the top level only (``tuple[float, ...] | None``)."""
    members, depth, start = [], 0, 0
    for i, ch in enumerate(annotation):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            members.append(annotation[start:i])
            start = i + 1
    return {m.strip() for m in [*members, annotation[start:]]}


def _covered(member: str, taken: set[str]) -> bool:
    """Whether a type the options class holds is among the types the keyword takes (a tuple by a Sequence)."""
    if member in taken:
        return True
    tuple_of = re.fullmatch(r"tuple\[(.+), \.\.\.\]", member)
    return tuple_of is not None and any(
        _members(tuple_of.group(1)) <= _members(t[9:-1]) for t in taken if t.startswith("Sequence[")
    )


def _written(annotation) -> str:
    """An annotation as written in the source (the modules use ``from __future__ import annotations``)."""
    return getattr(annotation, "__forward_arg__", annotation)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_keywords_are_the_options_fields_with_the_types_they_take(name):
    function = getattr(landscape, name)
    options = function.options_class
    raw = inspect.signature(function.__wrapped__)  # as written: **fields: Unpack[...Keywords]
    var = next(p for p in raw.parameters.values() if p.kind is p.VAR_KEYWORD)
    keywords_name = options.__name__.replace("Options", "Keywords")
    assert var.annotation == f"Unpack[{keywords_name}]"
    keywords = getattr(importlib.import_module(options.__module__), keywords_name)
    assert keywords.__total__ is False  # every option has its default
    fields = {f.name: f.type for f in dataclasses.fields(options) if f.name not in raw.parameters}
    assert set(keywords.__annotations__) == set(fields), set(keywords.__annotations__) ^ set(fields)
    for field, held in fields.items():
        taken = _members(_written(keywords.__annotations__[field]))
        missing = [m for m in _members(str(held)) if not _covered(m, taken)]
        assert not missing, (field, missing, taken)
