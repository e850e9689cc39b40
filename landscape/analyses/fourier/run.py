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
  ``noise_bands=True``); each band is written and flushed as it finishes, so a killed run resumes. The noise
  is built by ``options.noise_construction`` (``annulus`` or ``official``, :mod:`landscape.analyses.fourier.noise`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import nn
from typing_extensions import Unpack

from landscape import store
from landscape.analyses.fourier.features import FourierProfile, fourier_profile, merge_profiles
from landscape.analyses.fourier.noise import band_accuracies
from landscape.core.calls import analysis_function
from landscape.core.front import eval_model, prepare, python_call, run_from_python
from landscape.data.stream import Batch, BatchSource
from landscape.errors import LandscapeError
from landscape.options.fourier import MIN_PROFILE_SIDE, FourierKeywords, FourierOptions
from landscape.runtime import distributed as D
from landscape.runtime.lifecycle import AnalysisFile
from landscape.runtime.progress import Progress

if TYPE_CHECKING:
    from landscape.core.source import ModelSource


def write_profile(f: store.ResultFile, result: FourierProfile, axis: str, maps: bool) -> None:
    """Write a :class:`FourierProfile` into an open result file (layout in the module doc).

    ``high_frequency`` is written last and the file marked done, so a killed write is not taken as complete.

    Args:
        f: the open ``fourier`` result file (rank 0's).
        result: the merged profiles of every layer.
        axis: the common frequency axis, ``normalised`` or ``physical`` (see :meth:`FourierProfile.common_axis`).
        maps: also write each layer's centred mean log-amplitude map (``maps/NNN``).

    Raises:
        LandscapeError: an unknown ``axis``.
    """
    grid, common = result.common_axis(axis)
    f.write("frequencies", grid, axes=["frequency"])
    f.set_attrs({"units": "normalised [0, 1]" if axis == "normalised" else "pi"}, at="frequencies")
    f.write("delta_log_amplitude", common, axes=["layer", "frequency"])
    for i, layer in enumerate(result.layers):
        group = f"layers/{i:03d}"
        f.write(f"{group}/frequencies", result.frequencies(i), axes=["frequency"])
        f.write(f"{group}/log_amplitude", result.log_amplitude(i), axes=["frequency"])
        f.write(f"{group}/delta_log_amplitude", result.delta_log_amplitude(i), axes=["frequency"])
        f.set_attrs({"name": layer.name, "kind": layer.kind, "height": layer.height, "width": layer.width}, at=group)
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
    source: ModelSource | str | Path,
    options: FourierOptions = FourierOptions(),
    *,
    out: str | Path = "fourier.h5",
    model_name: str | None = None,
    force: bool = False,
    device: str = "auto",
    progress: bool | None = None,
    command: str | None = None,
    batches: Iterable[Any] | None = None,
) -> store.Result:
    """Fourier analysis of a model's feature maps on ``options.samples`` images, written to ``out``; returns it read.

    Computes Paper A's Delta log amplitude profile (``options.profile``: ``diagonal`` as in the paper, or
    ``radial``), the high-frequency value and the variance of every block's map (docs/analyses.md), optionally the
    2D mean log-amplitude maps (``options.maps``) and the accuracy drop under band-limited noise
    (``options.noise_bands``, of the construction ``options.noise_construction``). ``options.first_samples`` takes
    the first ``options.samples`` images of the split in file order instead of a seeded choice. Root attributes are
    the provenance of :meth:`AnalysisInputs.provenance` plus :meth:`FourierOptions.attrs`. A complete file of the
    same options is returned as is; an incomplete one is resumed; one of other options needs ``force``. The block
    outputs of a model outside the zoo are found by :class:`~landscape.models.taps.FeatureTaps` (its family rules, or
    ``options.taps``). Under torchrun the batches are shared among the ranks (the sums behind every number are
    additive) and rank 0 writes the file.

    Args:
        source: a checkpoint path or a :class:`~landscape.core.source.ModelSource`.
        options: every analysis option (validated when it was built).
        out: the HDF5 result file.
        model_name: the model of a checkpoint that does not name it.
        force: overwrite an existing file from other options.
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: show the progress on rank 0 (:mod:`landscape.runtime.progress`: a bar on a terminal, a line
            every 30 s elsewhere); False: nothing.
        command: how the run was asked for, recorded as ``command`` (default: this call).
        batches: the data as ``(x, y)`` batches (a ``DataLoader`` or a list), their first ``samples`` images instead of
            ``options.data`` (:func:`~landscape.core.front.prepare`).

    Returns:
        The file read back (:class:`landscape.store.read.Result`).

    Raises:
        LandscapeError: the options are not a :class:`FourierOptions`, the model or data cannot be loaded, the
            labels do not fit the model's outputs (with noise bands), or the file belongs to other options.
    """
    if not isinstance(options, FourierOptions):
        raise LandscapeError(f"run_fourier takes its options as a FourierOptions, got {type(options).__name__}")
    o = options
    call = command or python_call("run_fourier", source, o, out=out, model_name=model_name)
    prepared = prepare(
        source,
        o,
        model_name=model_name,
        device=device,
        command=call,
        first_samples=o.first_samples,
        labels=bool(o.noise_bands),  # labels count only for the accuracy under noise
        batches=batches,
    )
    inputs, batches, attrs = prepared.inputs, prepared.batches, prepared.attrs
    net = eval_model(inputs.model)

    def resume(f: store.ResultFile) -> dict:
        return {
            "complete": f.complete,
            "profile": "high_frequency" in f,
            "bands": [int(i) for i in np.flatnonzero(f.read("noise/done"))] if "noise/done" in f else [],
        }

    plan = f"fourier: {o.profile} profile of every block's feature maps" + (
        f", accuracy under {len(o.bands)} noise bands" if o.noise_bands else ""
    )
    passes = 1 + (1 + len(o.bands) if o.noise_bands else 0)  # the profile; the clean and each band's accuracy
    prepared.announce(plan, passes, "pass", prepared.seconds_per_pass, progress)
    mine = _Indexed(batches, D.shard(range(len(batches))))
    session = AnalysisFile(out, "fourier", attrs, force=force, resume=resume)
    with session as (f, state):
        assert state is not None
        if not state["complete"]:
            if not state["profile"]:
                with session.progress("fourier", len(mine), unit="batch", progress=progress) as bar:
                    part = (
                        fourier_profile(net, mine.batches, profile=o.profile, maps=o.maps, progress=bar, taps=o.taps)
                        if mine
                        else None
                    )
                if part is not None and D.active():  # gathered by pickling: sums travel on the CPU
                    for la in part.layers:
                        la.log_amplitude_sum, la.variance_sum = la.log_amplitude_sum.cpu(), la.variance_sum.cpu()
                result = merge_profiles(D.all_gather_objects(part))
                if D.is_main() and result.too_small:
                    print(small_maps_warning(result.too_small), file=sys.stderr)
                if f is not None:
                    write_profile(f, result, o.frequency_axis, o.maps)
            if o.noise_bands:
                done = len(state["bands"])
                with session.progress("noise bands", len(o.bands), unit="band", done=done, progress=progress) as bar:
                    _write_noise(f, net, mine, o, bar, inputs.source.output, state["bands"])
    return session.result


