"""The model registry: names -> constructor functions, timm style.

A registered function has the signature ``name(num_classes=..., **kwargs) -> nn.Module`` and fills in the
keyword arguments of one model class. :func:`create_model` records on the model what is needed to rebuild
it from a checkpoint alone: ``create_model(m.model_name, num_classes=m.num_classes, **m.model_kwargs)``.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
import json
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from landscape.errors import LandscapeError
from landscape.models.external import create_external, external_data_kwargs, is_external, keyword_names, output_classes
from landscape.runtime.devices import require_memory

ModelFn = TypeVar("ModelFn", bound=Callable[..., nn.Module])

_MODELS: dict[str, Callable[..., nn.Module]] = {}
_ALIASES: dict[str, str] = {"alternet": "alternet50", "resnet": "resnet50", "vit": "vit_ti"}


def register_model(fn: ModelFn) -> ModelFn:
    """Register ``fn`` under its ``__name__`` as a model constructor and return it unchanged.

    Args:
        fn: A constructor ``fn(num_classes=..., **kwargs) -> nn.Module`` (used as a decorator).

    Returns:
        ``fn`` itself.

    Raises:
        ValueError: If the name is already registered or is an alias.
    """
    name = fn.__name__
    if name in _MODELS or name in _ALIASES:
        raise ValueError(f"model {name!r} is already registered")
    _MODELS[name] = fn
    return fn


def list_models(pattern: str | None = None) -> list[str]:
    """Return the sorted registered model names, optionally filtered by an fnmatch ``pattern``.

    Args:
        pattern: A case-sensitive shell-style pattern (e.g. ``"vit_*"``), or ``None`` for all names.

    Returns:
        The sorted list of matching names (aliases not included).
    """
    names = sorted(_MODELS)
    if pattern is not None:
        names = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
    return names


def list_aliases() -> dict[str, str]:
    """Return a copy of the alias table (alias -> registered name).

    Returns:
        A new dict mapping each alias to its registered model name.
    """
    return dict(_ALIASES)


def resolve_model_name(name: str) -> str:
    """Return the registered name for ``name`` (a name or an alias) or raise :class:`LandscapeError`.

    Args:
        name: A registered model name or an alias.

    Returns:
        The registered name.

    Raises:
        LandscapeError: If ``name`` is neither registered nor an alias (with close matches as hints).
    """
    name = _ALIASES.get(name, name)
    if name in _MODELS:
        return name
    close = difflib.get_close_matches(name, sorted(_MODELS) + sorted(_ALIASES), n=4, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise LandscapeError(f"unknown model {name!r}; {hint}run `landscape models` to list all models")


def _to_json(value: Any, key: str) -> Any:
    """Return ``value`` with tuples turned into lists; raise if it is not JSON-serialisable."""
    if isinstance(value, (tuple, list)):
        return [_to_json(v, key) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_json(v, key) for k, v in value.items()}
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise LandscapeError(
            f"model option {key}={value!r} cannot be stored in a checkpoint; use numbers, strings, "
            "booleans or lists of them"
        ) from None
    return value


def create_model(name: str, num_classes: int | None = None, *, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """Build a model by name: a zoo name (or alias), ``timm:NAME``, ``torchvision:NAME`` or ``py:module:factory``.

    Args:
        name: the model spec (see `landscape.models.external` for the three prefixes).
        num_classes: output classes; None means 10 for zoo models and the library's default otherwise.
        pretrained: load the library's published weights (timm / torchvision; needs a network).
        **kwargs: constructor options, passed through.

    Returns:
        The module, carrying ``model_name`` (the resolved spec), ``num_classes`` and ``model_kwargs`` (``kwargs``
        as JSON-ready data, tuples as lists) so that a checkpoint can rebuild it.

    Raises:
        LandscapeError: unknown name, bad options, missing optional dependency, no network for ``pretrained``.
    """
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1
    ):
        raise LandscapeError(f"num_classes must be a positive integer, got {num_classes!r}")
    model_kwargs = {k: _to_json(v, k) for k, v in kwargs.items()}
    if is_external(name):
        model = built_within_memory(
            lambda: create_external(name, num_classes, pretrained, kwargs), name, estimate=False
        )
        resolved, num_classes = name, output_classes(model)
    else:
        resolved = resolve_model_name(name)
        if pretrained:
            raise LandscapeError(
                f"zoo model {resolved!r} has no published weights: train it (landscape train) "
                "and pass --ckpt, or use a timm: / torchvision: model"
            )
        num_classes = 10 if num_classes is None else num_classes
        try:
            model = built_within_memory(lambda: _MODELS[resolved](num_classes=num_classes, **kwargs), resolved)
        except TypeError as exc:
            raise LandscapeError(f"model {resolved!r} does not take that option ({exc}); check the spelling") from None
    model.model_name = resolved
    model.num_classes = num_classes
    model.model_kwargs = model_kwargs
    return model


def built_within_memory(build: Callable[[], nn.Module], name: str, *, estimate: bool = True) -> nn.Module:
    """``build()``, after its parameters and buffers are counted on the meta device and found to fit the memory.

    The meta build allocates nothing (and runs under a forked random state, so the caller's is untouched); a
    factory that cannot be built there is built as it is. An allocation that fails while the model is built is
    one line too.

    Args:
        build: makes the model.
        name: the model, for the messages.
        estimate: count on the meta device first (False for builds that download or read weights).

    Returns:
        The model.

    Raises:
        LandscapeError: its ``4 * (parameters + buffers)`` bytes exceed the CPU's memory, or building it ran out
            of memory.
    """
    fix = "choose smaller constructor options (--model-kw, or the checkpoint's model_kwargs)"
    if estimate:
        try:
            with torch.random.fork_rng(devices=[]), torch.device("meta"):
                shape = build()
        except Exception:  # a factory that needs real tensors: no estimate
            shape = None
        if shape is not None:
            n = sum(t.numel() for t in (*shape.parameters(), *shape.buffers()))
            require_memory(1, n, torch.float32, torch.device("cpu"), f"model {name!r} of {n:,} parameters", fix)
    try:
        return build()
    except (MemoryError, torch.OutOfMemoryError) as exc:
        raise LandscapeError(f"model {name!r} does not fit the memory ({type(exc).__name__}); {fix}") from None
    except RuntimeError as exc:
        if "allocate" not in str(exc):
            raise
        raise LandscapeError(
            f"model {name!r} does not fit the memory ({str(exc).splitlines()[0][:120]}); {fix}"
        ) from None


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Return the number of scalar parameters of ``model`` (only those with requires_grad if asked).

    Args:
        model: The model.
        trainable_only: Count only parameters with ``requires_grad``.

    Returns:
        ``sum_p p.numel()`` over the (trainable) parameters.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def zoo_options(name: str) -> frozenset[str] | None:
    """The keyword options a zoo model takes: those its class names, through ``**kwargs`` its bases' too.

    The class is the one the constructor's return annotation names (``def resnet18(...) -> ResNet``).

    Args:
        name: a zoo name or alias.

    Returns:
        The option names, or None when the constructor names no class (then any option may be taken).

    Raises:
        LandscapeError: ``name`` is not a zoo model.
    """
    factory = _MODELS[resolve_model_name(name)]
    cls = typing.get_type_hints(factory).get("return")
    if not isinstance(cls, type):
        return None
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        names |= keyword_names(klass.__init__) - {"self"}
        if not any(p.kind == p.VAR_KEYWORD for p in inspect.signature(klass.__init__).parameters.values()):
            break
    return frozenset(names)


def data_kwargs(spec: str, *, in_chans: int, img_size: int, drop_path: float = 0.0) -> dict[str, Any]:
    """The constructor options that fit a model to data: ``in_chans``, ``img_size``, ``drop_path_rate``.

    Each is given only to a model that takes it: a zoo model gets those its class names (:func:`zoo_options`:
    every zoo model takes ``in_chans`` and ``img_size``, the ViTs and AlterNets also ``drop_path_rate``);
    ``timm:`` / ``torchvision:`` / ``py:`` models follow `landscape.models.external.external_data_kwargs`.

    Args:
        spec: the model spec (zoo name, ``timm:``, ``torchvision:`` or ``py:``).
        in_chans: number of channels of the data.
        img_size: side of the data's images, in pixels.
        drop_path: stochastic-depth rate; asked for as ``drop_path_rate`` only when > 0.

    Returns:
        The keyword arguments to pass to the model's constructor (``drop_path_rate`` absent where not taken).

    Raises:
        LandscapeError: an unknown model, or as `landscape.models.external.external_data_kwargs` does.
    """
    if is_external(spec):
        return external_data_kwargs(spec, in_chans=in_chans, img_size=img_size, drop_path=drop_path)
    wanted: dict[str, Any] = {"in_chans": in_chans, "img_size": img_size}
    if drop_path > 0:
        wanted["drop_path_rate"] = drop_path
    taken = zoo_options(spec)
    return wanted if taken is None else {k: v for k, v in wanted.items() if k in taken}
