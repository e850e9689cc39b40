"""HessianOperator against dense Hessians from torch.func.hessian in float64 on tiny models."""

import numpy as np
import pytest
import torch
from helpers import TrackedBatches
from torch import nn

from landscape.analyses.hessian.density import spectral_density
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.linalg import DenseOperator
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.products import ProductCosts, cheapest
from landscape.core.objective import Objective
from landscape.core.params import flatten, unflatten
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError

REGULARIZERS = [Regularizer(), Regularizer("l2", 0.1), Regularizer("norm-sum", 0.05)]


def tiny_model(seed=0):
    """Linear -> BatchNorm (eval, non-trivial running stats) -> tanh -> Linear: 63 parameters."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 3))
    model[1].running_mean.normal_()
    model[1].running_var.uniform_(0.5, 2.0)
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.normal_()
    return model.eval()


def tiny_batches(sizes=(7, 4, 5), seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(s, 4, generator=g), torch.randint(0, 3, (s,), generator=g)) for s in sizes]


def dense_hessian(objective, names=None, batches=None):
    """The exact Hessian of sum_b (N_b/N) L_b + R by torch.func.hessian of the flat loss."""
    params = objective.params
    names = list(params) if names is None else names
    sub = {n: params[n] for n in names}
    used = range(len(objective.batches)) if batches is None else batches
    sizes = [objective.batches[i][1].shape[0] for i in used]

    def loss(flat):
        full = {**params, **unflatten(flat, sub)}
        data = sum(s / sum(sizes) * objective.batch_loss_fn(objective.batches[i])(full) for s, i in zip(sizes, used))
        return data + objective.regularizer(full)

    return torch.func.hessian(loss)(flatten(sub))


@pytest.mark.parametrize(
    ("reg", "mode"),
    [(REGULARIZERS[0], "linearize"), (REGULARIZERS[1], "jvp"), (REGULARIZERS[2], "auto")],
    ids=["none", "l2", "norm-sum"],
)
def test_operator_equals_the_dense_hessian(reg, mode):
    obj = Objective(tiny_model(), tiny_batches(), dtype=torch.float64, regularizer=reg)
    op = HessianOperator(obj, mode=mode)
    H = dense_hessian(obj)
    assert op.shape == (63, 63) and op.dtype == torch.float64
    torch.testing.assert_close(op.dense(), H, rtol=1e-12, atol=1e-13)
    assert op.n_matvec == 63
    torch.testing.assert_close(op.matvec(torch.eye(63, dtype=torch.float64)[5]), H[:, 5], rtol=1e-12, atol=1e-13)
    # the weighted sum must differ from an equal-weight average (unequal batch sizes matter)
    equal = sum(dense_hessian(obj, batches=[i]) for i in range(3)) / 3
    assert (equal - H).abs().max() > 1e-3


def test_every_way_of_making_products_agrees_and_auto_keeps_a_graph_only_where_allowed():
    obj = Objective(tiny_model(), tiny_batches((7, 4)), dtype=torch.float64)
    ops = {mode: HessianOperator(obj, mode=mode) for mode in ("linearize", "graph", "jvp")}
    auto = HessianOperator(obj, mode="auto", max_linearized=1)
    auto.plan_products(3)
    v = torch.randn(63, dtype=torch.float64)
    for _ in range(3):
        ref = ops["jvp"].matvec(v)
        for op in (*ops.values(), auto):
            torch.testing.assert_close(op.matvec(v), ref, rtol=1e-13, atol=1e-14)
    assert sorted(ops["linearize"]._linear) == [0, 1] and sorted(ops["graph"]._linear) == [0, 1]
    assert ops["jvp"]._linear == {}
    assert sorted(auto._linear) in ([], [0])  # only slot 0 may keep anything
    choice = auto.hvp_choice()
    assert choice["mode"] == "auto" and sum(choice["ways"].values()) == 2 and "graph_setup" in choice["seconds"]


def _costs(**seconds):
    for way in ("graph", "linearize"):  # a first product after the setup that costs what a later one does
        if way in seconds:
            seconds.setdefault(f"{way}_first", seconds[way])
    costs = ProductCosts()
    for name, value in seconds.items():
        for _ in range(3):  # three measurements: auto measures no more, so the test is deterministic
            costs.add(name, value)
    return costs


def test_cheapest_weighs_setup_against_the_products_left():
    options = {"jvp": (0.0, 4.0), "graph": (1.0, 3.0), "linearize": (20.0, 2.0)}
    assert cheapest(1, options) == "jvp"  # 4 < 1 + 3
    assert cheapest(2, options) == "graph"  # 2 + 6 < 8
    assert cheapest(19, options) == "graph"  # 1 + 57 = 58 = 20 + 38: the first listed of equals
    assert cheapest(30, options) == "linearize"  # 80 < 91
    assert cheapest(0, options) == "jvp"  # at least one product is assumed


@pytest.mark.parametrize(
    ("seconds", "planned", "ways"),
    [
        ({"jvp": 1.0, "graph_setup": 0.1, "graph": 0.5}, 10, {"graph": 2}),
        ({"jvp": 1.0, "graph_setup": 0.1, "graph": 2.0}, 10, {"jvp": 2}),  # a graph product that is slower
        (
            {"jvp": 1.0, "graph_setup": 0.1, "graph": 0.5, "linearize_setup": 1.0, "linearize": 0.1},
            10,
            {"linearize": 2},
        ),
        ({"jvp": 1.0, "graph_setup": 0.1, "graph": 0.5, "linearize_setup": 9.0, "linearize": 0.1}, 10, {"graph": 2}),
        (
            {"jvp": 1.0, "graph_setup": 0.1, "graph": 0.5, "linearize_setup": 9.0, "linearize": 0.1},
            100,
            {"linearize": 2},
        ),
    ],
    ids=["graph", "jvp", "trace-pays", "trace-too-dear", "trace-pays-later"],
)
def test_auto_takes_the_way_the_measurements_say_is_cheapest(seconds, planned, ways):
    obj = Objective(tiny_model(), tiny_batches((7, 4)), dtype=torch.float64)
    op = HessianOperator(obj, mode="auto", costs=_costs(**seconds))
    op.plan_products(planned)
    v = torch.randn(63, dtype=torch.float64)
    torch.testing.assert_close(op.matvec(v), dense_hessian(obj) @ v, rtol=1e-12, atol=1e-13)
    assert op.hvp_choice()["ways"] == ways
    kept = [] if "jvp" in ways else [0, 1]
    assert sorted(op._linear) == kept


def test_a_first_product_dearer_than_later_ones_counts_as_setup():
    costs = _costs(jvp=1.0, graph_setup=0.1, graph=0.5, linearize_setup=1.0, linearize_first=3.0, linearize=0.2)
    options = costs.estimates(cached=True)
    assert options["jvp"] == (0.0, 1.0) and options["graph"] == (0.1, 0.5)
    assert options["linearize"] == pytest.approx((1.0 + 3.0 - 0.2, 0.2))
    assert costs.estimates(cached=False) == {"jvp": (0.0, 1.0), "graph": (0.0, 0.6)}
    guessed = _costs(jvp=1.0).estimates(cached=True)  # nothing but jvp measured: the stated guesses
    assert guessed["graph"] == pytest.approx((0.3, 0.7)) and guessed["linearize"] == pytest.approx((7.5, 0.49))


def _approx(**options):
    return {way: pytest.approx(cost) for way, cost in options.items()}


def test_estimates_need_no_jvp_measurement():
    guessed = ProductCosts().estimates(cached=True)  # nothing measured: the ratios alone, in jvp products
    assert guessed["jvp"] == (0.0, 1.0) and guessed["graph"] == pytest.approx((0.3, 0.7))
    assert guessed["linearize"] == pytest.approx((7.5, 0.49))
    assert cheapest(1, guessed) == "jvp" and cheapest(20, guessed) == "graph"  # 1 = 0.3 + 0.7; 20 > 14.3 < 17.3
    costs = ProductCosts()
    costs.add("graph_setup", 0.2)
    costs.add("graph_first", 0.7)  # a graph alone measured: a jvp product is inferred as 0.7 / 0.7
    assert costs.estimates(cached=True) == _approx(jvp=(0.0, 1.0), graph=(0.2, 0.7), linearize=(5.0, 0.49))
    assert costs.estimates(cached=False) == _approx(jvp=(0.0, 1.0), graph=(0.0, 0.9))
    costs.add("graph", 0.35)  # a later product measured: it is the unit's source now
    assert costs.estimates(cached=False)["jvp"] == pytest.approx((0.0, 0.5))
    costs.failed["graph"] = "RuntimeError"
    assert list(costs.estimates(cached=True)) == ["jvp", "linearize"]
    costs.failed["jvp"] = "NotImplementedError"
    assert costs.estimates(cached=False) == {}


def test_auto_makes_no_product_only_to_measure_it_and_its_measured_products_are_exact():
    obj = Objective(tiny_model(), tiny_batches((7,)), dtype=torch.float64)
    op = HessianOperator(obj, mode="auto")
    op.plan_products(10)
    H = dense_hessian(obj)
    g = torch.Generator().manual_seed(3)
    v = torch.randn(63, dtype=torch.float64, generator=g)
    torch.testing.assert_close(op.matvec(v), H @ v, rtol=1e-12, atol=1e-13)  # the measured product, kept
    choice = op.hvp_choice()  # nothing measured yet: the ratios chose a graph for 10 products, and no jvp was made
    assert choice["ways"] == {"graph": 1} and set(choice["seconds"]) == {"graph_setup", "graph_first"}
    for _ in range(2):  # later products, whichever way the measurements now choose
        v = torch.randn(63, dtype=torch.float64, generator=g)
        torch.testing.assert_close(op.matvec(v), H @ v, rtol=1e-12, atol=1e-13)
    result = lanczos(HessianOperator(obj, mode="auto"), k=3, which="LM", tol=1e-10, seed=0)
    exact = torch.linalg.eigvalsh(H)
    top = exact[exact.abs().argsort(descending=True)[:3]].sort().values
    torch.testing.assert_close(result.eigenvalues, top, rtol=1e-9, atol=1e-12)


def test_auto_without_a_cache_rebuilds_a_graph_per_product_when_that_is_cheaper():
    obj = Objective(tiny_model(), tiny_batches((7, 4)), dtype=torch.float64)
    op = HessianOperator(obj, mode="auto", max_linearized=0, costs=_costs(jvp=1.0, graph_setup=0.2, graph=0.5))
    v = torch.randn(63, dtype=torch.float64)
    torch.testing.assert_close(op.matvec(v), dense_hessian(obj) @ v, rtol=1e-12, atol=1e-13)
    assert op.hvp_choice()["ways"] == {"graph": 2} and op._linear == {}


def test_graph_products_with_an_unused_parameter_are_zero_there():
    class Partly(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Linear(4, 3)
            self.unused = nn.Parameter(torch.ones(2))

        def forward(self, x):
            return self.used(x)

    torch.manual_seed(0)
    obj = Objective(Partly(), tiny_batches((7, 4)), dtype=torch.float64)
    op = HessianOperator(obj, mode="graph")
    torch.testing.assert_close(op.dense(), dense_hessian(obj), rtol=1e-12, atol=1e-13)
    cols = torch.stack([op.matvec(e) for e in torch.eye(op.shape[0], dtype=torch.float64)], dim=1)
    torch.testing.assert_close(cols, dense_hessian(obj), rtol=1e-12, atol=1e-13)
    assert op.names[0] == "unused" and cols[:2].abs().max() == 0 and cols[:, :2].abs().max() == 0


def test_matmat_equals_repeated_matvec_looped_and_vectorized():
    obj = Objective(tiny_model(), tiny_batches(), dtype=torch.float64, regularizer=REGULARIZERS[2])
    op = HessianOperator(obj, mode="linearize")
    V = torch.randn(63, 5, dtype=torch.float64)
    cols = torch.stack([op.matvec(V[:, j]) for j in range(5)], dim=1)
    torch.testing.assert_close(op.matmat(V), cols, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(op.matmat(V, vectorize=True), cols, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(op @ V, cols, rtol=1e-13, atol=1e-14)
    with pytest.raises(ValueError):
        op.matmat(torch.zeros(62, 2, dtype=torch.float64))


def test_parameter_patterns_give_the_dense_block():
    obj = Objective(tiny_model(), tiny_batches(), dtype=torch.float64, regularizer=REGULARIZERS[1])
    op = HessianOperator(obj, patterns=["3"])  # dotted prefix: 3.weight, 3.bias
    assert op.names == ["3.weight", "3.bias"]
    torch.testing.assert_close(op.dense(), dense_hessian(obj, names=op.names), rtol=1e-12, atol=1e-13)
    glob = HessianOperator(obj, patterns="*.bias")
    assert glob.names == ["0.bias", "1.bias", "3.bias"]
    torch.testing.assert_close(glob.dense(), dense_hessian(obj, names=glob.names), rtol=1e-12, atol=1e-13)
    with pytest.raises(LandscapeError, match="no parameter matches"):
        HessianOperator(obj, patterns="conv*")


def test_batch_subset_is_reweighted_and_includes_the_regularizer():
    obj = Objective(tiny_model(), tiny_batches(), dtype=torch.float64, regularizer=REGULARIZERS[2])
    one = HessianOperator(obj, batches=[1])
    torch.testing.assert_close(one.dense(), dense_hessian(obj, batches=[1]), rtol=1e-12, atol=1e-13)
    two = HessianOperator(obj, batches=[0, 2])
    torch.testing.assert_close(two.dense(), dense_hessian(obj, batches=[0, 2]), rtol=1e-12, atol=1e-13)
    with pytest.raises(LandscapeError):
        HessianOperator(obj, batches=[3])


def test_other_evaluation_point_and_scipy_view():
    obj = Objective(tiny_model(), tiny_batches(), dtype=torch.float64)
    point = {n: p + 0.1 for n, p in obj.params.items()}
    op = HessianOperator(obj, params=point)
    moved = Objective(tiny_model(), tiny_batches(), dtype=torch.float64)
    moved.params = point
    H = dense_hessian(moved)
    torch.testing.assert_close(op.dense(), H, rtol=1e-12, atol=1e-13)
    lin = op.to_scipy()
    x = np.random.default_rng(0).standard_normal(63)
    np.testing.assert_allclose(lin.matvec(x), H.numpy() @ x, rtol=1e-11, atol=1e-12)
    assert lin.shape == (63, 63)


def test_the_model_is_not_modified():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    obj = Objective(model, tiny_batches(), dtype=torch.float64)
    HessianOperator(obj).dense()
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    assert not model.training


class Noisy(nn.Module):
    def forward(self, x):
        return x + 0.1 * torch.randn_like(x)


def test_a_stochastic_model_is_refused():
    model = nn.Sequential(nn.Linear(4, 3), Noisy())
    with pytest.raises(LandscapeError, match="stochastic"):
        HessianOperator(Objective(model, tiny_batches()))


def test_clear_cache_frees_the_traced_products_and_keeps_the_results():
    import gc
    import weakref

    obj = Objective(tiny_model(), tiny_batches((7, 4)), dtype=torch.float64, regularizer=REGULARIZERS[1])
    op = HessianOperator(obj, mode="linearize")
    v = torch.randn(63, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    first = op.matvec(v)
    assert sorted(op._linear) == [0, 1]
    traced = [weakref.ref(fn) for fn in op._linear.values()]
    op.clear_cache()
    gc.collect()
    assert op._linear == {} and all(ref() is None for ref in traced)  # nothing else holds the traced products
    again = op.matvec(v)  # traced afresh, same numbers
    assert sorted(op._linear) == [0, 1]
    torch.testing.assert_close(again, first, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(again, dense_hessian(obj) @ v, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("names", [None, ["3.weight", "3.bias"]], ids=["all", "last-layer"])
def test_agrees_with_curvlinops_hessian_linear_operator(names):
    curvlinops = pytest.importorskip("curvlinops")
    model = tiny_model().double()
    batches = [(x.double(), y) for x, y in tiny_batches((9, 4))]  # unequal: the N_b / N weights matter
    obj = Objective(model, batches, dtype=torch.float64)
    ours = HessianOperator(obj, patterns=names, mode="jvp")
    named = dict(model.named_parameters())
    params = [named[n] for n in ours.names]
    theirs = curvlinops.HessianLinearOperator(model, nn.CrossEntropyLoss(reduction="mean"), params, batches)
    assert theirs.shape == ours.shape
    per_batch = [HessianOperator(obj, patterns=names, batches=[i], mode="jvp") for i in range(2)]
    g = torch.Generator().manual_seed(4)
    for _ in range(3):
        v = torch.randn(ours.shape[0], dtype=torch.float64, generator=g)
        want = theirs @ v
        torch.testing.assert_close(ours.matvec(v), want, rtol=1e-10, atol=1e-10 * float(want.abs().max()))
        equal = (per_batch[0].matvec(v) + per_batch[1].matvec(v)) / 2  # what an unweighted average would give
        assert float((equal - want).abs().max()) > 1e-3 * float(want.abs().max())


class TanhNoJvp(torch.autograd.Function):
    """tanh with a differentiable backward but no forward-mode rule: jvp(grad) cannot run, a graph can."""

    @staticmethod
    def forward(x):
        return torch.tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return g * (1 - t * t)


class TanhOnce(TanhNoJvp):
    """tanh whose backward cannot be differentiated: no way of making Hessian-vector products works."""

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return g * (1 - t * t)


class WithFunction(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.a, self.b, self.fn = nn.Linear(4, 5), nn.Linear(5, 3), fn

    def forward(self, x):
        return self.b(self.fn.apply(self.a(x)))


def test_auto_falls_back_to_a_way_the_model_allows_and_explicit_modes_fail_in_one_line():
    torch.manual_seed(0)
    obj = Objective(WithFunction(TanhNoJvp), tiny_batches((7, 4)), dtype=torch.float64)
    v = torch.randn(sum(p.numel() for p in obj.params.values()), dtype=torch.float64)
    auto = HessianOperator(obj, mode="auto")
    auto.plan_products(1)  # one product: jvp (which keeps nothing) is tried first, fails, and a graph makes it
    graph = HessianOperator(obj, mode="graph").matvec(v)
    torch.testing.assert_close(auto.matvec(v), graph, rtol=1e-13, atol=1e-14)
    choice = auto.hvp_choice()
    assert choice["failed"].get("jvp") == "NotImplementedError" and choice["ways"] == {"graph": 2}
    with pytest.raises(LandscapeError, match=r"--hvp jvp: this model's Hessian-vector products cannot be made"):
        HessianOperator(obj, mode="jvp").matvec(v)
    once = Objective(WithFunction(TanhOnce), tiny_batches((7, 4)), dtype=torch.float64)
    for mode in ("graph", "auto"):  # the products drop the backward's own derivative: not symmetric, refused
        with pytest.raises(LandscapeError, match=r"the operator is not symmetric .*once_differentiable"):
            lanczos(HessianOperator(once, mode=mode), k=2, which="LM", tol=1e-8, seed=0)
        with pytest.raises(LandscapeError, match=r"not symmetric"):
            spectral_density(HessianOperator(once, mode=mode), probes=1, steps=8, seed=0)
    A = torch.randn(30, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(LandscapeError, match="not symmetric"):  # any operator: a plain non-symmetric matrix
        lanczos(DenseOperator(A), k=2, seed=0)
    lanczos(DenseOperator(A + A.T), k=2, seed=0)  # and a symmetric one passes


def test_products_read_each_batch_when_needed_and_hold_none():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 2, 3), nn.Tanh(), nn.Flatten(), nn.Linear(2 * 16, 10)).double()
    source = TrackedBatches.synthetic(40, 6, 4)  # 10 batches
    obj = Objective(model, source, dtype=torch.float64)
    op = HessianOperator(obj, mode="jvp")
    before = len(source.alive)
    for _ in range(3):
        op.matvec(torch.ones(op.shape[0], dtype=torch.float64))
    assert len(source.alive) - before == 3 * 10 and source.most <= 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_advice_for_products_that_are_no_hessians_fits_the_operator(dtype):
    obj = Objective(WithFunction(TanhNoJvp), tiny_batches((7, 4)), dtype=dtype)
    wider = dtype != torch.float64
    for mode in ("graph", "jvp", "finite-difference"):
        op = HessianOperator(obj, mode=mode)
        assert ("--dtype float64" in op.remedy("non-finite")) == wider
        asymmetric = op.remedy("asymmetric")
        if mode == "finite-difference":
            assert "kinks" in asymmetric and ("--dtype float64" in asymmetric) == wider
        else:
            assert asymmetric.endswith("try --hvp " + ("finite-difference" if mode == "jvp" else "jvp"))
    once = Objective(WithFunction(TanhOnce), tiny_batches((7, 4)), dtype=dtype)
    with pytest.raises(LandscapeError, match=r"not symmetric .*drop terms; try --hvp jvp$"):
        lanczos(HessianOperator(once, mode="graph"), k=2, which="LM", tol=1e-8, seed=0)


def test_an_operator_without_advice_of_its_own_gets_the_generic_one():
    A = torch.randn(30, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(LandscapeError, match=r"not a Hessian's: a custom autograd function"):
        lanczos(DenseOperator(A), k=2, seed=0)

    class Advised(DenseOperator):
        def remedy(self, problem):
            return f"advice for {problem}"

    with pytest.raises(LandscapeError, match=r"not a Hessian's: advice for asymmetric$"):
        lanczos(Advised(A), k=2, seed=0)
    with pytest.raises(LandscapeError, match=r"\(advice for non-finite\)$"):
        lanczos(Advised(A * float("nan")), k=2, seed=0)
