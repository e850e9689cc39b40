"""The child process that compiles an exported program into a package (for :mod:`landscape.runtime.packages`).

``python -m landscape.runtime.package_build WORK THREADS PARENT``: load the program written by
``torch.export.save`` at ``WORK/program.pt2``, set ``THREADS`` torch threads and compile it with AOTInductor into
the package ``WORK/package.pt2``. ``WORK`` is the build's own folder. When the process ``PARENT`` ends first,
however it ends (``kill -9`` too), the build removes its program, its package and then ``WORK`` when empty, and
ends with every compiler it started (:func:`landscape.runtime.workers.end_with_parent`). Exit status 0 when the
package is written; an error's traceback goes to stderr, which the parent keeps the end of.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE_SUFFIX = ".pt2"
"""The suffix AOTInductor requires of a package file."""
PROGRAM = "program.pt2"
"""The exported program's name in the build's folder."""
PACKAGE = f"package{PACKAGE_SUFFIX}"
"""The package's name in the build's folder."""


def main(argv: list[str] | None = None) -> int:
    """Compile ``WORK/program.pt2`` into ``WORK/package.pt2`` with ``THREADS`` threads while ``PARENT`` lives.

    Args:
        argv: ``[WORK, THREADS, PARENT]`` (default: the command line).

    Returns:
        The exit status: 0 when written, 2 for bad arguments.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or not args[1].isdigit() or not args[2].isdigit():
        print("usage: python -m landscape.runtime.package_build WORK THREADS PARENT", file=sys.stderr)
        return 2
    work, threads, parent = Path(args[0]), int(args[1]), int(args[2])

    from landscape.runtime.workers import end_with_parent

    end_with_parent(parent, group=True, clean_up=lambda: _remove_build(work))

    import torch

    from landscape.runtime.compile_cache import quiet_cuda_home_probe

    quiet_cuda_home_probe()
    torch.set_num_threads(max(1, threads))
    exported = torch.export.load(work / PROGRAM)
    torch._inductor.aoti_compile_and_package(exported, package_path=str(work / PACKAGE))
    return 0


def _remove_build(work: Path) -> None:
    """Remove the build's program and package, then ``work`` itself when nothing else is in it."""
    for name in (PROGRAM, PACKAGE):
        (work / name).unlink(missing_ok=True)
    work.rmdir()


if __name__ == "__main__":
    sys.exit(main())
