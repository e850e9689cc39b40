"""REPAIR (Jordan et al. 2023): every channel of an interpolated network given its ends' interpolated statistics.

On the line ``theta(a) = (1 - a) theta_A + a theta_B`` the channels of a hidden layer shrink ("variance collapse"):
their standard deviations fall below those of both ends. REPAIR rescales and shifts, in ``theta(a)``, the output
channels of every ``Linear`` and ``Conv`` layer whose units a permutation moves (the layers of the permutation
spec, :mod:`landscape.analyses.align.spec`; the classifier's outputs are not among them), so that channel ``c``'s
mean and standard deviation on the training samples become

    mu*_c(a) = (1 - a) mu_c(theta_A) + a mu_c(theta_B),   sigma*_c(a) = (1 - a) sigma_c(theta_A) + a sigma_c(theta_B):

the output ``y_c`` becomes ``(y_c - mu_c) sigma*_c / sigma_c + mu*_c`` (a channel that never varies is only
shifted). Statistics are over every sample, spatial position and token of the training samples, the population
standard deviation, in float64. The layers are repaired in graph order, each measured with the layers before it
repaired (and, with ``bn="recompute"``, the BatchNorm statistics re-estimated with them), so each channel's
statistics equal their targets exactly, not only those of the first layer. The correction is a forward hook on the
layer (:func:`corrected`): the point's parameters are unchanged, the correction is part of the network evaluated
there. For networks with BatchNorm, re-estimating its statistics (``bn="recompute"``) is the analogue Jordan et
al. call "BN reset"; REPAIR acts on the layers' outputs before the BatchNorm layers as well.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from landscape.analyses.align.activations import site_units
from landscape.analyses.align.spec import Site, permutation_spec
from landscape.analyses.connect.evaluate import point_buffers
from landscape.analyses.connect.path import Endpoint
from landscape.core.objective import Objective
from landscape.errors import LandscapeError

_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass(frozen=True)
class Correction:
    """``y -> y * scale + shift`` along one layer's output channels.

    Attributes:
        module: the layer's name in the model (``layer1.0.conv1``).
        dim: the axis of the layer's output that holds the channels.
        scale: one factor per channel, float64.
        shift: one offset per channel, float64.
    """

    module: str
    dim: int
    scale: Tensor
    shift: Tensor


@dataclass(frozen=True)
class ChannelStatistics:
    """Each repaired layer's per-channel mean and population standard deviation, by layer name (float64)."""

    mean: dict[str, Tensor]
    std: dict[str, Tensor]


def repair_sites(objective: Objective) -> list[Site]:
    """The layers REPAIR corrects: every ``Linear`` and ``Conv`` whose output channels a permutation moves.

    Args:
        objective: the objective whose model is traced (its first batch gives the shapes).

    Returns:
        One site per layer, in graph order (a layer called twice counts once).

    Raises:
        LandscapeError: the model cannot be traced or holds a node no permutation spec covers (naming it; e.g.
            attention).
    """
    modules = dict(objective.module.named_modules())
    try:
        spec = permutation_spec(objective.module, objective.batches[0][0][:2])
    except LandscapeError as exc:
        raise LandscapeError(f"--repair corrects the layers of the permutation spec, which fails: {exc}") from exc
    found: dict[str, Site] = {}
    for p in spec.permutations:
        for site in p.sites:
            if site.module in modules and isinstance(modules[site.module], _LAYERS):
                found.setdefault(site.module, site)
    return sorted(found.values(), key=lambda s: list(modules).index(s.module))


@contextmanager
def corrected(objectives: Sequence[Objective], corrections: Sequence[Correction]) -> Iterator[None]:
    """Apply ``corrections`` as forward hooks on the layers of every objective's model while the block runs.

    Args:
        objectives: the objectives whose models are corrected (each has its own copy of the model).
        corrections: the corrections; none leaves the models as they are.

    Yields:
        Nothing; the hooks are removed when the block ends, also on an exception.
    """
    handles = []
    try:
        for objective in {id(o): o for o in objectives}.values():
            for c in corrections:
                layer = objective.module.get_submodule(c.module)
                handles.append(layer.register_forward_hook(_hook(c)))
        yield
    finally:
        for h in handles:
            h.remove()


