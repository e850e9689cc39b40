"""The Python front door's calls: each ``landscape.<analysis>`` function's signature, keywords and errors.

:func:`analysis_function` makes a function's options visible where a Python user looks: its signature (one
keyword per field of its options class, with the field's type and default), its docstring's ``Args`` (each
field's line of the class's ``Attributes``), and its errors. The options class is the one source of truth: a
field added there appears in the signature and the docstring with no edit here.

Messages are written once, in the command line's words (``--batch-size``, ``--force``); an error raised in a
Python call names the Python keyword instead (``batch_size=``, ``force=True``): :func:`python_message` rewrites
every ``--flag`` that is a keyword of the function called.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import re
import textwrap
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from landscape.errors import LandscapeError

F = TypeVar("F", bound=Callable[..., Any])

#: a command-line flag in a message, and the value written after it (a number or a quoted string), if any
_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?: (-?\d[^\s,;)]*|'[^']*'))?")
#: a Sphinx role naming an object of the options' module without its module (``:data:`NORMS```)
_ROLE = re.compile(r"(:\w+:`)(~?)([A-Za-z_]\w*)`")
#: command-line flags of the model's source, which a Python call sets on a ModelSource given as the model
SOURCE_FLAGS = {
    "--model-output": "ModelSource(output=...)",
    "--num-classes": "ModelSource(num_classes=...)",
    "--model-kw": "ModelSource(model_kwargs=...)",
}
#: the width the options' entries of a docstring are wrapped to
WIDTH = 116
#: an entry of a Google docstring section: ``name: text`` (or ``**name: text``) at the section's indent
_ENTRY = re.compile(r"^(\s+)(\*{0,2}\w+)( \([^)]*\))?: ")


class UnexpectedKeywordError(LandscapeError, TypeError):
    """A keyword the function does not take (a ``TypeError``, as Python's own, and a one-line user error)."""


def option_fields(options_class: type) -> list[dataclasses.Field[Any]]:
    """The fields of an options dataclass, in declaration order.

    Args:
        options_class: an options dataclass of :mod:`landscape.options`.

    Returns:
        Its dataclass fields.
    """
    return list(dataclasses.fields(options_class))


def field_default(field: dataclasses.Field[Any]) -> Any:
    """A field's default value (its factory's value for a ``default_factory``).

    Args:
        field: a dataclass field with a default.

    Returns:
        The default.
    """
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty


def field_docs(options_class: type) -> dict[str, str]:
    """Each field's description from the ``Attributes:`` section of the options class's docstring.

    Args:
        options_class: an options dataclass.

    Returns:
        Field name -> its description on one line (fields without one are left out).
    """
    docs: dict[str, str] = {}
    lines = inspect.cleandoc(options_class.__doc__ or "").splitlines()
    inside, current, indent = False, None, None
    for line in lines:
        if not line.strip():
            continue
        if not line.startswith(" "):
            inside, current = line.strip() == "Attributes:", None
            continue
        if not inside:
            continue
        entry = _ENTRY.match(line)
        if entry and (indent is None or len(entry.group(1)) == indent):
            indent, current = len(entry.group(1)), entry.group(2)
            docs[current] = line[entry.end() :].strip()
        elif current is not None:
            docs[current] += " " + line.strip()
    return docs


def _annotations(options_class: type) -> dict[str, Any]:
    """The fields' types, evaluated where the class is defined (its annotation strings where that fails)."""
    try:
        return typing.get_type_hints(options_class)
    except Exception:  # a name only imported for type checking: keep the annotations as written  # noqa: BLE001
        return {f.name: f.type for f in option_fields(options_class)}


def options_signature(function: Callable[..., Any], options_class: type) -> inspect.Signature:
    """``function``'s signature with its ``**fields`` replaced by one keyword per field of ``options_class``.

    Args:
        function: a ``landscape.<analysis>`` function taking the options as ``**fields``.
        options_class: its options dataclass.

    Returns:
        The signature: the function's own parameters, then each option as a keyword-only parameter with its
        type and default, in the class's order (a field of the same name as a parameter is the parameter).
    """
    try:
        own = inspect.signature(function, eval_str=True)
    except Exception:  # a name only imported for type checking: keep the annotations as written  # noqa: BLE001
        own = inspect.signature(function)
    params = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in params}
    types = _annotations(options_class)
    for field in option_fields(options_class):
        if field.name in taken:
            continue
        annotation = types.get(field.name, field.type)
        params.append(
            inspect.Parameter(
                field.name, inspect.Parameter.KEYWORD_ONLY, default=field_default(field), annotation=annotation
            )
        )
    return own.replace(parameters=params)


