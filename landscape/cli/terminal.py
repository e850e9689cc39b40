"""What the command line prints is made safe for a terminal in one place: every control character escaped.

A result file's attributes, a lock sidecar's fields, a checkpoint's metadata, an option's value and a file's
name all reach the terminal through the command's output. A crafted one could carry terminal escapes
(``ESC ]0;title BEL`` renames the window, others rewrite the screen or the clipboard), so while a command
runs, standard output and standard error are wrapped in :class:`SafeStream`, which writes every control
character other than a newline and a tab as a visible escape; only the progress bar's stream lets its carriage
return pass. A value read from a file is printed on one line (:func:`landscape.errors.one_line`, by whoever
formats it), so that it cannot start a line of its own (``faked_line: yes``) or hide what precedes it behind a
carriage return.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from landscape.errors import escape_controls

#: the control characters standard output and standard error write as they are: the newline and the tab (a
#: value from a file is shown on one line before it is printed: :func:`landscape.errors.one_line`)
KEPT = "\n\t"
#: ... and, on the stream the progress bar writes to alone, its carriage return
KEPT_BY_THE_BAR = KEPT + "\r"


def printable(text: str) -> str:
    r"""``text`` with every control character but the newline and the tab written as a visible escape.

    ``ESC`` becomes ``\x1b``, ``BEL`` ``\x07``, a carriage return ``\r``, U+202E ``\u202e``, the byte 0xff of a
    file name that is not UTF-8 ``\xff``.

    Args:
        text: anything about to be printed.

    Returns:
        The text to print.
    """
    return escape_controls(text, keep=KEPT)


class SafeStream(io.TextIOBase):
    """A text stream that writes what it is given through :func:`printable` to the stream it wraps.

    It has no ``buffer``, so nothing (click included) can write around it. Its :attr:`carriage_returns` is the
    stream the progress bar writes to: the same, but a carriage return passes.

    Args:
        stream: the stream written to (``sys.stdout`` or ``sys.stderr``).
        keep: the control characters written as they are.
    """

    def __init__(self, stream: TextIO, keep: str = KEPT) -> None:
        self._stream, self._keep = stream, keep

    @property
    def carriage_returns(self) -> SafeStream:
        """The wrapped stream as the progress bar writes to it: every control escaped but newline, tab and CR."""
        return SafeStream(self._stream, keep=KEPT_BY_THE_BAR)

    def write(self, text: str) -> int:
        """Write ``text`` made printable; returns the length of ``text``."""
        safe = escape_controls(text, keep=self._keep)
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
