"""A digest of what a module computes, apart from its tensors' values: the key of a compiled copy of its forward.

A compiled forward (:mod:`landscape.runtime.packages`) takes the parameters and buffers as inputs, so it stays
valid for any values; it is another function when the module's structure, configuration or code changes.
:func:`module_fingerprint` hashes all three:

- the module tree: every submodule's name and class, and ``repr(module)`` (each layer's own ``extra_repr``);
- each submodule's plain attributes (``bool``, ``int``, ``float``, ``str``, ``None`` and tuples or lists of them:
  flags such as ``fused_attn``, pooling modes, scales) and its forward hooks and pre-hooks (by their code);
- the code of every class in the tree that is not torch's own: the bytes of the file that defines it (other
  functions of that file included), else, where there is no file (a class typed into a notebook), the code
  objects of its methods. torch's own classes are covered by the torch version, which the callers' keys hold.

The fingerprint is a key, not a proof: what reads a compiled forward from a cache still checks its loss against
the eager forward before using it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from torch import nn

#: the attribute value types a fingerprint records (others, tensors included, are left to the state's shapes)
_PLAIN = (bool, int, float, str, type(None))
#: the largest source file hashed whole (a larger one is hashed by the class's code objects instead)
_MAX_SOURCE_BYTES = 16 * 2**20


def module_fingerprint(module: nn.Module, extra_code: Iterable[Callable[..., Any]] = ()) -> str:
    """The hexadecimal SHA-256 of ``module``'s tree, configuration and code (see the module docstring).

    Args:
        module: the module whose forward is compiled.
        extra_code: functions the compiled function calls besides the module (the loss, the fold), hashed by
            the files that define them.

    Returns:
        A 64-character hexadecimal digest; equal for two modules of the same structure, attributes and code.
    """
    parts: dict[str, Any] = {
        "tree": [(name, _qualname(type(m))) for name, m in module.named_modules()],
        "repr": repr(module),
        "attributes": [(name, _plain_attributes(m)) for name, m in module.named_modules()],
        "hooks": [(name, _hook_digests(m)) for name, m in module.named_modules()],
        "code": sorted({_qualname(c): _class_digest(c) for c in _classes(module)}.items()),
        "extra": sorted({_function_digest(f) for f in extra_code}),
    }
    text = json.dumps(parts, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _classes(module: nn.Module) -> set[type]:
    """The classes of the tree and their bases, torch's own and ``object`` left out."""
    out: set[type] = set()
    for m in module.modules():
        for cls in type(m).__mro__:
            if not _is_torch(cls) and cls is not object:
                out.add(cls)
    return out


def _is_torch(obj: Any) -> bool:
    name = getattr(obj, "__module__", "") or ""
    return name == "torch" or name.startswith("torch.")


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    return isinstance(value, (tuple, list)) and len(value) <= 64 and all(isinstance(v, _PLAIN) for v in value)


def _plain_attributes(m: nn.Module) -> list[tuple[str, str]]:
    """The module's public plain attributes (``training`` included), as ``(name, repr)``, sorted."""
    return sorted((k, repr(v)) for k, v in vars(m).items() if not k.startswith("_") and _plain(v))


def _hook_digests(m: nn.Module) -> list[str]:
    hooks = [*m._forward_pre_hooks.values(), *m._forward_hooks.values()]
    return [_function_digest(h) for h in hooks]


def _class_digest(cls: type) -> str:
    """The digest of the file defining ``cls``; without a readable file, of its methods' code objects."""
    text = _source_file_digest(cls)
    if text:
        return text
    h = hashlib.sha256()
    for name, value in sorted(vars(cls).items()):
        fn = getattr(value, "__func__", value)
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType):
            h.update(name.encode())
            h.update(_code_digest(code).encode())
    return "code:" + h.hexdigest()


def _function_digest(fn: Any) -> str:
    """The digest of the file defining ``fn`` (a function, bound method or callable object), else of its code."""
    fn = getattr(fn, "__func__", fn)
    text = _source_file_digest(fn)
    if text:
        return text
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        return "code:" + _code_digest(code)
    return "object:" + _qualname(type(fn))


def _source_file_digest(obj: Any) -> str:
    """``"file:<sha256>"`` of the source file that defines ``obj``, or ``""`` when there is none to read."""
    if _is_torch(obj):
        return "torch"
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if not path:
        return ""
    try:
        source = inspect.getsourcefile(obj) or path
    except TypeError:
        source = path
    try:
        data = Path(source).read_bytes()
    except OSError:
        return ""
    if len(data) > _MAX_SOURCE_BYTES:
        return ""
    return "file:" + hashlib.sha256(data).hexdigest()


def _code_digest(code: types.CodeType) -> str:
    """The digest of a code object: its bytecode, names and constants, nested code objects included."""
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    for const in code.co_consts:
        h.update((_code_digest(const) if isinstance(const, types.CodeType) else repr(const)).encode())
    return h.hexdigest()
