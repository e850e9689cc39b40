"""Barriers before and after weight matching as the network widens: resnet_mini on digits at widths 1x, 2x, 4x.

For each width multiplier ``k`` two ``resnet_mini`` (stage widths ``k * (8, 16)``, one block per stage) are trained
on digits from seeds 0 and 1 (:func:`landscape.train.train_model`, AdamW, ``--epochs``), then
:func:`landscape.analyses.connect.run.run_connect` measures the line between them with ``align="weights"``
(BatchNorm statistics re-estimated at every point): the loss and error barriers of the line to theta_B as trained
(``unaligned_line``) and to theta_B aligned to theta_A by weight matching (``line``), on the test split. Entezari
et al. (2022) and Ainsworth et al. (2023) report that the aligned barrier shrinks as the width grows.

Printed: one row per width: parameters, the ends' test accuracies, the loss and error barriers before and after
alignment, and the seconds taken. ``--smoke`` is the CI-sized run (widths 1x and 2x of ``(4, 8)``, one epoch on
256 images, 3 points): it checks that the pipeline runs, not the finding.

``--compare A B --data cifar10:PATH`` is the published comparison instead (Ainsworth et al. 2023; Jordan et al.
2023, REPAIR): two networks of one architecture trained elsewhere (a 2x-wide ResNet-20 on CIFAR-10 in the
papers), the midpoint of the line after weight matching measured on the whole test split twice, with the
BatchNorm statistics interpolated as the weights are (``bn="eval"``) and re-estimated on training images
(``bn="recompute"``, the "BN reset"; networks without BatchNorm get REPAIR instead, ``repair=True``). Printed: the
ends' and the midpoints' test accuracies beside the published 94.5% / 94.2%, 17.6% and 83.9%.

``--cost`` measures what alignment and curvature cost instead (one torch thread unless ``--threads``):

(a) weight matching of two torchvision ``resnet18`` (random init, seeds 0 and 1, 10 classes), and of a ``resnet18``
    and a copy of it with every permutation of its spec drawn at random: the sweeps (of the kept descent; each
    descent's objective and sweeps on the next line, with the seconds of the first descent alone, the single start
    of earlier releases) and the seconds of :func:`~landscape.analyses.align.weights.weight_matching` (every
    descent), and of the whole
    :func:`~landscape.analyses.align.run.align_models` (tracing the spec, the function check on 4 images);
(b) connect's curvature pass at one point (:func:`~landscape.analyses.connect.curvature.point_curvature`, the run's
    defaults) of a ``resnet_mini`` (widths 16-24-32-64, 256 synthetic CIFAR-sized images in batches of 128): the
    Hessian products it makes and its seconds (split into Lanczos and the average-case sharpness), against the
    seconds of exactly that many products alone (a fresh operator of the same mode, its set-up included, on
    random vectors): the ratio is the curvature pass's overhead over the Lanczos products it needs. The pass is
    given the point's batch losses, as connect knows them from the point's loss;
(c) the same pass at every point of the lines connect measures between two ``resnet_mini`` trained on digits as the
    demo trains them (seeds 0 and 1, 6 epochs; the line after weight matching and the line as trained, 5 points
    each, 360 test images): each point's pass against its own products timed inside it, and ``S_avg`` with its
    Monte-Carlo standard error.

Run:
    python benchmarks/alignment.py [--epochs 3] [--samples 500] [--steps 11] [--smoke]
    python benchmarks/alignment.py --compare A.pt B.pt --data cifar10:PATH [--samples N]
    python benchmarks/alignment.py --cost [--repeats 3] [--draws 4] [--keep-memory]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from landscape.analyses.connect.run import run_connect
from landscape.models.checkpoint import read_checkpoint
from landscape.options import checks
from landscape.options.connect import CURVATURE_QUANTITIES, ConnectOptions
from landscape.runtime.memory import keep_freed_memory
from landscape.train import TrainConfig, train_model


def train_pair(widths: tuple[int, ...], args: argparse.Namespace, folder: Path) -> list[Path]:
    """Two resnet_mini of the given stage widths trained on digits from seeds 0 and 1; their checkpoints."""
    paths = []
    for seed in (0, 1):
        config = TrainConfig(
            model="resnet_mini",
            data="digits",
            epochs=args.epochs,
            seed=seed,
            device="cpu",
            subset=args.subset,
            model_kwargs={"widths": list(widths), "layers": [1] * len(widths)},
        )
        out = folder / f"w{'-'.join(map(str, widths))}_s{seed}.pt"
        train_model(config, out, force=True, quiet=True)
        paths.append(out)
    return paths


#: the published test accuracies (%) of a 2x-wide ResNet-20 on CIFAR-10: the ends, and the midpoint after weight
#: matching without and with the BatchNorm reset (Jordan et al. 2023)
PUBLISHED = {"end A": 94.5, "end B": 94.2, "midpoint, no reset": 17.6, "midpoint, reset": 83.9}


def compare(ends: list[Path], data: str, samples: int | None) -> dict[str, float]:
    """The ends' and the matched midpoints' test accuracies (%) of two trained networks, as the papers measure them.

    Args:
        ends: the two checkpoints.
        data: their dataset spec (e.g. ``cifar10:PATH``).
        samples: test images (None: the whole split).

    Returns:
        The accuracies by :data:`PUBLISHED`'s names.
    """
    options = ConnectOptions(data=data, split="test", samples=samples, steps=3, align="weights", bn="eval")
    plain = run_connect(*ends, options, out=None, device="auto", progress=False)
    accuracy = 100 * plain["line/accuracy"][0]  # the ends as trained (their own statistics), the midpoint
    out = {"end A": float(accuracy[0]), "end B": float(accuracy[-1]), "midpoint, no reset": float(accuracy[1])}
    # a BatchNorm network is reset by re-estimating its statistics, others by REPAIR
    reset = replace(options, bn="recompute") if plain.attrs["has_batchnorm"] else replace(options, repair=True)
    out["midpoint, reset"] = float(
        100 * run_connect(*ends, reset, out=None, device="auto", progress=False)["line/accuracy"][0][1]
    )
    return out


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """``(fn(*args, **kwargs), wall seconds, CPU seconds of this process)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - wall, time.process_time() - cpu


