"""``run_fourier``: checkpoint -> Fourier profiles (+ band-noise robustness) -> one HDF5 result file.

File layout (kind ``fourier``; docs/schema.md, fourier):

- ``frequencies`` (n_freq) and ``delta_log_amplitude`` (n_layers, n_freq): every layer on one common axis,
  chosen by the root attribute ``frequency_axis`` (see :meth:`FourierProfile.common_axis`): ``normalised``
  (default, Paper A's Fig 2a: each curve spans [0, 1] from its zero to its highest frequency, linearly
  interpolated) or ``physical`` (units of pi, NaN past a layer's highest frequency).
- ``high_frequency``, ``depth`` (index / (L-1)), ``layer_names``, ``layer_kinds``, ``variance``,
  ``layer_sizes`` (n_layers, 2): per layer.
- ``layers/NNN/{frequencies, log_amplitude, delta_log_amplitude}``: each layer's native profile, frequencies
  in units of pi (``2 k / h``); group attributes ``name``, ``kind``, ``height``, ``width``.
- ``maps/NNN`` (h, w): centred mean log-amplitude map (only with ``maps=True``).
- ``noise/{frequencies, accuracy, accuracy_drop, done}`` and attribute ``clean_accuracy`` (only with
  ``noise_bands=True``); each band is written and flushed as it finishes, so a killed run resumes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from torch import nn

from landscape import store
from landscape.fourier.features import (
    FREQUENCY_AXES,
    PROFILES,
    FourierProfile,
    eval_model,
    fourier_profile,
    merge_profiles,
)
from landscape.fourier.noise import BANDS, STRENGTH, WIDTH, band_accuracies, check_labels

if TYPE_CHECKING:
    from landscape.pipeline import ModelSource


def write_profile(f: store.ResultFile, result: FourierProfile, axis: str, maps: bool) -> None:
    """Write a :class:`FourierProfile` into an open result file (layout in the module doc)."""
    grid, common = result.common_axis(axis)
    f.write("frequencies", grid, axes=["frequency"])
    f.set_attrs({"units": "normalised [0, 1]" if axis == "normalised" else "pi"}, at="frequencies")
    f.write("delta_log_amplitude", common, axes=["layer", "frequency"])
    for i, layer in enumerate(result.layers):
        group = f"layers/{i:03d}"
        f.write(f"{group}/frequencies", result.frequencies(i), axes=["frequency"])
        f.write(f"{group}/log_amplitude", result.log_amplitude(i), axes=["frequency"])
        f.write(f"{group}/delta_log_amplitude", result.delta_log_amplitude(i), axes=["frequency"])
        f.set_attrs({"name": layer.name, "kind": layer.kind, "height": layer.height, "width": layer.width},
                    at=group)
        if maps:
            f.write(f"maps/{i:03d}", result.mean_map(i), axes=["fy", "fx"])
    f.write("depth", result.depth, axes=["layer"])
    f.write("layer_names", np.array(result.names), axes=["layer"])
    f.write("layer_kinds", np.array(result.kinds), axes=["layer"])
    f.write("layer_sizes", np.array([[la.height, la.width] for la in result.layers]), axes=["layer", "hw"])
    f.write("variance", result.variance, axes=["layer"])
    f.write("high_frequency", result.high_frequency, axes=["layer"])  # written last: the marker
    f.mark_done()


def run_fourier(
    checkpoint: ModelSource | str | Path,
    out: str | Path = "fourier.h5",
    *,
    model_name: str | None = None,
    data: str | None = None,
    split: str = "test",
    samples: int = 256,
    batch_size: int = 64,
    seed: int = 0,
    profile: str = "diagonal",
    frequency_axis: str = "normalised",
    maps: bool = False,
    noise_bands: bool = False,
    bands: Sequence[float] = BANDS,
    noise_width: float = WIDTH,
    noise_strength: float = STRENGTH,
    taps: Sequence[str] | None = None,
    device: str = "auto",
    force: bool = False,
    quiet: bool = False,
) -> store.Result:
    """Fourier analysis of a checkpoint's feature maps on ``samples`` images, written to ``out``; returns it read.

    Computes Paper A's Delta log amplitude profile (``profile``: ``diagonal`` as in the paper, or ``radial``),
    the high-frequency value and the variance of every block's map (docs/analyses.md), optionally the 2D mean
    log-amplitude maps (``maps``) and the accuracy drop under band-limited noise (``noise_bands``). Root
    attributes are the provenance of :meth:`AnalysisInputs.provenance` plus every option. A complete file of
    the same options is returned as is; an incomplete one is resumed; one of other options needs ``force``.
    ``checkpoint`` is a path or a :class:`~landscape.pipeline.ModelSource`; the block outputs of a model
    outside the zoo are found by :class:`~landscape.taps.FeatureTaps` (its family rules, or ``taps``:
    ``'PATTERN=KIND'`` strings naming the modules whose outputs are the maps). Under torchrun the batches are
    shared among the ranks (the sums behind every number are additive) and rank 0 writes the file.
    """
    from landscape import checks
    from landscape import distributed as D
    from landscape.errors import LandscapeError
    from landscape.pipeline import batches_for, load_inputs

    if profile not in PROFILES:
        raise LandscapeError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}")
    if frequency_axis not in FREQUENCY_AXES:
        raise LandscapeError(f"unknown frequency axis {frequency_axis!r}; use one of {', '.join(FREQUENCY_AXES)}")
    if noise_bands:
        checks.positive(noise_strength, "--noise-strength")
        checks.positive(noise_width, "--noise-width")
        bands = [checks.in_range(b, "a noise band centre", 0.0, 1.0) for b in bands]
    dev = D.start(device)
    inputs = load_inputs(checkpoint, model_name=model_name, data=data, split=split, device=dev)
    options = {"profile": profile, "frequency_axis": frequency_axis, "maps": bool(maps), "batch_size": batch_size,
               "noise_bands": list(bands) if noise_bands else None,
               "noise_width": noise_width if noise_bands else None,
               "noise_strength": noise_strength if noise_bands else None, "taps": list(taps or [])}
    attrs = inputs.provenance(samples, seed, **options)
    batches = batches_for(inputs, batch_size=batch_size, n_samples=samples, seed=seed)
    attrs["n_samples"] = sum(int(x.shape[0]) for x, _ in batches)
    net = eval_model(inputs.model)
    if noise_bands:
        check_labels(net, batches, inputs.source.output)
    opened: list[store.ResultFile] = []

    def open_file() -> dict:
        f = store.open_result(out, "fourier", attrs, force=force)
        opened.append(f)
        return {"complete": f.complete, "profile": "high_frequency" in f,
                "bands": [int(i) for i in np.flatnonzero(f.read("noise/done"))] if "noise/done" in f else []}

    state = D.on_main(open_file)
    f = opened[0] if opened else None
    show = not quiet and D.is_main() and sys.stderr.isatty()
    mine = D.shard(list(enumerate(batches)))
    try:
        if not state["complete"]:
            if not state["profile"]:
                part = fourier_profile(net, [b for _, b in mine], profile=profile, maps=maps, progress=show,
                                       taps=taps) if mine else None
                if part is not None and D.active():  # gathered by pickling: sums travel on the CPU
                    for la in part.layers:
                        la.log_amplitude_sum, la.variance_sum = la.log_amplitude_sum.cpu(), la.variance_sum.cpu()
                result = merge_profiles(D.all_gather_objects(part))
                if f is not None:
                    write_profile(f, result, frequency_axis, maps)
            if noise_bands:
                _write_noise(f, net, mine, list(bands), noise_width, noise_strength, seed, show,
                             inputs.source.output, state["bands"])
            if f is not None:
                f.mark_complete()
    finally:
        if f is not None:
            f.close()
    D.barrier()
    return store.read_result(out)


def _summed(counts: tuple[int, int]) -> tuple[int, int]:
    """``(correct, total)`` summed over the ranks."""
    from landscape import distributed as D

    parts = D.all_gather_objects(counts)
    return sum(c for c, _ in parts), sum(t for _, t in parts)


def _write_noise(
    f: store.ResultFile | None, net: nn.Module, mine: list, bands: Sequence[float], width: float, strength: float,
    seed: int, show: bool, output: str | int | None, done: Sequence[int],
) -> None:
    """Clean accuracy, then the accuracy under noise of each band not yet done, written band by band."""
    from tqdm.auto import tqdm

    n = len(bands)
    if f is not None:
        if "noise/frequencies" not in f:
            f.write("noise/frequencies", np.asarray(bands, dtype=float), axes=["band"])
        f.allocate("noise/accuracy", (n,), "f8", fill=np.nan, axes=["band"])
        f.allocate("noise/accuracy_drop", (n,), "f8", fill=np.nan, axes=["band"])
        f.allocate("noise/done", (n,), bool, fill=False, axes=["band"])
    bar = tqdm(total=n, initial=len(done), desc="noise bands", unit="band", disable=not show, leave=False)
    clean = 0.0
    with bar:
        for i, acc in band_accuracies(net, mine, bands, width=width, strength=strength, seed=seed, output=output,
                                      skip=done, combine=_summed):
            if i is None:
                clean = acc
                if f is not None:
                    f.set_attrs({"clean_accuracy": acc}, at="noise")
                continue
            if f is not None:
                f.write_at("noise/accuracy", i, acc)
                f.write_at("noise/accuracy_drop", i, clean - acc)
                f.mark_done("noise/done", i)
            bar.update(1)
