"""Dataset specs (``name[:ARG]``): parsing, the splits, and :func:`dataset_info`."""

from __future__ import annotations

import re

from landscape.errors import LandscapeError

DATASETS = ("digits", "cifar10", "cifar100", "imagefolder", "synthetic")


_SPEC_HELP = "digits[:SIZE], cifar10:PATH, cifar100:PATH, imagefolder:PATH[:SIZE], synthetic[:N[:SIZE]]"


def parse_spec(spec: str) -> tuple[str, str | None]:
    """Split a dataset spec into its lower-case name and argument: ``"cifar10:/d" -> ("cifar10", "/d")``.

    Args:
        spec: A dataset spec ``name[:ARG]`` (see the module docstring); the name is case-insensitive.

    Returns:
        ``(name, arg)``: the name, one of :data:`DATASETS`, and everything after the first ``:`` (None if empty).

    Raises:
        LandscapeError: If ``spec`` is not a string, is empty, or names an unknown dataset.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise LandscapeError(f"empty dataset spec {spec!r}: use one of {_SPEC_HELP}")
    name, _, arg = spec.strip().partition(":")
    name = name.strip().lower()
    if name not in DATASETS:
        raise LandscapeError(f"unknown dataset {name!r}: use one of {_SPEC_HELP}")
    return name, (arg or None)


def positive_int(text: str, what: str, example: str) -> int:
    """``text`` as a positive integer.

    Args:
        text: the text given.
        what: what it is, for the message.
        example: an example of a good value, for the message.

    Returns:
        The integer.

    Raises:
        LandscapeError: ``text`` is not a positive integer.
    """
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise LandscapeError(f"{what} must be a positive integer, e.g. {example} (got {text!r})")
    return int(text)