class InPassProducts:
    """The CPU time of the Hessian products a curvature pass makes, timed inside the pass.

    :meth:`timing` replaces the curvature module's operator by one whose ``matvec`` adds its CPU time to
    :attr:`cpu`: the pass's own products, in the same seconds as the rest of the pass, so that the machine's drift
    between a pass and products made apart does not enter their ratio.
    """

    def __init__(self) -> None:
        self.cpu = 0.0

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Within the block, every curvature pass's products are timed into :attr:`cpu` (reset at entry)."""
        from landscape.analyses.connect import curvature

        base, timer = curvature.HessianOperator, self
        self.cpu = 0.0

        class TimedOperator(base):
            def matvec(self, v: torch.Tensor) -> torch.Tensor:
                cpu = time.process_time()
                try:
                    return super().matvec(v)
                finally:
                    timer.cpu += time.process_time() - cpu

        curvature.HessianOperator = TimedOperator
        try:
            yield
        finally:
            curvature.HessianOperator = base


def _resnet18(seed: int) -> torch.nn.Module:
    """torchvision's resnet18 (10 classes) at its random init from ``seed``."""
    import torchvision

    torch.manual_seed(seed)
    return torchvision.models.resnet18(num_classes=10).eval()


def matching_cost(
    build: Callable[[int], torch.nn.Module] = _resnet18, name: str = "torchvision resnet18"
) -> list[dict]:
    """(a) of ``--cost``: weight matching of two networks of one architecture, independent and permuted; printed.

    Args:
        build: the network at its random init from a seed (3x32x32 inputs).
        name: what it is, for the header.

    Returns:
        One row per theta_B: ``name``, ``sweeps``, ``converged``, ``exact`` (A's weights recovered exactly),
        ``seconds`` and ``cpu`` of the matching, ``align_seconds`` and ``align_cpu`` of the whole alignment.
    """
    from landscape.analyses.align.permute import apply, identity
    from landscape.analyses.align.run import align_models
    from landscape.analyses.align.spec import permutation_spec
    from landscape.analyses.align.weights import best_descent, weight_matching
    from landscape.options.align import DESCENT_STARTS

    a = build(0)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    spec = permutation_spec(a, x[:2])
    g = torch.Generator().manual_seed(2)
    drawn = {p.name: torch.randperm(p.size, generator=g) for p in spec.permutations}  # no heads in a ResNet
    print(f"(a) weight matching, {name} ({len(spec.permutations)} permutations), one process")
    print(f"{'theta_B':<22} {'sweeps':>6} {'matching s (cpu)':>16} {'align s (cpu)':>14} {'objective before -> after'}")
    rows = []
    for label, b in (("independent (seed 1)", build(1)), ("permuted copy", copy.deepcopy(a))):
        if label == "permuted copy":
            b.load_state_dict(apply(spec, a.state_dict(), drawn))
        m, seconds, cpu = _timed(weight_matching, spec, a.state_dict(), b.state_dict())
        r, align_seconds, align_cpu = _timed(align_models, a, b, [(x, None)], method="weights")
        exact = all(torch.equal(r.model.state_dict()[n], t) for n, t in a.state_dict().items())
        rows.append(
            {"name": label, "sweeps": m.sweeps, "converged": m.converged, "exact": exact, "seconds": seconds}
            | {"cpu": cpu, "align_seconds": align_seconds, "align_cpu": align_cpu}
        )
        print(
            f"{label:<22} {m.sweeps:>6} {seconds:>7.2f} ({cpu:>6.2f}) {align_seconds:>6.2f} ({align_cpu:>5.2f}) "
            f"{m.objective_before:>11.1f} -> {m.objective_after:<11.1f}" + (" A's weights exactly" if exact else ""),
            flush=True,
        )
        starts = ", ".join(f"{d.start}/{d.order} {d.objective:.1f} ({d.sweeps} sweeps)" for d in m.starts)
        _, first, first_cpu = _timed(
            best_descent,
            spec,
            a.state_dict(),
            b.state_dict(),
            identity(spec),
            list(spec.permutations),
            starts=DESCENT_STARTS[:1],
        )
        print(f"{'':<22} the descents: {starts}; the first alone {first:.2f} ({first_cpu:.2f}) s", flush=True)
    return rows


