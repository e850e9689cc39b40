"""The options of a training trajectory in polar coordinates (``landscape trajectory``, Paper A Fig 1b).

:class:`TrajectoryOptions` holds every option but the checkpoints, the output file and ``force``, and validates
them when it is built (no torch here: the CLI declares its options from it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from landscape.errors import LandscapeError

#: the parameters the distances and angles are taken over: the model's ``named_parameters()`` (the same set
#: the surface directions perturb; buffers such as BatchNorm running statistics are not weights and are left out)
PARAMETER_SET = "named_parameters"


@dataclass(frozen=True)
class TrajectoryOptions:
    """Every option of a trajectory but the checkpoints, the output file and ``force``.

    Built, it is valid: ``__post_init__`` checks every value and raises a one-line
    :class:`~landscape.errors.LandscapeError` otherwise.

    Attributes:
        exclude: parameter-name patterns left out of every vector (fnmatch globs, or plain substrings when a
            pattern has no wildcard, as ``--zero-patterns`` of the surface); empty: every parameter.

    Raises:
        LandscapeError: a pattern that is not a non-empty string.
    """

    exclude: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse patterns that are not non-empty strings (one-line errors).

        Raises:
            LandscapeError: naming the pattern.
        """
        if isinstance(self.exclude, str):
            object.__setattr__(self, "exclude", (self.exclude,))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        for pattern in self.exclude:
            if not isinstance(pattern, str) or not pattern.strip():
                raise LandscapeError(f"--exclude takes a non-empty parameter-name pattern, got {pattern!r}")

    def attrs(self) -> dict[str, Any]:
        """The root attributes these options write into the trajectory file (docs/schema.md, trajectory).

        Returns:
            ``parameter_set`` (:data:`PARAMETER_SET`) and ``exclude`` (a list of patterns).
        """
        return {"parameter_set": PARAMETER_SET, "exclude": list(self.exclude)}


class TrajectoryKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.trajectory`: the fields of :class:`TrajectoryOptions`.

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    exclude: str | Sequence[str]
