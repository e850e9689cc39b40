"""Freed memory kept in the process: glibc's malloc told not to hand it back to the kernel after every pass.

On Linux with glibc, an allocation above malloc's mmap threshold (128 KiB, raised as blocks are freed up to
32 MiB) is mapped from the kernel and unmapped when freed, and the top of the heap is returned to the kernel as
soon as more than the trim threshold (twice the mmap threshold) lies free there. A forward pass, a gradient or
a Hessian product allocates its activations anew and frees them at the end, so each pass touches fresh pages
and takes one minor page fault per 4 KiB page, each page zeroed by the kernel. On a CIFAR-style ResNet of 78k
parameters at 128 images that was 27,600-54,500 faults per Hessian product and 12-25% of a gradient's or a
product's CPU time in the kernel (``python benchmarks/memory.py``; docs/measured.md).

:func:`keep_freed_memory` sets glibc's ``M_MMAP_THRESHOLD`` to 32 MiB (the largest it takes on 64-bit
systems) and ``M_TRIM_THRESHOLD`` to 1 GiB: blocks up to 32 MiB come from the heap, and freed memory stays
in the process for the next pass, up to 1 GiB of it beyond what is in use. The process's peak memory is what it
was; only its resident size after the peak stays higher. Blocks above 32 MiB are still mapped per allocation.

The ``landscape`` command sets it for its own process and its worker processes (``LANDSCAPE_KEEP_MEMORY=0``,
``false``, ``no`` or ``off`` turns it off). It is a setting of the whole process, so from Python it is for the
caller to choose: call :func:`keep_freed_memory` once. Elsewhere (macOS, Windows, another C library) it changes nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

#: glibc's largest mmap threshold on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``): blocks up to it come from the heap
MMAP_THRESHOLD = 32 * 1024 * 1024
#: how much free memory at the top of the heap glibc keeps before returning it to the kernel
TRIM_THRESHOLD = 1024 * 1024 * 1024
#: the environment variable that turns the command's setting off (one of :data:`OFF`, in any case)
ENV_SWITCH = "LANDSCAPE_KEEP_MEMORY"
#: the values of :data:`ENV_SWITCH` that mean off
OFF = ("0", "false", "no", "off")
#: glibc's ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

_kept = False


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory for reuse instead of returning it to the kernel after each pass.

    Sets ``mallopt(M_MMAP_THRESHOLD, 32 MiB)`` and ``mallopt(M_TRIM_THRESHOLD, 1 GiB)`` for this process (the
    module's docstring says why). Calling it again changes nothing more.

    Returns:
        True when glibc took both settings (now or before); False where the process's C library is not glibc
        (nothing is changed).
    """
    global _kept
    if _kept:
        return True
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _kept = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    return _kept


def kept() -> bool:
    """Whether :func:`keep_freed_memory` has taken effect in this process."""
    return _kept


def keep_for_command() -> bool:
    """:func:`keep_freed_memory` for the ``landscape`` command, unless ``LANDSCAPE_KEEP_MEMORY`` is ``0`` (or off).

    Returns:
        Whether freed memory is now kept.
    """
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in OFF:
        return False
    return keep_freed_memory()
