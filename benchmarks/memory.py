"""What keeping freed memory saves: page faults and CPU time per pass, glibc's default against ``keep_freed_memory``.

The problem is benchmarks/hessian.py's (a CIFAR-style ResNet of 78,042 parameters, one batch of 128 synthetic
3x32x32 images, eval mode, CPU, one torch thread). Each round starts two fresh processes, one with glibc's
default malloc and one that first calls :func:`landscape.runtime.memory.keep_freed_memory`, in an order that
alternates from round to round. After one untimed pass of each, a process times ``--passes`` passes of each kind
(a forward without gradients, a gradient, a Hessian product by a kept graph) and reports per pass the user and
system CPU seconds, the wall seconds and the minor page faults (``getrusage``). Printed: every process's rows,
then per kind the medians over the rounds and the ratio kept / default of CPU time (user + system).

    python benchmarks/memory.py [--rounds 3] [--passes 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from landscape.options.checks import positive_argument

#: the kinds of pass timed, in order
KINDS = ("forward", "gradient", "product")


def measure(keep: bool, passes: int) -> dict[str, dict[str, float]]:
    """In this process: per pass ``user``, ``system``, ``wall`` seconds and ``faults`` of each kind."""
    import resource

    if keep:
        from landscape.runtime.memory import keep_freed_memory

        if not keep_freed_memory():
            raise SystemExit("this C library is not glibc: nothing to compare")
    import torch

    from landscape.analyses.hessian.operator import HessianOperator
    from landscape.core.objective import Objective
    from landscape.models.resnet import ResNet

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ResNet(layers=(1, 1, 1), widths=(16, 32, 64), num_classes=10).eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(128, 3, 32, 32, generator=g), torch.randint(0, 10, (128,), generator=g)
    objective = Objective(model, [(x, y)])
    op = HessianOperator(objective, mode="graph")
    v = torch.randn(op.shape[0], generator=torch.Generator().manual_seed(2))

    def forward() -> None:
        with torch.no_grad():
            objective.evaluate()

    passes_by_kind = {"forward": forward, "gradient": objective.gradient, "product": lambda: op.matvec(v)}
    out = {}
    for kind in KINDS:
        fn = passes_by_kind[kind]
        fn()  # untimed: the graph's setup, first-call work
        before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(passes):
            fn()
        after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall
        out[kind] = {
            "user": (after.ru_utime - before.ru_utime) / passes,
            "system": (after.ru_stime - before.ru_stime) / passes,
            "wall": wall / passes,
            "faults": (after.ru_minflt - before.ru_minflt) / passes,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    positive = positive_argument
    parser.add_argument("--rounds", type=positive, default=3, help="pairs of processes (default 3)")
    parser.add_argument("--passes", type=positive, default=8, help="timed passes of each kind per process")
    parser.add_argument("--child", choices=("default", "keep"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child == "keep", args.passes)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows: dict[str, list[dict]] = {"default": [], "keep": []}
    print(f"{'process':>8} {'pass':>9} {'user s':>8} {'system s':>9} {'wall s':>8} {'faults':>8}")
    for r in range(args.rounds):
        for mode in ("default", "keep") if r % 2 == 0 else ("keep", "default"):
            cmd = [sys.executable, __file__, "--child", mode, "--passes", str(args.passes)]
            result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
            rows[mode].append(result)
            for kind in KINDS:
                m = result[kind]
                print(
                    f"{mode:>8} {kind:>9} {m['user']:8.3f} {m['system']:9.3f} {m['wall']:8.3f} {m['faults']:8.0f}",
                    flush=True,
                )
    print(f"\nmedians over {args.rounds} rounds, per pass; kept / default of CPU time (user + system)")
    for kind in KINDS:
        med = {
            mode: {k: statistics.median(row[kind][k] for row in rows[mode]) for k in ("user", "system", "faults")}
            for mode in rows
        }
        cpu = {mode: med[mode]["user"] + med[mode]["system"] for mode in med}
        print(
            f"{kind:>9}: default {cpu['default']:.3f} s CPU ({med['default']['system']:.3f} system, "
            f"{med['default']['faults']:.0f} faults), kept {cpu['keep']:.3f} s ({med['keep']['system']:.3f} system, "
            f"{med['keep']['faults']:.0f} faults): {cpu['keep'] / cpu['default']:.2f}"
        )


if __name__ == "__main__":
    main()
