"""What the command line prints is made safe for a terminal in one place: every control character escaped.

A result file's attributes, a lock sidecar's fields, a checkpoint's metadata, an option's value and a file's
name all reach the terminal through the command's output. A crafted one could carry terminal escapes
(``ESC ]0;title BEL`` renames the window, others rewrite the screen or the clipboard), so while a command
runs, standard output and standard error are wrapped in :class:`SafeStream`, which writes every control
character other than a newline, a tab and a carriage return (the progress bar's) as a visible escape.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

#: the characters never written as they are: C0 controls but newline, tab and carriage return; DEL; C1 controls
UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    r"""``text`` with every control character (and bidirectional override) written as a visible escape.

    ``ESC`` becomes ``\x1b``, ``BEL`` ``\x07``, U+202E ``\u202e``, the byte 0xff of a file name that is not
    UTF-8 ``\xff``; newlines, tabs and carriage returns stay.

    Args:
        text: anything about to be printed.

    Returns:
        The text to print.
    """
    return UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a file name that is not UTF-8 (Python's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class SafeStream(io.TextIOBase):
    """A text stream that writes what it is given through :func:`printable` to the stream it wraps.

    It has no ``buffer``, so nothing (click included) can write around it.

    Args:
        stream: the stream written to (``sys.stdout`` or ``sys.stderr``).
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` made printable; returns the length of ``text``."""
        safe = printable(text)
        try:
            self._stream.write(safe)
        except UnicodeEncodeError:  # a terminal that cannot show the character: its escape instead
            self._stream.write(safe.encode(self.encoding, "backslashreplace").decode(self.encoding))
        return len(text)

    def flush(self) -> None:
        """Flush the wrapped stream."""
        self._stream.flush()

    def isatty(self) -> bool:
        """Whether the wrapped stream is a terminal."""
        return self._stream.isatty()

    def fileno(self) -> int:
        """The wrapped stream's descriptor."""
        return self._stream.fileno()

    def writable(self) -> bool:
        """Always: this stream is for writing."""
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The wrapped stream's encoding."""
        return getattr(self._stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        """The wrapped stream's error handler."""
        return getattr(self._stream, "errors", None)


@contextmanager
def safe_output() -> Iterator[None]:
    """Within the block, standard output and standard error are :class:`SafeStream`-s (restored after it)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(sys.stdout), SafeStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
