"""The options of permutation alignment: matching theta_B's hidden units to theta_A's before comparing them.

Used by ``landscape align``, :func:`landscape.analyses.align.run.run_align` and ``landscape connect --align``.

:class:`AlignOptions` holds every option but the two model sources, the output checkpoint and the run-time
choices (device, ``force``) and validates them when it is built. The methods (:data:`ALIGN_METHODS`), the
choices of ``connect --align`` (:data:`CONNECT_ALIGN`), the tolerance of the function check
(:data:`FUNCTION_TOLERANCE`), the cap on weight matching's sweeps (:data:`MAX_SWEEPS`) and its descents
(:data:`DESCENT_STARTS`) are defined here, once.
No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.common import FieldDefaults, canonical_split, check_data_options, choice

#: how the permutations are found: weight matching (coordinate descent of linear assignments on the weights'
#: inner products) or activation matching (linear assignment on the correlation of the two networks' units)
ALIGN_METHODS = ("weights", "activations")
#: ``landscape connect --align``: no alignment, or one of :data:`ALIGN_METHODS` before the paths
CONNECT_ALIGN = ("none", *ALIGN_METHODS)
#: the aligned network must compute theta_B's function: ``max |f(pi(B)) - f(B)| / max |f(B)|`` at most this
FUNCTION_TOLERANCE = 1e-5
#: weight matching stops after this many sweeps over the permutations even if one still changes
MAX_SWEEPS = 100
#: the orders in which a weight-matching descent visits the permutations: the spec's (layer by layer) in every
#: sweep, or a random order per sweep drawn from the seed
DESCENT_ORDERS = ("layers", "seeded")
#: weight matching's descents, ``(start, order)``, the best kept: from the invariant match and from the identity,
#: each in both orders (tests/analyses/align/test_weights.py: on small independent MLPs trained on digits neither
#: start is best on every pair, and the best of these four is never below a plain descent from the identity)
DESCENT_STARTS = (("invariant", "seeded"), ("identity", "seeded"), ("invariant", "layers"), ("identity", "layers"))
#: images of the training split that activation matching and the function check use by default
DEFAULT_SAMPLES = 256


@dataclass(frozen=True)
class AlignOptions(FieldDefaults):
    """Every option of an alignment but the two model sources, the output checkpoint and the run-time choices.

    Built, it is valid: ``__post_init__`` checks every value, raising a one-line
    :class:`~landscape.errors.LandscapeError` (before anything is loaded or written) otherwise.

    Attributes:
        data: dataset spec (None: theta_A's checkpoint's dataset, else ``digits``).
        split: the split whose images are matched on and checked on (``train`` by default).
        method: one of :data:`ALIGN_METHODS`.
        samples: images of activation matching and of the function check (fixed, seeded); None: the whole split.
        batch_size: images per fixed batch.
        seed: seed of the sample choice and of weight matching's order of the permutations.
        max_sweeps: weight matching's cap on sweeps over every permutation (at least 1).

    Raises:
        LandscapeError: an unknown method or split, a count that is not a whole number in range.
    """

    data: str | None = None
    split: str = "train"
    method: str = "weights"
    samples: int | None = DEFAULT_SAMPLES
    batch_size: int = 128
    seed: int = 0
    max_sweeps: int = MAX_SWEEPS

    def __post_init__(self) -> None:
        check_data_options(self.split, self.samples, self.batch_size, self.seed)
        object.__setattr__(self, "split", canonical_split(self.split))
        if self.data is not None and not isinstance(self.data, str):
            raise LandscapeError(f"--data must be a dataset spec string, got {self.data!r}")
        choice(self.method, "--method", ALIGN_METHODS)
        checks.positive_int(self.max_sweeps, "--max-sweeps")

    def attrs(self) -> dict[str, Any]:
        """What these options record (in the aligned checkpoint's metadata): method, split, seed, sizes.

        Returns:
            Name -> value.
        """
        out: dict[str, Any] = {"method": self.method, "split": self.split, "seed": int(self.seed)}
        if self.data is not None:
            out["dataset"] = self.data
        out.update(
            samples=None if self.samples is None else int(self.samples),
            batch_size=int(self.batch_size),
            max_sweeps=int(self.max_sweeps),
        )
        return out


class AlignKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.align`: the fields of :class:`AlignOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    method: str
    samples: int | None
    batch_size: int
    seed: int
    max_sweeps: int
