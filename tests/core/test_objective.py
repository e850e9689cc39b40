import copy
import types

import pytest
import torch
import torch.nn.functional as F
from helpers import TrackedBatches, one_line_error, reestimate_bn
from torch import nn

from landscape.core import params as P
from landscape.core.criteria import criterion_name, select_logits
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.data.batches import fixed_batches, stream_batches
from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError


def bn_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 9, 4))
    model = model.double()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model.eval()


def data(n=(7, 3, 5), seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(n), 2, 5, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (sum(n),), generator=g)
    cuts = torch.cumsum(torch.tensor((0, *n)), 0).tolist()
    return x, y, [(x[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


class AlwaysDropout(nn.Module):
    """Dropout that stays random in eval mode (a custom layer, not nn.Dropout)."""

    def forward(self, x):
        return x * (torch.rand_like(x) > 0.5) * 2


def test_centre_loss_equals_the_model_loss_with_unequal_batches():
    model = bn_model()
    x, y, batches = data()
    obj = Objective(model, batches)
    with torch.no_grad():
        out = model(x)
    expected = F.cross_entropy(out, y)
    assert float(obj.loss()) == pytest.approx(float(expected), rel=1e-13)
    ev = obj.evaluate()
    assert ev.loss == pytest.approx(float(expected), rel=1e-13) and ev.loss == ev.data_loss
    assert ev.accuracy == float((out.argmax(1) == y).double().mean())
    assert obj.weights == [7 / 15, 3 / 15, 5 / 15]
    with torch.no_grad():
        each = [float(F.cross_entropy(model(bx), by)) for bx, by in batches]
    assert ev.batch_losses == pytest.approx(each, rel=1e-13)
    # an equal-weight mean of the batch losses is a different number: the weighting matters here
    with torch.no_grad():
        equal = sum(float(F.cross_entropy(model(bx), by)) for bx, by in batches) / 3
    assert abs(equal - float(expected)) > 1e-3


def test_mse_criterion_is_the_mean_over_samples_and_classes():
    model = bn_model()
    x, y, batches = data()
    obj = Objective(model, batches, criterion="mse")
    with torch.no_grad():
        expected = F.mse_loss(model(x), F.one_hot(y, 4).double())
    assert obj.evaluate().loss == pytest.approx(float(expected), rel=1e-13)


def test_callable_criterion_label_smoothing_by_hand():
    model = bn_model()
    x, y, batches = data()
    eps = 0.1

    def smoothed(logits, targets):
        return F.cross_entropy(logits, targets, label_smoothing=eps)

    obj = Objective(model, batches, criterion=smoothed)
    with torch.no_grad():
        logp = torch.log_softmax(model(x), dim=1)
    soft = torch.full_like(logp, eps / 4).scatter_(1, y[:, None], 1 - eps + eps / 4)
    assert obj.evaluate().loss == pytest.approx(float(-(soft * logp).sum(1).mean()), rel=1e-12)
    assert criterion_name(smoothed).endswith("smoothed") and criterion_name("mse") == "mse"


class DictOut(nn.Module):
    """Wraps a model: returns a dict, a tuple or an object holding the logits."""

    def __init__(self, inner, how):
        super().__init__()
        self.inner, self.how = inner, how

    def forward(self, x):
        z = self.inner(x)
        if self.how == "dict":
            return {"features": x.mean(), "logits": z}
        if self.how == "tuple":
            return z, x.mean()
        if self.how == "object":
            return types.SimpleNamespace(logits=z)
        return {"scores": z}


@pytest.mark.parametrize(
    "how, output",
    [
        ("dict", None),
        ("tuple", None),
        ("object", None),
        ("named", "scores"),
        ("tuple", 0),
        ("named", lambda out: out["scores"]),
    ],
)
def test_logits_are_selected_from_tuple_dict_and_object_outputs(how, output):
    model = bn_model()
    x, y, batches = data()
    plain = Objective(model, batches).loss()
    wrapped = Objective(DictOut(model, how), batches, output=output)
    assert float(wrapped.loss()) == pytest.approx(float(plain), rel=1e-13)
    v = {n: torch.ones_like(p) for n, p in wrapped.params.items()}
    assert all(
        torch.allclose(a, b)
        for a, b in zip(
            wrapped.hvp(v).values(),
            Objective(model, batches).hvp({n.removeprefix("inner."): t for n, t in v.items()}).values(),
        )
    )


def test_unreadable_outputs_and_out_of_range_labels_are_one_line_errors():
    model = bn_model()
    _, _, batches = data()
    one_line_error(Objective, DictOut(model, "named"), batches, match="--model-output")
    one_line_error(Objective, DictOut(model, "named"), batches, output="nope", match="cannot take 'nope'")
    bad = [(x, y + 2) for x, y in batches]
    one_line_error(Objective, model, bad, match="labels 2..5 but the model outputs 4 classes")
    assert select_logits(torch.zeros(2, 3)).shape == (2, 3)
    one_line_error(select_logits, torch.zeros(2), match=r"logits have shape \(2,\), not \(batch, classes\)")


@pytest.mark.parametrize("kind,coef", [("l2", 0.3), ("norm-sum", 0.05)])
def test_regularisers_in_closed_form(kind, coef):
    model = bn_model()
    x, y, batches = data()
    reg = Regularizer(kind, coef)
    obj = Objective(model, batches, regularizer=reg)
    ps = [p.detach() for p in model.parameters()]
    closed = (
        0.5 * coef * sum(float((p**2).sum()) for p in ps)
        if kind == "l2"
        else coef * sum(float(torch.sqrt((p**2).sum())) for p in ps)
    )
    with torch.no_grad():
        data_loss = float(F.cross_entropy(model(x), y))
    ev = obj.evaluate()
    assert ev.data_loss == pytest.approx(data_loss, rel=1e-13)
    assert ev.loss - ev.data_loss == pytest.approx(closed, rel=1e-12)
    # gradient of the regulariser: l2 -> c * theta, norm-sum -> c * theta / ||theta|| per tensor
    g = obj.gradient()
    no_reg = Objective(model, batches).gradient()
    for name, p in model.named_parameters():
        n = p.detach().norm()  # norm-sum at a zero tensor (a fresh BN bias): the subgradient 0
        expected = coef * p.detach() if kind == "l2" else coef * p.detach() / (n if n > 0 else 1.0)
        torch.testing.assert_close(g[name] - no_reg[name], expected, rtol=1e-10, atol=1e-12)


def test_regulariser_defaults_and_errors():
    assert Regularizer.from_options("norm-sum").coef == 0.05
    assert Regularizer.from_options("l2").coef == 5e-4
    assert not Regularizer.from_options("none").active
    with pytest.raises(LandscapeError, match="unknown regulariser"):
        Regularizer("l1", 1.0)
    with pytest.raises(LandscapeError, match=">= 0"):
        Regularizer("l2", -1.0)


def test_gradient_and_hvp_match_dense_references():
    model = bn_model()
    x, y, batches = data()
    obj = Objective(model, batches, regularizer=Regularizer("l2", 0.1))
    params = dict(obj.params)

    def full(flat):
        p = P.unflatten(flat, params)
        out = torch.func.functional_call(obj.module, {**p, **obj.buffers}, (x,))
        return F.cross_entropy(out, y) + 0.05 * (flat**2).sum()

    theta = P.flatten(params)
    torch.testing.assert_close(P.flatten(obj.gradient()), torch.func.grad(full)(theta), rtol=1e-10, atol=1e-12)
    H = torch.func.hessian(full)(theta)
    v = torch.randn(theta.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    hv = P.flatten(obj.hvp(P.unflatten(v, params)))
    torch.testing.assert_close(hv, H @ v, rtol=1e-9, atol=1e-11)


def test_recompute_bn_buffers_matches_a_direct_computation():
    model = bn_model()
    _, _, batches = data()
    obj = Objective(model, batches)
    params = {n: t + 0.1 * torch.ones_like(t) for n, t in obj.params.items()}
    buffers = obj.recompute_bn_buffers(params)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(params[name])
    reestimate_bn(ref, batches)
    bn = ref[1]
    # cumulative average of per-batch means / unbiased variances, each batch counting once
    feats = [ref[0](bx) for bx, _ in batches]
    means = torch.stack([f.mean((0, 2, 3)) for f in feats]).mean(0)
    variances = torch.stack([f.transpose(0, 1).reshape(3, -1).var(1, unbiased=True) for f in feats]).mean(0)
    torch.testing.assert_close(buffers["1.running_mean"], bn.running_mean, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(buffers["1.running_var"], bn.running_var, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(buffers["1.running_mean"], means.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(buffers["1.running_var"], variances.detach(), rtol=1e-12, atol=1e-14)
    # the objective's own buffers and the module are untouched
    torch.testing.assert_close(obj.buffers["1.running_mean"], model[1].running_mean, rtol=0, atol=0)
    assert not obj.module.training and not any(m.training for m in obj.module.modules())


def test_objective_never_mutates_the_model():
    model = bn_model()
    before = copy.deepcopy(model.state_dict())
    _, _, batches = data()
    obj = Objective(model, batches)
    obj.evaluate({n: t * 2 for n, t in obj.params.items()})
    obj.recompute_bn_buffers(obj.params)
    obj.hvp({n: torch.ones_like(t) for n, t in obj.params.items()})
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_params_are_views_of_the_copy_not_of_the_model():
    model = bn_model()
    _, _, batches = data()
    obj = Objective(model, batches, param_names=["0.weight", "4.weight"])
    own = dict(obj.module.named_parameters())
    given = {n: p.data_ptr() for n, p in model.named_parameters()}
    for n, t in {**obj.params, **obj.fixed}.items():
        assert t.data_ptr() == own[n].data_ptr() != given[n]
        assert not t.requires_grad and torch.equal(t, dict(model.named_parameters())[n])
    assert list(obj.params) == ["0.weight", "4.weight"] and set(obj.fixed) == {"0.bias", "1.weight", "1.bias", "4.bias"}


def test_stochastic_model_is_refused_unless_allowed():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(50, 8), AlwaysDropout(), nn.Linear(8, 4)).double().eval()
    _, _, batches = data()
    with pytest.raises(LandscapeError, match="stochastic") as exc:
        Objective(model, batches)
    assert "\n" not in str(exc.value)
    Objective(model, batches, allow_stochastic=True)  # the explicit opt-out


def test_a_loss_only_check_refuses_a_stochastic_model_in_two_forward_passes_and_no_backward():
    torch.manual_seed(0)
    passes = []
    backward = []

    class Counted(nn.Linear):
        def forward(self, x):
            passes.append(1)
            out = super().forward(x)
            if out.requires_grad:
                out.register_hook(lambda g: backward.append(1))
            return out

    model = nn.Sequential(nn.Flatten(), Counted(50, 8), AlwaysDropout(), nn.Linear(8, 4)).double().eval()
    _, _, batches = data()
    with pytest.raises(LandscapeError, match=r"two passes gave different losses: dropout") as exc:
        Objective(model, batches, determinism="loss")
    assert "\n" not in str(exc.value)
    assert len(passes) == 2 and not backward  # the checked forward's output is the first pass
    steady = nn.Sequential(nn.Flatten(), Counted(50, 8), nn.Linear(8, 4)).double().eval()
    passes.clear()
    Objective(steady, batches, determinism="loss")
    assert len(passes) == 2 and not backward
    passes.clear()
    Objective(steady, batches)  # the default compares the gradients too: forward and backward passes
    assert len(passes) == 3 and len(backward) == 2


def test_an_unknown_determinism_check_is_refused():
    with pytest.raises(LandscapeError, match="unknown determinism check 'forward'; choose one of loss, gradient"):
        Objective(bn_model(), data()[2], determinism="forward")


def test_no_batches_is_an_error():
    with pytest.raises(LandscapeError, match="no data"):
        Objective(bn_model(), [])


@pytest.mark.parametrize("coef", [float("nan"), float("inf"), float("-inf"), -1e-9])
@pytest.mark.parametrize("kind", ["none", "l2", "norm-sum"])
def test_regulariser_coefficient_must_be_finite_and_non_negative(kind, coef):
    msg = one_line_error(Regularizer, kind, coef, match="regulariser coefficient")
    assert "--reg-coef" in msg and "finite" in msg
    one_line_error(Regularizer.from_options, kind, coef, match="regulariser coefficient")
    assert Regularizer(kind, 0.0).coef == 0.0 and Regularizer(kind, 2.5).coef == 2.5


# ------------------------------------------------------------------------------------ streamed batches
def synthetic_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 10))
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model.eval()


def test_a_streamed_objective_equals_one_over_the_list_of_its_batches_exactly():
    ds = load_dataset("synthetic:50:8", "train")
    source = stream_batches(ds, 16, 45, seed=2)
    listed = fixed_batches(ds, 16, 45, seed=2)
    model = synthetic_model()
    a = Objective(model, source, dtype=torch.float64)
    b = Objective(model, [(x.double(), y) for x, y in listed], dtype=torch.float64)
    assert a.weights == b.weights == [16 / 45, 16 / 45, 13 / 45] and a.n_samples == 45
    g = torch.Generator().manual_seed(1)
    v = {n: torch.randn(p.shape, generator=g, dtype=p.dtype) for n, p in a.params.items()}
    assert torch.equal(a.loss(), b.loss()) and a.evaluate() == b.evaluate()
    for got, want in ((a.gradient(), b.gradient()), (a.hvp(v), b.hvp(v))):
        assert all(torch.equal(got[n], want[n]) for n in want)
    ra, rb = a.recompute_bn_buffers(a.params), b.recompute_bn_buffers(b.params)
    assert all(torch.equal(ra[n], rb[n]) for n in rb)


def test_the_device_holds_at_most_two_batches_at_once_whatever_the_method():
    source = TrackedBatches.synthetic(96, 8, 8)  # 12 batches
    obj = Objective(synthetic_model(), source, dtype=torch.float64)
    v = {n: torch.ones_like(p) for n, p in obj.params.items()}
    obj.loss(), obj.evaluate(), obj.gradient(), obj.hvp(v), obj.recompute_bn_buffers(obj.params)
    assert isinstance(obj.batches, TrackedBatches)  # a placed view shares the record (a shallow copy)
    assert len(source.alive) >= 5 * 12 + 3 and source.most <= 2  # 5 passes over 12 batches, and the checks


class Overflowing(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x.flatten(1)) * 1e300 * 1e300  # inf in float32 and in float64


@pytest.mark.parametrize(
    "dtype, model_dtype, words, float64_said",
    [
        (None, torch.float32, "in float32 (check --data, --mean/--std)", False),  # the caller has no --dtype
        (None, torch.float64, "in float64 (check --data, --mean/--std)", False),
        (torch.float32, torch.float32, "in float32 (check --data, --mean/--std, or --dtype float64)", True),
        (torch.float64, torch.float32, "in float64 (check --data, --mean/--std)", False),
    ],
)
def test_float64_is_suggested_only_where_it_is_not_already_used(dtype, model_dtype, words, float64_said):
    batches = [(torch.randn(5, 1, 2, 2, dtype=model_dtype), torch.tensor([0, 1, 2, 0, 1]))]
    msg = one_line_error(Objective, Overflowing().to(model_dtype), batches, dtype=dtype, match="overflows")
    assert msg.endswith(words) and ("float64)" in msg) == float64_said, msg


def test_a_python_call_is_told_the_model_source_field_not_the_flag():
    import landscape

    batches = [(torch.randn(5, 2), torch.tensor([0, 1, 2, 0, 1]))]
    msg = one_line_error(landscape.hessian, DictOut(nn.Linear(2, 3), "named"), batches, top_k=1, progress=False)
    assert "name them with ModelSource(output=...)" in msg and "--model-output" not in msg


def test_the_first_batch_loss_holds_at_the_point_it_was_measured_and_is_forgotten_when_the_point_moves():
    import copy as copy_module

    model = bn_model()
    _, _, batches = data()
    obj = Objective(model, batches)
    x, y = batches[0]
    assert obj.first_batch_loss == float(F.cross_entropy(obj.module(x), y))
    assert Objective(model, batches, check=False).first_batch_loss is None
    for name in ("params", "fixed", "buffers"):
        moved = copy_module.copy(obj)  # as connect's points and tracking's refreshes do
        setattr(moved, name, dict(getattr(obj, name)))
        assert moved.first_batch_loss is None and obj.first_batch_loss is not None
