"""The sizes of ``landscape demo``'s runs.

:class:`DemoSettings`, the full demo's :data:`FULL`, the quick one's :data:`QUICK`, and :func:`with_seeds` for
another set of training seeds (:func:`landscape.reproduce.demo.run_demo` runs them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from landscape.errors import LandscapeError
from landscape.options.connect import ConnectOptions
from landscape.options.sharpness import SharpnessOptions
from landscape.reproduce.inputs import seed_folder
from landscape.reproduce.paper_b import PaperBSettings
from landscape.reproduce.widths import WidthSweep

#: the demo's models
MODELS = ("resnet_mini", "vit_mini", "alternet_mini")


@dataclass(frozen=True)
class DemoSettings:
    """The sizes of one demo run: training per model, surface grid, spectrum and Fourier samples.

    ``seeds``: the training seeds; every model is trained with each, and its spectrum and Fourier profile
    computed (the findings' intervals are over them); the surface and the figures are of the first seed's models.
    ``spectrum_batches``: the mini-batches of ``spectrum_batch`` training images of each spectrum (the first of a
    seeded order: more batches add to the same ones). ``data_fractions``: the shares of the training data on
    which ``vit_mini`` is trained again (same options otherwise, each seed) for Paper A's data-size claim; each
    gets a checkpoint and a spectrum in ``data_size/`` (the main models' files are not touched). ``paper_b``: the
    size of Paper B's run, or None to leave it out (its row is then "not measured" unless a ``paper_b.json`` is
    there). ``fourier_unit``: images per batch of the findings' recomputed Fourier profiles
    (:func:`landscape.reproduce.findings.findings`).
    ``sharpness``: the m-sharpness runs of ``vit_mini`` and ``resnet_mini`` of every seed, one per options
    object (one per measure: ``MODEL_sharpness_MEASURE.h5``), for the findings' rescaling-invariant flatness
    rows. ``connect``: the line (and curve) between ``connect_model`` trained with the first two seeds
    (``connect_MODEL.h5``), or None to leave it out. ``widths``: the barriers before and after weight matching
    of every seed pair at a quarter, a half and all of ``resnet_mini``'s channels (:mod:`landscape.reproduce.widths`,
    ``widths/``), or None.
    """

    train: dict[str, dict[str, Any]]
    grid: int
    surface_samples: int
    spectrum_batches: int
    spectrum_batch: int
    fourier_samples: int
    reg_coef: float = 0.05
    models: tuple[str, ...] = MODELS
    data_fractions: tuple[float, ...] = ()
    fourier_unit: int = 16
    seeds: tuple[int, ...] = (0, 1, 2)
    paper_b: PaperBSettings | None = None
    sharpness: tuple[SharpnessOptions, ...] = ()
    connect: ConnectOptions | None = None
    connect_model: str = "resnet_mini"
    widths: WidthSweep | None = None
    negative_curvature: tuple[str, ...] = ("resnet_mini", "vit_mini")


FULL = DemoSettings(
    train={
        "resnet_mini": {"epochs": 6, "batch_size": 64, "lr": 2e-3},
        "vit_mini": {"epochs": 20, "batch_size": 32, "lr": 1e-3},
        "alternet_mini": {"epochs": 8, "batch_size": 64, "lr": 2e-3},
    },
    grid=11,
    surface_samples=256,
    spectrum_batches=3,
    spectrum_batch=16,
    fourier_samples=256,
    data_fractions=(0.06,),  # the findings row takes the smallest; 0.3 fed no row (docs/measured.md)
    paper_b=PaperBSettings(),
    sharpness=(
        SharpnessOptions(samples=96, batch_size=32, measure="average", rho=(0.1,), draws=4),
        SharpnessOptions(samples=96, batch_size=32, measure="worst", rho=(0.005,), p="inf"),  # the default ascent
    ),
    connect=ConnectOptions(
        split="both", samples=360, steps=11, curve="bezier", bend_epochs=5, plane_steps=7, align="weights"
    ),
    widths=WidthSweep(),
)
QUICK = DemoSettings(
    train={m: {"epochs": 1, "batch_size": 64, "lr": 2e-3, "subset": 0.25} for m in MODELS},
    grid=3,
    surface_samples=32,
    spectrum_batches=2,
    spectrum_batch=16,
    fourier_samples=32,
    fourier_unit=4,
    seeds=(0, 1),
    sharpness=(
        SharpnessOptions(samples=32, batch_size=16, measure="average", rho=(0.1,), draws=2, resamples=100),
        SharpnessOptions(
            samples=32, batch_size=16, measure="worst", rho=(0.005,), p="inf", steps=2, restarts=1, resamples=100
        ),
    ),
    connect=ConnectOptions(
        samples=64, batch_size=32, steps=3, curve="bezier", bend_epochs=1, plane_steps=3, align="weights"
    ),
)


def with_seeds(settings: DemoSettings, seeds: Sequence[int]) -> DemoSettings:
    """``settings`` with other training seeds, Paper B's run's included (e.g. a second, disjoint set of seeds).

    Args:
        settings: the sizes.
        seeds: the training seeds (distinct non-negative integers; the first seed's models get the surfaces and
            figures, and the first two are connected).

    Returns:
        The settings with ``seeds`` (and Paper B's ``seeds``) replaced.

    Raises:
        LandscapeError: no seed, a seed that is not a non-negative integer, or a repeated seed.
    """
    seeds = tuple(seeds)
    for s in seeds:
        seed_folder(".", s)  # refuses what is not a non-negative integer
    if not seeds or len(set(seeds)) != len(seeds):
        raise LandscapeError(f"seeds must be one or more distinct non-negative integers, got {list(seeds)}")
    paper_b = None if settings.paper_b is None else dataclasses.replace(settings.paper_b, seeds=seeds)
    return dataclasses.replace(settings, seeds=tuple(int(s) for s in seeds), paper_b=paper_b)
