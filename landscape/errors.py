"""The exception types for errors a user can cause, and the one way code we did not write is called.

:class:`LandscapeError` is a mistake a user can make, with a one-line message that says what to do.
:class:`ForeignError` is a :class:`LandscapeError` for an exception raised by code landscape did not write (a
``py:`` factory, a model's forward pass, timm's or torchvision's constructors): :func:`calling` wraps each such
call, so that the error is classified by where the call was made, never by the words of its message.
:func:`missing_extra` is the error of an optional package that is not installed, naming the extra that adds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

#: the characters never shown as they are: C0 controls (the newline, the carriage return and the tab among them),
#: DEL, C1 controls, the line and paragraph separators, bidirectional overrides and isolates, lone surrogates (the
#: bytes of a file name that is not UTF-8)
CONTROLS = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
#: the escapes of the controls that have a short one
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str, keep: str = "") -> str:
    r"""``text`` with every control character of :data:`CONTROLS` but those in ``keep`` written as a visible escape.

    ``ESC`` becomes ``\x1b``, a newline ``\n``, U+202E ``\u202e``, the byte 0xff of a file name that is not
    UTF-8 (Python's surrogate escape) ``\xff``.

    Args:
        text: anything about to be shown.
        keep: the control characters to leave as they are (``"\n"`` for text of several lines).

    Returns:
        The text, safe to show.
    """
    return _pattern(keep).sub(_escape, text)


def one_line(text: str) -> str:
    r"""``text`` as one line: every control character escaped (:func:`escape_controls`), newlines included.

    A value read from a file cannot then start a line of its own in what is printed around it.

    Args:
        text: a message, or a value from a file.

    Returns:
        The text on one line; a tab stays.
    """
    return escape_controls(text, keep="\t")


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _pattern(keep: str) -> re.Pattern[str]:
    if keep not in _PATTERNS:
        kept = "".join(re.escape(c) for c in keep)
        _PATTERNS[keep] = re.compile(f"(?![{kept}])[{CONTROLS}]" if kept else f"[{CONTROLS}]")
    return _PATTERNS[keep]


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class LandscapeError(Exception):
    """A user-caused error with a one-line message that says what to do.

    The CLI prints the message without a traceback and exits with status 2.
    """


#: the distribution's name on the package index (the import name and the command are ``landscape``)
DISTRIBUTION = "landscape-toolkit"


def install_extra(extra: str) -> str:
    """The command that adds one of the distribution's extras to an installation.

    Args:
        extra: the extra's name in ``pyproject.toml``, e.g. ``"timm"``.

    Returns:
        E.g. ``"pip install 'landscape-toolkit[timm]'"`` (with the toolkit installed, pip adds the extra's packages).
    """
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_extra(needs: str, extra: str) -> LandscapeError:
    """The one-line error of an optional package that is not installed.

    Args:
        needs: what needs which package, e.g. ``"timm: models need the timm package"``.
        extra: the extra that installs it (see :func:`install_extra`).

    Returns:
        ``"{needs}, which is not installed: pip install 'landscape-toolkit[{extra}]'"``, to raise
        (``raise missing_extra(...) from None``).
    """
    return LandscapeError(f"{needs}, which is not installed: {install_extra(extra)}")


class LandscapeWarning(UserWarning):
    """An option that has no effect as given (or is applied only in part); the CLI prints it as one line."""


def first_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message: ``"KeyError: 'x'"``.

    Args:
        exc: any exception.

    Returns:
        ``"Type: first line"``, or ``"Type"`` when the message is empty.
    """
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


class ForeignError(LandscapeError):
    """An exception raised by code landscape did not write, quoted in one line with where it was called.

    The message is ``"{origin} raised {Type}: {first line of its message}[; {hint}]"``; the original exception
    is the ``__cause__`` (its traceback is kept: the CLI shows it with ``--traceback``).

    Args:
        origin: who raised it, e.g. ``"your factory py:pkg.mod:make"`` or ``"timm's constructor of timm:resnet18"``.
        exception: the exception raised.
        hint: what to do, appended after ``;`` (empty: nothing).

    Attributes:
        origin: as given.
        exception: as given.
    """

    def __init__(self, origin: str, exception: BaseException, hint: str = "") -> None:
        self.origin, self.exception = origin, exception
        super().__init__(f"{origin} raised {first_line(exception)}" + (f"; {hint}" if hint else ""))


@contextmanager
def calling(origin: str, hint: str = "", *, passing: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Call code landscape did not write: an exception it raises becomes a :class:`ForeignError` naming ``origin``.

    A :class:`LandscapeError` (raised by landscape code the foreign code called back, such as a hook) and the
    exception types in ``passing`` go through unchanged, and so do ``KeyboardInterrupt`` and ``SystemExit``.

    Args:
        origin: who is called, for the message (see :class:`ForeignError`).
        hint: what to do, for the message.
        passing: exception types that are not the foreign code's fault (e.g. out of memory) and keep their type.

    Yields:
        Nothing; the foreign call runs inside the ``with`` block.

    Raises:
        ForeignError: the code inside the block raised any other ``Exception``.
    """
    try:
        yield
    except LandscapeError:
        raise
    except Exception as exc:
        if passing and isinstance(exc, passing):
            raise
        raise ForeignError(origin, exc, hint) from exc
