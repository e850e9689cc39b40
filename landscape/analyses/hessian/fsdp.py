"""Hessian eigenpairs of a model sharded with torch's FSDP (``fully_shard``), by central differences of gradients.

For a model too large for one device, torch's FSDP keeps on each rank only a shard of every parameter (dim 0
split over a 1-D device mesh) and gathers the whole parameters for each forward and backward pass. Here every
Lanczos vector is sharded the same way: rank ``r`` holds the entries of the parameters' shards it holds
(:func:`shard_ranges`), the solver's reductions are all-reduced over the mesh
(:class:`~landscape.analyses.hessian.shards.ShardedInnerProduct`), and the product maps this rank's shard of ``v``
to this rank's shard of ``H v`` by the central difference of two gradients (:class:`FSDPHessianOperator`):

    H v ~ (g(w + eps v) - g(w - eps v)) / (2 eps),   eps = u^a (1 + ||w||) / ||v||,

``g = sum_b (N_b / N) grad L_b`` the full-data gradient over the batches, ``u`` the dtype's machine epsilon and
``a`` as :func:`~landscape.analyses.hessian.products.relative_step` says (1/2 in float64, 1/3 otherwise), the norms
those of the whole vectors. Only first derivatives are taken (FSDP's ordinary backward), so nothing of the
model is ever held whole on one rank beyond what FSDP gathers itself. :func:`fsdp_lanczos` runs the one thick-restart
Lanczos of :mod:`~landscape.analyses.hessian.lanczos` on it; ``landscape.hessian`` refuses a sharded model and
names this function (docs/analyses.md, "Models sharded with FSDP").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn

from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.linalg import EigenResult
from landscape.analyses.hessian.probes import local_generator
from landscape.analyses.hessian.products import relative_step
from landscape.analyses.hessian.shards import ShardedInnerProduct
from landscape.core.calls import speaks_python
from landscape.core.front import check_labels
from landscape.data.given import given_batches
from landscape.data.stream import BatchSource
from landscape.errors import LandscapeError

#: ``(outputs, labels) -> the batch's mean loss``
Criterion = Callable[[Tensor, Tensor], Tensor]


def is_fully_sharded(module: object) -> bool:
    """Whether ``module`` was wrapped with torch's ``fully_shard`` (an ``FSDPModule``).

    Args:
        module: anything.

    Returns:
        True for a module that ``fully_shard`` wrapped.
    """
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without distributed support
        return False
    return isinstance(module, FSDPModule)


def fully_shard_model(module: nn.Module, mesh: object | None = None) -> nn.Module:
    """Wrap a plain module with ``fully_shard``: each submodule that owns parameters, then the root.

    Submodules are wrapped children first, so each wrapped unit gathers only its own parameters for its passes.
    The module is changed in place (FSDP's way) and returned.

    Args:
        module: the model (on the device of this rank, or on ``meta`` to be materialised by the caller).
        mesh: a 1-D ``DeviceMesh`` (default: all ranks of the default process group, on the parameters' device
            type).

    Returns:
        ``module``, now an ``FSDPModule`` whose parameters are DTensors sharded along dim 0.

    Raises:
        LandscapeError: no process group is running, or the module has no parameters.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise LandscapeError("fully_shard needs a process group: run under torchrun and call dist.init_process_group")
    first = next(module.parameters(), None)
    if first is None:
        raise LandscapeError("the module has no parameters to shard")
    if mesh is None:
        mesh = init_device_mesh(first.device.type, (dist.get_world_size(),))
    for sub in reversed([m for m in module.modules() if m is not module]):  # children before their parents
        if next(sub.parameters(recurse=False), None) is not None:
            fully_shard(sub, mesh=mesh)
    fully_shard(module, mesh=mesh)
    return module


def shard_ranges(params: Sequence[Tensor]) -> tuple[list[tuple[int, int]], int, object]:
    """Where this rank's parameter shards lie in the flat order of the whole parameters.

    The whole vector is the parameters flattened one after another (their order in ``named_parameters``, as a
    model that is not sharded flattens them); a parameter sharded along dim 0 gives each rank a block of rows, so
    this rank holds one range ``[start, stop)`` per parameter. The rows of every rank are gathered once (the
    shards of a 1-D mesh follow the mesh's order).

    Args:
        params: the model's trainable parameters, DTensors sharded along dim 0 over one 1-D mesh.

    Returns:
        ``(ranges, n, mesh)``: this rank's ranges in the order of ``params``, the whole length, the mesh.

    Raises:
        LandscapeError: a parameter that is not a DTensor sharded along dim 0 of one 1-D mesh shared by all.
    """
    from torch.distributed.tensor import DTensor, Shard

    meshes = {id(p.device_mesh): p.device_mesh for p in params if isinstance(p, DTensor)}
    bad = [p for p in params if not isinstance(p, DTensor) or p.dim() == 0 or tuple(p.placements) != (Shard(0),)]
    if bad or len(meshes) != 1 or next(iter(meshes.values())).ndim != 1:
        raise LandscapeError(
            "every trainable parameter must be sharded by fully_shard along dim 0 over one 1-D device mesh (wrap the "
            "whole model, e.g. with landscape.analyses.hessian.fsdp.fully_shard_model); HSDP and 2-D meshes are not "
            "supported"
        )
    mesh = next(iter(meshes.values()))
    rows = [int(p.to_local().shape[0]) for p in params]
    everyone: list[list[int]] = [rows] * mesh.size()
    if mesh.size() > 1:
        dist.all_gather_object(everyone, rows, group=mesh.get_group())
    me = mesh.get_local_rank()
    ranges, offset = [], 0
    for i, p in enumerate(params):
        per_row = p.numel() // p.shape[0]
        first_row = sum(everyone[r][i] for r in range(me))
        ranges.append((offset + first_row * per_row, offset + (first_row + rows[i]) * per_row))
        offset += p.numel()
    return ranges, offset, mesh


def _front_door(model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]], first: Tensor | None) -> BatchSource:
    """The batches checked as every analysis checks the data it is given (read onto the ``first`` parameter's device).

    :func:`~landscape.data.given.given_batches` (each batch's images and labels, one dtype and one label form in
    every batch, integer class indices as int64), images of the parameters' dtype, and every class index an
    output of the model (:func:`~landscape.core.front.check_labels`: one forward pass of one image, which every rank
    makes together).
    """
    held = given_batches(list(batches), first.device if first is not None else "cpu")
    images, dtype = held[0][0].dtype, first.dtype if first is not None else None
    if dtype is not None and images.is_floating_point and images != dtype:
        raise LandscapeError(
            f"the batches hold {images} images but the model's parameters are {dtype}: give images of the "
            f"model's dtype (x.to({dtype}))"
        )
    check_labels(model, held, remedy="give labels the model can output, or a model with more outputs")
    return held


