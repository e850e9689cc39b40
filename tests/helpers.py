"""Assertions shared by several test modules."""

import pytest

from landscape.errors import LandscapeError


def one_line_error(fn, *args, match=None, **kwargs):
    """Call ``fn`` expecting a LandscapeError whose message is a single non-empty line; return the message."""
    with pytest.raises(LandscapeError, match=match) as e:
        fn(*args, **kwargs)
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg
