"""The options of a lesion study (``landscape lesion``, :func:`landscape.analyses.lesion.run.run_lesion`).

:class:`LesionOptions` holds every option but the model source, the output file and the run-time choices (device,
``force``, progress bar) and validates them when it is built, so that a bad value is a one-line error before any
model, data or file is touched. It imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from landscape.errors import LandscapeError
from landscape.options.common import FieldDefaults, check_data_options


@dataclass(frozen=True)
class LesionOptions(FieldDefaults):
    """Every option of a lesion study but the model source, the output file and the run-time choices.

    Built, it is valid: ``__post_init__`` checks every value, raising a one-line
    :class:`~landscape.errors.LandscapeError` (before anything is loaded or written) otherwise.

    Attributes:
        data: dataset spec (None: the checkpoint's dataset, else ``digits``).
        split: :data:`~landscape.options.common.SPLITS`; the test split by default.
        samples: images evaluated (fixed, seeded); None for the whole split.
        batch_size: images per batch.
        seed: seed of the sample choice.

    Raises:
        LandscapeError: an invalid value (unknown split, non-positive count, a seed that is not a whole number, a
            dataset spec that is not a string), naming the CLI option.
    """

    data: str | None = None
    split: str = "test"
    samples: int | None = 512
    batch_size: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "split", check_data_options(self.split, self.samples, self.batch_size, self.seed))
        if self.data is not None and not isinstance(self.data, str):
            raise LandscapeError(f"--data must be a dataset spec string, got {self.data!r}")

    def attrs(self) -> dict[str, Any]:
        """The root attributes these options write into the lesion file (docs/schema.md, lesion).

        ``split``, ``seed``, ``batch_size``, and ``dataset`` when :attr:`data` is given; ``n_samples`` (the images
        actually used) is measured by the run.

        Returns:
            Attribute name -> value, as the file records it.
        """
        out: dict[str, Any] = {"split": self.split, "seed": int(self.seed), "batch_size": int(self.batch_size)}
        if self.data is not None:
            out["dataset"] = self.data
        return out


class LesionKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.lesion`: the fields of :class:`LesionOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    samples: int | None
    batch_size: int
    seed: int
