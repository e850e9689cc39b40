"""Models from other libraries: ``timm:NAME``, ``torchvision:NAME`` and ``py:package.module:factory``.

A model spec with one of these prefixes names a model that the zoo's registry does not hold:

- ``timm:NAME``: ``timm.create_model(NAME, pretrained=..., num_classes=..., **kwargs)``, any name of
  ``timm.list_models()``; needs the optional ``timm`` extra.
- ``torchvision:NAME``: ``torchvision.models.get_model(NAME, weights=..., num_classes=..., **kwargs)``.
- ``py:package.module:factory``: ``factory(**kwargs)`` must return an ``nn.Module``; ``num_classes`` (and
  ``in_chans``, ``img_size`` when a model is fitted to data) are passed only if the factory names them.

``pretrained=True`` downloads the library's published weights (timm: the Hugging Face hub; torchvision:
``weights="DEFAULT"``); offline that is a one-line error pointing at ``--ckpt`` with a local file. Every
model built here carries the attributes ``model_name`` (the whole spec), ``num_classes`` and
``model_kwargs`` (JSON-ready), as zoo models do, so a checkpoint can rebuild it.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from landscape.data.preprocess import Preprocess
from landscape.errors import LandscapeError, calling, missing_extra

if TYPE_CHECKING:
    from landscape.data.preprocess import Preprocess

SOURCES = ("timm", "torchvision", "py")


def split_spec(name: str) -> tuple[str | None, str]:
    """Split a model spec at its source prefix: ``"timm:resnet18" -> ("timm", "resnet18")``.

    Args:
        name: A model spec; a zoo name (no ``timm:``, ``torchvision:`` or ``py:`` prefix) gives ``(None, name)``.

    Returns:
        ``(source, rest)`` with ``source`` one of :data:`SOURCES` or ``None``.

    Raises:
        LandscapeError: If a known prefix is followed by no model name (e.g. ``"timm:"``).
    """
    source, sep, rest = name.partition(":")
    if sep and source in SOURCES:
        if not rest:
            raise LandscapeError(f"model spec {name!r} names no model: write {source}:NAME")
        return source, rest
    return None, name


def is_external(name: str | None) -> bool:
    """Whether ``name`` is a ``timm:``, ``torchvision:`` or ``py:`` spec.

    Args:
        name: A model spec, or ``None``.

    Returns:
        True if ``name`` has one of the prefixes of :data:`SOURCES`, False otherwise (and for ``None``).

    Raises:
        LandscapeError: If a known prefix is followed by no model name.
    """
    return name is not None and split_spec(name)[0] is not None


def _timm() -> Any:
    try:
        return importlib.import_module("timm")
    except ImportError:
        raise missing_extra("timm: models need the timm package", "timm") from None


def _unknown(kind: str, name: str, known: list[str], listing: str) -> LandscapeError:
    close = difflib.get_close_matches(name, known, n=4, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return LandscapeError(f"unknown {kind} model {name!r}; {hint}see {listing}")


def _download_error(spec: str, exc: OSError) -> LandscapeError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return LandscapeError(
        f"could not fetch the pretrained weights of {spec} ({type(exc).__name__}: {first}); --pretrained needs a "
        "network: download the weights elsewhere and pass --ckpt weights.pth (a state dict) or weights.safetensors"
    )


#: what to do when a library's constructor or a user's factory refuses its arguments
CONSTRUCTOR_HINT = "check --model-kw and --num-classes"


def _timm_create(name: str, **kwargs: Any) -> nn.Module:
    """``timm.create_model(name, **kwargs)``: what timm raises is named as timm's (a download failure as such)."""
    timm = _timm()
    with calling(f"timm's constructor of timm:{name}", CONSTRUCTOR_HINT):
        try:
            return timm.create_model(name, **kwargs)
        except OSError as exc:
            raise _download_error(f"timm:{name}", exc) from None