def options_docstring(doc: str | None, options_class: type, skip: Collection[str] = ()) -> str:
    """``doc`` with its ``**fields`` entry of ``Args`` replaced by one entry per option (with its default).

    Args:
        doc: the function's Google docstring (its ``Args`` has a ``**fields:`` entry, replaced with its
            continuation lines; without one the options are added at the end of ``Args``).
        options_class: its options dataclass.
        skip: fields that are the function's own parameters (documented by it).

    Returns:
        The docstring with the options in ``Args``.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    docs = field_docs(options_class)
    entries = []
    for field in option_fields(options_class):
        if field.name in skip:
            continue
        text = _ROLE.sub(rf"\1~{options_class.__module__}.\3`", docs.get(field.name, ""))
        entry = f"{field.name}: {text} Default: ``{field_default(field)!r}``.".replace(":  Default", ": Default")
        entries += textwrap.wrap(entry, WIDTH, initial_indent="    ", subsequent_indent="        ")
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("**fields")), None)
    if start is not None:
        end = start + 1
        while end < len(lines) and lines[end].startswith("        "):
            end += 1
        lines[start:end] = entries
    else:
        args = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
        if args is None:
            lines += ["", "Args:", *entries]
        else:
            end = args + 1
            while end < len(lines) and lines[end].startswith("    "):
                end += 1
            lines[end:end] = entries
    return "\n".join(lines) + "\n"


def python_message(message: str, signature: inspect.Signature, aliases: Mapping[str, str] | None = None) -> str:
    """A message in the command line's words with each flag that is a keyword of ``signature`` in Python's.

    ``--batch-size 64`` becomes ``batch_size=64``, ``--x`` becomes ``x=`` and a flag of a keyword that is False by
    default (``--force``) ``force=True``; a flag whose keyword is named otherwise is looked up in ``aliases``
    (flag -> the Python text, e.g. ``{"--zero": "zero_patterns"}``); a flag of the model's source that is no keyword
    becomes its :class:`~landscape.core.source.ModelSource` field (:data:`SOURCE_FLAGS`). Other flags stay.

    Args:
        message: the message.
        signature: the signature of the function called.
        aliases: command-line flags whose keyword is not the flag's name with ``_``.

    Returns:
        The message for a Python caller.
    """
    aliases = dict(aliases or {})

    def one(match: re.Match[str]) -> str:
        flag, value = f"--{match.group(1)}", match.group(2)
        name = aliases.get(flag, match.group(1).replace("-", "_"))
        keyword, _, fixed = name.partition("=")
        param = signature.parameters.get(keyword)
        if param is None and flag in SOURCE_FLAGS:
            return SOURCE_FLAGS[flag].replace("...", value or "...")
        if param is None or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            return match.group(0)
        if fixed:
            return f"{keyword}={fixed}" + (f" {value}" if value else "")
        if value is not None:
            return f"{keyword}={value}"
        return f"{keyword}=True" if param.default is False else f"{keyword}="

    return _FLAG.sub(one, message)


def speaks_python(function: F) -> F:
    """Decorate a function only Python calls (never the command line): its errors name its own keywords.

    A :class:`~landscape.errors.LandscapeError` raised inside it, in the command line's words (``lower --ncv``),
    reaches the caller with each flag that is one of its keywords in Python's (``lower ncv=``,
    :func:`python_message`).

    Args:
        function: the function.

    Returns:
        The decorated function.
    """
    signature = inspect.signature(function)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except LandscapeError as exc:
            if exc.args and isinstance(exc.args[0], str):
                exc.args = (python_message(exc.args[0], signature), *exc.args[1:])
            raise

    return call  # type: ignore[return-value]


def analysis_function(options_class: type) -> Callable[[F], F]:
    """Decorate a ``landscape.<analysis>`` function: its options in its signature, docstring and errors.

    The function itself takes its options as ``**fields``; the decorated function shows them in
    ``inspect.signature`` / ``help()`` (:func:`options_signature`, :func:`options_docstring`), refuses an unknown
    keyword naming the nearest one, and names Python keywords in its errors (:func:`python_message`, with the
    options class's ``CLI_FLAGS`` aliases).

    Args:
        options_class: the analysis's options dataclass.

    Returns:
        The decorator.
    """

    def decorate(function: F) -> F:
        signature = options_signature(function, options_class)
        public = f"landscape.{function.__name__}"
        aliases = getattr(options_class, "CLI_FLAGS", {})

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            for key in kwargs:
                if key not in signature.parameters:
                    near = difflib.get_close_matches(key, list(signature.parameters), n=1)
                    hint = f"did you mean {near[0]}?" if near else f"help({public}) lists its options"
                    raise UnexpectedKeywordError(f"{public}() got an unexpected keyword argument {key!r}; {hint}")
            try:
                return function(*args, **kwargs)
            except LandscapeError as exc:
                if exc.args and isinstance(exc.args[0], str):
                    exc.args = (python_message(exc.args[0], signature, aliases), *exc.args[1:])
                raise

        call.__signature__ = signature  # type: ignore[attr-defined]
        call.__doc__ = options_docstring(function.__doc__, options_class, inspect.signature(function).parameters)
        call.options_class = options_class  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return decorate