#: where a curvature pass's values hold the Hessian products it made
PRODUCTS = CURVATURE_QUANTITIES.index("hessian_products")
#: pairs of forward passes (plain, tuned) timed by ``--cost``
FORWARD_PAIRS = 20


def curvature_cost(
    repeats: int,
    model_kwargs: dict | None = None,
    samples: int = 256,
    batch_size: int = 128,
    draws: int = ConnectOptions.curvature_samples,
) -> list[dict]:
    """(b) of ``--cost``: one point's curvature pass against the Hessian products it makes; printed.

    Each of ``repeats`` rounds times the pass, its products made alone, Lanczos alone and ``S_avg`` alone, in an
    order that rotates from round to round; the ratios to the products alone are printed as the best of the
    rounds and, from two rounds on, as the median and quartiles of each round's own ratio (drift cancels within
    a round).

    Args:
        repeats: measurement rounds (after one warm-up pass).
        model_kwargs: ``resnet_mini``'s options (default widths 16-24-32-64).
        samples: synthetic 3x32x32 images.
        batch_size: images per batch.
        draws: the average-case sharpness' antithetic draws per batch (connect's ``--curvature-samples``).

    Returns:
        One row per repeat: ``products`` (the pass's), ``products_alone`` (made alone), and ``(wall, cpu)``
        seconds of the ``pass``, the products ``alone``, ``lanczos`` alone and the ``sharpness`` alone.
    """
    from landscape.analyses.connect.curvature import CurvatureSettings, objective_at, point_curvature
    from landscape.analyses.hessian.lanczos import lanczos
    from landscape.analyses.hessian.operator import HessianOperator
    from landscape.analyses.sharpness.measures import average_sharpness
    from landscape.core.forward import EvalForward
    from landscape.core.objective import Objective
    from landscape.models import create_model
    from landscape.options.connect import CURVATURE_HVP, ConnectOptions

    torch.manual_seed(0)
    kwargs = {"widths": (16, 24, 32, 64)} if model_kwargs is None else model_kwargs
    model = create_model("resnet_mini", num_classes=10, **kwargs).eval()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(samples, 3, 32, 32, generator=g), torch.randint(0, 10, (samples,), generator=g)
    objective = Objective(
        model, [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, samples, batch_size)]
    )
    o = ConnectOptions(curvature=True, curvature_samples=draws)
    settings = CurvatureSettings(o.curvature_rho, o.curvature_samples, 0)
    at = objective_at(objective, objective.params, objective.buffers)

    def products_alone(n: int) -> int:
        op = HessianOperator(at, at.params, mode=CURVATURE_HVP)
        v = torch.randn(op.shape[0], generator=torch.Generator().manual_seed(3))
        for _ in range(n):
            op.matvec(v)
        return op.n_matvec

    def lanczos_alone() -> None:
        op = HessianOperator(at, at.params, mode=CURVATURE_HVP)
        lanczos(op, k=1, which="LA", tol=settings.tol, maxiter=settings.maxiter, seed=0, return_eigenvectors=False)

    params = sum(t.numel() for t in objective.params.values())
    print(f"(b) connect --curvature at one point: resnet_mini {kwargs} ({params} parameters), {samples} images")
    print("    seconds, wall (cpu); 'alone': that many products of a fresh operator, its set-up included")
    print("    'its products': the CPU seconds of the pass's own products, timed inside the pass")
    print(f"{'pass':>15} {'products':>8} {'its products':>10} {'alone':>15} {'lanczos':>15} {'sharpness':>15}")
    forward = EvalForward(objective)  # as connect tunes it once per run (not timed)
    forward.tune()
    ways = {
        "plain": (objective.batch_loss_at(0), (objective.params,)),
        "tuned": (forward.batch_loss, (0, objective.params)),
    }
    ratios = []
    with torch.no_grad():
        for i in range(FORWARD_PAIRS):  # the order alternates: the machine's drift cancels in each pair's ratio
            seconds = {}
            for way in ("plain", "tuned") if i % 2 == 0 else ("tuned", "plain"):
                fn, args = ways[way]
                seconds[way] = _timed(fn, *args)[2]
            ratios.append(seconds["tuned"] / seconds["plain"])
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    print(
        f"    sharpness' forward: {forward.n_folded} BatchNorms folded, channels-last {forward.channels_last}; "
        f"a forward of {batch_size} images tuned / plain over {FORWARD_PAIRS} pairs (CPU): median {q2:.3f}, quartiles "
        f"{q1:.3f}-{q3:.3f}"
    )
    # a warm-up pass, not timed; the products a pass makes (the same at every repeat: seeded)
    known = objective.evaluate().batch_losses  # connect knows them from the point's loss (not timed)
    n_pass = int(point_curvature(objective, objective.params, objective.buffers, settings, forward, known)[PRODUCTS])
    in_pass = InPassProducts()

    def timed_pass() -> tuple:
        with in_pass.timing():
            return _timed(point_curvature, objective, objective.params, objective.buffers, settings, forward, known)

    measured = {
        "pass": timed_pass,
        "alone": lambda: _timed(products_alone, n_pass),
        "lanczos": lambda: _timed(lanczos_alone),
        "sharpness": lambda: _timed(
            average_sharpness,
            at,
            settings.rho,
            samples=settings.samples,
            antithetic=True,
            seed=0,
            forward=forward,
            base_loss=known,
        ),
    }
    names = list(measured)
    rows = []
    for r in range(repeats):  # the order rotates from round to round: the drift within a round cancels on average
        row: dict = {}
        for name in names[r % len(names) :] + names[: r % len(names)]:
            out, *seconds = measured[name]()
            row[name] = seconds
            if name == "pass":
                row["products"], row["in_pass"] = int(out[PRODUCTS]), in_pass.cpu
            elif name == "alone":
                row["products_alone"] = out
        rows.append(row)
        cells = [f"{row[k][0]:>6.2f} ({row[k][1]:>6.2f})" for k in ("pass", "alone", "lanczos", "sharpness")]
        print(f"{cells[0]} {row['products']:>8} {row['in_pass']:>10.2f} {' '.join(cells[1:])}", flush=True)
    for i, clock in enumerate(("wall", "cpu")):
        best = {k: min(r[k][i] for r in rows) for k in ("pass", "alone", "lanczos", "sharpness")}  # least disturbed
        print(
            f"ratio ({clock}, best of {repeats}): pass / products alone {best['pass'] / best['alone']:.2f}, "
            f"lanczos / products alone {best['lanczos'] / best['alone']:.2f}, sharpness / products alone "
            f"{best['sharpness'] / best['alone']:.2f}"
        )
    if repeats >= 2:
        cells = []
        for k in ("pass", "lanczos", "sharpness"):
            q1, q2, q3 = statistics.quantiles([r[k][1] / r["alone"][1] for r in rows], n=4, method="inclusive")
            cells.append(f"{k} / products alone {q2:.2f} ({q1:.2f}-{q3:.2f})")
        print(f"ratio (cpu, within each of the {repeats} rounds; median, quartiles): {', '.join(cells)}")
    own = [r["pass"][1] / r["in_pass"] for r in rows]
    spread = ""
    if len(own) >= 2:
        q1, _, q3 = statistics.quantiles(own, n=4, method="inclusive")
        spread = f" ({q1:.3f}-{q3:.3f})"
    median = statistics.median(own)
    print(f"ratio (cpu): pass / its own products timed inside it, median of {repeats}: {median:.3f}{spread}")
    return rows


