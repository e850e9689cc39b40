"""The FSDP Lanczos on 2 ranks (gloo, CPU) against a dense float64 Hessian and against the same run on 1 rank."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from helpers import torchrun
from torch.func import functional_call, hessian

from landscape.analyses.hessian.fsdp import FSDPHessianOperator, is_fully_sharded
from landscape.errors import LandscapeError

SCRIPT = Path(__file__).with_name("fsdp_ranks.py")
_spec = importlib.util.spec_from_file_location("fsdp_ranks", SCRIPT)
ranks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ranks)


def dense_hessian():
    """``sum_b (N_b/N) d^2 CE_b / dw^2`` of the plain model by torch.func.hessian, flat in named_parameters order."""
    model, batches = ranks.make_model(), ranks.make_batches()
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    total = sum(int(y.shape[0]) for _, y in batches)

    def loss(w):
        params, at = {}, 0
        for name, shape in zip(names, shapes):
            params[name] = w[at : at + shape.numel()].reshape(shape)
            at += shape.numel()
        return sum(
            (y.shape[0] / total) * torch.nn.functional.cross_entropy(functional_call(model, params, (x,)), y)
            for x, y in batches
        )

    return hessian(loss)(flat)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp") / "ranks.json"
    proc = torchrun(SCRIPT, out, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_two_sharded_ranks_find_the_dense_top_eigenvalues_and_agree_with_one_rank(runs):
    H = dense_hessian()
    exact = torch.linalg.eigvalsh(H)[-ranks.K :]
    for rank in runs:
        two = torch.tensor(rank["two"]["eigenvalues"], dtype=torch.float64)
        one = torch.tensor(rank["one"]["eigenvalues"], dtype=torch.float64)
        assert all(rank["two"]["converged"]) and all(rank["one"]["converged"])
        assert torch.allclose(two, exact, rtol=1e-6, atol=0), (two, exact)
        assert torch.allclose(two, one, rtol=1e-8, atol=0), (two, one)
    assert runs[0]["two"]["eigenvalues"] == runs[1]["two"]["eigenvalues"]  # every rank the same numbers


@pytest.mark.slow
def test_each_rank_holds_only_its_shard_of_every_lanczos_vector(runs):
    n = sum(p.numel() for p in ranks.make_model().parameters())
    lengths = [rank["two"]["local_length"] for rank in runs]
    assert sum(lengths) == n and max(lengths) < n
    for rank in runs:
        assert rank["two"]["vector_lengths"] == [rank["two"]["local_length"]]  # every product: the shard only
        assert rank["one"]["vector_lengths"] == [n]
        assert len(rank["two"]["eigenvectors"][0]) == rank["two"]["local_length"]
        assert rank["two"]["restored"] and rank["two"]["grads_none"]  # w back bit for bit, no gradient left


@pytest.mark.slow
def test_the_shards_put_together_are_the_dense_eigenvectors(runs):
    H = dense_hessian()
    _, vectors = torch.linalg.eigh(H)
    whole = torch.zeros(H.shape[0], ranks.K, dtype=torch.float64)
    for rank in runs:
        part, at = torch.tensor(rank["two"]["eigenvectors"], dtype=torch.float64).T, 0
        for start, stop in rank["two"]["ranges"]:
            whole[start:stop] = part[at : at + stop - start]
            at += stop - start
    for j in range(ranks.K):
        cosine = abs(float(whole[:, j] @ vectors[:, -ranks.K + j]))
        assert cosine == pytest.approx(1.0, abs=1e-6)


@pytest.mark.slow
def test_landscape_hessian_refuses_a_sharded_model_and_names_the_function(runs):
    assert "fsdp_lanczos" in runs[0]["refused"] and "\n" not in runs[0]["refused"]


def test_a_plain_model_is_not_sharded_and_the_operator_refuses_it():
    model = ranks.make_model()
    assert not is_fully_sharded(model)
    with pytest.raises(LandscapeError, match="not wrapped with fully_shard"):
        FSDPHessianOperator(model, ranks.make_batches())
