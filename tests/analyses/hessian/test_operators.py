"""The operators by name: the factory, eigenpairs' dispatch, and the issue's check through landscape.hessian."""

import numpy as np
import pytest
import torch

import landscape
from analyses.hessian.references import dense_empirical_fisher, dense_ggn
from analyses.hessian.test_ggn import mlp, objective, trained
from analyses.hessian.test_operator import dense_hessian, tiny_batches
from landscape.analyses.hessian.operators import OPERATOR_CLASSES, curvature_operator, eigen_method
from landscape.errors import LandscapeError
from landscape.options.hessian import OPERATORS


def test_every_operator_of_the_options_has_a_class_that_names_itself():
    assert tuple(OPERATOR_CLASSES) == OPERATORS
    obj = objective()
    for name in OPERATORS:
        op = curvature_operator(obj, name, patterns="2.*", batches=[0, 2])
        assert op.operator == name and op.hvp_choice()["operator"] == name and op.names == ["2.weight", "2.bias"]
        assert eigen_method(op) == ("kronecker" if name == "kfac" else "lanczos")
    with pytest.raises(LandscapeError, match="--operator"):
        curvature_operator(obj, "fisher")
    with pytest.raises(LandscapeError, match="drop --hvp"):
        curvature_operator(obj, "empirical-fisher", mode="jvp")


def test_landscape_hessian_takes_the_operator_and_meets_the_issues_check():
    """On a float64 MLP: top-3 of ggn and empirical-fisher equal a dense reference to 1e-6, and the residual's most
    negative eigenvalue equals the dense H - G's."""
    model = trained(mlp(), tiny_batches())
    batches = [(x.double(), y) for x, y in tiny_batches()]
    obj = objective(model)
    dense = {"ggn": dense_ggn(obj), "empirical-fisher": dense_empirical_fisher(obj)}
    common = {"samples": 16, "batch_size": 7, "dtype": "float64", "tol": 1e-10, "device": "cpu", "progress": False}
    for name, matrix in dense.items():
        res = landscape.hessian(model, batches, operator=name, top_k=3, **common)
        assert res.attrs["operator"] == name and res["converged"].all()
        np.testing.assert_allclose(res["eigenvalues"], torch.linalg.eigvalsh(matrix)[-3:].numpy(), rtol=1e-6)
    res = landscape.hessian(model, batches, operator="residual", top_k=1, which="SA", **common)
    want = torch.linalg.eigvalsh(dense_hessian(obj) - dense["ggn"])[0]
    assert res["eigenvalues"][0] == pytest.approx(float(want), rel=1e-6) and want < 0
    with pytest.raises(LandscapeError, match="the kfac operator takes no second .*: drop hvp="):
        landscape.hessian(model, batches, operator="kfac", hvp="graph", **common)