def small_maps_warning(names: list[str]) -> str:
    """The one-line warning on layers whose feature maps are too small for a Fourier profile.

    Args:
        names: the layers (:attr:`FourierProfile.too_small`).

    Returns:
        E.g. ``warning: the feature maps of 2 blocks (blocks.0, blocks.1) are smaller than 3 x 3, too small for a
        Fourier profile; their high-frequency values are NaN (a larger --input-size gives larger maps)``.
    """
    shown = ", ".join(names[:6]) + (f", and {len(names) - 6} more" if len(names) > 6 else "")
    return (
        f"warning: the feature maps of {len(names)} block{'s' if len(names) > 1 else ''} ({shown}) are smaller than "
        f"{MIN_PROFILE_SIDE} x {MIN_PROFILE_SIDE}, too small for a Fourier profile; their high-frequency values are "
        "NaN (a larger --input-size gives larger maps)"
    )


class _Indexed(Sequence[tuple[int, Batch]]):
    """This rank's batches with their global indices, ``(j, (x, y))``, each read onto the device when iterated."""

    def __init__(self, source: BatchSource, order: Sequence[int]) -> None:
        self.order = list(order)
        self.batches = source.select(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> tuple[int, Batch]:  # type: ignore[override]
        return self.order[i], self.batches[i]

    def __iter__(self) -> Iterator[tuple[int, Batch]]:
        return zip(self.order, self.batches)


def _summed(counts: tuple[int, int]) -> tuple[int, int]:
    """``(correct, total)`` summed over the ranks."""
    parts = D.all_gather_objects(counts)
    return sum(c for c, _ in parts), sum(t for _, t in parts)


def _write_noise(
    f: store.ResultFile | None,
    net: nn.Module,
    mine: Sequence[tuple[int, Batch]],
    o: FourierOptions,
    bar: Progress,
    output: str | int | None,
    done: Sequence[int],
) -> None:
    """Clean accuracy, then the accuracy under noise of each band not yet done, written band by band.

    Args:
        f: the open result file (None on ranks other than 0).
        net: the classifier in eval mode.
        mine: this rank's ``(j, (x, y))`` batches.
        o: the options: bands, width, construction and its amplitude (``noise_strength`` or ``noise_eps``), seed.
        bar: counts the bands done.
        output: where the logits are in the model's output.
        done: indices of the bands already in the file.
    """
    bands = list(o.bands)
    n = len(bands)
    if f is not None:
        if "noise/frequencies" not in f:
            f.write("noise/frequencies", np.asarray(bands, dtype=float), axes=["band"])
        f.allocate("noise/accuracy", (n,), "f8", fill=np.nan, axes=["band"])
        f.allocate("noise/accuracy_drop", (n,), "f8", fill=np.nan, axes=["band"])
        f.allocate("noise/done", (n,), bool, fill=False, axes=["band"])
    clean = 0.0
    for i, acc in band_accuracies(
        net,
        mine,
        bands,
        width=o.noise_width,
        strength=o.noise_strength,
        seed=o.seed,
        output=output,
        construction=o.noise_construction,
        eps=o.noise_eps,
        skip=done,
        combine=_summed,
    ):
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


@analysis_function(FourierOptions)
def fourier(
    model: Any,
    data: Any = None,
    *,
    out: str | Path | None = None,
    options: FourierOptions | None = None,
    device: str = "auto",
    force: bool = False,
    progress: bool | None = None,
    batch: Callable[[Any], Any] | None = None,
    **fields: Unpack[FourierKeywords],
) -> store.Result:
    """The Fourier spectra of every block's feature maps of ``model`` on ``data`` (``landscape fourier``).

    Delta log amplitude per frequency, its high-frequency value and the variance of every block; see
    :class:`~landscape.options.fourier.FourierOptions` for every keyword.

    Args:
        model: an ``nn.Module`` (copied, never changed), a checkpoint path, or a
            :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...), a ``Dataset``, ``DataLoader`` or list of
            ``(x, y)`` batches (the first ``samples`` images, in order), or None for the checkpoint's dataset (else
            digits).
        out: the HDF5 file to write (resumed when it holds the same run); None keeps the result in memory.
        options: a :class:`~landscape.options.fourier.FourierOptions`, instead of keywords.
        device: ``auto``, ``cpu`` or ``cuda``.
        force: replace a file of other options at ``out``.
        progress: what will run and the progress on rank 0 (a bar on a terminal, lines elsewhere); False:
            nothing (:mod:`landscape.runtime.progress`).
        batch: a function from one batch of ``data`` (a ``Dataset`` or ``DataLoader`` you hold) to ``(inputs,
            labels)``, for batches that are dicts or longer tuples, e.g. ``lambda b: (b["image"], b["label"])``.
        **fields: the options as keywords (the fields of the options class).

    Returns:
        The result (:class:`~landscape.store.Result`): its ``attrs`` and arrays.

    Raises:
        LandscapeError: bad options, a model or data that cannot be used, or a file of other options at ``out``.
    """
    return run_from_python(
        run_fourier,
        "landscape.fourier",
        FourierOptions,
        model,
        data,
        options=options,
        fields=fields,
        batch=batch,
        out=out,
        device=device,
        force=force,
        progress=progress,
    )
