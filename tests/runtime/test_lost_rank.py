"""A rank lost in the middle of a run: the others end with one line naming it, and the same command resumes."""

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import tiny_resnet_checkpoint, torchrun

from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.runtime.distributed import collective
from landscape.store.read import read_result

# rank 1 leaves at its 3rd all_reduce (as if killed: no exception, no clean-up); rank 0 carries on alone
KILL_RANK_1 = """
import os
import sys

import torch.distributed as dist

if os.environ["RANK"] == "1":
    real, calls = dist.all_reduce, [0]

    def leaving(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:
            os._exit(0)
        return real(*args, **kwargs)

    dist.all_reduce = leaving

from landscape.cli import cli

cli(sys.argv[1:], prog_name="landscape")
"""

ROOT = Path(__file__).resolve().parents[2]  # the script imports this checkout of landscape
HESSIAN = ["hessian", "--samples", "8", "--batch-size", "4", "--top-k", "1", "--ncv", "4", "--maxiter", "3"]


def test_a_failed_collective_is_one_line_with_the_backend_error_as_its_cause():
    with pytest.raises(LandscapeError, match="run the same command again: it resumes") as e, collective("barrier"):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:561] Connection closed by peer")
    assert isinstance(e.value.__cause__, RuntimeError) and "\n" not in str(e.value)


@pytest.mark.slow
def test_rank_0_names_the_lost_rank_in_one_line_and_the_same_command_resumes(tmp_path):
    ckpt, _ = tiny_resnet_checkpoint(tmp_path)
    (tmp_path / "kill_rank_1.py").write_text(textwrap.dedent(KILL_RANK_1))
    out, logs = tmp_path / "h.h5", tmp_path / "logs"
    args = [*HESSIAN, "--ckpt", ckpt, "--device", "cpu", "--quiet", "--out", out]
    proc = torchrun(
        "--log-dir",
        logs,
        "--redirects",
        "3",
        tmp_path / "kill_rank_1.py",
        *args,
        timeout=240,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode != 0
    (rank_0,) = [p for p in logs.rglob("stderr.log") if p.parent.name == "0"]
    assert rank_0.read_text() == (
        "Error: rank 1 of 2 stopped during the run (rank 0's all_reduce lost its connection to it); "
        "run the same command again: it resumes from what its file holds\n"
    )
    assert "exitcode  : 2" in proc.stderr  # torchrun's report of rank 0
    again = CliRunner().invoke(cli, [str(a) for a in args])
    assert again.exit_code == 0, again.output
    assert read_result(out).attrs["complete"]