def curvature_path_cost(
    steps: int = 5,
    samples: int = 360,
    epochs: int = 6,
    model_kwargs: dict | None = None,
    subset: int | None = None,
    draws: int = ConnectOptions.curvature_samples,
) -> list[dict]:
    """(c) of ``--cost``: connect's curvature pass at every point of a line between two trained networks; printed.

    Two ``resnet_mini`` are trained on digits from seeds 0 and 1 as the demo trains them (AdamW, lr 2e-3, batches of
    64, ``epochs``); :func:`~landscape.analyses.connect.run.run_connect` measures the line between them after weight
    matching and the line as trained (``steps`` points each, ``samples`` test images, ``--curvature`` at its
    defaults). Each point's pass is timed, and its own Hessian products inside it (:class:`InPassProducts`).

    Args:
        steps: points of each line.
        samples: test images.
        epochs: training epochs of each network.
        model_kwargs: ``resnet_mini``'s options (default the zoo's).
        subset: training images (default all).
        draws: the average-case sharpness' antithetic draws per batch (connect's ``--curvature-samples``).

    Returns:
        One row per point, in the order measured: the CPU seconds of the ``pass`` and of its products ``in_pass``,
        and the pass's values by :data:`~landscape.options.connect.CURVATURE_QUANTITIES`.
    """
    from landscape.analyses.connect import points

    rows: list[dict] = []
    in_pass, measured = InPassProducts(), points.point_curvature

    def timed_pass(*args: Any, **kwargs: Any) -> tuple:
        with in_pass.timing():
            out, _, cpu = _timed(measured, *args, **kwargs)
        rows.append({"pass": cpu, "in_pass": in_pass.cpu, **dict(zip(CURVATURE_QUANTITIES, out))})
        return out

    with tempfile.TemporaryDirectory() as tmp:
        ends = []
        for seed in (0, 1):
            config = TrainConfig(
                model="resnet_mini", data="digits", epochs=epochs, seed=seed, device="cpu", subset=subset,
                model_kwargs=model_kwargs or {},
            )  # fmt: skip
            ends.append(Path(tmp) / f"s{seed}.pt")
            train_model(config, ends[-1], force=True, quiet=True)
        options = ConnectOptions(
            split="test", samples=samples, steps=steps, align="weights", curvature=True, curvature_samples=draws
        )
        points.point_curvature = timed_pass
        try:
            run_connect(*ends, options, out=None, device="cpu", progress=False)
        finally:
            points.point_curvature = measured
    print(
        f"(c) connect --curvature along the lines between two resnet_mini trained on digits ({epochs} epochs), "
        f"{steps} points each, {samples} test images, {options.curvature_samples} antithetic draws per batch"
    )
    print(f"{'point':>5} {'products':>8} {'pass':>7} {'its products':>12} {'ratio':>6} {'S_avg':>8} {'stderr':>8}")
    for i, r in enumerate(rows):
        print(
            f"{i:>5} {r['hessian_products']:>8.0f} {r['pass']:>7.2f} {r['in_pass']:>12.2f} "
            f"{r['pass'] / r['in_pass']:>6.3f} {r['average_sharpness']:>8.4f} {r['average_sharpness_stderr']:>8.4f}",
            flush=True,
        )
    ratios = [r["pass"] / r["in_pass"] for r in rows]
    relative = [r["average_sharpness_stderr"] / r["average_sharpness"] for r in rows if r["average_sharpness"] > 0]
    print(
        f"ratio (cpu): pass / its own products over the {len(rows)} points: median {statistics.median(ratios):.3f}, "
        f"largest {max(ratios):.3f}; S_avg's standard error / S_avg: median {statistics.median(relative):.3f}, "
        f"largest {max(relative):.3f}"
    )
    return rows


