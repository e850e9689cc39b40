"""The ways one batch's Hessian-vector products can be made, what each costs, and the measured choice.

For a batch loss ``L_b`` at a point ``theta`` the product ``v -> H_b v`` is made one of three ways:

- ``jvp``: ``jvp(grad(L_b))(theta; v)``, forward over reverse, from scratch each time; keeps nothing.
- ``graph``: ``g = grad(L_b)`` built once with ``create_graph=True``, then each product is one backward pass
  through it, ``d(g . v)/d theta`` (reverse over reverse); the setup costs about one gradient and the batch's
  double graph stays in memory.
- ``linearize``: ``torch.func.linearize`` of ``grad(L_b)``; the setup is a trace (tens to hundreds of
  gradients' time) and each product runs the traced linear map.
- ``finite-difference``: the central difference of two gradients,
  ``H_b v ~ (grad L_b(theta + eps v) - grad L_b(theta - eps v)) / (2 eps)`` with ``eps = h / ||v||``
  (:func:`central_difference`), ``h`` chosen once per point from the truncation and rounding errors measured there
  (:mod:`~landscape.analyses.hessian.steps`): two first-order gradients, no second derivative of any operation, so
  it works for a model whose operations have no double backward; it is approximate (its predicted error is
  recorded) and never chosen by ``auto``.

What each costs depends on the model, the batch size and the device (``python benchmarks/hessian.py`` prints
them), so ``auto`` measures: before every product the way with the least expected time for the products still
to come, ``setup + left * per_product``, is taken (:func:`cheapest`). Ways not yet measured are estimated from
what has been, by fixed ratios to a ``jvp`` product (:meth:`ProductCosts.estimates`; with nothing measured the
ratios alone decide); a way that is taken is timed, so the estimate is replaced by a measurement. No product
is made only to be measured: every measured product is one the caller asked for. So a batch that keeps a graph
starts with it (its setup is a fraction of one gradient) and ``jvp``, which redoes the gradient's work in
every product, is measured only when it is taken: for a single product, when a graph cannot be made, or when
the measurements say it is cheaper. Batches of one shape share one :class:`ProductCosts`, so later batches
decide from the first one's measurements.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.func import grad, jvp, linearize

from landscape.analyses.hessian.steps import StepChoice, full_float32
from landscape.core.gradients import gradient_of
from landscape.core.params import ParamDict
from landscape.errors import LandscapeError
from landscape.runtime.devices import fastest

#: the ways a product can be made (``auto`` chooses among them)
WAYS = ("jvp", "graph", "linearize")
#: the approximate way, by the central difference of two gradients (chosen only by name, never by ``auto``)
FINITE_DIFFERENCE = "finite-difference"
#: before a graph is measured: its setup and product as fractions of a ``jvp`` product (a gradient with
#: ``create_graph`` is about a quarter of a jvp product, a backward through it about 0.7: benchmarks/hessian.py);
#: the product ratio also infers a jvp product from a measured graph product (:meth:`ProductCosts.estimates`)
GRAPH_SETUP_GUESS, GRAPH_PRODUCT_GUESS = 0.3, 0.7
#: before a trace is measured: its setup in units of a measured graph setup, and its product as a fraction of a
#: measured graph product (benchmarks/hessian.py: 22 setups and 0.69 at batch 128; 140 setups at batch 16)
TRACE_SETUP_GUESS, TRACE_PRODUCT_GUESS = 25.0, 0.7


def quiet_jvp(fn: Callable[[ParamDict], ParamDict], params: ParamDict, v: ParamDict) -> ParamDict:
    """``jvp(fn, params, v)``'s tangent (for ``fn = grad(L)``: ``H v``), without torch's jit deprecation warning.

    Args:
        fn: the function of a params dict.
        params: the point.
        v: the tangent, by parameter name.

    Returns:
        The tangent of ``fn``'s output.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=FutureWarning)
        return jvp(fn, (params,), (v,))[1]


