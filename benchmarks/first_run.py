"""What a newcomer's first commands cost: wall and CPU seconds of each, run as a user types them.

The steps, in one fresh folder, one after the other (each a child process of this script, so its CPU time is
its own and its children's):

- ``readme``: README's first Python block, as it stands (a 21 x 21 surface of a small ``nn.Module`` on 256
  digits, its summary and a figure), run by this Python;
- ``surface``: ``landscape surface --model resnet_mini --random-init ...``, the front page's figure, no training
  (a 21 x 21 filter-normalised grid on 128 digits); ``plot`` and ``info``: ``landscape plot`` and
  ``landscape info`` of that file;
- ``demo``: ``landscape demo --quick --out demo``, the quick demo (two seeds, smoke sizes, every stage and
  figure).

Run from the repository root, in the project's environment (the ``landscape`` command on PATH):

    python benchmarks/first_run.py [--out DIR] [--only readme,surface,plot,info,demo]

It prints one line per command (wall seconds, CPU seconds) and the load average before and after, since the
wall time on a shared machine depends on the other jobs.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the steps, in the order they run
STEPS = ("readme", "surface", "plot", "info", "demo")


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """Run ``command`` in ``cwd`` and return its wall seconds and its CPU seconds (user + system, children).

    Args:
        command: the command and its arguments.
        cwd: the folder it runs in.

    Returns:
        ``(wall, cpu)`` in seconds.

    Raises:
        subprocess.CalledProcessError: the command failed.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    """Time the first commands and print one line per command."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder to run in (default: a new temporary one)")
    parser.add_argument("--only", default=",".join(STEPS), help="comma-separated steps to run, in this order")
    args = parser.parse_args()
    steps = [step.strip() for step in args.only.split(",") if step.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"unknown steps {', '.join(unknown)}; choose among {', '.join(STEPS)}")
    folder = args.out or Path(tempfile.mkdtemp(prefix="landscape-first-run-"))
    folder.mkdir(parents=True, exist_ok=True)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"^```python\n(.*?)^```", readme, flags=re.S | re.M)
    surface = ["--model", "resnet_mini", "--random-init", "--data", "digits", "--x", "-1:1:21", "--y", "-1:1:21"]
    commands = {
        "readme": [sys.executable, "-c", block.group(1) if block else "raise SystemExit('no Python block')"],
        "surface": ["landscape", "surface", *surface, "--samples", "128", "--out", "resnet_mini_surface.h5"],
        "plot": ["landscape", "plot", "resnet_mini_surface.h5", "--out", "figures"],
        "info": ["landscape", "info", "resnet_mini_surface.h5"],
        "demo": ["landscape", "demo", "--quick", "--out", "demo"],
    }
    print(f"in {folder}; load average before: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    for step in steps:
        wall, cpu = timed(commands[step], folder)
        shown = "python -c <README's first Python block>" if step == "readme" else shlex.join(commands[step])
        print(f"{wall:8.1f} s wall {cpu:8.1f} s CPU   {shown}", flush=True)
    print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