def main(argv: list[str] | None = None) -> None:
    """Train, align and measure each width; print the table.

    Args:
        argv: the command line (default ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    positive = checks.positive_argument
    parser.add_argument("--epochs", type=positive, default=3)
    parser.add_argument("--samples", type=positive, default=None, help="Test images (default 500; --compare: all).")
    parser.add_argument("--steps", type=positive, default=11, help="Points of each line (at least 2).")
    parser.add_argument("--multipliers", type=positive, nargs="+", default=[1, 2, 4])
    parser.add_argument("--threads", type=positive, default=1)
    parser.add_argument("--smoke", action="store_true", help="CI-sized: widths 1x and 2x of (4, 8), 1 epoch.")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="The published comparison instead.")
    parser.add_argument("--data", default=None, help="The dataset of --compare, e.g. cifar10:PATH.")
    parser.add_argument("--cost", action="store_true", help="What alignment and curvature cost instead.")
    parser.add_argument("--repeats", type=positive, default=3, help="--cost: repeats of the curvature measurement.")
    parser.add_argument(
        "--draws",
        type=positive,
        default=ConnectOptions.curvature_samples,
        help="--cost: the average-case sharpness' draws per batch (connect's --curvature-samples).",
    )
    parser.add_argument(
        "--keep-memory",
        action="store_true",
        help="Keep freed memory in the process as the landscape command does (landscape.runtime.memory).",
    )
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps: a line needs at least 2 points, got {args.steps}")
    if args.keep_memory and not keep_freed_memory():
        parser.error("--keep-memory needs glibc's malloc (Linux)")
    torch.set_num_threads(args.threads)
    if args.cost:
        matching_cost()
        curvature_cost(args.repeats, draws=args.draws)
        curvature_path_cost(draws=args.draws)
        return
    if args.compare:
        if not args.data:
            parser.error("--compare needs --data, the dataset the two networks were trained on (e.g. cifar10:PATH)")
        measured = compare(list(args.compare), args.data, args.samples)
        print(f"{'':<20} {'measured %':>10} {'published %':>11}")
        for name, value in measured.items():
            print(f"{name:<20} {value:>10.1f} {PUBLISHED[name]:>11.1f}")
        return
    args.samples = 500 if args.samples is None else args.samples
    base, args.subset = (8, 16), None
    if args.smoke:
        base, args.subset, args.epochs, args.samples, args.steps, args.multipliers = (4, 8), 256, 1, 128, 3, [1, 2]
    header = f"{'widths':>10} {'params':>8} {'acc A':>6} {'acc B':>6} {'loss B':>15} {'error B':>15} {'s':>6}"
    print(header + "\n" + " " * 36 + "before -> after    before -> after")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for k in args.multipliers:
            widths = tuple(k * w for w in base)
            start = time.perf_counter()
            ends = train_pair(widths, args, folder)
            options = ConnectOptions(split="test", samples=args.samples, steps=args.steps, align="weights")
            res = run_connect(*ends, options, out=None, device="cpu", progress=False)
            bars = res.attrs["barriers"]
            before, after = bars["unaligned_line"]["test"], bars["line"]["test"]
            params = sum(t.numel() for t in read_checkpoint(ends[0]).state_dict.values() if t.is_floating_point())
            acc = res["line/accuracy"][0]
            print(
                f"{'-'.join(map(str, widths)):>10} {params:>8} {acc[0]:>6.3f} {acc[-1]:>6.3f} "
                f"{before['loss']:>6.3f} -> {after['loss']:<6.3f} {before['error']:>6.3f} -> {after['error']:<6.3f} "
                f"{time.perf_counter() - start:>6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