def central_difference(
    gradient: Callable[[ParamDict], ParamDict], params: ParamDict, v: Mapping[str, Tensor], length: float
) -> ParamDict:
    """``H v ~ (g(theta + eps v) - g(theta - eps v)) / (2 eps)`` with ``eps = length / ||v||``, ``g`` the gradient.

    Only first derivatives are taken, so it needs no double backward (and it runs inside ``vmap``: ``eps`` is a
    tensor). A zero ``v`` gives zero.

    Args:
        gradient: ``theta -> grad L(theta)`` by parameter name.
        params: the point ``theta``.
        v: the vector by parameter name.
        length: the length ``h`` of the displacement ``eps v`` (:func:`~landscape.analyses.hessian.steps.choose_step`).

    Returns:
        The central-difference approximation of ``H v`` by parameter name.
    """
    norm = torch.sqrt(sum((t.double() ** 2).sum() for t in v.values()))
    eps = length / torch.clamp(norm, min=torch.finfo(torch.float64).tiny)
    plus = gradient({n: t + (eps * v[n]).to(t.dtype) for n, t in params.items()})
    minus = gradient({n: t - (eps * v[n]).to(t.dtype) for n, t in params.items()})
    return {n: ((plus[n] - minus[n]) / (2 * eps)).to(params[n].dtype) for n in params}


def cheapest(left: float, options: Mapping[str, tuple[float, float]]) -> str:
    """The way with the least expected time ``setup + left * per_product`` for ``left`` more products.

    Args:
        left: the number of products still to come, this one included (at least 1 is assumed).
        options: ``way -> (setup seconds, seconds per product)``; setups already paid are 0.

    Returns:
        The cheapest way (the first listed among equals).
    """
    left = max(float(left), 1.0)
    return min(options, key=lambda way: options[way][0] + left * options[way][1])


