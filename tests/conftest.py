"""Session-wide test settings.

The tests use tiny models: one intra-op thread is faster for them, and immune to the spin-waiting of OpenMP
threads when other processes share the cores (forward + backward of ResNet-50 measured 10x slower on 2 loaded
threads than on 1). Subprocesses (the entry point, torchrun, notebook kernels) inherit OMP_NUM_THREADS=1.
No test writes to the user's cache folder (:func:`compile_cache`).
"""

import os

import pytest
import torch

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="module")
def compile_cache(tmp_path_factory):
    """Every test module's compile records in a fresh folder (never the user's cache); inductor's compiled
    kernels in one folder kept across test sessions, so only the first session compiles cold."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path_factory.mktemp("landscape-cache")))
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.getbasetemp().parent / "inductor-cache"))
        yield