def _torchvision_get(name: str, **kwargs: Any) -> nn.Module:
    """``torchvision.models.get_model(name, **kwargs)``: what it raises is named as torchvision's."""
    import torchvision

    with calling(f"torchvision's constructor of torchvision:{name}", CONSTRUCTOR_HINT):
        try:
            return torchvision.models.get_model(name, **kwargs)
        except OSError as exc:
            raise _download_error(f"torchvision:{name}", exc) from None


def _build_timm(name: str, num_classes: int | None, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    timm = _timm()
    if not timm.is_model(name):
        raise _unknown("timm", name, timm.list_models(), "python -c 'import timm; print(timm.list_models())'")
    if num_classes is not None:
        kwargs = {**kwargs, "num_classes": num_classes}
    return _timm_create(name, pretrained=pretrained, **kwargs)


def _check_torchvision(name: str) -> None:
    import torchvision

    known = torchvision.models.list_models()
    if name not in known:
        raise _unknown("torchvision", name, known, "torchvision.models.list_models()")


def _build_torchvision(name: str, num_classes: int | None, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    import torchvision

    _check_torchvision(name)
    if pretrained:
        with calling(f"torchvision's weights of torchvision:{name}", "pass --ckpt with a state dict instead"):
            weights = torchvision.models.get_model_weights(name).DEFAULT
        n_weights = len(weights.meta.get("categories") or [])
        if num_classes is not None and num_classes != n_weights:
            raise LandscapeError(
                f"torchvision:{name} pretrained weights have {n_weights} classes, not {num_classes}: omit "
                "--num-classes, or fine-tune with landscape train and analyse that checkpoint"
            )
        kwargs = {**kwargs, "weights": weights}
    elif num_classes is not None:
        kwargs = {**kwargs, "num_classes": num_classes}
    return _torchvision_get(name, **kwargs)


def resolve_factory(path: str) -> Callable[..., nn.Module]:
    """Import ``package.module:factory`` (the part after ``py:``) and return the callable.

    Args:
        path: ``"package.module:factory"``; ``factory`` may be a dotted attribute path inside the module.

    Returns:
        The callable named by ``path``.

    Raises:
        LandscapeError: If ``path`` lacks the module or the factory part, the module cannot be found, it has
            no such attribute, or the attribute is not callable.
        ForeignError: the module raised another exception while it was imported.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise LandscapeError(f"py: model spec needs package.module:factory, got {path!r}")
    try:
        with calling(f"your module {module_name} (imported for py:{path})", "fix the module", passing=(ImportError,)):
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LandscapeError(f"py:{path}: cannot import {module_name} ({exc}); check PYTHONPATH") from None
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise LandscapeError(f"py:{path}: {module_name} has no attribute {attr!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise LandscapeError(f"py:{path}: {attr} is not callable; name a function or class returning nn.Module")
    return factory  # type: ignore[return-value]


def keyword_names(fn: Callable[..., Any]) -> set[str]:
    """Keyword names ``fn`` accepts explicitly (a ``**kwargs`` catch-all does not count).

    Args:
        fn: a function or class (``inspect.signature`` of it).

    Returns:
        The names of its positional-or-keyword and keyword-only parameters; empty when it has no signature.
    """
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _build_py(path: str, num_classes: int | None, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    if pretrained:
        raise LandscapeError(f"py:{path} has no published weights: pass --ckpt with a state dict instead")
    factory = resolve_factory(path)
    if num_classes is not None and "num_classes" in keyword_names(factory):
        kwargs = {**kwargs, "num_classes": num_classes}
    with calling(f"your factory py:{path}", "fix the factory or check --model-kw"):
        model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise LandscapeError(f"py:{path} returned {type(model).__name__}, not a torch.nn.Module")
    return model


_BUILDERS = {"timm": _build_timm, "torchvision": _build_torchvision, "py": _build_py}


def create_external(spec: str, num_classes: int | None, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    """Build the model of a ``timm:`` / ``torchvision:`` / ``py:`` spec (see the module docstring).

    Args:
        spec: the whole spec, e.g. ``"timm:vit_tiny_patch16_224"``.
        num_classes: output classes; None keeps the library's default (1000 for ImageNet models).
        pretrained: load the library's published weights (needs a network).
        kwargs: constructor options passed through.

    Returns:
        The module, in the mode its library builds it (training).

    Raises:
        LandscapeError: unknown name, missing timm, no network for ``pretrained``.
        ForeignError: the factory or the library's constructor raised (refused options, ...).
    """
    source, name = split_spec(spec)
    if source is None:
        raise LandscapeError(f"{spec!r} is not a timm:, torchvision: or py: model spec")
    return _BUILDERS[source](name, num_classes, pretrained, dict(kwargs))


def forward_origin(model: nn.Module) -> str:
    """Who wrote ``model``'s forward pass, as an error raised in it names it (see `landscape.errors.calling`).

    Args:
        model: the model, carrying ``model_name`` when ``create_model`` built it.

    Returns:
        ``"your model's forward (py:pkg.mod:make)"`` for ``py:`` models, ``"your model's forward (ClassName)"``
        for a module without a model name (one given from Python), ``"timm's forward of timm:NAME"``,
        ``"torchvision's forward of torchvision:NAME"``, else (a zoo model) ``"the forward of model NAME"``.
    """
    spec = getattr(model, "model_name", None)
    if not isinstance(spec, str):
        return f"your model's forward ({type(model).__name__})"
    source = spec.partition(":")[0] if is_external(spec) else None
    if source == "py":
        return f"your model's forward ({spec})"
    if source is not None:
        return f"{source}'s forward of {spec}"
    return f"the forward of model {spec}"


def calling_forward(model: nn.Module, x: Tensor, batch: int | None = None) -> AbstractContextManager[None]:
    """The context of a forward pass of ``model`` on ``x``: what the pass raises is named as the model's.

    Args:
        model: the model whose forward runs inside the ``with`` block.
        x: its inputs (their shape is quoted in the message).
        batch: which batch of the data ``x`` is (named in the message); None: not said.

    Returns:
        `landscape.errors.calling` with the :func:`forward_origin` of ``model``; running out of memory keeps its type.
    """
    which = "" if batch is None else f"batch {batch}, "
    hint = f"it was given {which}inputs of shape {tuple(x.shape)}: check the model and the data"
    return calling(forward_origin(model), hint, passing=(torch.OutOfMemoryError,))


def output_classes(model: nn.Module) -> int | None:
    """The number of classes of a library model: its ``num_classes`` or the last Linear layer's outputs.

    Args:
        model: The model.

    Returns:
        ``model.num_classes`` when it is a positive int, else the ``out_features`` of the last ``nn.Linear``
        in ``model.modules()``, else ``None``.
    """
    n = getattr(model, "num_classes", None)
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return linears[-1].out_features if linears else None


def external_data_kwargs(spec: str, *, in_chans: int, img_size: int, drop_path: float = 0.0) -> dict[str, Any]:
    """Constructor options that fit a ``timm:`` / ``torchvision:`` / ``py:`` model to data (see `data_kwargs`).

    timm models take ``in_chans`` and ``drop_path_rate``, and ``img_size`` when their class names it (probed on
    the meta device, no memory used). torchvision models take only ``image_size`` where their class names it
    (ViT); data with other than 3 channels is refused. A ``py:`` factory gets the ones it names.

    Args:
        spec: The model spec (``timm:``, ``torchvision:`` or ``py:``).
        in_chans: Number of channels of the data.
        img_size: Side of the data's images, in pixels.
        drop_path: Stochastic-depth rate; passed as ``drop_path_rate`` only when > 0 (not to torchvision).

    Returns:
        The keyword arguments to pass to the model's constructor.

    Raises:
        LandscapeError: If ``spec`` is a zoo name, the timm or torchvision name is unknown, timm is not installed,
            a torchvision model is given data with ``in_chans != 3``, or a ``py:`` factory cannot be resolved.
    """
    wanted: dict[str, Any] = {"in_chans": in_chans, "img_size": img_size}
    if drop_path > 0:
        wanted["drop_path_rate"] = drop_path
    source, name = split_spec(spec)
    if source is None:
        raise LandscapeError(f"{spec!r} is not a timm:, torchvision: or py: model spec")
    if source == "timm":
        timm = _timm()
        if not timm.is_model(name):
            raise _unknown("timm", name, timm.list_models(), "python -c 'import timm; print(timm.list_models())'")
        with torch.device("meta"):
            probe = _timm_create(name)
        if "img_size" not in keyword_names(type(probe).__init__):
            wanted.pop("img_size")
        return wanted
    if source == "torchvision":
        if in_chans != 3:
            raise LandscapeError(
                f"{spec} takes 3-channel images and the data has {in_chans}: use RGB data (cifar10:, imagefolder:, "
                "synthetic) or a timm: model, which accepts in_chans"
            )
        _check_torchvision(name)
        with torch.device("meta"):
            probe = _torchvision_get(name)
        return {"image_size": img_size} if "image_size" in keyword_names(type(probe).__init__) else {}
    names = keyword_names(resolve_factory(name))
    return {k: v for k, v in wanted.items() if k in names}


def model_preprocess(model: nn.Module) -> Preprocess | None:
    """The input preprocessing a library model expects, or None for zoo and ``py:`` models.

    timm: its resolved data config (``timm.data.resolve_model_data_config``: interpolation, crop_pct, mean,
    std), with the input size of the model's fixed patch grid where it has one (a ViT built with
    ``img_size=32`` expects 32 px) and the config's otherwise. torchvision: the transforms of the
    architecture's default weights (resize / crop as crop_pct, interpolation, mean, std), where it has weights.

    Args:
        model: A model carrying ``model_name`` (as built by ``create_model``); without it, ``None`` is returned.

    Returns:
        A :class:`~landscape.data.Preprocess`, or ``None`` for zoo, ``py:`` and weightless torchvision models.

    Raises:
        LandscapeError: If the model is a ``timm:`` model and timm is not installed.
    """
    spec = getattr(model, "model_name", None)
    source, name = split_spec(spec) if isinstance(spec, str) else (None, "")
    if source == "timm":
        cfg = _timm().data.resolve_model_data_config(model)
        fixed = getattr(getattr(model, "patch_embed", None), "img_size", None)
        size = tuple(fixed) if fixed is not None else tuple(cfg["input_size"][-2:])
        return Preprocess(
            image_size=size[0] if size[0] == size[1] else size,
            crop_pct=min(1.0, cfg["crop_pct"]),
            interpolation=cfg["interpolation"],
            mean=cfg["mean"],
            std=cfg["std"],
        )
    if source == "torchvision":
        import torchvision

        try:
            weights = torchvision.models.get_model_weights(name).DEFAULT
        except (ValueError, KeyError, AttributeError):  # an architecture without published weights
            return None
        t = weights.transforms()
        crop, resize = int(t.crop_size[0]), int(t.resize_size[0])
        return Preprocess(
            image_size=crop,
            crop_pct=min(1.0, crop / resize),
            interpolation=t.interpolation.value,
            mean=tuple(t.mean),
            std=tuple(t.std),
        )
    return None


def fused_attention_modules(module: nn.Module) -> list[nn.Module]:
    """The submodules of ``module`` with fused attention kernels switched on (timm's ``fused_attn``).

    Args:
        module: the model.

    Returns:
        Every submodule (``module`` included) whose ``fused_attn`` attribute is ``True``.
    """
    return [m for m in module.modules() if getattr(m, "fused_attn", False) is True]


def unfuse_attention(module: nn.Module) -> int:
    """Switch off fused attention kernels (timm's ``fused_attn``) in ``module``; return how many were on.

    torch.func's forward-mode differentiation (the Hessian-vector products) has no rule for the fused CPU/GPU
    attention kernels; the explicit softmax(q k^T) v path computes the same function.

    Args:
        module: the model; modified in place (``fused_attn = False`` on each such submodule).

    Returns:
        The number of submodules switched off.
    """
    fused = fused_attention_modules(module)
    for m in fused:
        m.fused_attn = False
    return len(fused)