@dataclass
class ProductCosts:
    """Seconds measured for each way of making products on batches of one shape.

    Attributes:
        seconds: ``name -> measurements``; names ``jvp``, ``graph`` and ``linearize`` (per product after the
            first), ``graph_setup`` and ``linearize_setup`` (building the graph, tracing) and ``graph_first`` and
            ``linearize_first`` (the first product after a setup).
        failed: ways that raised when tried (``way -> exception type name``); never tried again.
        step: the choice of the central differences' step at the point
            (:class:`~landscape.analyses.hessian.steps.StepChoice`) when products are made by ``finite-difference``,
            else None; operators on batches of one shape at one point share it.
    """

    seconds: dict[str, list[float]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    step: StepChoice | None = None

    def add(self, name: str, value: float) -> None:
        """Record one measurement of ``name``."""
        self.seconds.setdefault(name, []).append(float(value))

    def fastest(self, name: str) -> float | None:
        """The least of ``name``'s measurements (a load spike or a first call's warm-up only adds), or None."""
        values = self.seconds.get(name)
        return min(values) if values else None

    def estimates(self, *, cached: bool) -> dict[str, tuple[float, float]]:
        """``way -> (setup, per product)`` in seconds: measured where measured, else estimated from what is.

        The unit of the estimates is a ``jvp`` product ``J``: measured, else ``P / GRAPH_PRODUCT_GUESS`` from a
        measured graph product ``P`` (a later one, else the first), else 1 (nothing measured: only the ratios
        decide). Unmeasured, a graph costs ``(GRAPH_SETUP_GUESS J, GRAPH_PRODUCT_GUESS J)`` and a trace
        ``(TRACE_SETUP_GUESS S, TRACE_PRODUCT_GUESS P)`` for the graph's setup ``S`` and product ``P``. Without a
        cache (``cached=False``: the batch may keep nothing) a graph is built for every product, so its setup is
        added to its per-product time and linearize is not offered. Ways that failed are left out.

        Args:
            cached: whether the batch may keep a graph or a trace between products.

        Returns:
            The options for :func:`cheapest`, in the order of :data:`WAYS`.
        """
        t_jvp, measured_graph = self.fastest("jvp"), self.fastest("graph")
        if measured_graph is None:
            measured_graph = self.fastest("graph_first")
        if t_jvp is None:
            t_jvp = 1.0 if measured_graph is None else measured_graph / GRAPH_PRODUCT_GUESS
        out = {"jvp": (0.0, t_jvp)}
        g_setup, g_prod = self._measured("graph", GRAPH_SETUP_GUESS * t_jvp, GRAPH_PRODUCT_GUESS * t_jvp)
        out["graph"] = (g_setup, g_prod) if cached else (0.0, g_setup + g_prod)
        if cached:
            out["linearize"] = self._measured("linearize", TRACE_SETUP_GUESS * g_setup, TRACE_PRODUCT_GUESS * g_prod)
        return {way: cost for way, cost in out.items() if way not in self.failed}

    def _measured(self, way: str, setup_guess: float, product_guess: float) -> tuple[float, float]:
        """``(setup, per product)`` of ``way``: the setup includes what its first product costs beyond a later one."""
        product = self.fastest(way)
        setup, first = self.fastest(f"{way}_setup"), self.fastest(f"{way}_first")
        if setup is None or first is None:
            return setup_guess, product_guess if product is None else product
        if product is None:  # only the first product is known: it is also the best guess of a later one
            return setup, first
        return setup + max(first - product, 0.0), product

    def summary(self) -> dict[str, object]:
        """The fastest times measured, the ways that failed, and the central differences' step and errors.

        Returns:
            ``{"seconds", "failed"}``, with ``finite_difference_step`` (the step's length) and ``finite_difference``
            (:meth:`~landscape.analyses.hessian.steps.StepChoice.summary`) once a step was chosen.
        """
        out: dict[str, object] = {
            "seconds": {name: round(float(self.fastest(name) or 0.0), 6) for name in sorted(self.seconds)},
            "failed": dict(self.failed),
        }
        if self.step is not None:
            out["finite_difference_step"] = self.step.step
            out["finite_difference"] = self.step.summary()
        return out


class BatchProducts:
    """Products ``v -> H_b v`` of one batch, made the way its mode says (``auto``: the measured cheapest).

    Args:
        loss: ``sub -> L_b`` for a dict of the selected parameters (the others held fixed inside).
        params: the evaluation point of the selected parameters.
        mode: ``auto``, ``jvp``, ``graph``, ``linearize`` or ``finite-difference``.
        costs: the measurements shared with other batches of the same shape (``auto``).
        cached: whether this batch may keep a graph or a trace between products (memory).

    Attributes:
        way: the way the last product was made (None before the first).
        cache: the kept product function (a graph or a trace), or None.
    """

    def __init__(
        self,
        loss: Callable[[ParamDict], Tensor],
        params: ParamDict,
        mode: str,
        costs: ProductCosts,
        *,
        cached: bool,
    ) -> None:
        self.loss = loss
        self.params = params
        self.mode = mode
        self.costs = costs
        self.cached = cached
        self.way: str | None = None
        self.cache: Callable[[ParamDict], ParamDict] | None = None
        self._cache_way: str | None = None
        self._device = next(iter(params.values())).device

    def __call__(self, v: ParamDict, left: float) -> ParamDict:
        """``H_b v`` for a dict ``v`` of the selected parameters; ``left``: products expected, this one included.

        Args:
            v: the vector by parameter name.
            left: how many more products the caller expects (for ``auto``'s choice).

        Returns:
            ``H_b v`` by parameter name.
        """
        way = self.mode if self.mode != "auto" else self._choose(left)
        try:
            return self._product(way, v)
        except (RuntimeError, NotImplementedError) as exc:  # the model's ops lack this derivative, or no memory
            if self.mode != "auto":
                raise _unusable(way, exc) from None
            self.costs.failed[way] = type(exc).__name__
            self.drop()
            if all(w in self.costs.failed for w in WAYS):  # every way failed: the last failure says why
                raise _unusable(way, exc) from None
        return self(v, left)  # auto: the next way that has not failed

    def _product(self, way: str, v: ParamDict) -> ParamDict:
        if way == FINITE_DIFFERENCE:
            if self.costs.step is None:
                raise RuntimeError("a central difference before its step was chosen (HessianOperator chooses it)")
            self.way = way
            with full_float32(self._device):
                return central_difference(gradient_of(self.loss), self.params, v, self.costs.step.step)
        if way == "jvp":
            self.drop()
            out = self._timed("jvp", lambda: self._jvp(v))
            self.way = way
            return out
        if way == self._cache_way and self.cache is not None:
            self.way = way
            fn = self.cache
            return self._timed(way, lambda: fn(v)) if self.mode == "auto" else fn(v)
        fn = self._timed(f"{way}_setup", lambda: self._setup(way))
        out = self._timed(f"{way}_first", lambda: fn(v))  # a trace's first call does one-time work
        if way == "linearize":
            _check_replayed(fn, v, out)
        self.way = way
        if self.cached or self.mode != "auto":
            self.cache, self._cache_way = fn, way
        return out

    def _choose(self, left: float) -> str:
        options = self.costs.estimates(cached=self.cached)
        if not options:  # only a trace is left and this batch may not keep one: it is traced for this product
            return next(w for w in WAYS if w not in self.costs.failed)
        if self._cache_way in options and self.cache is not None:
            options[self._cache_way] = (0.0, options[self._cache_way][1])
        return cheapest(left, options)

    def _timed(self, name: str, fn: Callable[[], object]):  # noqa: ANN202
        if self.mode != "auto" or (name in self.costs.seconds and len(self.costs.seconds[name]) >= 3):
            return fn()
        seconds, out = fastest(fn, self._device, repeats=1)
        self.costs.add(name, seconds)
        return out

    def drop(self) -> None:
        """Forget the kept graph or trace (its memory is freed once nothing else holds it)."""
        self.cache, self._cache_way = None, None

    def _jvp(self, v: ParamDict) -> ParamDict:
        return quiet_jvp(grad(self.loss), self.params, v)

    def _setup(self, way: str) -> Callable[[ParamDict], ParamDict]:
        if way == "linearize":
            with warnings.catch_warnings():  # fx const-folding chatter, harmless
                warnings.simplefilter("ignore")
                return linearize(grad(self.loss), self.params)[1]
        return _graph_products(self.loss, self.params)


def _check_replayed(fn: Callable[[ParamDict], ParamDict], v: ParamDict, first: ParamDict) -> None:
    """Refuse a linearize trace whose second call differs from its first (the first product made again).

    ``torch.func.linearize`` folds the parts of the traced function that do not depend on the parameters into
    constants and replays the rest on every call; an in-place operation on such a part (a batch normalised in
    place when it is read, a table built in place in a model's forward) then rewrites the constant at every
    call, and every product after the first is wrong. A stable trace gives the same product bit for bit.

    Raises:
        RuntimeError: the two calls differ (``auto`` then takes another way; ``--hvp linearize`` says why).
    """
    again = fn(v)
    if any(not torch.equal(first[n], again[n]) for n in first):
        raise RuntimeError(
            "its trace gives another product when called again (an in-place operation on a tensor that does not "
            "depend on the parameters, which the trace keeps as a constant)"
        )


def _unusable(way: str, exc: BaseException) -> LandscapeError:
    """The one-line error for a way of making products that this model (or this device's memory) does not allow."""
    if isinstance(exc, torch.OutOfMemoryError):
        return LandscapeError(
            f"--hvp {way}: out of memory keeping each batch's {'graph' if way == 'graph' else 'trace'}; "
            "use --hvp auto or jvp, or fewer samples per batch"
        )
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return LandscapeError(
        f"--hvp {way}: this model's Hessian-vector products cannot be made this way ({type(exc).__name__}: "
        f"{detail}); use --hvp auto (it tries the others)"
    )


def _graph_products(loss: Callable[[ParamDict], Tensor], params: ParamDict) -> Callable[[ParamDict], ParamDict]:
    """``v -> H v`` by backward passes through ``grad(loss)`` built once with ``create_graph=True``."""
    names = list(params)
    leaves = [params[n].detach().requires_grad_(True) for n in names]
    with torch.enable_grad():
        grads = torch.autograd.grad(
            loss(dict(zip(names, leaves))), leaves, create_graph=True, allow_unused=True, materialize_grads=True
        )
    live = [i for i, g in enumerate(grads) if g.requires_grad]  # a gradient constant in theta has no Hessian rows

    def product(v: Mapping[str, Tensor]) -> ParamDict:
        if not live:
            return {n: torch.zeros_like(params[n]) for n in names}
        with torch.enable_grad():
            out = torch.autograd.grad(
                [grads[i] for i in live],
                leaves,
                [v[names[i]] for i in live],
                retain_graph=True,
                allow_unused=True,
                materialize_grads=True,
            )
        return dict(zip(names, out))

    return product
