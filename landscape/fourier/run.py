"""``run_fourier``: checkpoint -> Fourier profiles (+ band-noise robustness) -> one HDF5 result file.

File layout (kind ``fourier``, README.md's HDF5 schema plus per-layer detail):

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
from landscape.fourier.features import FREQUENCY_AXES, PROFILES, FourierProfile, eval_model, fourier_profile
from landscape.fourier.noise import BANDS, STRENGTH, WIDTH, accuracy

if TYPE_CHECKING:
    from landscape.pipeline import ModelSource


def write_profile(f: store.h5py.File, result: FourierProfile, axis: str, maps: bool) -> None:
    """Write a :class:`FourierProfile` into an open result file (layout in the module doc)."""
    grid, common = result.common_axis(axis)
    freq = store.write_array(f, "frequencies", grid, axes=["frequency"])
    store.set_attrs(freq, {"units": "normalised [0, 1]" if axis == "normalised" else "pi"})
    store.write_array(f, "delta_log_amplitude", common, axes=["layer", "frequency"])
    for i, layer in enumerate(result.layers):
        group = f"layers/{i:03d}"
        store.write_array(f, f"{group}/frequencies", result.frequencies(i), axes=["frequency"])
        store.write_array(f, f"{group}/log_amplitude", result.log_amplitude(i), axes=["frequency"])
        store.write_array(f, f"{group}/delta_log_amplitude", result.delta_log_amplitude(i), axes=["frequency"])
        store.set_attrs(f[group], {"name": layer.name, "kind": layer.kind, "height": layer.height,
                                   "width": layer.width})
        if maps:
            store.write_array(f, f"maps/{i:03d}", result.mean_map(i), axes=["fy", "fx"])
    store.write_array(f, "depth", result.depth, axes=["layer"])
    store.write_array(f, "layer_names", np.array(result.names), axes=["layer"])
    store.write_array(f, "layer_kinds", np.array(result.kinds), axes=["layer"])
    store.write_array(f, "layer_sizes", np.array([[la.height, la.width] for la in result.layers]),
                      axes=["layer", "hw"])
    store.write_array(f, "variance", result.variance, axes=["layer"])
    store.write_array(f, "high_frequency", result.high_frequency, axes=["layer"])  # written last: the marker


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
    the high-frequency value and the variance of every block's map (A.3), optionally the 2D mean
    log-amplitude maps (``maps``) and the accuracy drop under band-limited noise (``noise_bands``). Root
    attributes are the provenance of :meth:`AnalysisInputs.provenance` plus every option. A complete file of
    the same options is returned as is; an incomplete one is resumed; one of other options needs ``force``.
    ``checkpoint`` is a path or a :class:`~landscape.pipeline.ModelSource`; the block outputs of a model
    outside the zoo are found by :class:`~landscape.taps.FeatureTaps` (its family rules, or ``taps``:
    ``'PATTERN=KIND'`` strings naming the modules whose outputs are the maps).
    """
    from landscape import distributed as D
    from landscape.errors import LandscapeError
    from landscape.pipeline import batches_for, load_inputs

    if profile not in PROFILES:
        raise LandscapeError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}")
    if frequency_axis not in FREQUENCY_AXES:
        raise LandscapeError(f"unknown frequency axis {frequency_axis!r}; use one of {', '.join(FREQUENCY_AXES)}")
    if noise_bands and noise_strength <= 0:
        raise LandscapeError(f"--noise-strength must be positive, got {noise_strength}")
    inputs = load_inputs(checkpoint, model_name=model_name, data=data, split=split, device=device)
    options = {"profile": profile, "frequency_axis": frequency_axis, "maps": bool(maps), "batch_size": batch_size,
               "noise_bands": list(bands) if noise_bands else None,
               "noise_width": noise_width if noise_bands else None,
               "noise_strength": noise_strength if noise_bands else None, "taps": list(taps or [])}
    attrs = inputs.provenance(samples, seed, **options)
    batches = batches_for(inputs, batch_size=batch_size, n_samples=samples, seed=seed)
    attrs["n_samples"] = sum(int(x.shape[0]) for x, _ in batches)
    if D.is_main():  # under torchrun the (cheap) analysis runs on rank 0 alone; the others wait for the file
        f, _ = store.open_result(out, "fourier", attrs, force=force)
        show = not quiet and sys.stderr.isatty()
        with f:
            if not f.attrs.get("complete"):
                if "high_frequency" not in f:
                    result = fourier_profile(inputs.model, batches, profile=profile, maps=maps, progress=show,
                                             taps=taps)
                    write_profile(f, result, frequency_axis, maps)
                if noise_bands:
                    _write_noise(f, inputs.model, batches, bands, noise_width, noise_strength, seed, show,
                                 inputs.source.output)
                store.mark_complete(f)
    D.barrier()
    return store.read_result(out)


def _write_noise(
    f: store.h5py.File, model: nn.Module, batches: list, bands: Sequence[float], width: float, strength: float,
    seed: int, show: bool, output: str | int | None = None,
) -> None:
    """Clean accuracy, then the accuracy under noise of each band not yet done, flushed band by band."""
    net = eval_model(model)
    n = len(bands)
    if "noise/frequencies" not in f:
        store.write_array(f, "noise/frequencies", np.asarray(bands, dtype=float), axes=["band"])
    acc = store.require_dataset(f, "noise/accuracy", (n,), "f8", fill=np.nan, axes=["band"])
    drop = store.require_dataset(f, "noise/accuracy_drop", (n,), "f8", fill=np.nan, axes=["band"])
    done = store.require_dataset(f, "noise/done", (n,), bool, fill=False, axes=["band"])
    group = f["noise"]
    if "clean_accuracy" not in group.attrs:
        store.set_attrs(group, {"clean_accuracy": accuracy(net, batches, output=output)})
        f.flush()
    clean = float(group.attrs["clean_accuracy"])
    from tqdm.auto import tqdm

    for i in tqdm(range(n), desc="noise bands", unit="band", disable=not show, leave=False):
        if done[i]:
            continue
        noise = {"centre": float(bands[i]), "width": width, "strength": strength, "seed": seed}
        a = accuracy(net, batches, noise, output=output)
        acc[i], drop[i], done[i] = a, clean - a, True
        f.flush()
