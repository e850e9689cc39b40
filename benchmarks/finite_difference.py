"""Central-difference Hessian products in float32 against exact ones: top-3 eigenvalues, cost, bf16, FSDP.

Each mode prints what docs/analyses.md ("Finite differences") reports; the products' step is the one measured at
the point (``landscape.analyses.hessian.steps``). The model is a zoo name, ``timm:NAME`` or ``torchvision:NAME``
(``--random-init``, seed 0) or a checkpoint (``--checkpoint``), on ``--samples`` images of ``--data`` (digits; RGB
``synthetic:4:224`` for torchvision's ViTs, which take 3 x 224 x 224) in one batch, preprocessed as ``landscape
hessian`` does (docs/data-models.md).

- ``accuracy``: the top-3 eigenvalues (Lanczos, ``LA``) by central differences (tol 1e-4); the float64 Rayleigh
  quotients and residuals of their Ritz vectors under exact products of the weights cast to float64 (one product
  each: an eigenvalue of the float64 Hessian lies within the residual); with ``--float64-lanczos`` the float64
  problem solved (graph, tol 1e-10); and the top-3 of exact float32 products (``--exact graph``, and/or ``jvp``;
  tol 1e-6) of the same weights. Prints the products, the gradients they cost (the step's measurement included),
  the step, its predicted error and the products' measured asymmetry, or the refusal. ``--dtype float64`` makes
  the differences and the exact solves in float64.
- ``bf16``: along the float32 top eigenvector ``y`` and a random unit vector, the relative error of a central
  difference under a bfloat16 autocast forward (float32 weights and accumulation) against the exact float32
  product, for steps from 1e-4 to 1e-1, beside the same in float32; then what the step's measurement finds
  under bfloat16 (its refusal).
- ``fsdp``: ``fsdp_lanczos`` of the model on 2 gloo ranks (CPU; ``torchrun`` is started here) against the exact
  products of ``accuracy``'s first two columns.

    python benchmarks/finite_difference.py accuracy --model vit_mini --random-init --samples 64 --float64-lanczos
    python benchmarks/finite_difference.py accuracy --checkpoint vit_mini_trained.pt --samples 64 --float64-lanczos
    python benchmarks/finite_difference.py accuracy --model timm:vit_tiny_patch16_224 --random-init --samples 2 \
        --float64-lanczos --threads 2
    python benchmarks/finite_difference.py accuracy --model torchvision:vit_b_16 --random-init --samples 2 --ncv 16 \
        --exact-ncv 12 --threads 2 --data synthetic:4:224
    python benchmarks/finite_difference.py accuracy --checkpoint resnet_mini_trained.pt --samples 64   # refused
    python benchmarks/finite_difference.py accuracy --checkpoint resnet_mini_trained.pt --samples 64 --dtype float64
    python benchmarks/finite_difference.py bf16 --model vit_mini --random-init --samples 64
    python benchmarks/finite_difference.py fsdp --model vit_mini --random-init --samples 64
    python benchmarks/finite_difference.py fsdp --checkpoint vit_mini_trained.pt --samples 64

The checkpoints: ``landscape train --model vit_mini --data digits --epochs 15 --out vit_mini_trained.pt`` (and
``resnet_mini`` the same way).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from landscape.analyses.hessian.lanczos import lanczos
from landscape.analyses.hessian.operator import HessianOperator
from landscape.analyses.hessian.products import central_difference
from landscape.core.front import batches_for, load_inputs
from landscape.core.gradients import gradient_of
from landscape.core.objective import Objective
from landscape.core.params import flatten, unflatten
from landscape.core.source import ModelSource
from landscape.errors import LandscapeError
from landscape.options.checks import positive_argument

warnings.filterwarnings("ignore")
#: the eigenpairs compared
K = 3
#: the steps of ``bf16``'s table
STEPS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def batches_of(args: argparse.Namespace) -> tuple[torch.nn.Module, list]:
    """The model (eval mode, CPU) and its batch of ``--samples`` images of ``--data``, as ``landscape hessian`` reads
    them."""
    source = (
        ModelSource(checkpoint=args.checkpoint, model=args.model)
        if args.checkpoint
        else ModelSource(model=args.model or "vit_mini", random_init=True)
    )
    inputs = load_inputs(source, data=args.data, device="cpu")
    source_batches = batches_for(inputs, batch_size=args.samples, n_samples=args.samples, seed=0)
    return inputs.model.eval(), [source_batches[i] for i in range(len(source_batches))]


def exact_float32(
    model: torch.nn.Module, batches: list, ncv: int | None, mode: str = "graph", dtype: torch.dtype = torch.float32
) -> torch.Tensor | None:
    """The top-3 eigenvalues of exact products (``mode``, tol 1e-6) in ``dtype``, printed; None when refused.

    Exact float32 products are refused by Lanczos when two of their couplings differ by more than ``10 sqrt(eps)``
    of its estimate of ``||H||`` (their own rounding, on large models): the line says so and the float64 checks
    remain.
    """
    op = HessianOperator(Objective(model, batches, dtype=dtype), mode=mode)
    start = time.perf_counter()
    try:
        res = lanczos(op, k=K, tol=1e-6, ncv=ncv, seed=0)
    except LandscapeError as exc:
        print(f"exact {str(dtype)[6:]} ({mode}): refused by Lanczos: {exc}")
        return None
    seconds = time.perf_counter() - start
    print(f"exact {str(dtype)[6:]} ({mode}): {fmt(res.eigenvalues)} in {res.n_matvec} products, {seconds:.0f} s")
    return res.eigenvalues


def gradient_seconds(objective: Objective) -> float:
    """The least of three timed gradients of the objective (the unit of the products' cost)."""
    loss = objective.batch_loss_at(0)
    gradient = gradient_of(loss)
    gradient(objective.params)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        gradient(objective.params)
        times.append(time.perf_counter() - start)
    return min(times)


def accuracy(args: argparse.Namespace) -> int:
    """Print the float32 central differences' top-3 against exact products (module doc)."""
    model, batches = batches_of(args)
    dtype = getattr(torch, args.dtype)
    objective = Objective(model, batches, dtype=dtype)
    theta = flatten(objective.params)
    name = f"{args.checkpoint or args.model or 'vit_mini'} in {args.dtype}"
    print(f"model {name}: {theta.numel():,} weights, ||theta|| {float(theta.norm()):.4g}")
    op = HessianOperator(objective, mode="finite-difference")
    start = time.perf_counter()
    try:
        found = lanczos(op, k=K, tol=1e-4, ncv=args.ncv, seed=0, return_eigenvectors=True)
    except LandscapeError as exc:
        print(f"finite differences: refused: {exc}")
        return 0
    seconds = time.perf_counter() - start
    unit = gradient_seconds(objective)
    choice = op.hvp_choice()
    step = choice["finite_difference"]
    spent = choice["finite_difference_gradients"]
    print(
        f"finite differences: {fmt(found.eigenvalues)} in {found.n_matvec} products ({spent} gradients: "
        f"{spent / found.n_matvec:.3f} a product; {seconds / found.n_matvec / unit:.2f} gradient times a product), "
        f"converged {found.converged.tolist()}"
    )
    print(
        f"  step {step['step']:.3g} (probe steps {', '.join(f'{h:.3g}' for h in step['probe_steps'])}), predicted "
        f"error {step['estimated_error']:.2g}, measured asymmetry {found.symmetry_defect:.2g}"
    )
    vectors = found.eigenvectors.double()
    values = found.eigenvalues
    del op, found
    exact64 = HessianOperator(Objective(model, batches, dtype=torch.float64), mode="graph")
    quotients, residuals = [], []
    for j in range(K):
        y = vectors[:, j] / vectors[:, j].norm()
        hy = exact64.matvec(y)
        quotients.append(float(y @ hy))
        residuals.append(float((hy - quotients[-1] * y).norm()))
    rayleigh = torch.tensor(quotients, dtype=torch.float64)
    print(
        f"float64 Rayleigh quotients of its Ritz vectors: {fmt(rayleigh)}, residuals "
        f"{', '.join(f'{r:.2g}' for r in residuals)} (an eigenvalue of the float64 Hessian lies within each); "
        f"relative error {fmt(rel(values, rayleigh))}"
    )
    del vectors
    if args.float64_lanczos:
        reference = lanczos(exact64, k=K, tol=1e-10, ncv=args.ncv, seed=0).eigenvalues
        error = fmt(rel(values, reference))
        print(f"exact float64 (graph, tol 1e-10): {fmt(reference)}; relative error {error}")
    del exact64
    for mode in args.exact:
        exact = exact_float32(model, batches, args.exact_ncv or args.ncv, mode, dtype)
        if exact is not None:
            print(f"  relative error against exact {args.dtype} ({mode}): {fmt(rel(values, exact))}")
    return 0


def bf16(args: argparse.Namespace) -> int:
    """Print the table of central differences under a bfloat16 forward against float32 (module doc)."""
    model, batches = batches_of(args)
    objective = Objective(model, batches)
    exact = HessianOperator(objective, mode="graph")
    top = lanczos(exact, k=1, tol=1e-6, seed=0, return_eigenvectors=True)
    y = top.eigenvectors[:, -1]
    w = torch.randn(y.numel(), generator=torch.Generator().manual_seed(1))
    w /= w.norm()
    truth = {"top": exact.matvec(y).double(), "random": exact.matvec(w).double()}
    loss = lambda sub: sum(weight * objective.batch_loss_fn(b)(sub) for weight, b in zip(objective.weights, batches))  # noqa: E731
    gradient = gradient_of(loss)

    def error(v: torch.Tensor, name: str, step: float, half: bool) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
            made = flatten(central_difference(gradient, objective.params, unflatten(v, objective.params), step))
        return float((made.double() - truth[name]).norm() / truth[name].norm())

    print(f"model {args.checkpoint or args.model or 'vit_mini'}, top eigenvalue {float(top.eigenvalues[-1]):.4g}")
    print("| step | float32, top eigenvector | bfloat16, top eigenvector | bfloat16, random vector |")
    print("|---|---|---|---|")
    for step in STEPS:
        row = (error(y, "top", step, False), error(y, "top", step, True), error(w, "random", step, True))
        print(f"| {step:.0e} | {row[0]:.2g} | {row[1]:.2g} | {row[2]:.2g} |")
    measured = HessianOperator(objective, mode="finite-difference").step()
    print(f"float32: step {measured.step:.3g}, predicted error {measured.error:.2g}")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        try:
            HessianOperator(objective, mode="finite-difference").step()
            print("bfloat16: accepted")
        except LandscapeError as exc:
            print(f"bfloat16: refused: {exc}")
    return 0


def fsdp(args: argparse.Namespace) -> int:
    """Run ``fsdp_lanczos`` on 2 gloo ranks (``torchrun``) and compare it with exact products (module doc)."""
    model, batches = batches_of(args)
    exact = exact_float32(model, batches, args.ncv)
    if exact is None:
        return 1
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "ranks.json"
        job = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__]
        job += ["fsdp-child", "--samples", str(args.samples), "--out", str(out)]
        job += ["--model", args.model] if args.model else []
        job += ["--data", args.data]
        job += ["--checkpoint", args.checkpoint] if args.checkpoint else []
        start = time.perf_counter()
        done = subprocess.run(job, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"finite_difference.py: the ranks failed: {done.stderr.strip().splitlines()[-1:]}")
        ranks = json.loads(out.read_text())
    found = torch.tensor(ranks["eigenvalues"], dtype=torch.float64)
    step = ranks["finite_difference"]
    print(
        f"fsdp_lanczos, 2 gloo ranks: {fmt(found)} in {ranks['n_matvec']} products "
        f"({step['gradients_total']} gradients), {seconds:.0f} s with the start; step {step['step']:.3g}, "
        f"predicted error {step['estimated_error']:.2g}, measured asymmetry {ranks['symmetry_defect']:.2g}; "
        f"relative error {fmt(rel(found, exact))}"
    )
    return 0


