"""Feature maps of every block of any vision network, read by forward hooks.

:class:`FeatureTaps` runs ``model(x)`` once and returns the output of every block as a
:class:`~landscape.models.layers.Feature` (name = module path, kind, NCHW map), in forward order. Where the
maps come from, in order of precedence:

- ``taps``: ``'PATTERN=KIND'`` items; every module whose name (``model.named_modules()``) matches the fnmatch
  glob ``PATTERN`` (``*`` also matches dots) gives its output as a map of kind ``KIND``. NCHW outputs pass,
  ``(B, N, C)`` tokens are laid out on a square grid (after dropping one leading CLS token if need be).
- ``zoo``: models with ``block_features(x)`` (the landscape zoo): that method, no hooks.
- a family rule, found from the module tree:

  - ``timm-vit``: ``patch_embed`` + ``blocks`` of modules with ``attn`` and ``mlp``. Per block the residual
    stream after the MSA half (``blocks.i.msa``) and the block output (``blocks.i.mlp``), after the embedded
    tokens (input of ``blocks.0``, ``patch_embed``). Prefix tokens (``num_prefix_tokens``) are dropped and
    the rest laid out row-major on the patch grid of the input size.
  - ``timm-swin``: ``patch_embed`` (NHWC) + ``layers[i]`` with ``downsample`` and ``blocks``; the same two
    maps per block, the stage input of ``layers.0`` and every non-identity ``downsample``; NHWC -> NCHW.
  - ``timm-convnext``: ``stem`` + ``stages[i]`` with ``downsample`` and ``blocks`` of ``conv_dw`` blocks.
  - ``resnet`` (timm and torchvision): ``conv1`` + ``layer1..`` of blocks with ``conv1`` and ``conv2``: the
    stem output (input of ``layer1``), then every block output.
  - ``torchvision-vit``: ``conv_proj`` + ``encoder.layers`` of blocks with ``ln_2`` and ``mlp``.

The stream after the MSA half of a transformer block is the input of whichever of its second norm or its
MLP runs first in that call: ``norm2`` for pre-norm blocks (``x + mlp(norm2(x))``), ``mlp`` for post-norm
ones (``x + norm2(mlp(x))``, timm ``ResPostBlock``, Swin V2). Hooks exist only while the taps are in use
(inside ``with`` or one call) and are always removed; the model's mode and parameters are never changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from landscape.errors import LandscapeError
from landscape.models.external import calling_forward
from landscape.models.layers import FEATURE_KINDS, Feature
from landscape.models.tap_rules import (
    Call,
    Plan,
    Site,
    model_grid,
    read_any,
    resnet_plan,
    square_grid,
    timm_convnext,
    timm_swin,
    timm_vit,
    torchvision_vit,
)
from landscape.options.names import is_glob, name_matches

RULES: tuple[str, ...] = ("zoo", "timm-vit", "timm-swin", "timm-convnext", "resnet", "torchvision-vit", "taps")
MAX_CANDIDATES = 10
_KINDS = ", ".join(FEATURE_KINDS)
_TAPS_HINT = f"pass --taps 'PATTERN=KIND' (taps=[...] in Python; KIND one of {_KINDS})"
_READABLE = "tap modules that return NCHW maps or (B, N, C) tokens on a square grid"


# --------------------------------------------------------------------------------------------------------
# Reading a captured value as an NCHW map


def as_grid(tensor: Tensor) -> Tensor:
    """Return an NCHW map for a feature: NCHW passes through; tokens (B, N, C) are laid out row-major.

    Token ``i`` goes to row ``i // s``, column ``i % s`` of an ``s x s`` grid with ``s = sqrt(N)``; when
    ``N - 1`` is a square instead, the first (CLS) token is dropped first. Tokens give a (strided) view.

    Args:
        tensor: A feature, NCHW ``(B, C, H, W)`` or tokens ``(B, N, C)``.

    Returns:
        ``tensor`` itself when 4-D, else a ``(B, C, s, s)`` view of the tokens.

    Raises:
        LandscapeError: If ``tensor`` is neither 4-D nor 3-D, or its tokens (with or without one CLS token)
            do not form a square grid.
    """
    if tensor.dim() == 4:
        return tensor
    if tensor.dim() != 3:
        raise LandscapeError(f"a feature map must be NCHW or (B, N, C) tokens, got shape {tuple(tensor.shape)}")
    grid = square_grid(tensor)
    if grid is None:
        raise LandscapeError(f"{tensor.shape[1]} tokens do not form a square grid (with or without a CLS token)")
    return grid


# --------------------------------------------------------------------------------------------------------
# Where to hook: sites and family rules


_FAMILIES: tuple[tuple[str, Callable[[nn.Module], Plan | None]], ...] = (
    ("timm-vit", timm_vit),
    ("timm-swin", timm_swin),
    ("timm-convnext", timm_convnext),
    ("resnet", resnet_plan),
    ("torchvision-vit", torchvision_vit),
)


# --------------------------------------------------------------------------------------------------------
# User taps


def parse_taps(items: Sequence[str] | None) -> list[tuple[str, str]]:
    """Parse ``'PATTERN=KIND'`` strings into ``(pattern, kind)`` pairs.

    ``PATTERN`` is an fnmatch glob on module names (``model.named_modules()``), ``KIND`` one of
    :data:`~landscape.models.layers.FEATURE_KINDS`. ``None`` gives an empty list.

    Args:
        items: ``'PATTERN=KIND'`` strings (split at the last ``=``, both parts stripped), or None.

    Returns:
        The ``(pattern, kind)`` pairs, in the order given.

    Raises:
        LandscapeError: an item that is not a string, without ``=``, with an empty pattern, or with an
            unknown kind.
    """
    pairs = []
    for item in items or ():
        if not isinstance(item, str):
            raise LandscapeError(f"a tap must be a string 'PATTERN=KIND', got {item!r}")
        pattern, sep, kind = (part.strip() for part in item.rpartition("="))
        if not sep or not pattern:
            raise LandscapeError(f"bad tap {item!r}: write 'PATTERN=KIND', e.g. 'blocks.?=mlp' (KIND one of {_KINDS})")
        pairs.append((pattern, _checked_kind(kind, item)))
    return pairs


def _checked_kind(kind: str, item: object) -> str:
    if kind not in FEATURE_KINDS:
        raise LandscapeError(f"unknown kind {kind!r} in tap {item!r}; use one of {_KINDS}")
    return kind


def _normalise_taps(taps: Sequence[str] | Sequence[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """``'PATTERN=KIND'`` strings or ``(pattern, kind)`` pairs as checked pairs."""
    if isinstance(taps, str):
        return parse_taps([taps])
    pairs = []
    for item in taps or ():
        if isinstance(item, str):
            pairs += parse_taps([item])
        elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(p, str) for p in item) and item[0]:
            pairs.append((item[0], _checked_kind(item[1], item)))
        else:
            raise LandscapeError(f"a tap must be 'PATTERN=KIND' or a (pattern, kind) pair, got {item!r}")
    return pairs


def candidate_modules(model: nn.Module) -> list[str]:
    """Names of the modules a user would likely tap: the children of Sequential/ModuleList containers.

    Shallowest first; the model's own children when it has no containers.

    Args:
        model: The network.

    Returns:
        Module names (as in ``model.named_modules()``), sorted by depth (number of dots).
    """
    names = [
        f"{name}.{child}" if name else child
        for name, module in model.named_modules()
        if isinstance(module, (nn.Sequential, nn.ModuleList))
        for child, _ in module.named_children()
    ]
    names = names or [name for name, _ in model.named_children()]
    return sorted(names, key=lambda n: n.count("."))


def _candidate_text(model: nn.Module) -> str:
    names = candidate_modules(model)
    if not names:
        return "none (the model has no submodules)"
    modules = dict(model.named_modules())
    more = f" (and {len(names) - MAX_CANDIDATES} more)" if len(names) > MAX_CANDIDATES else ""
    return ", ".join(f"{name} ({type(modules[name]).__name__})" for name in names[:MAX_CANDIDATES]) + more


def _taps(name: str, pattern: str) -> bool:
    """Whether ``pattern`` taps module ``name``: the one name rule, a plain pattern tapping the named module itself."""
    return name_matches(name, pattern) if is_glob(pattern) else name == pattern


def _tap_plan(model: nn.Module, pairs: list[tuple[str, str]]) -> Plan:
    """One output site per module matched by a pattern (the first matching pattern gives the kind)."""
    named = [(name, module) for name, module in model.named_modules() if name]
    unmatched = [p for p, _ in pairs if not any(_taps(name, p) for name, _ in named)]
    if unmatched:
        raise LandscapeError(
            f"taps {', '.join(repr(p) for p in unmatched)} match no module of {type(model).__name__}; "
            f"candidate modules: {_candidate_text(model)}"
        )
    sites = []
    read = partial(read_any, grid=model_grid(model))
    for name, module in named:
        kind = next((k for p, k in pairs if _taps(name, p)), None)
        if kind is not None:
            sites.append(Site(module, name, kind, read))
    return Plan(sites, copy=True)


def _plan(model: nn.Module, pairs: list[tuple[str, str]]) -> tuple[str, Plan | None]:
    """The rule for ``model`` and its sites (None for the zoo, which needs no hooks)."""
    if pairs:
        return "taps", _tap_plan(model, pairs)
    if callable(getattr(model, "block_features", None)):
        return "zoo", None
    for rule, find in _FAMILIES:
        plan = find(model)
        if plan is not None:
            return rule, plan
    families = "timm ViT/Swin/ConvNeXt/ResNet, torchvision ResNet/ViT"
    raise LandscapeError(
        f"{type(model).__name__} has no block_features(x) and is none of the known families ({families}); "
        f"{_TAPS_HINT}; candidate modules: {_candidate_text(model)}"
    )


# --------------------------------------------------------------------------------------------------------
# The hooks


@dataclass
class _Record:
    """One captured value, the version counter it had then, and the enclosing block's input shape."""

    site: Site
    value: Any
    version: int | None
    block_shape: torch.Size | None = None