class FSDPHessianOperator:
    """The full-data loss Hessian of a ``fully_shard``-ed model, on this rank's shards of flat vectors.

    ``H v ~ (g(w + eps v) - g(w - eps v)) / (2 eps)`` with ``g = sum_b (N_b / N) grad L_b`` and
    ``eps = relative_step * (1 + ||w||) / ||v||`` (whole-vector norms, all-reduced over the mesh). The parameters
    are moved in place to ``w + eps v`` and ``w - eps v`` (their local shards, without autograd) and copied back
    from a kept copy of the shards afterwards, so ``w`` is restored bit for bit; the caller's ``.grad`` are put
    back too. Every rank is given the same batches; rank ``r`` of ``W`` runs the forward and backward passes of
    batches ``r, r + W, ...`` with its loss scaled by ``W N_b / N`` (FSDP averages gradients over the ranks, so
    the average is the weighted sum); a rank with fewer batches runs a pass with weight 0 so that every rank runs
    the same number of passes (FSDP's collectives need it).

    Args:
        model: the model, wrapped with ``fully_shard`` (:func:`fully_shard_model`), in eval mode, with FSDP's
            default gradient averaging (no ``set_gradient_divide_factor``) and without a mixed-precision policy
            that lowers the parameters' dtype.
        batches: the ``(inputs, labels)`` batches, the same list on every rank (each moved to the parameters'
            device when used).
        criterion: ``(outputs, labels) -> mean loss`` of a batch (default: cross-entropy).

    Attributes:
        names: the trainable parameters' names, in flat order.
        shape: ``(n, n)``, ``n`` the number of trainable entries of the whole model.
        dtype: the dtype of the vectors (the first parameter's).
        device: the device of the vectors.
        inner: the :class:`~landscape.analyses.hessian.shards.ShardedInnerProduct` of this rank's shards.
        weights: ``N_b / N`` for each batch.
        step: the length ``||eps v||`` of every displacement.
        n_matvec: the number of products made so far.

    Raises:
        LandscapeError: a model that is not sharded as above, in training mode, or no batches; batches that the
            analyses' Python functions refuse (:func:`~landscape.data.given.given_batches`), images of another
            dtype than the parameters', or a class index the model cannot output.
    """

    def __init__(self, model: nn.Module, batches: Sequence[tuple[Tensor, Tensor]], criterion: Criterion | None = None):
        if not is_fully_sharded(model):
            raise LandscapeError("the model is not wrapped with fully_shard; use landscape.hessian for a plain model")
        if any(m.training for m in model.modules()):
            raise LandscapeError(
                "the model is in training mode (dropout or batch statistics make the loss random); call model.eval()"
            )
        if not batches:
            raise LandscapeError("give at least one (inputs, labels) batch")
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        held = _front_door(model, batches, named[0][1] if named else None)
        self.model, self.names, self.params = model, [n for n, _ in named], [p for _, p in named]
        ranges, n, mesh = shard_ranges(self.params)
        self.rank, self.world = mesh.get_local_rank(), mesh.size()
        with torch.no_grad():
            shards = [p.to_local() for p in self.params]
            self._point = [t.detach().clone() for t in shards]
        self.dtype, self.device = shards[0].dtype, shards[0].device
        self.shape = (n, n)
        self.inner = ShardedInnerProduct(ranges, n, mesh.get_group(), self.device)
        self.batches = held
        sizes = held.sizes
        self.weights = [s / sum(sizes) for s in sizes]
        self.criterion = criterion or nn.functional.cross_entropy
        squares = sum(t.double().pow(2).sum() for t in self._point)
        size = float(self.inner.reduce(torch.as_tensor(squares, dtype=torch.float64)).sqrt())
        self.step = max(relative_step(t.dtype) for t in self._point) * (1.0 + size)
        self.n_matvec = 0

    def remedy(self, problem: str) -> str:
        """What to try when these products are not a Hessian's, in Python's words (fsdp_lanczos has no flags)."""
        wider = "" if self.dtype == torch.float64 else "; a float64 model makes them smaller"
        if problem == "non-finite":
            return f"a NaN weight, or a loss that overflows in {str(self.dtype).replace('torch.', '')}{wider}"
        return f"its products are central differences, which cross kinks of ReLU-like activations{wider}"

    def _set(self, shift: Sequence[Tensor] | None, sign: float) -> None:
        """Set every local shard to ``w + sign * shift`` (``w`` itself, copied, when ``shift`` is None)."""
        with torch.no_grad():
            for p, w, d in zip(self.params, self._point, shift or [None] * len(self.params)):
                local = p.to_local()  # FSDP's own storage of the shard: the next gather reads it
                local.copy_(w if d is None else (w + d) if sign > 0 else (w - d))

    def _gradient(self) -> Tensor:
        """This rank's shard of ``sum_b (N_b / N) grad L_b`` at the parameters' present values, flat."""
        mine = list(range(self.rank, len(self.batches), self.world))
        passes = math.ceil(len(self.batches) / self.world)
        for p in self.params:
            p.grad = None
        for i in range(passes):
            index, scale = (mine[i], self.world * self.weights[mine[i]]) if i < len(mine) else (0, 0.0)
            x, y = self.batches[index]
            loss = self.criterion(self.model(x.to(self.device)), y.to(self.device))
            (loss * scale).backward()
        parts = [
            p.grad.to_local().reshape(-1) if p.grad is not None else torch.zeros_like(w).reshape(-1)
            for p, w in zip(self.params, self._point)
        ]
        return torch.cat(parts).detach()

    def matvec(self, v: Tensor) -> Tensor:
        """This rank's shard of ``H v`` for this rank's shard of ``v`` (every rank must call it together).

        Args:
            v: this rank's part of the vector, ``inner.local_length(n)`` entries.

        Returns:
            This rank's part of ``H v``, same length, in :attr:`dtype` on :attr:`device`.

        Raises:
            ValueError: ``v`` does not have this rank's number of entries.
        """
        v = v.to(device=self.device, dtype=self.dtype).reshape(-1)
        if v.numel() != self.inner.length:
            raise ValueError(f"vector has {v.numel()} entries, this rank's shards hold {self.inner.length}")
        norm = self.inner.norm(v.double())
        eps = self.step / torch.clamp(norm, min=torch.finfo(torch.float64).tiny)
        parts = v.split([w.numel() for w in self._point])
        shift = [(eps * d).to(w.dtype).view_as(w) for d, w in zip(parts, self._point)]
        saved = [p.grad for p in self.params]
        try:
            self._set(shift, +1.0)
            plus = self._gradient()
            self._set(shift, -1.0)
            minus = self._gradient()
        finally:
            self._set(None, 0.0)
            for p, g in zip(self.params, saved):
                p.grad = g
        self.n_matvec += 1
        return ((plus - minus) / (2 * eps)).to(self.dtype)


