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


def small_resnet():
    """The zoo's ResNet (shortcut convolutions, nine conv -> BatchNorm pairs) with non-trivial BatchNorm tensors."""
    from landscape.models.resnet import ResNet

    torch.manual_seed(0)
    model = ResNet(layers=(1, 1, 1), widths=(4, 4, 6), num_classes=3).eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    return model


def test_products_through_the_folded_model_are_the_exact_hessian_of_the_unfolded_one():
    from landscape.analyses.hessian.operator import HessianOperator

    g = torch.Generator().manual_seed(3)
    batch = (torch.randn(6, 3, 8, 8, generator=g), torch.randint(0, 3, (6,), generator=g))
    obj = Objective(small_resnet(), [batch], dtype=torch.float64)
    native = obj.batch_loss_fn(obj.batches[0])
    want = torch.func.hessian(lambda f: native(unflatten(f, obj.params)))(flatten(obj.params))
    got = HessianOperator(obj, mode="graph").dense()
    assert obj.second_order_fold.folded is not None and obj.second_order_fold.folded.n_folded == 9
    torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-12)
    bn_rows = [i for i, n in enumerate(obj.params) if ".bn" in n or n.startswith("bn")]
    assert bn_rows  # the BatchNorms' own parameters are rows of the Hessian, through the fold's chain rule


def test_a_model_with_hooks_is_not_folded():
    g = torch.Generator().manual_seed(4)
    batch = (torch.randn(5, 2, 4, 4, generator=g), torch.randint(0, 3, (5,), generator=g))
    model = bn_model()
    handle = model[0].register_forward_hook(lambda mod, inp, out: 2 * out)  # a hook on the folded convolution
    obj = Objective(model, [batch], dtype=torch.float64)
    native, second = (obj.batch_loss_fn(obj.batches[0], second_order=flag) for flag in (False, True))
    torch.testing.assert_close(second(obj.params), native(obj.params), rtol=1e-14, atol=0)
    assert not obj.second_order_fold.tried
    handle.remove()
    obj.module[0]._forward_hooks.clear()  # the objective's copy: now hook-free, so folded at the next loss
    torch.testing.assert_close(second(obj.params), native(obj.params), rtol=1e-14, atol=0)
    assert obj.second_order_fold.folded is not None
    unhooked = native(obj.params)
    obj.module[1].register_forward_hook(lambda mod, inp, out: out + 1)  # a hook added after the fold: not folded
    assert not torch.isclose(native(obj.params), unhooked)  # the hook changes the loss...
    torch.testing.assert_close(second(obj.params), native(obj.params), rtol=1e-14, atol=0)  # ...and is kept


def test_a_fold_that_disagrees_or_fails_is_not_used():
    from landscape.core.second_order import SecondOrderFold

    refused = SecondOrderFold()
    assert refused.get(bn_model(), lambda folded: False) is None
    assert refused.tried and "differs" in refused.notes[-1]

    def broken(folded):
        raise RuntimeError("a use of a folded layer the trace did not show")

    failed = SecondOrderFold()
    assert failed.get(bn_model(), broken) is None and "folding failed (RuntimeError)" in failed.notes[-1]
    nothing = SecondOrderFold()
    assert nothing.get(nn.Sequential(nn.Linear(2, 2), nn.Tanh()), lambda folded: True) is None


def test_the_operator_records_how_many_batchnorms_its_products_fold():
    from landscape.analyses.hessian.operator import HessianOperator

    g = torch.Generator().manual_seed(5)
    batch = (torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 3, (4,), generator=g))
    v = torch.randn(sum(p.numel() for p in small_resnet().parameters()), generator=g)
    counts = {}
    for mode in ("graph", "finite-difference"):
        op = HessianOperator(Objective(small_resnet(), [batch]), mode=mode)
        op.matvec(v)
        counts[mode] = op.hvp_choice()["bn_folded"]
    hooked = small_resnet()
    hooked.stem.register_forward_hook(lambda mod, inp, out: out)
    op = HessianOperator(Objective(hooked, [batch]), mode="graph")
    op.matvec(v)
    counts["hooked"] = op.hvp_choice()["bn_folded"]
    assert counts == {"graph": 9, "finite-difference": 0, "hooked": 0}


def test_the_per_mini_batch_spectrum_records_how_many_batchnorms_its_products_fold():
    from landscape.analyses.hessian.spectrum import max_eigenvalue_spectrum

    g = torch.Generator().manual_seed(6)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(2)]
    counts = {}
    for hvp in ("graph", "auto", "finite-difference"):
        res = max_eigenvalue_spectrum(small_resnet(), batches, k=1, hvp=hvp, group=1, tol=1e-2, dtype=torch.float64)
        assert list(res.hvp_choice) == ["4x3x8x8"]
        counts[hvp] = res.hvp_choice["4x3x8x8"]["bn_folded"]
    assert counts == {"graph": 9, "auto": 9, "finite-difference": 0}