def _version(value: object) -> int | None:
    if isinstance(value, Tensor) and not value.is_inference():
        return value._version
    return None


def _first_input(args: tuple[Any, ...]) -> Any:
    return args[0] if args else None


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"shape {tuple(value.shape)}"
    return f"a {type(value).__name__}, not a Tensor"


class FeatureTaps:
    """The NCHW output map of every block of ``model``, read by hooks in one forward pass.

    ``FeatureTaps(model, taps)(x)`` runs ``model(x)`` once and returns a list of
    :class:`~landscape.models.layers.Feature` in forward order (see the module docstring for the rules;
    ``rule`` names the one used). Use it as a context manager to keep the hooks for several calls; a call
    outside ``with`` adds and removes them itself. Hooks are removed on every exit, also on exceptions;
    the model's mode and parameters are never changed (put it in eval mode yourself). Maps are the
    model's own tensors (or views of them): they are valid until the next call.

    Args:
        model: the network.
        taps: ``'PATTERN=KIND'`` strings or ``(pattern, kind)`` pairs; when given they replace every rule.

    Attributes:
        model: The network.
        rule: The rule used, one of :data:`RULES`.

    Raises:
        LandscapeError: bad taps, taps that match no module, or no rule and no taps (the message lists
            candidate modules to tap). A call raises it for a tapped output that is not a readable map.
    """

    def __init__(self, model: nn.Module, taps: Sequence[str] | Sequence[tuple[str, str]] | None = None) -> None:
        self.model = model
        self.rule, self._plan = _plan(model, _normalise_taps(taps))
        self._handles: list[RemovableHandle] = []
        self._records: list[_Record] = []
        self._armed: dict[int, torch.Size | None] = {}

    def __enter__(self) -> FeatureTaps:
        self._attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove every hook this object added (and forget any captured values); safe to call twice."""
        while self._handles:
            self._handles.pop().remove()
        self._records, self._armed = [], {}

    def __call__(self, x: Tensor) -> list[Feature]:
        """Run ``model(x)`` once and return every block's map, in forward order.

        Args:
            x: Input images of shape ``(B, C, H, W)``.

        Returns:
            One :class:`~landscape.models.layers.Feature` per recorded site (NCHW maps); a site that runs
            several times gives ``name``, ``name[1]``, ``name[2]``, ...

        Raises:
            LandscapeError: If a captured value is not a readable map, or was changed in place later in the
                forward pass.
            ForeignError: the model's forward raised.
        """
        if self._plan is None:
            with calling_forward(self.model, x):
                return list(self.model.block_features(x))
        owner = not self._handles
        if owner:
            self._attach()
        try:
            self._records, self._armed = [], {}
            with calling_forward(self.model, x):
                self.model(x)
            records = self._records
        finally:
            if owner:
                self.close()
            else:
                self._records, self._armed = [], {}
        if not records and self.rule == "taps":
            raise self._never_ran(x)
        return self._features(records, (int(x.shape[-2]), int(x.shape[-1])))

    def _never_ran(self, x: Tensor) -> LandscapeError:
        """The error for taps whose modules the forward pass never called (a model that calls a block's parts)."""
        ran: list[str] = []
        handles = [
            module.register_forward_hook(lambda *_, name=name: ran.append(name))
            for name, module in self.model.named_modules()
            if name
        ]
        try:
            with torch.no_grad(), calling_forward(self.model, x):
                self.model(x)
        finally:
            for handle in handles:
                handle.remove()
        tapped = list(dict.fromkeys(site.name for site in self._plan.sites))
        inside = [n for n in dict.fromkeys(ran) if any(n.startswith(f"{t}.") for t in tapped)]
        own = (
            " (it has its own feature maps: drop --taps)"
            if callable(getattr(self.model, "block_features", None))
            else ""
        )
        return LandscapeError(
            f"the --taps modules of {type(self.model).__name__} ({', '.join(tapped[:3])}, ...) never run in its "
            f"forward pass, so no feature map was taken{own}; modules that run inside them: "
            f"{', '.join(inside[:6]) or 'none'}"
        )

    def _attach(self) -> None:
        if self._handles or self._plan is None:
            return
        try:
            blocks = {id(s.block): s.block for s in self._plan.sites if s.block is not None}
            for key, block in blocks.items():
                self._handles.append(block.register_forward_pre_hook(partial(self._arm, key)))
            for site in self._plan.sites:
                if site.at == "output":
                    self._handles.append(site.module.register_forward_hook(partial(self._on_output, site)))
                else:
                    self._handles.append(site.module.register_forward_pre_hook(partial(self._on_input, site)))
        except BaseException:
            self.close()
            raise

    def _arm(self, key: int, module: nn.Module, args: tuple[Any, ...]) -> None:
        value = _first_input(args)
        self._armed[key] = value.shape if isinstance(value, Tensor) else None

    def _on_input(self, site: Site, module: nn.Module, args: tuple[Any, ...]) -> None:
        shape = None
        if site.block is not None:
            if id(site.block) not in self._armed:
                return
            shape = self._armed.pop(id(site.block))
        self._record(site, _first_input(args), shape)

    def _on_output(self, site: Site, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self._record(site, output, None)

    def _record(self, site: Site, value: Any, block_shape: torch.Size | None) -> None:
        if self._plan.copy and isinstance(value, Tensor):
            value = value.clone()
        self._records.append(_Record(site, value, _version(value), block_shape))

    def _features(self, records: list[_Record], image_size: tuple[int, int]) -> list[Feature]:
        """Read every record as an NCHW map; repeated calls of one site are named ``name[1]``, ``name[2]``..."""
        seen: Counter[str] = Counter()
        features = []
        for rec in records:
            site = rec.site
            where = "output" if site.at == "output" else "input"
            if isinstance(rec.value, Tensor) and rec.version is not None and rec.value._version != rec.version:
                raise LandscapeError(
                    f"module {site.name}'s {where} was changed in place later in the forward pass; {_TAPS_HINT}"
                )
            grid = site.read(rec.value, Call(image_size, rec.block_shape)) if isinstance(rec.value, Tensor) else None
            if grid is None:
                raise LandscapeError(
                    f"module {site.name}'s {where} ({_describe(rec.value)}) cannot be read as a feature map; "
                    f"{_READABLE}"
                )
            name = site.name if not seen[site.name] else f"{site.name}[{seen[site.name]}]"
            seen[site.name] += 1
            features.append(Feature(name, site.kind, grid))
        return features
