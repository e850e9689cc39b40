"""Regularizer.hessian_product in closed form against torch.func.hessian of the penalty."""

import pytest
import torch

from landscape.core.params import flatten, unflatten
from landscape.core.regularizer import Regularizer


@pytest.mark.parametrize("reg", [Regularizer("l2", 0.3), Regularizer("norm-sum", 0.05), Regularizer()])
def test_the_closed_form_product_is_the_dense_hessian_of_the_penalty(reg):
    g = torch.Generator().manual_seed(0)
    params = {"w": torch.randn(3, 4, generator=g, dtype=torch.float64), "b": torch.randn(4, generator=g).double()}
    v = {n: torch.randn(t.shape, generator=g, dtype=torch.float64) for n, t in params.items()}
    dense = torch.func.hessian(lambda flat: reg(unflatten(flat, params)))(flatten(params))
    got = flatten(reg.hessian_product(params, v))
    torch.testing.assert_close(got, dense @ flatten(v), rtol=1e-12, atol=1e-14)


def test_a_zero_tensor_has_no_norm_sum_curvature():
    params = {"w": torch.zeros(3, dtype=torch.float64), "b": torch.ones(2, dtype=torch.float64)}
    v = {n: torch.ones_like(t) for n, t in params.items()}
    out = Regularizer("norm-sum", 1.0).hessian_product(params, v)
    assert torch.equal(out["w"], torch.zeros(3, dtype=torch.float64)) and torch.isfinite(out["b"]).all()
