"""A griffe extension for the API pages: each ``landscape.<analysis>`` function shows its options.

The functions are decorated with ``landscape.core.calls.analysis_function(OptionsClass)``, which builds their
signature (one keyword per field of the options class) and the ``Args`` of their docstring when the package is
imported. griffe reads the source without importing it, so it would show ``**fields``; this extension imports
each decorated function and gives griffe its signature and docstring as Python sees them (``help()``).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import griffe

# this checkout's package, whichever landscape the environment has installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DECORATOR = "analysis_function"
#: the modules before a class's name in an annotation (``landscape.options.surface.SurfaceOptions``, ``pathlib.Path``)
_MODULES = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+(?=[A-Za-z_])")

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
    inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
    inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
    inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword,
}


def _annotation(value: Any) -> str | None:
    """A parameter's annotation as text, without the modules' prefixes of the common types."""
    if value is inspect.Parameter.empty:
        return None
    return _MODULES.sub("", inspect.formatannotation(value))


class OptionSignatures(griffe.Extension):
    """Replace the source signature and docstring of each decorated analysis function by the imported one's."""

    def on_function_instance(self, *, node: Any, func: griffe.Function, agent: Any, **kwargs: Any) -> None:
        """Give ``func`` its runtime signature and docstring when it is decorated with ``analysis_function``."""
        if not any(DECORATOR in str(d.value) for d in func.decorators):
            return
        live = getattr(importlib.import_module(func.module.path), func.name)
        parameters = griffe.Parameters()
        for param in inspect.signature(live).parameters.values():
            default = None if param.default is inspect.Parameter.empty else repr(param.default)
            parameters.add(
                griffe.Parameter(
                    param.name, annotation=_annotation(param.annotation), kind=_KINDS[param.kind], default=default
                )
            )
        func.parameters = parameters
        source = func.docstring
        func.docstring = griffe.Docstring(
            inspect.cleandoc(live.__doc__ or ""),
            lineno=source.lineno if source else None,
            endlineno=source.endlineno if source else None,
            parent=func,
            parser=source.parser if source else None,
            parser_options=source.parser_options if source else None,
        )
