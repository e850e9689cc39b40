"""What the registry needs of an analysis whose output is a checkpoint, not a result file.

``landscape align`` writes theta_B aligned as a checkpoint (its record under ``extra["alignment"]``), so no result
file of kind ``align`` exists to summarise or draw; these say so in one line if one is ever asked for.
"""

from __future__ import annotations

from typing import Any

from landscape.errors import LandscapeError

#: what an align run writes instead of a result file
WRITES = "a checkpoint (theta_B aligned; its record under extra['alignment']), not a result file"


def align_summary(result: Any) -> str:
    """The one line on a file of kind ``align``: there are none, an align run writes a checkpoint.

    Args:
        result: a result file of kind ``align``.

    Returns:
        The line.
    """
    return f"Permutation alignment writes {WRITES}"


class AlignFigures:
    """The registry's figures of ``align``: nothing to draw (the output is a checkpoint)."""

    @staticmethod
    def check(result: Any) -> None:
        """Refuse to draw: an align run writes :data:`WRITES`.

        Args:
            result: a result file of kind ``align``.

        Raises:
            LandscapeError: always.
        """
        raise LandscapeError(f"{getattr(result, 'path', 'the file')}: landscape align writes {WRITES}; nothing to draw")

    @staticmethod
    def plot(results: Any, out_dir: Any, fmt: str, **options: Any) -> list:
        """No figures.

        Returns:
            An empty list.
        """
        return []
