"""The options of a feature-similarity analysis.

Used by ``landscape similarity`` and :func:`landscape.analyses.similarity.run.run_similarity`.

:class:`SimilarityOptions` holds every option but the model sources, the output file and the run-time choices
(device, ``force``, progress bar) and validates them when it is built, so that a bad value (a batch of fewer
than :data:`MIN_BATCH` samples, a last batch too small for the unbiased estimator) is a one-line error before
any model, data or file is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from landscape.errors import LandscapeError
from landscape.options.common import FieldDefaults, check_data_options

#: the fewest samples of a minibatch: the unbiased HSIC divides by ``n (n - 3)``
MIN_BATCH = 4


def _taps(value: Any) -> tuple[Any, ...] | None:
    if isinstance(value, str):
        value = (value,)
    return tuple(value) if value else None


@dataclass(frozen=True)
class SimilarityOptions(FieldDefaults):
    """Every option of a feature-similarity (linear CKA) analysis but the model sources and the output file.

    Built, it is valid: ``__post_init__`` checks every value, raising a one-line
    :class:`~landscape.errors.LandscapeError` (before anything is loaded or written) otherwise.

    Attributes:
        data: dataset spec (None: the first model's checkpoint's dataset, else ``digits``).
        split: :data:`~landscape.options.common.SPLITS`.
        samples: images analysed (fixed, seeded); None for the whole split (a last batch of fewer than
            :data:`MIN_BATCH` images is then left out).
        batch_size: images per minibatch, at least :data:`MIN_BATCH`; with ``samples`` given, the last batch
            (``samples % batch_size``, when not 0) must hold at least :data:`MIN_BATCH` images too.
        seed: seed of the sample choice (and of a ``--random-init`` model).
        taps: ``'PATTERN=KIND'`` items (or ``(pattern, kind)`` pairs) naming the block outputs of the first
            model, for models no rule knows; None: the model's rule.
        other_taps: the same for the second model.

    Raises:
        LandscapeError: an invalid value, naming the CLI option.
    """

    data: str | None = None
    split: str = "test"
    samples: int | None = 256
    batch_size: int = 64
    seed: int = 0
    taps: tuple[Any, ...] | None = None
    other_taps: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "split", check_data_options(self.split, self.samples, self.batch_size, self.seed))
        if self.data is not None and not isinstance(self.data, str):
            raise LandscapeError(f"--data must be a dataset spec string, got {self.data!r}")
        if self.batch_size < MIN_BATCH:
            raise LandscapeError(
                f"--batch-size must be at least {MIN_BATCH} for the unbiased HSIC (it divides by n(n-3)), "
                f"got {self.batch_size}"
            )
        if self.samples is not None:
            if self.samples < MIN_BATCH:
                raise LandscapeError(f"--samples must be at least {MIN_BATCH}, got {self.samples}")
            last = self.samples % self.batch_size
            if 0 < last < MIN_BATCH:
                raise LandscapeError(
                    f"--samples {self.samples} leaves a last batch of {last} < {MIN_BATCH} images with --batch-size "
                    f"{self.batch_size}; choose --samples {self.samples - last} or a multiple of the batch size"
                )
        object.__setattr__(self, "taps", _taps(self.taps))
        object.__setattr__(self, "other_taps", _taps(self.other_taps))

    def attrs(self) -> dict[str, Any]:
        """The root attributes these options write into the similarity file (docs/schema.md, similarity).

        ``split``, ``seed``, ``batch_size``, ``taps`` and ``other_taps`` (lists), and ``dataset`` when
        :attr:`data` is given. ``n_samples`` (the images actually used) is measured by the run.

        Returns:
            Attribute name -> value, as the file records it.
        """
        out: dict[str, Any] = {"split": self.split, "seed": int(self.seed)}
        if self.data is not None:
            out["dataset"] = self.data
        out.update(batch_size=int(self.batch_size), taps=list(self.taps or []), other_taps=list(self.other_taps or []))
        return out


class SimilarityKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.similarity`: the fields of :class:`SimilarityOptions` (``data``: its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    samples: int | None
    batch_size: int
    seed: int
    taps: str | Sequence[Any] | None
    other_taps: str | Sequence[Any] | None
