"""Feature maps of every block, accumulated over batches into per-layer Fourier profiles and variances.

The maps come from :class:`landscape.models.taps.FeatureTaps`: a zoo model's ``block_features(x)``, hooks placed
by a family rule (timm ViT/Swin/ConvNeXt/ResNet, torchvision ResNet/ViT) or the user's ``taps``. Memory
stays bounded: per layer only running sums are kept (an (h, w) log-amplitude map or a half-diagonal vector,
a variance sum and a count), never the maps of more than one batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from landscape.analyses.fourier import spectrum
from landscape.core.front import batch_images, eval_model
from landscape.errors import LandscapeError
from landscape.models.taps import FeatureTaps, as_grid
from landscape.options.fourier import FREQUENCY_AXES, MIN_PROFILE_SIDE, PROFILES  # defined once, with the options
from landscape.runtime.progress import Progress


@dataclass
class LayerSpectrum:
    """Running sums of one layer: log-amplitude (diagonal vector or (h, w) map in FFT order), variance.

    Attributes:
        name: the layer's name.
        kind: the layer's kind (stem/conv/msa/mlp/downsample/embed).
        height: the feature map's height ``h``.
        width: the feature map's width ``w``.
        log_amplitude_sum: the sum of ``log(|F| + 1e-6)`` over (sample, channel): shape ``(ceil(h/2),)`` or
            ``(h, w)`` (FFT order), float64.
        variance_sum: the sum of the unbiased spatial variances over (sample, channel), a 0-dim float64 tensor.
        count: the number of (sample, channel) pairs summed.
    """

    name: str
    kind: str
    height: int
    width: int
    log_amplitude_sum: Tensor
    variance_sum: Tensor
    count: int = 0

    @property
    def mean_log_amplitude(self) -> np.ndarray:
        """Mean over samples and channels of ``log(|F| + 1e-6)`` (diagonal vector or FFT-order map)."""
        return (self.log_amplitude_sum / self.count).cpu().numpy()

    @property
    def variance(self) -> float:
        """Mean over (sample, channel) of the unbiased spatial variance."""
        return float(self.variance_sum / self.count)


@dataclass
class FourierProfile:
    """Per-layer Fourier profiles of a model's feature maps (each on the layer's own frequency grid).

    Attributes:
        profile: ``"diagonal"`` or ``"radial"``.
        layers: the running sums of each layer, in forward order.
        n_samples: the number of input samples accumulated.
    """

    profile: str
    layers: list[LayerSpectrum] = field(default_factory=list)
    n_samples: int = 0

    @property
    def names(self) -> list[str]:
        """Layer names in forward order."""
        return [layer.name for layer in self.layers]

    @property
    def kinds(self) -> list[str]:
        """Layer kinds (stem/conv/msa/mlp/downsample/embed)."""
        return [layer.kind for layer in self.layers]

    @property
    def depth(self) -> np.ndarray:
        """Normalised depth ``index / (L - 1)`` (0 for a single layer)."""
        n = len(self.layers)
        return np.arange(n) / max(n - 1, 1)

    @property
    def variance(self) -> np.ndarray:
        """Feature-map variance per layer."""
        return np.array([layer.variance for layer in self.layers])

    def log_amplitude(self, i: int) -> np.ndarray:
        """Layer ``i``'s profile of mean log amplitude (diagonal or radial) on its own frequency grid.

        Args:
            i: the layer's index in :attr:`layers`.

        Returns:
            The profile log A(f), shape ``(ceil(h/2),)`` (radial: ``(ceil(min(h, w)/2),)``).

        Raises:
            LandscapeError: a diagonal profile taken from a full map that is not square.
        """
        layer = self.layers[i]
        mean = layer.mean_log_amplitude
        if mean.ndim == 1:
            return mean
        if self.profile == "diagonal":
            return spectrum.diagonal_of_map(np.fft.fftshift(mean))
        return spectrum.radial_profile(mean)

    def frequencies(self, i: int) -> np.ndarray:
        """Layer ``i``'s native frequencies in units of pi (``2 k / h``).

        Args:
            i: the layer's index in :attr:`layers`.

        Returns:
            The frequencies of :meth:`log_amplitude`'s points, same shape.
        """
        layer = self.layers[i]
        if self.profile == "diagonal":
            return spectrum.diagonal_frequencies(layer.height)
        return spectrum.radial_frequencies(layer.height, layer.width)

    def delta_log_amplitude(self, i: int) -> np.ndarray:
        """Layer ``i``'s ``log A(f) - log A(0)`` on its own frequency grid.

        Args:
            i: the layer's index in :attr:`layers`.

        Returns:
            The Delta log amplitude, of :meth:`log_amplitude`'s shape (first entry 0).
        """
        profile = self.log_amplitude(i)
        return profile - profile[0]

    @property
    def too_small(self) -> list[str]:
        """The layers whose maps are too small for a profile: ``min(h, w) < MIN_PROFILE_SIDE`` (only frequency 0)."""
        return [la.name for la in self.layers if min(la.height, la.width) < MIN_PROFILE_SIDE]

    @property
    def high_frequency(self) -> np.ndarray:
        """Per layer, the Delta log amplitude at its highest frequency (the end of its curve).

        NaN for a layer whose maps are too small to have one (:attr:`too_small`), not the 0 of its only frequency.
        """
        small = set(self.too_small)
        return np.array(
            [np.nan if la.name in small else self.delta_log_amplitude(i)[-1] for i, la in enumerate(self.layers)]
        )

    def mean_map(self, i: int) -> np.ndarray | None:
        """Layer ``i``'s centred (fftshift-ed) 2D mean log-amplitude map, if it was accumulated.

        Args:
            i: the layer's index in :attr:`layers`.

        Returns:
            The map, shape ``(h, w)``, or ``None`` when only the half diagonal was accumulated.
        """
        mean = self.layers[i].mean_log_amplitude
        return np.fft.fftshift(mean) if mean.ndim == 2 else None

    def common_axis(self, axis: str = "normalised") -> tuple[np.ndarray, np.ndarray]:
        """All layers' Delta log amplitudes on one frequency axis: ``(frequencies, (n_layers, n_freq))``.

        ``normalised`` (Paper A's Fig 2a): each layer's curve spans [0, 1] from its zero to its highest
        frequency (its own points at ``linspace(0, 1, n_l)``) and is linearly interpolated onto
        ``linspace(0, 1, n_freq)``, ``n_freq`` the most points of any layer; a one-point layer is NaN past 0.
        ``physical``: the axis is the finest layer's grid in units of pi; each layer is interpolated on its
        own frequencies and NaN beyond its highest one.

        Args:
            axis: ``"normalised"`` or ``"physical"``.

        Returns:
            ``(frequencies, delta)``: the common axis, shape ``(n_freq,)``, and the Delta log amplitudes,
            shape ``(n_layers, n_freq)`` (NaN where a layer has no value).

        Raises:
            LandscapeError: ``axis`` is unknown.
        """
        if axis not in FREQUENCY_AXES:
            raise LandscapeError(f"unknown frequency axis {axis!r}; use one of {', '.join(FREQUENCY_AXES)}")
        n_layers = len(self.layers)
        natives = [self.frequencies(i) for i in range(n_layers)]
        finest = int(np.argmax([len(f) for f in natives]))
        n_freq = len(natives[finest])
        grid = np.linspace(0.0, 1.0, n_freq) if axis == "normalised" else natives[finest]
        out = np.full((n_layers, n_freq), np.nan)
        for i in range(n_layers):
            delta = self.delta_log_amplitude(i)
            own = np.linspace(0.0, 1.0, len(delta)) if axis == "normalised" else natives[i]
            inside = grid <= own[-1] + 1e-12
            out[i, inside] = np.interp(grid[inside], own, delta)
        return grid, out


def fourier_profile(
    model: nn.Module,
    batches: Iterable[Tensor | Sequence[Tensor]],
    *,
    taps: Sequence[str] | Sequence[tuple[str, str]] | None = None,
    profile: str = "diagonal",
    maps: bool = False,
    progress: bool | Progress = False,
) -> FourierProfile:
    """Accumulate Paper A's Fourier profile and the variance of every block's feature map over ``batches``.

    For each layer: ``sum log(|FFT2(x)| + 1e-6)`` over samples and channels (the half diagonal only, or the
    whole (h, w) map when ``profile="radial"`` or ``maps=True``), and the sum of per-(sample, channel)
    unbiased spatial variances. ``batches`` yield inputs or ``(inputs, targets)``. The model runs in eval
    mode under ``torch.no_grad`` (an eval copy is made if any module is in training mode; the model passed in
    is never changed). ``taps`` (``'PATTERN=KIND'`` items) choose the modules whose outputs are the maps
    instead of the model's rule (see :class:`~landscape.models.taps.FeatureTaps`).

    Args:
        model: the model (never changed).
        batches: inputs of shape ``(B, C, H, W)``, or ``(inputs, targets)`` pairs.
        taps: ``'PATTERN=KIND'`` strings or ``(pattern, kind)`` pairs; ``None`` for the model's rule.
        profile: ``"diagonal"`` or ``"radial"``.
        maps: also keep the full ``(h, w)`` map of each layer for a diagonal profile (see
            :meth:`FourierProfile.mean_map`).
        progress: count the batches on this :class:`~landscape.runtime.progress.Progress`, or ``True`` to show
            one of its own (a bar on a terminal, lines elsewhere).

    Returns:
        The :class:`FourierProfile` with float64 running sums of every layer.

    Raises:
        LandscapeError: ``profile`` is unknown, no feature maps can be tapped or read (see
            :class:`~landscape.models.taps.FeatureTaps`), a diagonal profile without ``maps`` meets a non-square map,
            the number or size of the maps changes between batches, or there are no batches.
    """
    if profile not in PROFILES:
        raise LandscapeError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}")
    net = eval_model(model)
    reader = FeatureTaps(net, taps)
    full_map = maps or profile == "radial"
    result = FourierProfile(profile)
    batches = batches if isinstance(batches, Sequence) else list(batches)  # a source is read batch by batch
    own = not isinstance(progress, Progress)
    bar = Progress("fourier", len(batches), unit="batch", progress=None if progress else False) if own else progress
    with reader, torch.no_grad(), bar if own else contextlib.nullcontext():
        for batch in batches:
            x = batch_images(batch)
            features = reader(x)
            if result.layers and len(features) != len(result.layers):
                raise LandscapeError("the model gave a different number of feature maps between batches")
            for i, feature in enumerate(features):
                grid = as_grid(feature.tensor).contiguous()  # one copy for token maps, shared below
                h, w = grid.shape[-2:]
                accumulate = spectrum.log_amplitude_map_sum if full_map else spectrum.diagonal_log_amplitude_sum
                logs = accumulate(grid)
                var = spectrum.spatial_variance_sum(grid)
                logs, var = logs.to(torch.float64), var.to(torch.float64)
                if len(result.layers) <= i:
                    result.layers.append(LayerSpectrum(feature.name, feature.kind, h, w, logs, var))
                else:
                    layer = result.layers[i]
                    if (layer.height, layer.width) != (h, w):
                        raise LandscapeError(f"layer {feature.name} changed size between batches; use equal images")
                    layer.log_amplitude_sum = layer.log_amplitude_sum + logs
                    layer.variance_sum = layer.variance_sum + var
                result.layers[i].count += grid.shape[0] * grid.shape[1]
            result.n_samples += x.shape[0]
            bar.update(1)
    if not result.layers:
        raise LandscapeError("no batches to analyse; give at least one sample")
    return result


def merge_profiles(parts: Sequence[FourierProfile | None]) -> FourierProfile:
    """One profile from profiles accumulated on disjoint shares of the batches (``None``: a share with none).

    The running sums and counts of every layer are added in the order given, so the merged means are those
    of one pass over all the batches (up to float64 rounding).

    Args:
        parts: the profiles of the shares (e.g. one per rank), ``None`` for a share without batches.

    Returns:
        The merged :class:`FourierProfile` (sums on the CPU; the parts are not changed).

    Raises:
        LandscapeError: the parts disagree on the layers (names or sizes), or every part is empty.
    """
    present = [p for p in parts if p is not None]
    if not present:
        raise LandscapeError("no batches to analyse; give at least one sample")
    first = present[0]
    layers = [
        LayerSpectrum(
            la.name, la.kind, la.height, la.width, la.log_amplitude_sum.cpu(), la.variance_sum.cpu(), la.count
        )
        for la in first.layers
    ]
    merged = FourierProfile(first.profile, layers, first.n_samples)
    for part in present[1:]:
        if [(la.name, la.height, la.width) for la in part.layers] != [(la.name, la.height, la.width) for la in layers]:
            raise LandscapeError("the processes found different feature maps; give every rank the same model")
        for mine, theirs in zip(layers, part.layers):
            mine.log_amplitude_sum = mine.log_amplitude_sum + theirs.log_amplitude_sum.cpu()
            mine.variance_sum = mine.variance_sum + theirs.variance_sum.cpu()
            mine.count += theirs.count
        merged.n_samples += part.n_samples
    return merged
