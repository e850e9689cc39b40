"""The one rule for matching parameter and module names with the patterns a user gives.

A pattern with a wildcard (``*``, ``?`` or ``[``) is an ``fnmatch`` glob over the whole dotted name
(``layer1.*``, ``*.bias``, ``*pos_embed*``), case-sensitive. A plain pattern matches the name itself and every
name below it: ``fc`` matches ``fc``, ``fc.weight`` and ``fc.bias``, but not ``fc2.weight`` or ``head.fc.weight``
(write ``*fc*`` for a substring). ``--zero``, ``--params``, ``--exclude`` and the training's weight-decay groups
select parameters by this rule; ``--taps`` selects modules by it, where a plain pattern taps the named module
itself (what is below it is inside its output).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from landscape.errors import LandscapeError

_WILDCARDS = "*?["


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` has a wildcard (and is matched as an ``fnmatch`` glob).

    Args:
        pattern: a name pattern.

    Returns:
        True when it has ``*``, ``?`` or ``[``.
    """
    return any(c in pattern for c in _WILDCARDS)


def name_matches(name: str, pattern: str) -> bool:
    """Whether ``name`` matches ``pattern`` by the one rule (see the module's doc).

    Args:
        name: a dotted parameter or module name, e.g. ``"blocks.0.attn.qkv.weight"``.
        pattern: a glob, or a plain name.

    Returns:
        True when the glob matches the whole name, or the plain pattern is the name or a dotted prefix of it.
    """
    if is_glob(pattern):
        return fnmatch.fnmatchcase(name, pattern)
    return name == pattern or name.startswith(pattern + ".")


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches any of ``patterns`` (:func:`name_matches`).

    Args:
        name: a dotted name.
        patterns: the patterns.

    Returns:
        True when one matches.
    """
    return any(name_matches(name, p) for p in patterns)


def select(names: Sequence[str], patterns: Sequence[str] | str | None, what: str = "parameter") -> list[str]:
    """The names matching any pattern, in their order; every name for None or no pattern.

    Args:
        names: e.g. those of ``model.named_parameters()``.
        patterns: one pattern, a list of them, or None.
        what: what the names are, for the message.

    Returns:
        The matching names, in the order of ``names``.

    Raises:
        LandscapeError: patterns were given but no name matches any of them.
    """
    if patterns is None:
        return list(names)
    pats = [patterns] if isinstance(patterns, str) else list(patterns)
    if not pats:
        return list(names)
    chosen = [n for n in names if matches_any(n, pats)]
    if not chosen:
        raise LandscapeError(
            f"no {what} matches {', '.join(pats)}; a plain name matches itself and what is below it ('fc' matches "
            "fc.weight), a glob the whole name ('*.weight')"
        )
    return chosen
