"""The criteria's Hessians in the logits (one definition per criterion) against torch.func.hessian of the losses."""

import pytest
import torch
from torch.func import grad, hessian

from landscape.core.criteria import batch_loss, logit_hessian_product, logit_hessian_sqrt, sample_logit_gradients
from landscape.errors import LandscapeError

B, C = 5, 4


def case(criterion):
    g = torch.Generator().manual_seed(0)
    z = 3 * torch.randn(B, C, generator=g, dtype=torch.float64)
    if criterion == "soft_cross_entropy":  # label distributions, and one row that sums to 2 (mass s)
        y = torch.softmax(torch.randn(B, C, generator=g, dtype=torch.float64), -1)
        y[0] *= 2
    else:
        y = torch.randint(0, C, (B,), generator=g)
    return z, y


@pytest.mark.parametrize("criterion", ["cross_entropy", "soft_cross_entropy", "mse"])
def test_the_product_and_the_square_roots_are_the_loss_hessian_in_the_logits(criterion):
    z, y = case(criterion)
    dense = hessian(lambda w: batch_loss(w, y, criterion))(z).reshape(B * C, B * C)
    u = torch.randn(B, C, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = logit_hessian_product(z, y, criterion, u)
    assert torch.allclose(got.reshape(-1), dense @ u.reshape(-1), rtol=1e-12, atol=1e-14)
    Q = logit_hessian_sqrt(z, y, criterion)
    for n in range(B):  # the per-sample loss is B times the batch's mean's share
        per_sample = hessian(lambda w, n=n: batch_loss(w[None], y[n][None], criterion))(z[n])
        assert torch.allclose(Q[n] @ Q[n].T, per_sample, rtol=1e-12, atol=1e-14)
    e = sample_logit_gradients(z, y, criterion)
    for n in range(B):
        assert torch.allclose(e[n], grad(lambda w, n=n: batch_loss(w[None], y[n][None], criterion))(z[n]), atol=1e-14)


def test_a_callable_criterion_has_a_product_but_no_square_root():
    z, y = case("cross_entropy")

    def smoothed(w, t):
        return torch.nn.functional.cross_entropy(w, t, label_smoothing=0.1)

    dense = hessian(lambda w: smoothed(w, y))(z).reshape(B * C, B * C)
    u = torch.randn(B, C, dtype=torch.float64)
    assert torch.allclose(logit_hessian_product(z, y, smoothed, u).reshape(-1), dense @ u.reshape(-1), atol=1e-14)
    with pytest.raises(LandscapeError, match="K-FAC needs the Hessian of the loss in the logits per sample"):
        logit_hessian_sqrt(z, y, smoothed)