@speaks_python
def fsdp_lanczos(
    model: nn.Module,
    batches: Sequence[tuple[Tensor, Tensor]],
    *,
    k: int = 6,
    which: str = "LA",
    ncv: int | None = None,
    tol: float = 1e-6,
    maxiter: int | None = None,
    v0: Tensor | None = None,
    seed: int | None = 0,
    criterion: Criterion | None = None,
    return_eigenvectors: bool = False,
    callback: Callable[[int, Tensor, Tensor], None] | None = None,
) -> EigenResult:
    """``k`` Hessian eigenpairs of a ``fully_shard``-ed model's full-data loss, with every vector sharded.

    The thick-restart Lanczos of :func:`~landscape.analyses.hessian.lanczos.lanczos` (ARPACK's convergence test,
    scipy's argument names) over :class:`FSDPHessianOperator`: every rank calls it with the same arguments and
    batches, holds ``n / W`` entries of every Lanczos vector, and gets the same eigenvalues. The start vector is
    the same whole vector whatever the number of ranks (drawn from ``seed``:
    :mod:`~landscape.analyses.hessian.shards`), so 1 rank and ``W`` ranks agree to rounding.

    Args:
        model: the model wrapped with ``fully_shard``, in eval mode (see :class:`FSDPHessianOperator`).
        batches: the ``(inputs, labels)`` batches, the same on every rank.
        k: how many eigenpairs.
        which: LA largest, SA smallest, BE both ends, LM largest magnitude.
        ncv: basis size (default ``min(n, max(2k+1, 20))``).
        tol: relative residual of a converged pair (0: ``eps^(2/3)``).
        maxiter: maximum number of restarts.
        v0: this rank's shard of the start vector (default: Gaussian from ``seed``).
        seed: the start vector's seed; None: rank 0 draws one and sends it to the others.
        criterion: ``(outputs, labels) -> mean loss`` (default: cross-entropy).
        return_eigenvectors: whether to form the Ritz vectors (each rank gets its shard's rows).
        callback: ``callback(n_matvec, wanted_ritz_values, wanted_errors)`` after every product.

    Returns:
        An :class:`~landscape.analyses.hessian.linalg.EigenResult`; ``eigenvectors``, when asked for, has this
        rank's ``inner.local_length(n)`` rows.

    Raises:
        LandscapeError: a model or request the operator or the solver refuses.
    """
    op = FSDPHessianOperator(model, batches, criterion)
    if seed is None:
        box = [int(torch.randint(0, 2**62, (1,), generator=local_generator(None)))]  # the global RNG untouched
        if op.world > 1:
            dist.broadcast_object_list(box, group=op.inner.group, group_src=0)
        seed = box[0]
    return lanczos(
        op,
        k=k,
        which=which,
        ncv=ncv,
        tol=tol,
        maxiter=maxiter,
        v0=v0,
        seed=seed,
        return_eigenvectors=return_eigenvectors,
        callback=callback,
    )