def fsdp_child(args: argparse.Namespace) -> int:
    """One rank of ``fsdp``: shard the model, solve, and (rank 0) write the result to ``--out``."""
    import torch.distributed as dist

    from landscape.analyses.hessian.fsdp import fsdp_lanczos, fully_shard_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model, batches = batches_of(args)
    res = fsdp_lanczos(fully_shard_model(model), batches, k=K, tol=1e-4, seed=0)
    if dist.get_rank() == 0:
        record = {
            "eigenvalues": res.eigenvalues.tolist(),
            "n_matvec": res.n_matvec,
            "symmetry_defect": res.symmetry_defect,
            "finite_difference": res.finite_difference,
        }
        Path(args.out).write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def fmt(values: torch.Tensor) -> str:
    """Values in descending order, 6 significant digits (relative errors: 2)."""
    ordered = sorted((float(v) for v in values), key=abs, reverse=True)
    return ", ".join(f"{v:.2g}" if abs(v) < 1e-2 else f"{v:.6g}" for v in ordered)


def rel(found: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``(found - reference) / |reference|``, both sorted descending."""
    a = torch.sort(found.double(), descending=True).values
    b = torch.sort(reference.double(), descending=True).values
    return (a - b) / b.abs()


def main(argv: list[str] | None = None) -> int:
    """Run one mode.

    Args:
        argv: the command line (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("accuracy", "bf16", "fsdp", "fsdp-child"))
    parser.add_argument("--model", default=None, help="the model (default vit_mini; a checkpoint names its own)")
    parser.add_argument("--random-init", action="store_true", help="the model's seeded initialisation (default)")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--samples", type=positive_argument, default=64)
    parser.add_argument("--data", default="digits", help="dataset spec (torchvision's ViTs: synthetic:4:224)")
    parser.add_argument("--ncv", type=positive_argument, default=None)
    parser.add_argument(
        "--exact-ncv", type=positive_argument, default=None, help="accuracy: the exact solves' basis (default --ncv)"
    )
    parser.add_argument("--float64-lanczos", action="store_true", help="accuracy: also solve the float64 problem")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"), help="accuracy: the products'")
    parser.add_argument(
        "--exact", nargs="*", default=["graph"], choices=("graph", "jvp"), help="accuracy: the exact float32 solves"
    )
    parser.add_argument("--threads", type=positive_argument, default=1)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    modes = {"accuracy": accuracy, "bf16": bf16, "fsdp": fsdp, "fsdp-child": fsdp_child}
    return modes[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