def _hook(c: Correction):  # noqa: ANN202 (a forward hook)
    def hook(module: nn.Module, inputs: object, output: Tensor) -> Tensor:
        shape = [1] * output.dim()
        shape[c.dim] = -1
        return output * c.scale.to(output).view(shape) + c.shift.to(output).view(shape)

    return hook


@torch.no_grad()
def channel_statistics(
    objective: Objective, params: Mapping[str, Tensor], buffers: Mapping[str, Tensor], sites: Sequence[Site]
) -> ChannelStatistics:
    """The mean and population standard deviation of each site's output channels over the objective's batches.

    Every sample, spatial position and token is one observation; sums in float64.

    Args:
        objective: the objective (its model, with whatever corrections are hooked on it, and its batches).
        params: the point's parameters.
        buffers: the point's buffers (BatchNorm statistics as the point is evaluated).
        sites: the layers measured.

    Returns:
        The statistics by layer name.
    """
    sums: dict[str, list] = {}
    handles = []

    def recorder(site: Site):  # noqa: ANN202 (a forward hook)
        def hook(module: nn.Module, inputs: object, output: Tensor) -> None:
            x = site_units(output, site, output.shape[site.dim])
            held = sums.setdefault(site.module, [0, 0.0, 0.0])
            held[0] += x.shape[0]
            held[1] = held[1] + x.sum(0)
            held[2] = held[2] + (x * x).sum(0)

        return hook

    try:
        for site in sites:
            handles.append(objective.module.get_submodule(site.module).register_forward_hook(recorder(site)))
        for x, _ in objective.batches:
            objective.logits(params, x, buffers)
    finally:
        for h in handles:
            h.remove()
    mean, std = {}, {}
    for name, (n, s, ss) in sums.items():
        mean[name] = (s / n).cpu()
        std[name] = (ss / n - (s / n) ** 2).clamp_min(0.0).sqrt().cpu()
    return ChannelStatistics(mean, std)


class Repair:
    """REPAIR on the line between two networks: the ends' channel statistics, and each point's corrections.

    Args:
        objective: the objective whose batches (the training samples) give the statistics.
        a: theta_A, on the objective's device.
        b: theta_B.
        bn: how a point's BatchNorm statistics are set (``recompute`` or ``eval``), as when it is evaluated.
        sites: the layers to correct (default :func:`repair_sites`).

    Attributes:
        sites: the layers corrected, in graph order.
        ends: the statistics of theta_A and of theta_B.
    """

    def __init__(
        self, objective: Objective, a: Endpoint, b: Endpoint, bn: str, sites: Sequence[Site] | None = None
    ) -> None:
        self.objective = objective
        self.bn = bn
        self.sites = list(repair_sites(objective) if sites is None else sites)
        self.ends = tuple(
            channel_statistics(objective, end.params, point_buffers(objective, end, bn), self.sites) for end in (a, b)
        )

    @property
    def channels(self) -> int:
        """The number of channels corrected at a point."""
        return sum(int(s.numel()) for s in self.ends[0].mean.values())

    def corrections(self, point: Endpoint, alpha: float) -> list[Correction]:
        """The corrections of ``theta(alpha)``: each layer's channels to the ends' statistics interpolated at alpha.

        Layer by layer in graph order, each measured with the corrections before it hooked on (and BatchNorm
        statistics re-estimated with them, with ``bn="recompute"``).

        Args:
            point: ``theta(alpha)``, on the objective's device.
            alpha: its coordinate on the line.

        Returns:
            One :class:`Correction` per layer of :attr:`sites`.
        """
        done: list[Correction] = []
        a, b = self.ends
        for site in self.sites:
            with corrected([self.objective], done):
                buffers = point_buffers(self.objective, point, self.bn)
                found = channel_statistics(self.objective, point.params, buffers, [site])
            name = site.module
            mean, std = found.mean[name], found.std[name]
            want_mean = (1 - alpha) * a.mean[name] + alpha * b.mean[name]
            want_std = (1 - alpha) * a.std[name] + alpha * b.std[name]
            scale = torch.where(std > 0, want_std / torch.where(std > 0, std, 1.0), torch.ones_like(std))
            done.append(Correction(name, site.dim, scale, want_mean - scale * mean))
        return done
