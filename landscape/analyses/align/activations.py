"""Activation matching (Ainsworth et al. 2023; Entezari et al. 2022): units paired by their correlation on data.

For each permutation, at every node of the forward pass whose output carries its units (its sites: the layer's
output, its normalisation, its activation, the residual adds of a stream), the units' activations of both networks
on the same images are gathered, every spatial position and token a sample, and the Pearson correlation
``C[i, j] = cov(a_i, b_j) / (std(a_i) std(b_j))`` of theta_A's unit ``i`` and theta_B's unit ``j`` is computed
(float64 running sums over the batches; a unit that never varies correlates 0). The permutation maximises
``sum_i sum_sites C[i, p[i]]``, one linear assignment per permutation.

An attention module's inner units (its query/key and value/output permutations) are seen at no node's output:
they are found by weight matching with every other permutation held at its activation match
(:func:`~landscape.analyses.align.weights.best_descent`: the best of its starts), and the matching names them
(``weight_matched``) and records each start (``starts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, fx, nn

from landscape.analyses.align.permute import apply, identity, objective
from landscape.analyses.align.spec import PermutationSpec, Site, trace
from landscape.analyses.align.weights import Matching, assignment, best_descent


def site_units(out: Tensor, site: Site, size: int) -> Tensor:
    """A node's output as ``(samples, units)`` float64: every position along the other axes is a sample.

    Args:
        out: the node's output.
        site: where the units lie in it.
        size: the number of units.

    Returns:
        The matrix.
    """
    moved = out.detach().to(torch.float64).movedim(site.dim, -1)
    return moved.reshape(-1, size, site.repeat).transpose(1, 2).reshape(-1, size)


class _Sums:
    """Running sums of two ``(samples, n)`` streams: counts, means, second moments and the cross moment."""

    def __init__(self, n: int) -> None:
        self.count = 0
        self.a = torch.zeros(n, dtype=torch.float64)
        self.b = torch.zeros(n, dtype=torch.float64)
        self.aa = torch.zeros(n, dtype=torch.float64)
        self.bb = torch.zeros(n, dtype=torch.float64)
        self.ab = torch.zeros(n, n, dtype=torch.float64)

    def add(self, x: Tensor, y: Tensor) -> None:
        x, y = x.cpu(), y.cpu()
        self.count += x.shape[0]
        self.a += x.sum(0)
        self.b += y.sum(0)
        self.aa += (x * x).sum(0)
        self.bb += (y * y).sum(0)
        self.ab += x.T @ y

    def correlation(self) -> Tensor:
        n = max(self.count, 1)
        ma, mb = self.a / n, self.b / n
        cov = self.ab / n - ma[:, None] * mb[None, :]
        sa = (self.aa / n - ma * ma).clamp_min(0).sqrt()
        sb = (self.bb / n - mb * mb).clamp_min(0).sqrt()
        scale = sa[:, None] * sb[None, :]
        return torch.where(scale > 1e-12, cov / scale.clamp_min(1e-300), torch.zeros_like(cov))


def _outputs(gm: fx.GraphModule, x: Tensor, wanted: set[str]) -> dict[str, Tensor]:
    """The outputs of the ``wanted`` nodes of one forward pass."""
    seen: dict[str, Tensor] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            out = super().run_node(n)
            if n.name in wanted:
                seen[n.name] = out.detach().clone()
            return out

    Recorder(gm).run(x)
    return seen


@torch.no_grad()
def activation_matching(
    spec: PermutationSpec,
    model_a: nn.Module,
    model_b: nn.Module,
    batches: Sequence[Sequence[Tensor]],
    *,
    seed: int = 0,
    max_sweeps: int = 100,
) -> Matching:
    """The permutations of theta_B's units that best match its activations to theta_A's (module doc).

    Args:
        spec: the networks' permutation spec.
        model_a: theta_A (eval mode; not changed).
        model_b: theta_B, of the same architecture.
        batches: ``(x, y)`` batches on the models' device; only ``x`` is used.
        seed: seeds the weight matching of the permutations no node shows.
        max_sweeps: its cap on sweeps.

    Returns:
        The :class:`Matching` (one sweep; converged unless the weight matching of the unseen ones was not).
    """
    gm_a, gm_b = trace(model_a), trace(model_b)
    wanted = {s.node for p in spec.permutations for s in p.sites}
    sums = {(p.name, s.node): _Sums(p.size) for p in spec.permutations for s in p.sites}
    for batch in batches:
        x = batch[0]
        out_a, out_b = _outputs(gm_a, x, wanted), _outputs(gm_b, x, wanted)
        for p in spec.permutations:
            for s in p.sites:
                sums[(p.name, s.node)].add(site_units(out_a[s.node], s, p.size), site_units(out_b[s.node], s, p.size))
    perms = identity(spec)
    for p in spec.permutations:
        if p.sites:
            perms[p.name] = assignment(sum(sums[(p.name, s.node)].correlation() for s in p.sites))
    a, b = model_a.state_dict(), model_b.state_dict()
    unseen = [p for p in spec.permutations if not p.sites]
    starts = best_descent(spec, a, b, perms, unseen, seed=seed, max_sweeps=max_sweeps) if unseen else ()
    converged = max(starts, key=lambda d: d.objective).converged if starts else True
    after = objective(spec, a, apply(spec, b, perms))
    names = tuple(p.name for p in unseen)
    return Matching(perms, 1, converged, objective(spec, a, b), after, names, starts)
