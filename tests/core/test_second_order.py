"""Eval-mode BatchNorm as an affine map: against torch's fused kernel and exact float64 Hessians."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from landscape.core.objective import Objective
from landscape.core.params import flatten, unflatten
from landscape.core.second_order import AffineBatchNorm, affine_batch_norm


def _stats(c, g):
    return torch.randn(c, dtype=torch.float64, generator=g), torch.rand(c, dtype=torch.float64, generator=g) + 0.5


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6), (2, 3, 4, 5)])
@pytest.mark.parametrize("affine", [True, False])
def test_affine_batch_norm_equals_torch_in_eval_mode(shape, affine):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64, generator=g)
    mean, var = _stats(3, g)
    weight, bias = _stats(3, g) if affine else (None, None)
    want = F.batch_norm(x, mean, var, weight, bias, False, 0.1, 1e-3)
    got = affine_batch_norm(x, mean, var, weight, bias, False, 0.1, 1e-3)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    # written out: (x - mu) / sqrt(var + eps) * gamma + beta, channel on dim 1
    view = (1, 3) + (1,) * (len(shape) - 2)
    by_hand = (x - mean.reshape(view)) / (var.reshape(view) + 1e-3).sqrt()
    if affine:
        by_hand = by_hand * weight.reshape(view) + bias.reshape(view)
    torch.testing.assert_close(got, by_hand, rtol=1e-14, atol=1e-14)


def test_batch_statistics_and_other_functions_are_left_to_torch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 3, 4, dtype=torch.float64, generator=g)
    mean, var = _stats(3, g)
    with AffineBatchNorm():
        train = F.batch_norm(x, mean.clone(), var.clone(), training=True)
        no_stats = F.batch_norm(x, None, None, training=True)
        other = torch.tanh(x)
    torch.testing.assert_close(train, F.batch_norm(x, mean.clone(), var.clone(), training=True))
    torch.testing.assert_close(
        no_stats, (x - x.mean((0, 2), keepdim=True)) / (x.var((0, 2), unbiased=False, keepdim=True) + 1e-5).sqrt()
    )
    assert torch.equal(other, torch.tanh(x))


def bn_model():
    """conv -> BatchNorm2d (eval, non-trivial statistics) -> tanh -> linear: second derivatives through the BN."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.Tanh(), nn.Flatten(), nn.Linear(12, 3))
    model[1].running_mean.normal_()
    model[1].running_var.uniform_(0.5, 2.0)
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.normal_()
    return model.eval()


def test_second_order_losses_have_the_exact_hessian_of_torchs_batch_norm():
    g = torch.Generator().manual_seed(2)
    batch = (torch.randn(5, 2, 4, 4, generator=g), torch.randint(0, 3, (5,), generator=g))
    obj = Objective(bn_model(), [batch], dtype=torch.float64)
    native, affine = (obj.batch_loss_fn(obj.batches[0], second_order=flag) for flag in (False, True))
    flat = flatten(obj.params)

    def of_flat(loss):
        return lambda f: loss(unflatten(f, obj.params))

    torch.testing.assert_close(affine(obj.params), native(obj.params), rtol=1e-14, atol=0)
    want = torch.func.hessian(of_flat(native))(flat)  # torch's fused kernel, twice differentiated
    torch.testing.assert_close(torch.func.hessian(of_flat(affine))(flat), want, rtol=1e-11, atol=1e-12)
    v = torch.randn(flat.numel(), dtype=torch.float64, generator=g)
    torch.testing.assert_close(flatten(obj.hvp(unflatten(v, obj.params))), want @ v, rtol=1e-11, atol=1e-12)
    assert want.abs()[:81, :81].max() > 0  # the conv weights' block, which sees the BN's scale, is not empty
