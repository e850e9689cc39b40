"""Assertions and fixtures' building blocks shared by several test modules."""

import os
import subprocess
import sys
import weakref

import pytest
import torch
from torch import nn

from landscape.data.batches import sample_indices
from landscape.data.loading import load_dataset
from landscape.data.stream import DatasetBatches
from landscape.errors import LandscapeError


def one_line_error(fn, *args, match=None, **kwargs):
    """Call ``fn`` expecting a LandscapeError whose message is a single non-empty line; return the message."""
    with pytest.raises(LandscapeError, match=match) as e:
        fn(*args, **kwargs)
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


@torch.no_grad()
def reestimate_bn(module, batches):
    """Reference BatchNorm re-estimation: reset the statistics, cumulative averaging, one pass in train mode."""
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    module.train()
    for x, _ in batches:
        module(x)
    return module.eval()


def interrupt_after(n):
    """An ``on_round(done, total)`` callback that raises KeyboardInterrupt once ``n`` points are done."""

    def stop(done, total):
        if done == n:
            raise KeyboardInterrupt

    return stop


def torchrun(*args, timeout=300, env=None):
    """Run ``torch.distributed.run --standalone --nproc_per_node 2 ARGS...`` (a script, or ``-m landscape ...``).

    ``env``: variables set on top of this process's environment. Returns the CompletedProcess (text output).
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def tiny_resnet_checkpoint(folder):
    """A random-init 1-channel ``resnet_mini`` (widths 4, 8; one block each) saved as a digits checkpoint.

    Returns:
        ``(path, model)``: the checkpoint's path in ``folder`` and the model it holds (eval mode).
    """
    from landscape.models import create_model
    from landscape.models.checkpoint import save_checkpoint

    torch.manual_seed(0)
    model = create_model("resnet_mini", num_classes=10, in_chans=1, widths=(4, 8), layers=(1, 1))
    path = save_checkpoint(
        folder / "tiny.pt",
        model,
        model_name="resnet_mini",
        model_kwargs=model.model_kwargs,
        num_classes=10,
        dataset="digits",
    )
    return path, model.eval()


def execute_notebook(name, workdir):
    """Execute ``notebooks/NAME`` as committed (QUICK = True) in a fresh python3 kernel with ``workdir`` as its
    WORKDIR; any cell error fails. Returns the number of PNG figures it displayed."""
    import time
    from pathlib import Path

    import nbformat
    from nbclient import NotebookClient

    folder = Path(__file__).resolve().parents[1] / "notebooks"
    nb = nbformat.read(folder / name, as_version=4)
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "LANDSCAPE_NOTEBOOK_WORKDIR": str(workdir)}
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    start = time.perf_counter()
    client.execute(env=env)
    print(f"{name}: {time.perf_counter() - start:.1f} s")
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {}))


class TrackedBatches(DatasetBatches):
    """Dataset batches that record every batch placed (views share the record), to count how many are alive."""

    def __init__(self, *args):
        super().__init__(*args)
        self.alive: list[weakref.ref] = []
        self.most = 0

    def place(self, x, y):
        x, y = super().place(x.clone(), y)  # a fresh tensor per read, as on another device
        self.alive.append(weakref.ref(x))
        self.most = max(self.most, sum(r() is not None for r in self.alive))
        return x, y

    @classmethod
    def synthetic(cls, n, side, batch_size):
        """``n`` synthetic images of ``side`` x ``side`` in batches of ``batch_size``, seeded order."""
        ds = load_dataset(f"synthetic:{n}:{side}", "train")
        return cls(ds, sample_indices(len(ds), n, 0), batch_size)


def conv_bn_model() -> nn.Module:
    """A float64 Conv(1 -> 3, 3x3) -> BatchNorm -> ReLU -> Linear(48 -> 4) in eval mode, for (N, 1, 6, 6) inputs.

    Seeded (0); its BatchNorm's running statistics are drawn away from 0 and 1, so that folding them matters.
    """
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(48, 4)).double()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model.eval()
