"""K-FAC: the Gauss-Newton of each ``nn.Linear`` and ``nn.Conv2d`` layer approximated by one Kronecker product.

For a layer ``s = W a`` (``W`` the weight with the bias as a last column, ``a`` its input with a 1 appended) seen
at ``R`` positions per sample (``R = 1`` for a Linear on vectors, the tokens of a Linear on sequences, a
convolution's output pixels: its input's expanded patches, Grosse & Martens 2016), the generalised Gauss-Newton
block of ``W`` is approximated (Martens & Grosse 2015; KFAC-expand, Eschenhagen et al. 2023) by

    G_W ~ A (x) S,   A = (1 / (N R)) sum_{n, r} a_nr a_nr^T,   S = (1/N) sum_{n, r, c} g_nrc g_nrc^T,

``g_nrc = d(z_n . q_nc) / ds_nr`` the backpropagation of column ``c`` of a square root ``Q_n`` of the loss's
Hessian in the logits (``Q_n Q_n^T = H_z,n``, :func:`landscape.core.criteria.logit_hessian_sqrt`: the exact
expectation over the model's labels, curvlinops' ``fisher_type="type-2"``, not a Monte-Carlo sample). In flat order
(a weight's entries row-major, ``(out, in)``) the block is ``S (x) A``: ``K vec(M) = vec(S M A)`` for ``M`` the
layer's vector as an ``(out, in + 1)`` matrix. K-FAC is block-diagonal over layers; the parameters of no Linear or
Conv2d (norms, embeddings and tokens, position tables, grouped convolutions) are not covered: their rows and
columns are zero (:attr:`KFACOperator.uncovered` names them). The factors are computed once over the used batches
at the point (eval-mode BatchNorm, the model as it is), on every rank under torchrun. The regulariser's Hessian is
added exactly, as to every operator.

Eigenvalues: those of ``S (x) A`` are the products ``mu_i nu_j`` of the factors' eigenvalues, with eigenvectors
``u_i (x) w_j``; with the uncovered parameters' zeros (and an ``l2`` regulariser's shift ``coef``) they are every
eigenvalue of the operator, exactly (:meth:`KFACOperator.eigenpairs`). A ``norm-sum`` regulariser's Hessian does
not share the factors' eigenvectors: then the eigenvalues are Lanczos' on the products.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from landscape.analyses.hessian.flat import FlatOperator
from landscape.analyses.hessian.lanczos import converged as pair_converged
from landscape.analyses.hessian.linalg import EigenResult, rank_ritz
from landscape.core.criteria import logit_hessian_sqrt
from landscape.core.objective import Objective
from landscape.core.params import ParamDict

#: the layers K-FAC covers
COVERED_LAYERS = (nn.Linear, nn.Conv2d)


@dataclass
class KroneckerLayer:
    """One covered layer: its selected parameters and its two factors.

    Attributes:
        module: the layer's name in the model (``""`` for the model itself).
        weight: the weight's parameter name when it is selected, else None.
        bias: the bias's parameter name when it is selected, else None.
        A: the input factor restricted to the selected columns (the weight's inputs, then the bias's 1),
            ``(d, d)``.
        S: the output-gradient factor, ``(out, out)``.
    """

    module: str
    weight: str | None
    bias: str | None
    A: Tensor
    S: Tensor


def _conv_padding(module: nn.Conv2d) -> tuple[int, int] | None:
    """The integer padding of a convolution, or None when it has none ``F.unfold`` can take."""
    padding = module.padding
    if not isinstance(padding, str):
        return tuple(int(p) for p in padding)  # type: ignore[return-value]
    if padding == "valid":
        return (0, 0)
    total = [d * (k - 1) for d, k in zip(module.dilation, module.kernel_size)]
    return None if any(t % 2 for t in total) else (total[0] // 2, total[1] // 2)


def covered(module: nn.Module) -> bool:
    """Whether K-FAC covers ``module``: a Linear, or a Conv2d of one group with zero padding ``F.unfold`` can take.

    Args:
        module: a submodule of the model.

    Returns:
        True for the layers whose factors :class:`KFACOperator` computes.
    """
    if isinstance(module, nn.Linear):
        return True
    return (
        isinstance(module, nn.Conv2d)
        and module.groups == 1
        and module.padding_mode == "zeros"
        and _conv_padding(module) is not None
    )


def _rows(module: nn.Module, x: Tensor) -> Tensor:
    """The layer's inputs as rows ``(N R, in)``: a Linear's feature vectors, a convolution's expanded patches."""
    if isinstance(module, nn.Conv2d):
        patches = F.unfold(
            x, module.kernel_size, dilation=module.dilation, padding=_conv_padding(module), stride=module.stride
        )
        return patches.transpose(1, 2).reshape(-1, patches.shape[1])
    return x.reshape(-1, x.shape[-1])


