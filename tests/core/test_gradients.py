import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from landscape.core.gradients import gradient_of, under_transform, value_and_gradient


def problem():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    unused = nn.Parameter(torch.ones(2))
    params = {n: p.detach() for n, p in model.named_parameters()} | {"unused": unused.detach()}
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))

    def loss(p):
        state = {n: t for n, t in p.items() if n != "unused"}
        return nn.functional.cross_entropy(functional_call(model, state, (x,)), y)

    return loss, params


def test_the_plain_route_gives_torch_funcs_values_and_leaves_the_point_alone():
    loss, params = problem()
    want_g, want_value = grad_and_value(loss)(params)
    with torch.no_grad():  # a caller's no_grad does not stop the gradient
        got_g, got_value = value_and_gradient(loss, params)
    assert not under_transform()
    assert torch.equal(got_value, want_value) and not got_value.requires_grad
    for n in params:
        torch.testing.assert_close(got_g[n], want_g[n], rtol=0, atol=0)
        assert not params[n].requires_grad
    assert torch.equal(got_g["unused"], torch.zeros(2))  # a parameter the loss does not read: zeros
    torch.testing.assert_close(gradient_of(loss)(params)["0.weight"], want_g["0.weight"], rtol=0, atol=0)


def test_inside_a_transform_it_composes():
    loss, params = problem()
    shifts = torch.linspace(-0.5, 0.5, 3)

    def at(shift):
        return value_and_gradient(loss, {n: t + shift for n, t in params.items()})[0]["2.weight"]

    def inside(shift):
        assert under_transform()
        return at(shift)

    batched = vmap(inside)(shifts)
    for i, s in enumerate(shifts):
        want = grad_and_value(loss)({n: t + s for n, t in params.items()})[0]["2.weight"]
        torch.testing.assert_close(batched[i], want, rtol=1e-6, atol=1e-7)
    # a second derivative through it: d/ds of sum(grad L(params + s)) by torch.func against a finite difference
    second = torch.func.grad(lambda s: inside(s).sum())(torch.tensor(0.1))
    h = 1e-3
    fd = (at(torch.tensor(0.1 + h)).sum() - at(torch.tensor(0.1 - h)).sum()) / (2 * h)
    torch.testing.assert_close(second, fd, rtol=1e-2, atol=1e-4)
