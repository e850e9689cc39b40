"""Run under ``torchrun --nproc_per_node 2``: the FSDP Lanczos on 2 ranks and on 1 rank (a 1-rank sub-mesh).

A float64 tanh MLP (the sharding, against a dense Hessian), a float32 ViT (the step measured on the shards, against
exact products), and the refusals of a ReLU network and of a bfloat16 ``param_dtype``. Writes, from rank 0, a JSON
file (the path given as the only argument) that ``test_fsdp.py`` compares with the references. ``make_model``,
``make_batches``, ``make_vit`` and ``make_images`` are imported by the test too.
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


def make_vit() -> nn.Module:
    """The zoo's ViT at 16 x 16 (GELU; 102,602 float32 weights of norm 19.6 at its seeded initialisation)."""
    from landscape.models import create_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = create_model(
            "vit_mini", num_classes=10, in_chans=1, img_size=16, depth=2, embed_dim=64, num_heads=2, patch_size=4
        )
    return model.eval()


def make_images() -> list:
    """Two batches (20 and 12) of Gaussian 16 x 16 images with random labels."""
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 1, 16, 16, generator=gen), torch.randint(0, 10, (32,), generator=gen)
    return [(x[:20], y[:20]), (x[20:], y[20:])]


def make_relu() -> nn.Module:
    """A float32 ReLU MLP on the images, its biases 0: a blank image's pre-activations lie on ReLU's kink."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        model = nn.Sequential(nn.Flatten(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.bias.zero_()
    return model.eval()


def refusal(call) -> str:
    """The message of the LandscapeError ``call()`` raises ('' when it does not)."""
    from landscape.errors import LandscapeError

    try:
        call()
    except LandscapeError as exc:
        return str(exc)
    return ""


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
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    import landscape
    from landscape.analyses.hessian.fsdp import fsdp_lanczos, fully_shard_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    batches = make_batches()
    two = solve(fully_shard_model(make_model()), batches)
    solo = init_device_mesh("cpu", (dist.get_world_size(), 1), mesh_dim_names=("ranks", "solo"))["solo"]
    one = solve(fully_shard_model(make_model(), mesh=solo), batches)  # each rank alone: world 1
    refused = refusal(lambda: landscape.hessian(fully_shard_model(make_model()), batches, top_k=1))
    images = make_images()
    vit = fsdp_lanczos(fully_shard_model(make_vit()), images, k=K, tol=1e-4, seed=0)
    blank = [(torch.zeros(8, 1, 16, 16), torch.arange(8)), *images]  # blank images: on the kinks at every step
    kinks = refusal(lambda: fsdp_lanczos(fully_shard_model(make_relu()), blank, k=K, tol=1e-4, seed=0))
    half = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = make_vit()
    for sub in reversed([m for m in model.modules() if m is not model]):
        if next(sub.parameters(recurse=False), None) is not None:
            fully_shard(sub, mp_policy=half)
    rounding = refusal(lambda: fsdp_lanczos(fully_shard(model, mp_policy=half), images, k=K, tol=1e-4, seed=0))
    found = {
        "eigenvalues": vit.eigenvalues.tolist(),
        "converged": vit.converged.tolist(),
        "n_matvec": vit.n_matvec,
        "symmetry_defect": vit.symmetry_defect,
        "finite_difference": vit.finite_difference,
    }
    everyone = [None] * dist.get_world_size()
    mine = {"two": two, "one": one, "refused": refused, "vit": found, "kinks": kinks, "bfloat16": rounding}
    dist.all_gather_object(everyone, mine)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(everyone, f)
    dist.barrier()  # no rank tears its groups down while another still talks in them
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
