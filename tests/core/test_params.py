"""landscape.core.params.vector_norm against float64 sums, where torch's float32 norm loses digits."""

import torch

from landscape.core.params import flat_dot, project, vector_norm


def test_a_float32_norm_of_millions_of_entries_is_the_float64_sum_rounded_once():
    n = 4_000_000
    x = torch.full((n,), n**-0.5, dtype=torch.float32)  # unit length; torch's float32 vector_norm gives 1.003
    assert vector_norm(x).dtype == torch.float32
    assert abs(float(vector_norm(x)) - float(x.double().norm())) <= 6e-8
    rows = x.reshape(4, -1)
    torch.testing.assert_close(vector_norm(rows, dim=1).double(), rows.double().norm(dim=1), rtol=1e-7, atol=0)
    exact = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert float(vector_norm(exact)) == 5.0 and vector_norm(exact).dtype == torch.float64


def test_float32_products_of_millions_of_entries_keep_the_float64_sum():
    n = 3_000_001  # not a whole number of blocks
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, generator=gen).abs() * 1e-3
    a[:3] = 100.0  # large terms first: a float32 accumulator then drops the small ones (BLAS: 1e-4 of the scale)
    basis = torch.randn(3, n, generator=gen).abs().T  # columns contiguous, as a Lanczos basis stores them
    basis[:3, 0] = 100.0
    exact = basis.double().T @ a.double()
    scale = basis.double().norm(dim=0) * a.double().norm()
    assert float((flat_dot(basis[:, 0], a).double() - exact[0]).abs() / scale[0]) < 1e-6
    coefficients = project(basis, a)
    assert coefficients.dtype == torch.float32
    assert float(((coefficients.double() - exact).abs() / scale).max()) < 1e-6
    rows = basis.contiguous()  # a row-major matrix: BLAS sums in another order, as accurately
    assert float(((project(rows, a).double() - exact).abs() / scale).max()) < 1e-6
