"""Run under ``torchrun --nproc_per_node 2``: the FSDP Lanczos on 2 ranks and on 1 rank (a 1-rank sub-mesh).

Writes, from rank 0, a JSON file (the path given as the only argument) that ``test_fsdp.py`` compares with
dense references. ``make_model`` and ``make_batches`` are imported by the test too.
"""

import json
import sys

import torch
from torch import nn

N_IN, N_HIDDEN, N_OUT, SIZES, K = 5, 7, 3, (4, 4, 3), 3


def make_model() -> nn.Module:
    """A float64 tanh MLP (smooth, so central differences are accurate) with seeded Gaussian weights."""
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(N_IN, N_HIDDEN), nn.Tanh(), nn.Linear(N_HIDDEN, N_OUT)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return model.eval()


def make_batches() -> list:
    """Three batches of unequal sizes (so the weights N_b/N differ and rank 1 runs one pass with weight 0)."""
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(s, N_IN, generator=gen, dtype=torch.float64), torch.randint(0, N_OUT, (s,), generator=gen))
        for s in SIZES
    ]


def solve(model: nn.Module, batches: list) -> dict:
    """The top-K pairs by fsdp_lanczos; the lengths of the vectors the operator was given; w and grads after."""
    from landscape.analyses.hessian.fsdp import FSDPHessianOperator, fsdp_lanczos

    seen = []
    matvec = FSDPHessianOperator.matvec

    def spy(self, v):
        seen.append(int(v.numel()))
        return matvec(self, v)

    before = [p.to_local().clone() for p in model.parameters()]
    FSDPHessianOperator.matvec = spy
    try:
        res = fsdp_lanczos(model, batches, k=K, tol=1e-8, return_eigenvectors=True)
    finally:
        FSDPHessianOperator.matvec = matvec
    op = FSDPHessianOperator(model, batches)
    return {
        "eigenvalues": res.eigenvalues.tolist(),
        "converged": res.converged.tolist(),
        "vector_lengths": sorted(set(seen)),
        "local_length": op.inner.length,
        "ranges": op.inner.ranges,
        "n": op.shape[0],
        "eigenvectors": res.eigenvectors.T.tolist(),
        "restored": all(torch.equal(a, p.to_local()) for a, p in zip(before, model.parameters())),
        "grads_none": all(p.grad is None for p in model.parameters()),
    }


def main(out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import landscape
    from landscape.analyses.hessian.fsdp import fully_shard_model
    from landscape.errors import LandscapeError

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    batches = make_batches()
    two = solve(fully_shard_model(make_model()), batches)
    solo = init_device_mesh("cpu", (dist.get_world_size(), 1), mesh_dim_names=("ranks", "solo"))["solo"]
    one = solve(fully_shard_model(make_model(), mesh=solo), batches)  # each rank alone: world 1
    try:
        landscape.hessian(fully_shard_model(make_model()), batches, top_k=1, hvp="finite-difference")
        refused = ""
    except LandscapeError as exc:
        refused = str(exc)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, {"two": two, "one": one, "refused": refused})
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(everyone, f)
    dist.barrier()  # no rank tears its groups down while another still talks in them
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
