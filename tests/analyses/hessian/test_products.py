"""Central-difference Hessian-vector products against the exact product of a dense float64 Hessian."""

import numpy as np
import pytest
import torch
from torch import nn

from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.operator import HessianOperator
from landscape.core.objective import Objective
from landscape.core.params import flatten, unflatten
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError


class TanhOnce(torch.autograd.Function):
    """tanh whose backward cannot be differentiated (no double backward, no forward-mode derivative)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return g * (1 - t * t)


class Net(nn.Module):
    """conv -> tanh -> linear -> tanh -> linear, the tanh either torch's or :class:`TanhOnce`."""

    def __init__(self, once: bool):
        super().__init__()
        self.conv, self.fc, self.out = nn.Conv2d(1, 2, 3), nn.Linear(2 * 6 * 6, 8), nn.Linear(8, 3)
        self.tanh = TanhOnce.apply if once else torch.tanh

    def forward(self, x):
        h = self.tanh(self.conv(x)).flatten(1)
        return self.out(self.tanh(self.fc(h)))


def objectives(reg):
    """The same weights and data as a float32 objective with TanhOnce and a float64 one with torch.tanh."""
    torch.manual_seed(0)
    once, plain = Net(True), Net(False)
    plain.load_state_dict(once.state_dict())
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)) for n in (20, 12)]
    return Objective(once, batches, regularizer=reg), Objective(plain, batches, dtype=torch.float64, regularizer=reg)


def dense_hessian(objective):
    """sum_b (N_b/N) d^2 L_b + d^2 R by torch.func.hessian of the flat float64 loss."""
    params, sizes = objective.params, [y.shape[0] for _, y in objective.batches]

    def loss(flat):
        full = unflatten(flat, params)
        data = sum(s / sum(sizes) * objective.batch_loss_fn(b)(full) for s, b in zip(sizes, objective.batches))
        return data + objective.regularizer(full)

    return torch.func.hessian(loss)(flatten(params))


@pytest.mark.parametrize("reg", [Regularizer(), Regularizer("l2", 0.1)], ids=["none", "l2"])
def test_finite_difference_products_in_float32_are_within_their_predicted_error_of_the_exact_product(one_thread, reg):
    fd_objective, exact_objective = objectives(reg)
    H = dense_hessian(exact_objective)
    op = HessianOperator(fd_objective, mode="finite-difference")
    g = torch.Generator().manual_seed(2)
    v = torch.randn(op.shape[0], generator=g, dtype=torch.float64)
    with pytest.raises(LandscapeError, match="--hvp jvp"):  # no forward-mode rule
        HessianOperator(fd_objective, mode="jvp").matvec(v)
    graph = HessianOperator(fd_objective, mode="graph").matvec(v).double()  # drops the backward's derivative
    assert float(torch.linalg.vector_norm(graph - H @ v) / torch.linalg.vector_norm(H @ v)) > 1e-2
    lam = float(torch.linalg.eigvalsh(H).abs().max())
    for scale in (1.0, 1e-3, 1e3):  # the step is scaled by 1/||v||: the error is proportional to ||v||
        v = torch.randn(op.shape[0], generator=g, dtype=torch.float64) * scale
        error = float(torch.linalg.vector_norm(op.matvec(v).double() - H @ v)) / float(torch.linalg.vector_norm(v))
        # the predicted error of a unit vector's product, at the largest curvature (measured: 0.2-0.4 of it)
        assert error <= op.product_error(lam), (scale, error, op.product_error(lam))
        assert error <= 1e-3 * lam
    choice = op.hvp_choice()
    step = choice["finite_difference"]
    assert choice["mode"] == "finite-difference" and choice["ways"] == {"finite-difference": 2}
    assert choice["finite_difference_step"] == step["step"] == op.step().step > 0
    assert step["lattice"] == "float32" and step["asymptotic"] and step["gradients"] == 5
    assert 0 < step["estimated_error"] <= 1e-3
    assert choice["finite_difference_gradients"] == 5 + 2 * 3  # the measurement, then two per product


def test_finite_difference_lanczos_finds_the_exact_top_eigenvalues_without_double_backward(one_thread):
    fd_objective, exact_objective = objectives(Regularizer())
    expected = torch.linalg.eigvalsh(dense_hessian(exact_objective)).flip(0)[:3]
    res = lanczos(HessianOperator(fd_objective, mode="finite-difference"), k=3, which="LA", tol=1e-4, seed=0)
    assert bool(res.converged.all())
    found = torch.as_tensor(res.eigenvalues, dtype=torch.float64).sort(descending=True).values
    torch.testing.assert_close(found, expected, rtol=1e-4, atol=0)  # measured: 1.6e-5 at most
    assert 0 < res.symmetry_defect < 1e-3


def test_vectorised_finite_difference_products_equal_the_looped_ones(one_thread):
    fd_objective, _ = objectives(Regularizer("l2", 0.1))
    op = HessianOperator(fd_objective, mode="finite-difference")
    V = torch.randn(op.shape[0], 3, generator=torch.Generator().manual_seed(3))
    looped, vectorised = op.matmat(V), op.matmat(V, vectorize=True)
    # each carries the rounding of a float32 difference (at most B / h of the predicted error), rounded apart
    rounding = op.step().rounding * op.step().scale
    for j in range(3):
        assert float(torch.linalg.vector_norm(vectorised[:, j] - looped[:, j])) <= 2 * rounding * float(V[:, j].norm())
    assert op.n_matvec == 6


def test_hessian_of_resnet_mini_by_finite_differences_has_the_exact_top_3_eigenvalues(one_thread, tmp_path):
    from landscape.analyses.hessian.run import run_hessian
    from landscape.models import create_model
    from landscape.models.checkpoint import save_checkpoint
    from landscape.options.hessian import HessianOptions

    torch.manual_seed(0)
    model = create_model("resnet_mini", num_classes=10, in_chans=1)
    with torch.no_grad():  # BatchNorm as after training: at init a pre-activation of a blank pixel is exactly 0, on
        for m in model.modules():  # ReLU's kink, which a difference of any step crosses (and the exact Hessian not)
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.bias.normal_(0.0, 0.2)
    ckpt = save_checkpoint(
        tmp_path / "r.pt", model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10
    )
    # float64: in float32 the central differences of this ReLU network cross activation kinks at any step that
    # rounding allows, and are refused (tests/analyses/hessian/test_finite.py)
    common = {"data": "digits", "samples": 6, "batch_size": 6, "top_k": 3, "tol": 1e-6, "dtype": "float64"}
    runs = {
        hvp: run_hessian(ckpt, HessianOptions(hvp=hvp, **common), out=tmp_path / f"{hvp}.h5", progress=False)
        for hvp in ("auto", "finite-difference")
    }
    exact, fd = (np.sort(runs[hvp]["eigenvalues"])[::-1] for hvp in ("auto", "finite-difference"))
    np.testing.assert_allclose(fd, exact, rtol=1e-3)
    choice = runs["finite-difference"].attrs["hvp_choice"]
    assert choice["mode"] == "finite-difference" and choice["finite_difference_step"] > 0
    assert choice["finite_difference"]["lattice"] == "float64"
    assert runs["finite-difference"].attrs["eigen_symmetry_defect"] < 1e-3
