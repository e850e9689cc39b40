"""Hessian eigenpairs of a model sharded with torch's FSDP (``fully_shard``), by central differences of gradients.

For a model too large for one device, torch's FSDP keeps on each rank only a shard of every parameter (dim 0
split over a 1-D device mesh) and gathers the whole parameters for each forward and backward pass. Here every
Lanczos vector is sharded the same way: rank ``r`` holds the entries of the parameters' shards it holds
(:func:`shard_ranges`), the solver's reductions are all-reduced over the mesh
(:class:`~landscape.analyses.hessian.shards.ShardedInnerProduct`), and the product maps this rank's shard of ``v``
to this rank's shard of ``H v`` by the central difference of two gradients (:class:`FSDPHessianOperator`):

    H v ~ (g(w + eps v) - g(w - eps v)) / (2 eps),   eps = h / ||v||,

``g = sum_b (N_b / N) grad L_b`` the full-data gradient over the batches, the norms those of the whole vectors,
and ``h`` chosen once at the point from its measured truncation and rounding errors
(:func:`~landscape.analyses.hessian.steps.choose_step`, on the shards; refused where no step is accurate, under a
16-bit ``param_dtype`` or across ReLU kinks: :mod:`~landscape.analyses.hessian.finite`). Only first derivatives are
taken (FSDP's ordinary backward), so nothing of the model is ever held whole on one rank beyond what FSDP gathers
itself. :func:`fsdp_lanczos` runs the one thick-restart
Lanczos of :mod:`~landscape.analyses.hessian.lanczos` on it; ``landscape.hessian`` refuses a sharded model and
names this function (docs/analyses.md, "Models sharded with FSDP").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn

from landscape.analyses.hessian import finite
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.linalg import EigenResult
from landscape.analyses.hessian.probes import local_generator
from landscape.analyses.hessian.shards import ShardedInnerProduct
from landscape.analyses.hessian.steps import StepChoice, full_float32
from landscape.core.calls import speaks_python
from landscape.core.front import check_labels
from landscape.data.given import given_batches
from landscape.data.stream import BatchSource
from landscape.errors import LandscapeError
from landscape.options.hessian import FD_MAX_ERROR

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

    meshes: list = []
    for p in params:  # equal meshes may be distinct objects (a parameter's spec can hold a copy): compare by value
        if isinstance(p, DTensor) and not any(p.device_mesh == m for m in meshes):
            meshes.append(p.device_mesh)
    bad = [p for p in params if not isinstance(p, DTensor) or p.dim() == 0 or tuple(p.placements) != (Shard(0),)]
    if bad or len(meshes) != 1 or meshes[0].ndim != 1:
        raise LandscapeError(
            "every trainable parameter must be sharded by fully_shard along dim 0 over one 1-D device mesh (wrap the "
            "whole model, e.g. with landscape.analyses.hessian.fsdp.fully_shard_model); HSDP and 2-D meshes are not "
            "supported"
        )
    mesh = meshes[0]
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

    ``H v ~ (g(w + eps v) - g(w - eps v)) / (2 eps)`` with ``g = sum_b (N_b / N) grad L_b`` and ``eps = h / ||v||``
    (whole-vector norms, all-reduced over the mesh), ``h`` measured at the point before the first product
    (:meth:`step`; :class:`~landscape.analyses.hessian.finite.CentralDifferences`). The parameters
    are moved in place to ``w + eps v`` and ``w - eps v`` (their local shards, without autograd) and copied back
    from a kept copy of the shards afterwards, so ``w`` is restored bit for bit; the caller's ``.grad`` are put
    back too. Every rank is given the same batches; rank ``r`` of ``W`` runs the forward and backward passes of
    batches ``r, r + W, ...`` with its loss scaled by ``W N_b / N`` (FSDP averages gradients over the ranks, so
    the average is the weighted sum); a rank with fewer batches runs a pass with weight 0 so that every rank runs
    the same number of passes (FSDP's collectives need it).

    Args:
        model: the model, wrapped with ``fully_shard`` (:func:`fully_shard_model`), in eval mode, with FSDP's
            default gradient averaging (no ``set_gradient_divide_factor``); a mixed-precision policy with a 16-bit
            ``param_dtype`` is refused when the step is measured (its rounding leaves no accurate step).
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
        differences: the point's central differences (step, probe, predicted error, refusals).
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
        self._sizes = [t.numel() for t in self._point]
        self.shape = (n, n)
        self.inner = ShardedInnerProduct(ranges, n, mesh.get_group(), self.device)
        self.batches = held
        sizes = held.sizes
        self.weights = [s / sum(sizes) for s in sizes]
        self.criterion = criterion or nn.functional.cross_entropy
        self.differences = finite.CentralDifferences(
            self._point_gradient,
            torch.cat([t.reshape(-1) for t in self._point]),
            self.inner,
            n,
            self.dtype,
            self.device,
            self._lattice,
            self._explain,
            self.remedy,
        )
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
        with full_float32(self.device):  # TF32 would round the displacements away
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

    def _lattice(self) -> torch.dtype:
        """The dtype the weights are rounded to in the forward pass: FSDP's ``param_dtype``, an autocast's, theirs."""
        state = getattr(self.model, "_get_fsdp_state", None)
        policy = getattr(state(), "_mp_policy", None) if state is not None else None
        compute = getattr(policy, "param_dtype", None) or self.dtype
        lattice = finite.forward_lattice(compute, self.device)
        return lattice if torch.finfo(lattice).eps > torch.finfo(self.dtype).eps else self.dtype  # never finer

    def _point_gradient(self, shift: Tensor | None) -> Tensor:
        """This rank's shard of the flat gradient at ``w + shift`` (``shift`` this rank's part, added in place)."""
        parts = None if shift is None else [d.view_as(w) for d, w in zip(shift.split(self._sizes), self._point)]
        saved = [p.grad for p in self.params]
        try:
            self._set(parts, +1.0)
            return self._gradient()
        finally:
            self._set(None, 0.0)
            for p, g in zip(self.params, saved):
                p.grad = g

    def _explain(self, finding: str) -> str:
        """The one-line refusal of central differences here (every rank calls it: it runs one sharded forward)."""
        x = self.batches[0][0][:2].to(self.device)
        kinks = finite.kinked_operations(lambda: self.model(x))
        return finite.refusal(finding, kinks=kinks, lattice=self._lattice(), dtype=self.dtype, python=True)

    def step(self) -> StepChoice:
        """The step of the central differences, measured at the first call (every rank calls it together).

        Returns:
            The :class:`~landscape.analyses.hessian.steps.StepChoice`.

        Raises:
            LandscapeError: no step gives accurate products (the message names the cause and what to do).
        """
        return self.differences.step()

    def start_vector(self, generator: torch.Generator) -> Tensor:
        """This rank's part of Lanczos' start vector: the gradient's direction plus the solver's Gaussian vector.

        Args:
            generator: the solver's generator (every rank holds it in the same state).

        Returns:
            This rank's part of the unit vector (``CentralDifferences.start_vector``).
        """
        vector = self.differences.start_vector(generator)
        assert vector is not None
        return vector

    def product_error(self, curvature: float = 0.0) -> float:
        """The predicted error of a unit vector's product along ``curvature`` (for the solver's residual floor).

        Args:
            curvature: the curvature along the vector.

        Returns:
            The absolute error.
        """
        return self.differences.product_error(curvature)

    #: the relative asymmetry of two couplings the solver allows (the largest product error accepted)
    asymmetry_tolerance = FD_MAX_ERROR

    def adapt_step(self, vector: Tensor) -> bool:
        """Measure the truncation along ``vector`` and shorten the step when it must be (every rank together).

        Args:
            vector: this rank's part of the top Ritz vector, or of a vector whose products came out asymmetric.

        Returns:
            True when the step was shortened (``CentralDifferences.adapt``).
        """
        return self.differences.adapt(vector)

    @property
    def curvature_scale(self) -> float | None:
        """The curvature the step was chosen for (None before it is)."""
        return self.differences.scale

    def explain_asymmetry(self, upper: float, lower: float, products: int) -> str:
        """The refusal of products that are not symmetric (the solver's check; every rank calls it together).

        Args:
            upper: ``v_i . A v_j``.
            lower: ``v_j . A v_i``.
            products: the products made so far.

        Returns:
            The one-line message.
        """
        return self.differences.asymmetry(upper, lower, products)

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
        if self.differences.choice is None:
            self.differences.step(v.double() / norm)
        self.n_matvec += 1
        known = self.differences.probe_product(v)
        if known is not None:  # the probe's product, made by the step's measurement
            return known
        self.differences.count()
        eps = self.differences.choice.step / torch.clamp(norm, min=torch.finfo(torch.float64).tiny)
        parts = v.split(self._sizes)
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
        rank's ``inner.local_length(n)`` rows; ``finite_difference`` the step and its predicted error
        (:meth:`~landscape.analyses.hessian.steps.StepChoice.summary`) and ``symmetry_defect`` the largest
        asymmetry of the products measured.

    Raises:
        LandscapeError: a model or request the operator or the solver refuses.
    """
    op = FSDPHessianOperator(model, batches, criterion)
    if seed is None:
        box = [int(torch.randint(0, 2**62, (1,), generator=local_generator(None)))]  # the global RNG untouched
        if op.world > 1:
            dist.broadcast_object_list(box, group=op.inner.group, group_src=0)
        seed = box[0]
    result = lanczos(
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
    result.finite_difference = {**op.step().summary(), "gradients_total": op.differences.gradients}
    return result
