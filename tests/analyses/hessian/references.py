"""Dense float64 references of the curvature operators, from per-sample Jacobians and gradients (never the operators).

For an objective over batches of sizes ``N_b`` (``N`` in all), every sample weighs ``1/N``:

- ``G = sum_n (1/N) J_n^T H_n J_n + H_R``: ``J_n`` the per-sample Jacobian of the logits (``torch.func.jacrev``),
  ``H_n`` the Hessian of the per-sample loss in its logits (``torch.func.hessian``);
- ``F = sum_n (1/N) g_n g_n^T + H_R``: ``g_n`` the per-sample gradient (``vmap(grad)``);
- ``H``: ``torch.func.hessian`` of the whole loss (:func:`analyses.hessian.test_operator.dense_hessian`);
- K-FAC of a ``nn.Sequential``: each Linear's input ``a_n`` (with a 1) and the Jacobian ``dz_n / ds_n`` of the logits
  in its output ``s_n`` (``jacrev`` of the layers after it), ``A = (1/N) sum a a^T``, ``S = (1/N) sum (dz/ds)^T H_n
  (dz/ds)``, placed as ``S (x) A`` in the flat order (the weight row-major, then the bias).
"""

import torch
from torch.func import grad, hessian, jacrev, vmap

from landscape.core.criteria import batch_loss
from landscape.core.params import flatten, unflatten


def _samples(objective, batches=None):
    used = range(len(objective.batches)) if batches is None else batches
    xs, ys = zip(*(objective.batches[i] for i in used))
    return torch.cat(xs), torch.cat(ys)


def _sample_loss(objective):
    return lambda z, y: batch_loss(z[None], y[None], objective.criterion)


def regularizer_hessian(objective, names):
    sub = {n: objective.params[n] for n in names}
    return hessian(lambda flat: objective.regularizer({**objective.params, **unflatten(flat, sub)}))(flatten(sub))


def per_sample(objective, names=None, batches=None):
    """``(J, Hz, g)``: per-sample logit Jacobians ``(N, C, P)``, logit Hessians ``(N, C, C)``, gradients ``(N, P)``."""
    names = list(objective.params) if names is None else names
    sub = {n: objective.params[n] for n in names}
    x, y = _samples(objective, batches)
    loss = _sample_loss(objective)

    def logits(flat, xn):
        return objective.logits({**objective.params, **unflatten(flat, sub)}, xn[None])[0]

    theta = flatten(sub)
    J = vmap(jacrev(logits), in_dims=(None, 0))(theta, x)
    z = vmap(logits, in_dims=(None, 0))(theta, x)
    Hz = torch.stack([hessian(loss)(z[n], y[n]) for n in range(len(x))])  # a loop: one_hot cannot run in vmap
    g = torch.stack([grad(lambda flat, n=n: loss(logits(flat, x[n]), y[n]))(theta) for n in range(len(x))])
    return J, Hz, g


def dense_ggn(objective, names=None, batches=None):
    """The Gauss-Newton ``(1/N) sum_n J_n^T H_n J_n + H_R``."""
    names = list(objective.params) if names is None else names
    J, Hz, _ = per_sample(objective, names, batches)
    return torch.einsum("ncp,ncd,ndq->pq", J, Hz, J) / J.shape[0] + regularizer_hessian(objective, names)


def dense_empirical_fisher(objective, names=None, batches=None):
    """The empirical Fisher ``(1/N) sum_n g_n g_n^T + H_R``."""
    names = list(objective.params) if names is None else names
    _, _, g = per_sample(objective, names, batches)
    return g.T @ g / g.shape[0] + regularizer_hessian(objective, names)


def dense_kfac(objective, sequential):
    """K-FAC of ``sequential`` (the objective's own copy, a ``nn.Sequential`` of Linear and other layers) at its params.

    Returns:
        ``(K, covered)``: the dense K-FAC (zero rows and columns outside the Linear layers; no regulariser) and the
        covered parameter names.
    """
    names = list(objective.params)
    x, y = _samples(objective)
    n = x.shape[0]
    loss = _sample_loss(objective)
    state = {**objective.params, **objective.buffers}
    offsets, start = {}, 0
    for name in names:
        offsets[name] = start
        start += objective.params[name].numel()
    K = torch.zeros(start, start, dtype=torch.float64)
    covered = []
    z = torch.func.functional_call(sequential, state, (x,))
    Hz = torch.stack([hessian(loss)(z[m], y[m]) for m in range(n)])
    for i, layer in enumerate(sequential):
        if not isinstance(layer, torch.nn.Linear):
            continue
        before = torch.func.functional_call(sequential[:i], _sub(state, i, 0), (x,)) if i else x
        s = before @ objective.params[f"{i}.weight"].T + objective.params[f"{i}.bias"]
        rest = sequential[i + 1 :]
        after = _sub(state, len(sequential), i + 1)

        def head(sn, rest=rest, after=after):
            return torch.func.functional_call(rest, after, (sn[None].clone(),))[0] if len(rest) else sn

        Js = vmap(jacrev(head))(s)  # (N, C, out)
        S = torch.einsum("nco,ncd,ndp->op", Js, Hz, Js) / n
        a = torch.cat([before, before.new_ones(n, 1)], dim=1)
        A = a.T @ a / n
        out, width = S.shape[0], A.shape[0]
        rowmajor = torch.kron(S.contiguous(), A.contiguous())  # over vec_rowmajor([W | b]): index o * width + i
        w, b = f"{i}.weight", f"{i}.bias"
        index = []
        for o in range(out):
            index += [offsets[w] + o * (width - 1) + j for j in range(width - 1)] + [offsets[b] + o]
        index = torch.tensor(index)
        K[index[:, None], index[None, :]] = rowmajor
        covered += [w, b]
    return K, covered


def _sub(state, stop, start):
    """The entries of ``state`` of the modules ``start..stop-1`` of a Sequential (a slice keeps their names)."""
    return {key: value for key, value in state.items() if start <= int(key.partition(".")[0]) < stop}
