"""Validation of user-given numbers in one place: finiteness is checked together with the sign or range.

Every check returns the value as a ``float`` (or ``int``) and raises :class:`~landscape.errors.LandscapeError`
with a one-line message naming the option, the rule and the value it got. ``nan`` and ``inf`` never pass a
check, whatever the rule: NaN compares false with everything, so ``nan < 0`` alone would let it through.
"""

from __future__ import annotations

import argparse
import math
import numbers
from typing import Any

from landscape.errors import LandscapeError


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise LandscapeError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float (e.g. 10**400)
        raise LandscapeError(f"{name} must be a finite number, got {value!r}") from None
    except (TypeError, ValueError):
        raise LandscapeError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise LandscapeError(f"{name} must be a finite number, got {value!r}")
    return number


def finite(value: Any, name: str) -> float:
    """``value`` as a float; an error unless it is a finite real number.

    Args:
        value: the number to check (a real number or a numeric string; ``bool`` is refused).
        name: the option's name, used in the error message (e.g. ``"--sigma"``).

    Returns:
        ``float(value)``.

    Raises:
        LandscapeError: ``value`` is not a number, or is ``nan``/``inf``.
    """
    return _as_float(value, name)


def non_negative(value: Any, name: str) -> float:
    """``value`` as a float; an error unless it is finite and ``>= 0``.

    Args:
        value: the number to check (a real number or a numeric string; ``bool`` is refused).
        name: the option's name, used in the error message.

    Returns:
        ``float(value)``.

    Raises:
        LandscapeError: ``value`` is not a number, is ``nan``/``inf``, or is negative.
    """
    number = _as_float(value, name)
    if number < 0:
        raise LandscapeError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def positive(value: Any, name: str) -> float:
    """``value`` as a float; an error unless it is finite and ``> 0``.

    Args:
        value: the number to check (a real number or a numeric string; ``bool`` is refused).
        name: the option's name, used in the error message.

    Returns:
        ``float(value)``.

    Raises:
        LandscapeError: ``value`` is not a number, is ``nan``/``inf``, or is ``<= 0``.
    """
    number = _as_float(value, name)
    if number <= 0:
        raise LandscapeError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def in_range(
    value: Any, name: str, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> float:
    """``value`` as a float; an error unless it is finite and inside ``[low, high]`` (ends open as asked).

    Args:
        value: the number to check (a real number or a numeric string; ``bool`` is refused).
        name: the option's name, used in the error message.
        low: the lower end of the interval.
        high: the upper end of the interval.
        low_open: exclude ``low`` itself (``value > low`` rather than ``>= low``).
        high_open: exclude ``high`` itself (``value < high`` rather than ``<= high``).

    Returns:
        ``float(value)``.

    Raises:
        LandscapeError: ``value`` is not a number, is ``nan``/``inf``, or lies outside the interval.
    """
    number = _as_float(value, name)
    above = number > low if low_open else number >= low
    below = number < high if high_open else number <= high
    if not (above and below):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise LandscapeError(f"{name} must lie in {interval}, got {value!r}")
    return number


#: the largest whole number an option takes: a count or seed plus an index (``seed + j``) still fits in 63 bits,
#: so every integer reaches torch, numpy and HDF5 as a machine integer
MAX_INTEGER = 2**62


def whole(value: Any, name: str, least: int = 0) -> int:
    """``value`` as an int; an error unless it is a whole number in ``[least, MAX_INTEGER]``.

    Args:
        value: the number to check; must be an integral type (``int``, ``numpy.int64``, ...), not ``bool``.
        name: the option's name, used in the error message.
        least: the smallest value allowed.

    Returns:
        ``int(value)``.

    Raises:
        LandscapeError: ``value`` is not an integral number, is a ``bool``, or lies outside ``[least, MAX_INTEGER]``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < least:
        raise LandscapeError(f"{name} must be a whole number >= {least}, got {value!r}")
    if int(value) > MAX_INTEGER:
        raise LandscapeError(f"{name} must be a whole number from {least} to 2**62 = {MAX_INTEGER}, got {value!r}")
    return int(value)


def positive_int(value: Any, name: str) -> int:
    """``value`` as an int; an error unless it is a whole number in ``[1, MAX_INTEGER]`` (see :func:`whole`).

    Args:
        value: the number to check; must be an integral type (``int``, ``numpy.int64``, ...), not ``bool``.
        name: the option's name, used in the error message.

    Returns:
        ``int(value)``.

    Raises:
        LandscapeError: ``value`` is not an integral number, is a ``bool``, or lies outside ``[1, MAX_INTEGER]``.
    """
    return whole(value, name, 1)


def positive_argument(text: str) -> int:
    """An ``argparse`` type (the benchmarks' scripts): a whole number from 1 to ``MAX_INTEGER`` (:func:`positive_int`).

    Args:
        text: the command-line value.

    Returns:
        The number.

    Raises:
        argparse.ArgumentTypeError: ``text`` is not such a number (argparse prints it in one line and exits with 2).
    """
    try:
        return positive_int(int(text), "the value")
    except (ValueError, LandscapeError):
        top = f"2**{MAX_INTEGER.bit_length() - 1}"
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {top}, got {text!r}") from None


#: the largest seed: a seed plus a batch or probe index (``seed + j``) stays a seed torch accepts (< 2**63)
MAX_SEED = MAX_INTEGER


def seed(value: Any, name: str = "--seed") -> int:
    """``value`` as an int; an error unless it is a whole number in ``[0, MAX_SEED]``.

    Args:
        value: the seed; an integral type (``int``, ``numpy.int64``, ...), not ``bool``.
        name: the option's name, used in the error message.

    Returns:
        ``int(value)``.

    Raises:
        LandscapeError: ``value`` is not an integral number, is a ``bool``, or lies outside ``[0, MAX_SEED]``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= MAX_SEED:
        raise LandscapeError(f"{name} must be a whole number from 0 to 2**62 = {MAX_SEED}, got {value!r}")
    return int(value)


def finite_all(values: Any, name: str) -> list[float]:
    """Every entry of ``values`` as a float; an error naming the first entry that is not finite.

    Args:
        values: an iterable of numbers.
        name: the option's name; an error names the entry as ``name[i]``.

    Returns:
        ``[float(v) for v in values]``.

    Raises:
        LandscapeError: an entry is not a number, or is ``nan``/``inf``.
    """
    return [_as_float(v, f"{name}[{i}]") for i, v in enumerate(values)]


def output_file(value: Any, name: str = "--out", example: str = "FILE") -> Any:
    """``value`` unchanged; an error when it names a folder by ending with a path separator.

    ``Path("newdir/")`` is ``Path("newdir")``, so a file would be written under the folder's name: the text is
    judged before it becomes a path, by the command line (``--out``) and by every Python function (``out=``).

    Args:
        value: the output file as given (a str, bytes or an ``os.PathLike``).
        name: the option's name, used in the error message.
        example: a file name to suggest inside the folder.

    Returns:
        ``value``.

    Raises:
        LandscapeError: ``value`` ends with ``/`` (or the platform's separator).
    """
    import os

    text = os.fsdecode(value) if isinstance(value, bytes) else value if isinstance(value, str) else None
    if text is not None and text.endswith(("/", os.sep)):
        raise LandscapeError(f"{name} {text!r} names a folder: give a file in it, e.g. {name} {text + example!r}")
    return value
