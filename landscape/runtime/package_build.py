"""The child process that compiles an exported program into a package (for :mod:`landscape.runtime.packages`).

``python -m landscape.runtime.package_build PROGRAM OUT THREADS``: load the program written by
``torch.export.save`` at ``PROGRAM``, set ``THREADS`` torch threads and compile it with AOTInductor into the
package ``OUT`` (a ``.pt2`` file). Exit status 0 when the package is written; an error's traceback goes to
stderr, which the parent keeps the end of.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Compile ``PROGRAM`` into ``OUT`` with ``THREADS`` threads.

    Args:
        argv: ``[PROGRAM, OUT, THREADS]`` (default: the command line).

    Returns:
        The exit status: 0 when written, 2 for bad arguments.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or not args[2].isdigit():
        print("usage: python -m landscape.runtime.package_build PROGRAM OUT THREADS", file=sys.stderr)
        return 2
    program, out, threads = args[0], args[1], int(args[2])

    import torch

    from landscape.runtime.compile_cache import quiet_cuda_home_probe

    quiet_cuda_home_probe()
    torch.set_num_threads(max(1, threads))
    exported = torch.export.load(program)
    torch._inductor.aoti_compile_and_package(exported, package_path=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
