"""The options of a Fourier analysis and their choices.

Used by ``landscape fourier`` and :func:`landscape.analyses.fourier.run.run_fourier`.

:class:`FourierOptions` holds every option but the model source, the output file and the run-time choices
(device, ``force``, progress bar) and validates them when it is built, so that a bad value (a NaN noise
strength, a band centre outside [0, 1], an unknown profile) is a one-line error before any model, data or
file is touched. The profiles (:data:`PROFILES`), frequency axes (:data:`FREQUENCY_AXES`), noise
constructions (:data:`NOISE_CONSTRUCTIONS`) and the default noise bands (:data:`BANDS`, :data:`WIDTH`,
:data:`STRENGTH`, :data:`EPS`) are defined here, once: ``landscape.analyses.fourier`` and the CLI import them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from landscape.errors import LandscapeError
from landscape.options import checks
from landscape.options.common import FieldDefaults, check_data_options, choice

#: 1D profile of a spectrum: the half diagonal (Paper A) or the radial average
#: the block kinds counted as MSA, and as Conv/MLP (downsampling counts as Conv), when their values are compared
MSA_KINDS = ("msa",)
CONV_KINDS = ("conv", "downsample", "mlp")
PROFILES = ("diagonal", "radial")
#: the smallest side of a feature map that has a profile: a side of 1 or 2 has only the zero frequency on its half
#: diagonal (``ceil(h / 2)`` points), so its high-frequency Delta log amplitude would be 0 by construction
MIN_PROFILE_SIDE = 3
#: common frequency axis of the layers: each curve spans [0, 1] (Paper A), or units of pi (NaN-padded)
FREQUENCY_AXES = ("normalised", "physical")
#: default band centres (units of pi) and width
BANDS = tuple(round(0.1 * i, 1) for i in range(1, 10))
WIDTH = 0.1
#: default noise root-mean-square per image, in normalised input units
STRENGTH = 0.5
#: how band noise is built: our symmetric square annulus renormalised to an RMS, or Paper A's released
#: ``FreqAttack`` over ``Random`` (centred integer squares, signs scaled by ``eps``, no renormalisation)
NOISE_CONSTRUCTIONS = ("annulus", "official")
#: default ``eps`` of the official construction, in normalised input units: the default of the released
#: ``ops/adversarial.py`` ``Random(eps=0.007)`` that ``FreqAttack`` wraps (the paper does not state Fig 2b's)
EPS = 0.007


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise LandscapeError(f"{name} must be True or False, got {value!r}")
    return value


@dataclass(frozen=True)
class FourierOptions(FieldDefaults):
    """Every option of a Fourier analysis but the model source, the output file and the run-time choices.

    Built, it is valid: ``__post_init__`` checks every value, raising a one-line
    :class:`~landscape.errors.LandscapeError` (before anything is loaded or written) otherwise. The noise
    options are checked even without :attr:`noise_bands`.

    Attributes:
        data: dataset spec (None: the checkpoint's dataset, else ``digits``).
        split: :data:`~landscape.options.common.SPLITS`.
        samples: images analysed (fixed, seeded); None for the whole split.
        first_samples: take the first :attr:`samples` images of the split in file order (Paper A's first test
            batch) instead of a seeded choice; the seed then only seeds the noise.
        batch_size: images per batch.
        seed: seed of the sample choice and of the noise.
        profile: one of :data:`PROFILES`.
        frequency_axis: one of :data:`FREQUENCY_AXES`.
        maps: also store each layer's 2D mean log-amplitude map.
        noise_bands: also measure the accuracy drop under band-limited noise.
        bands: noise band centres, in units of pi, each in [0, 1].
        noise_width: width of each band (> 0, units of pi).
        noise_strength: root-mean-square of the noise per image (> 0, normalised input units; ``annulus``).
        noise_construction: one of :data:`NOISE_CONSTRUCTIONS` (docs/analyses.md, band noise).
        noise_eps: amplitude ``eps`` of the signs before the band-pass (> 0, normalised input units;
            ``official``).
        taps: ``'PATTERN=KIND'`` items (or ``(pattern, kind)`` pairs) naming the modules whose outputs are the
            block maps, for models no rule knows; None: the model's rule.

    Raises:
        LandscapeError: an invalid value (unknown choice, non-finite or out-of-range number, no noise bands),
            naming the CLI option.
    """

    data: str | None = None
    split: str = "test"
    samples: int | None = 256
    first_samples: bool = False
    batch_size: int = 64
    seed: int = 0
    profile: str = "diagonal"
    frequency_axis: str = "normalised"
    maps: bool = False
    noise_bands: bool = False
    bands: tuple[float, ...] = BANDS
    noise_width: float = WIDTH
    noise_strength: float = STRENGTH
    noise_construction: str = "annulus"
    noise_eps: float = EPS
    taps: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "split", check_data_options(self.split, self.samples, self.batch_size, self.seed))
        if self.data is not None and not isinstance(self.data, str):
            raise LandscapeError(f"--data must be a dataset spec string, got {self.data!r}")
        choice(self.profile, "profile", PROFILES)
        choice(self.frequency_axis, "frequency axis", FREQUENCY_AXES)
        for name in ("first_samples", "maps", "noise_bands"):
            _flag(getattr(self, name), name)
        bands = (self.bands,) if isinstance(self.bands, (int, float, str)) else self.bands
        bands = tuple(checks.in_range(b, "a noise band centre", 0.0, 1.0) for b in bands)
        if not bands:
            raise LandscapeError("no noise bands given; give at least one band centre in [0, 1]")
        object.__setattr__(self, "bands", bands)
        object.__setattr__(self, "noise_width", checks.positive(self.noise_width, "--noise-width"))
        object.__setattr__(self, "noise_strength", checks.positive(self.noise_strength, "--noise-strength"))
        choice(self.noise_construction, "noise construction", NOISE_CONSTRUCTIONS)
        object.__setattr__(self, "noise_eps", checks.positive(self.noise_eps, "--noise-eps"))
        taps = self.taps
        if isinstance(taps, str):
            taps = (taps,)
        object.__setattr__(self, "taps", tuple(taps) if taps else None)

    def attrs(self) -> dict[str, Any]:
        """The root attributes these options write into the Fourier file (docs/schema.md, fourier).

        ``split``, ``seed``, ``batch_size``, ``profile``, ``frequency_axis``, ``maps``, ``noise_bands`` (the band
        centres, or None without noise), ``noise_width`` and ``noise_strength`` (None without noise), ``taps``
        (a list), and ``dataset`` when :attr:`data` is given. Only away from the defaults, so that files of the
        default options keep their attributes (and resume): ``first_samples`` (True) when set, and with noise
        of the ``official`` construction ``noise_construction`` and ``noise_eps``, ``noise_strength`` then None
        (unused). ``n_samples`` (the images actually used) is measured by the run.

        Returns:
            Attribute name -> value, as the file records it.
        """
        official = self.noise_bands and self.noise_construction == "official"
        out: dict[str, Any] = {"split": self.split, "seed": int(self.seed)}
        if self.data is not None:
            out["dataset"] = self.data
        out.update(
            profile=self.profile,
            frequency_axis=self.frequency_axis,
            maps=self.maps,
            batch_size=int(self.batch_size),
            noise_bands=list(self.bands) if self.noise_bands else None,
            noise_width=self.noise_width if self.noise_bands else None,
            noise_strength=self.noise_strength if self.noise_bands and not official else None,
            taps=list(self.taps or []),
        )
        if official:
            out.update(noise_construction=self.noise_construction, noise_eps=self.noise_eps)
        if self.first_samples:
            out["first_samples"] = True
        return out


class FourierKeywords(TypedDict, total=False):
    """Keywords of :func:`landscape.fourier`: the fields of :class:`FourierOptions` (``data`` is its own argument).

    Each with the types the function takes, so that a type checker flags ``top_k="5"``; the options class
    checks the values and holds them normalised (tests/options/test_keywords.py keeps the two in step).
    """

    split: str
    samples: int | None
    first_samples: bool
    batch_size: int
    seed: int
    profile: str
    frequency_axis: str
    maps: bool
    noise_bands: bool
    bands: float | Sequence[float]
    noise_width: float
    noise_strength: float
    noise_construction: str
    noise_eps: float
    taps: str | Sequence[Any] | None