def _output_rows(module: nn.Module, g: Tensor) -> Tensor:
    """The gradient of a layer's output as rows ``(N R, out)`` (a convolution's channels last)."""
    if isinstance(module, nn.Conv2d):
        g = g.movedim(1, -1)
    return g.reshape(-1, g.shape[-1])


class KFACOperator(FlatOperator):
    """K-FAC's block-diagonal Kronecker approximation of the generalised Gauss-Newton, plus ``H_R``, on flat vectors.

    Args:
        objective: the objective (model, batches, criterion ``cross_entropy``, ``soft_cross_entropy`` or
            ``mse``; regulariser).
        params: the evaluation point (default ``objective.params``).
        patterns: name patterns of the operator's block (:class:`~landscape.analyses.hessian.flat.FlatOperator`):
            a layer's factors are restricted to its selected weight and bias.
        batches: indices of the objective's batches the factors are computed from (default all).
        shard: accepted for the common signature; the factors are computed on every rank and a product needs no
            communication.

    Attributes:
        layers: the covered layers with a selected parameter, in the model's order.
        uncovered: the selected parameters no covered layer holds (zero rows and columns).

    Raises:
        LandscapeError: a callable criterion (its Hessian in the logits per sample is not known), or the errors of
            :class:`~landscape.analyses.hessian.flat.FlatOperator`.
    """

    operator = "kfac"

    def __init__(
        self,
        objective: Objective,
        params: Mapping[str, Tensor] | None = None,
        *,
        patterns: Sequence[str] | str | None = None,
        batches: Sequence[int] | None = None,
        shard: bool = False,
    ) -> None:
        super().__init__(objective, params, patterns=patterns, batches=batches, shard=False)
        modules = {}
        for name, module in objective.module.named_modules():
            if not covered(module):
                continue
            prefix = f"{name}." if name else ""
            weight = f"{prefix}weight" if f"{prefix}weight" in self.params else None
            bias = f"{prefix}bias" if module.bias is not None and f"{prefix}bias" in self.params else None
            if weight or bias:
                modules[name] = (module, weight, bias)
        self.layers = self._factors(modules)
        held = {n for layer in self.layers for n in (layer.weight, layer.bias) if n}
        self.uncovered = [n for n in self.names if n not in held]

    # -- the factors ---------------------------------------------------------------------------------
    def _factors(self, modules: Mapping[str, tuple[nn.Module, str | None, str | None]]) -> list[KroneckerLayer]:
        """Each covered layer's ``A`` and ``S`` over the used batches (hooks on the objective's own model copy)."""
        a_sum: dict[str, Tensor] = {}
        rows: dict[str, int] = {}
        s_sum: dict[str, Tensor] = {}
        outputs: list[tuple[str, Tensor]] = []

        def hook(name: str):  # noqa: ANN202
            def record(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor:
                x = _rows(module, inputs[0].detach())
                if module.bias is not None:
                    x = torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1)
                a_sum[name] = a_sum.get(name, 0) + x.T @ x
                rows[name] = rows.get(name, 0) + x.shape[0]
                outputs.append((name, output))
                return output.clone()  # later in-place operations change the copy, never the recorded output

            return record

        handles = [module.register_forward_hook(hook(name)) for name, (module, _, _) in modules.items()]
        samples = 0
        try:
            for index in self.batch_indices:
                x, y = self.objective.batches[index]
                outputs.clear()
                leaves = {n: t.detach().requires_grad_(True) for n, t in self.params.items()}
                with torch.enable_grad():
                    z = self.objective.logits(self._full(leaves), x)
                roots = logit_hessian_sqrt(z, y, self.objective.criterion)
                live = [(name, out) for name, out in outputs if out.requires_grad]
                for c in range(roots.shape[-1] if live else 0):
                    grads = torch.autograd.grad(
                        z, [out for _, out in live], roots[:, :, c], retain_graph=True, allow_unused=True
                    )
                    for (name, _), g in zip(live, grads):
                        if g is not None:
                            g = _output_rows(modules[name][0], g)
                            s_sum[name] = s_sum.get(name, 0) + g.T @ g
                samples += x.shape[0]
        finally:
            for handle in handles:
                handle.remove()
        layers = []
        for name, (module, weight, bias) in modules.items():
            if name not in rows:
                continue  # a layer the forward pass never called has no curvature
            A = a_sum[name] / rows[name]
            d_in = A.shape[0] - (module.bias is not None)
            keep = [*(range(d_in) if weight else ()), *([d_in] if bias else [])]
            out = module.weight.shape[0]
            S = s_sum[name] / samples if name in s_sum else A.new_zeros(out, out)
            layers.append(KroneckerLayer(name, weight, bias, A[keep][:, keep].contiguous(), S))
        return layers

    # -- products ------------------------------------------------------------------------------------
    def _layer_matrix(self, layer: KroneckerLayer, v: Mapping[str, Tensor]) -> Tensor:
        """The layer's part of ``v`` as the ``(out, d)`` matrix the factors act on (weight columns, then bias)."""
        parts = []
        if layer.weight:
            parts.append(v[layer.weight].reshape(layer.S.shape[0], -1))
        if layer.bias:
            parts.append(v[layer.bias].reshape(-1, 1))
        return torch.cat(parts, dim=1)

    def _scatter(self, layer: KroneckerLayer, M: Tensor, out: dict[str, Tensor]) -> None:
        """Write the ``(out, d)`` matrix ``M`` back into ``out`` as the layer's weight and bias."""
        if layer.weight:
            width = self.params[layer.weight][0].numel()
            out[layer.weight] = M[:, :width].reshape(self.params[layer.weight].shape)
        if layer.bias:
            out[layer.bias] = M[:, -1].reshape(self.params[layer.bias].shape)

    def hvp_dict(self, v: Mapping[str, Tensor], *, part: int = 0, parts: int = 1) -> ParamDict:
        """``K v + H_R v``: each layer's ``S M A``, zero on the uncovered parameters (the whole product in part 0).

        Args:
            v: the vector by parameter name.
            part: which share to compute; every share but the first is zero (the product needs no batch).
            parts: the number of shares.

        Returns:
            ``K v + H_R v`` by selected parameter name.
        """
        v = {n: v[n] for n in self.names}
        out = {n: torch.zeros_like(t) for n, t in v.items()}
        self.n_matvec += 1
        if part != 0:
            return out
        for layer in self.layers:
            self._scatter(layer, layer.S @ self._layer_matrix(layer, v) @ layer.A, out)
        reg = self._regularizer_product(v)
        return out if reg is None else {n: out[n] + reg[n] for n in out}

    def hvp_choice(self) -> dict[str, object]:
        """How the products were made (docs/schema.md): the covered layers and the uncovered parameters.

        Returns:
            ``{"operator": "kfac", "fisher_type": "type-2", "approximation": "expand", "layers": [...],
            "uncovered": [...]}``.
        """
        return {
            **super().hvp_choice(),
            "fisher_type": "type-2",
            "approximation": "expand",
            "layers": [layer.module for layer in self.layers],
            "uncovered": list(self.uncovered),
        }

    def trace(self) -> float:
        """``tr(K + H_R) = sum_layers tr(S) tr(A)`` plus the regulariser's trace when it is ``l2`` (exact).

        Returns:
            The trace; NaN with a ``norm-sum`` regulariser (use a trace estimator).
        """
        shift = self._shift()
        if shift is None:
            return float("nan")
        total = sum(float(torch.trace(layer.S.double()) * torch.trace(layer.A.double())) for layer in self.layers)
        return total + shift * self.shape[0]

    @property
    def exact(self) -> bool:
        """Whether :meth:`eigenpairs` is exact: the regulariser's Hessian is a multiple of the identity (or none)."""
        return self._shift() is not None

    def _shift(self) -> float | None:
        """The regulariser's Hessian as a multiple of the identity (0 without one), or None when it is not one."""
        reg = self.objective.regularizer
        if not reg.active:
            return 0.0
        return float(reg.coef) if reg.kind == "l2" else None

    # -- exact eigenpairs ----------------------------------------------------------------------------
    def eigenpairs(
        self, k: int, which: str = "LA", tol: float = 1e-6, return_eigenvectors: bool = True
    ) -> EigenResult | None:
        """``k`` eigenpairs of kind ``which`` exactly from the factors' eigendecompositions (float64).

        Every eigenvalue is a product ``mu_i nu_j`` of a layer's ``S`` and ``A`` eigenvalues, or 0 on the
        uncovered parameters, plus an ``l2`` regulariser's ``coef``; the eigenvector of ``mu_i nu_j`` is the layer's
        ``u_i w_j^T``, of an uncovered 0 a unit vector of that parameter. Each pair's residual ``||K y - lambda y||``
        is measured with one product and judged by Lanczos' test (:func:`~landscape.analyses.hessian.lanczos.
        converged`).

        Args:
            k: how many eigenpairs (at most the operator's size).
            which: ``LA``, ``SA``, ``BE`` or ``LM`` (:func:`~landscape.analyses.hessian.linalg.rank_ritz`).
            tol: the relative residual of a converged pair (0: ``eps^(2/3)`` of the dtype).
            return_eigenvectors: also return the eigenvectors (their residuals are measured either way).

        Returns:
            The pairs as a Lanczos result (ascending; ``n_matvec`` the residuals' products, no restart), or None
            when the regulariser is ``norm-sum`` (no exact eigenpairs: use Lanczos).
        """
        shift = self._shift()
        if shift is None:
            return None
        pieces, vectors_of = [], []
        for layer in self.layers:
            mu, U = torch.linalg.eigh(layer.S.double().cpu())
            nu, W = torch.linalg.eigh(layer.A.double().cpu())
            pieces.append(torch.outer(mu, nu).reshape(-1))
            vectors_of.append((layer, U, W))
        zeros = sum(self.params[n].numel() for n in self.uncovered)
        values = torch.cat([*pieces, torch.zeros(zeros, dtype=torch.float64)]) + shift
        chosen = rank_ritz(values, which)[:k]
        chosen = chosen[torch.argsort(values[chosen])]
        columns = [self._eigenvector(int(i), pieces, vectors_of) for i in chosen]
        V = torch.stack(columns, dim=1) if columns else torch.zeros(self.shape[0], 0)
        V = V.to(device=self.device, dtype=self.dtype)
        eig = values[chosen]
        products = self.matmat(V) if columns else V
        residuals = torch.linalg.vector_norm(products - V * eig.to(V), dim=0).double().cpu()
        eps = float(torch.finfo(self.dtype).eps)
        tol = float(tol) if tol > 0 else eps ** (2 / 3)
        floor = eps ** (2 / 3) * float(values.abs().max()) if values.numel() else 0.0
        return EigenResult(
            eigenvalues=eig,
            eigenvectors=V if return_eigenvectors else None,
            residuals=residuals,
            errors=residuals.clone(),
            converged=pair_converged(residuals, eig, tol, floor),
            n_matvec=len(columns),
            n_restarts=0,
            which=which,
            tol=tol,
        )

    def _eigenvector(self, index: int, pieces: list[Tensor], vectors_of: list[tuple]) -> Tensor:
        """The flat unit eigenvector of the ``index``-th value of the concatenated eigenvalues (float64)."""
        out = {n: torch.zeros(t.shape, dtype=torch.float64) for n, t in self.params.items()}
        for piece, (layer, U, W) in zip(pieces, vectors_of):
            if index < piece.numel():
                i, j = divmod(index, W.shape[0])
                self._scatter(layer, torch.outer(U[:, i], W[:, j]), out)
                return torch.cat([out[n].reshape(-1) for n in self.names])
            index -= piece.numel()
        for name in self.uncovered:
            size = self.params[name].numel()
            if index < size:
                out[name].view(-1)[index] = 1.0
                break
            index -= size
        return torch.cat([out[n].reshape(-1) for n in self.names])
