"""Principal angles, spectral and Frobenius distances against closed forms and dense matrices."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from landscape.analyses.curvature.distances import (
    DifferenceOperator,
    frobenius_distance,
    hessian_probes,
    principal_angles,
    rounding_distance,
    spectral_norm,
)
from landscape.analyses.hessian.linalg import DenseOperator


class Dense(DenseOperator):
    """A dense symmetric matrix with the names the distances compare (one parameter)."""

    names = ["w"]


def symmetric(n, seed, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    return (a + a.T) / 2 + shift * torch.eye(n, dtype=torch.float64)


def test_principal_angles_are_scipys_and_a_rotation_by_a_known_angle():
    g = torch.Generator().manual_seed(0)
    U, V = torch.randn(20, 3, generator=g, dtype=torch.float64), torch.randn(20, 3, generator=g, dtype=torch.float64)
    want = np.sort(scipy.linalg.subspace_angles(U.numpy(), V.numpy()))
    np.testing.assert_allclose(principal_angles(U, V).numpy(), want, atol=1e-12)
    e = torch.eye(4, dtype=torch.float64)
    turned = torch.stack([e[0], math.cos(0.3) * e[1] + math.sin(0.3) * e[2]], dim=1)
    np.testing.assert_allclose(principal_angles(e[:, :2], turned).numpy(), [0.0, 0.3], atol=1e-12)


def test_the_spectral_norm_of_a_difference_is_its_largest_magnitude():
    H, A = Dense(symmetric(30, 1)), Dense(symmetric(30, 2, shift=-3.0))
    got = spectral_norm(DifferenceOperator(H, A), tol=1e-10, seed=0)
    want = torch.linalg.eigvalsh(H.matrix - A.matrix).abs().max()
    assert got.converged and got.value == pytest.approx(float(want), rel=1e-9)
    with pytest.raises(ValueError, match="different parameters"):
        other = Dense(symmetric(30, 3))
        other.names = ["v"]
        DifferenceOperator(H, other)


def test_the_frobenius_distance_is_unbiased_within_its_standard_error():
    H, A = Dense(symmetric(40, 4)), Dense(symmetric(40, 5) * 0.3)
    want = float(torch.linalg.matrix_norm(H.matrix - A.matrix) / torch.linalg.matrix_norm(H.matrix))
    estimates = []
    for seed in range(30):
        probes = hessian_probes(H, 50, seed)
        got = frobenius_distance(probes, A)
        estimates.append((got.relative, got.stderr))
        assert probes.norm == pytest.approx(float(torch.linalg.matrix_norm(H.matrix)), rel=0.25)
    values, errors = np.array(estimates).T
    assert abs(values.mean() - want) < 3 * values.std() / np.sqrt(len(values))  # unbiased to first order
    assert np.median(errors) == pytest.approx(values.std(), rel=0.4)  # the delta method's error is the spread
    assert frobenius_distance(hessian_probes(H, 10, 0), H).relative == 0.0
    assert rounding_distance(torch.float32) == pytest.approx(3.45e-3, rel=0.01)
    assert rounding_distance(torch.float64) == pytest.approx(1.49e-7, rel=0.01)
