"""The FSDP Lanczos on 2 ranks (gloo, CPU) against a dense float64 Hessian, the same run on 1 rank, and a float32
ViT's exact products; the refusals of a ReLU network and of a bfloat16 ``param_dtype``, in Python's words."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from helpers import torchrun
from torch.func import functional_call, hessian

from landscape.analyses.hessian.fsdp import FSDPHessianOperator, is_fully_sharded
from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.operator import HessianOperator
from landscape.core.objective import Objective
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


@pytest.mark.slow
def test_a_float32_vit_on_two_sharded_ranks_has_the_top_eigenvalues_of_its_exact_products(runs):
    model, images = ranks.make_vit(), ranks.make_images()
    exact = lanczos(HessianOperator(Objective(model, images, dtype=torch.float64), mode="graph"), k=ranks.K, tol=1e-10)
    float32 = lanczos(HessianOperator(Objective(model, images), mode="graph"), k=ranks.K, tol=1e-6, seed=0)
    for rank in runs:
        found = torch.tensor(rank["vit"]["eigenvalues"], dtype=torch.float64)
        assert all(rank["vit"]["converged"])
        torch.testing.assert_close(found, exact.eigenvalues, rtol=1e-4, atol=0)  # measured: 1.6e-5 at most
        torch.testing.assert_close(found, float32.eigenvalues, rtol=1e-4, atol=0)
        step = rank["vit"]["finite_difference"]
        assert step["lattice"] == "float32" and step["asymptotic"] and step["estimated_error"] < 1e-3
        assert step["gradients_total"] / rank["vit"]["n_matvec"] <= 2.2  # its probe's product is Lanczos' first
        assert rank["vit"]["symmetry_defect"] < 1e-3
    assert runs[0]["vit"] == runs[1]["vit"]


@pytest.mark.slow
def test_fsdp_lanczos_refuses_kinks_and_a_bfloat16_forward_in_python_words(runs):
    kinks, rounding = runs[0]["kinks"], runs[0]["bfloat16"]
    for message in (kinks, rounding):
        assert message.startswith("fsdp_lanczos: ") and "\n" not in message and "--" not in message
    assert "kinks of the model's piecewise-linear relu" in kinks
    assert "landscape.hessian(model, data, hvp='graph')" in kinks
    assert "model.double()" in kinks and "GELU in place of ReLU" in kinks
    assert "runs in bfloat16" in rounding and "MixedPrecisionPolicy with param_dtype=torch.float32" in rounding


def test_a_plain_model_is_not_sharded_and_the_operator_refuses_it():
    model = ranks.make_model()
    assert not is_fully_sharded(model)
    with pytest.raises(LandscapeError, match="not wrapped with fully_shard"):
        FSDPHessianOperator(model, ranks.make_batches())


FRONT_DOOR = """
import json, sys, tempfile
import torch
import torch.distributed as dist
sys.path.insert(0, {here!r})
import fsdp_ranks as ranks
from landscape.analyses.hessian.fsdp import fsdp_lanczos, fully_shard_model
from landscape.errors import LandscapeError

torch.set_num_threads(1)
dist.init_process_group("gloo", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1)
model = fully_shard_model(ranks.make_model())
good = ranks.make_batches()
x, y = good[0]
cases = {{
    "labels out of range": [(x, y + 5)],
    "images of two dtypes": [good[0], (good[1][0].float(), good[1][1])],
    "images of another dtype than the model": [(x.float(), y)],
    "labels of two forms": [good[0], (good[1][0], torch.full((4, 3), 1 / 3, dtype=torch.float64))],
    "int32 labels": [(b, t.int()) for b, t in good],
    "int64 labels": good,
}}
out = {{}}
for name, batches in cases.items():
    try:
        out[name] = fsdp_lanczos(model, batches, k=2, tol=1e-8).eigenvalues.tolist()
    except LandscapeError as exc:
        out[name] = "Error: " + str(exc)
with torch.no_grad():
    next(model.parameters()).to_local().view(-1)[0] = float("nan")
try:
    fsdp_lanczos(model, good, k=2, tol=1e-8)
except LandscapeError as exc:
    out["nan weight"] = "Error: " + str(exc)
print(json.dumps(out))
dist.destroy_process_group()
"""


def test_fsdp_lanczos_checks_its_batches_as_the_front_door_does():
    import subprocess
    import sys

    script = FRONT_DOOR.format(here=str(SCRIPT.parent))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["labels out of range"].startswith("Error: the data has labels 5..")
    assert "outputs 3 classes" in out["labels out of range"]
    assert out["images of two dtypes"].startswith("Error: batch 1 has torch.float32 images but batch 0 has")
    assert out["images of another dtype than the model"].startswith(
        "Error: the batches hold torch.float32 images but the model's parameters are torch.float64"
    )
    assert out["labels of two forms"].startswith("Error: batch 1 has labels of distributions over 3 classes")
    assert out["int32 labels"] == out["int64 labels"] and len(out["int64 labels"]) == 2
    assert out["nan weight"].startswith("Error: the Hessian-vector product returned non-finite values")
    assert "a NaN weight, or a loss that overflows in float64)" in out["nan weight"]  # float64 already
    assert all("\n" not in v and "--" not in v for v in out.values() if isinstance(v, str))  # no flags: Python
