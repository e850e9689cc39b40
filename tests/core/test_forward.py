"""EvalForward: the folded, channels-last forward equals the plain eval-mode loss at any point and buffers."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from landscape.core.forward import EvalForward
from landscape.core.objective import Objective
from landscape.models import create_model


def _conv_bn_objective(dtype=torch.float32):
    torch.manual_seed(0)
    model = create_model("resnet_mini", num_classes=10, widths=(4, 8, 8, 8)).eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 3, 16, 16, generator=g), torch.randint(0, 10, (24,), generator=g)
    return Objective(model, [(x[:16], y[:16]), (x[16:], y[16:])], dtype=dtype)


def _plain_loss(objective, params, buffers, index):
    """The reference: the model itself, in eval mode, with the point's params and buffers loaded."""
    model = copy.deepcopy(objective.module).to(torch.float64)
    state = {n: t.double() for n, t in {**objective.fixed, **params, **buffers}.items()}
    model.load_state_dict(state, strict=False)
    x, y = objective.batches[index]
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(x.double()), y))


def _moved(objective, seed):
    """Another point and other BatchNorm statistics (running variances kept positive)."""
    g = torch.Generator().manual_seed(seed)
    params = {n: t + 0.05 * torch.randn(t.shape, generator=g, dtype=t.dtype) for n, t in objective.params.items()}
    buffers = {}
    for n, t in objective.buffers.items():
        if not t.is_floating_point():
            buffers[n] = t
        elif n.endswith("running_var"):
            buffers[n] = t * (0.5 + torch.rand(t.shape, generator=g, dtype=t.dtype))
        else:
            buffers[n] = t + 0.1 * torch.randn(t.shape, generator=g, dtype=t.dtype)
    return params, buffers


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tuned_forward_equals_the_plain_loss_at_another_point_and_buffers(dtype):
    objective = _conv_bn_objective(dtype)
    forward = EvalForward(objective)
    forward.enable_fold()
    forward.use_channels_last()
    assert forward.fold is not None and forward.fold.n_folded > 0
    params, buffers = _moved(objective, 3)
    at = copy.copy(objective)
    at.params, at.buffers = params, buffers
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    for index in range(2):
        got = float(forward.at(at).batch_loss(index, params))
        assert got == pytest.approx(_plain_loss(objective, params, buffers, index), rel=tol)
        unfolded = forward.at(at).unfolded()
        assert unfolded.fold is None and unfolded.channels_last
        assert float(unfolded.batch_loss(index, params)) == pytest.approx(got, rel=tol)
    assert forward.fold is not None  # unfolded() is a copy


def test_tune_keeps_float64_in_its_own_layout_and_records_why_nothing_folds():
    objective = _conv_bn_objective(torch.float64)
    forward = EvalForward(objective)
    forward.tune()
    assert not forward.channels_last  # float64 results are compared exactly: layout never changed
    recomputed = EvalForward(objective, bn="recompute")
    recomputed.tune()
    assert recomputed.fold is None and not recomputed.channels_last
    assert "recompute" in recomputed.fold_notes[0]


def test_the_layout_is_timed_once_per_process_for_a_model_and_input(monkeypatch):
    from landscape.core import forward as module

    monkeypatch.setattr(module, "_LAYOUTS", {})
    times = [1.0, 0.5, 0.5, 1.0]  # NCHW then channels-last: the first pair says channels-last, the second NCHW

    def timed(fn, device, repeats, warm_up=False):
        return times.pop(0), fn()

    monkeypatch.setattr(module, "fastest", timed)
    first, second = EvalForward(_conv_bn_objective()), EvalForward(_conv_bn_objective())
    assert first.choose_memory_format() and first.channels_last
    assert second.choose_memory_format() and second.channels_last  # the first timing holds: the same numbers
    assert times == [0.5, 1.0]  # the second was not timed
    batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))]
    wider = Objective(create_model("resnet_mini", num_classes=10, widths=(4, 8, 8, 16)).eval(), batches)
    assert not EvalForward(wider).choose_memory_format()  # another architecture is timed: NCHW 0.5 against 1.0
    assert times == []


def test_a_forward_whose_convolutions_are_a_small_part_is_not_timed_in_two_layouts(monkeypatch):
    from landscape.core import forward as module

    monkeypatch.setattr(module, "_LAYOUTS", {})

    def timed(fn, device, repeats, warm_up=False):
        raise AssertionError("the layouts were timed")

    monkeypatch.setattr(module, "fastest", timed)
    torch.manual_seed(0)
    batches = [(torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,)))]
    vit = EvalForward(Objective(create_model("vit_mini", num_classes=10).eval(), batches, determinism="loss"))
    share = vit._conv_share(vit._point_state(vit.obj.params), *batches[0])
    assert 0 < share < module.LAYOUT_MIN_CONV_SHARE / 2  # the patch embedding: 1-2% of the forward
    assert not vit.choose_memory_format() and not vit.channels_last
    assert list(module._LAYOUTS.values()) == [False]  # remembered: later runs in the process do not measure it
    resnet = EvalForward(_conv_bn_objective())
    assert (
        resnet._conv_share(resnet._point_state(resnet.obj.params), *resnet.obj.batches[0])
        > 2 * module.LAYOUT_MIN_CONV_SHARE
    )


def test_the_fold_is_checked_against_the_loss_the_objective_measured_without_another_unfolded_pass():
    objective = _conv_bn_objective(torch.float64)
    x, y = objective.batches[0]
    want = float(F.cross_entropy(objective.module(x), y))  # the reference: the model itself at its point
    assert objective.first_batch_loss == want
    checked, again = EvalForward(objective), EvalForward(objective)
    assert checked.enable_fold(check=False) == again.enable_fold(check=False) > 0
    calls = []
    hook = objective.module.register_forward_hook(lambda *args: calls.append(1))  # the unfolded model's passes
    try:
        assert checked.check_fold() > 0 and checked.fold is not None and calls == []
        objective.first_batch_loss = None  # an objective built without its checks: the unfolded pass is made
        assert again.check_fold() > 0 and again.fold is not None and calls == [1]
    finally:
        hook.remove()


def test_a_fold_checked_later_is_kept_or_undone_as_one_checked_at_once(monkeypatch):
    objective = _conv_bn_objective(torch.float64)
    now, later = EvalForward(objective), EvalForward(objective)
    n = now.enable_fold()
    assert later.enable_fold(check=False) == n > 0 and later.fold is not None  # folded, not yet checked
    assert later.check_fold() == n and later.fold is not None
    from landscape.core import forward as module

    monkeypatch.setattr(module, "folded_loss_agrees", lambda got, want: False)  # a fold that would disagree
    wrong = EvalForward(objective)
    wrong.enable_fold(check=False)
    assert wrong.check_fold() == 0 and wrong.fold is None and "differs" in wrong.fold_notes[-1]
    assert wrong.attrs()["bn_folded"] == 0
