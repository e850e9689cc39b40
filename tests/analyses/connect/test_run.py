"""The connect run end to end: brute-force values on the line and curve, resumption, refusals, CLI, figures."""

import copy
import os
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from helpers import one_line_error, reestimate_bn, torchrun

import landscape
from landscape.analyses.connect.bendfile import bend_path
from landscape.analyses.connect.run import run_connect
from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import read_checkpoint, save_checkpoint
from landscape.options.connect import CURVATURE_QUANTITIES, ConnectOptions
from landscape.plot import plot_files
from landscape.plot.report import write_report
from landscape.store.read import read_result

WORKTREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TINY = {"num_classes": 10, "in_chans": 1, "widths": (4, 8), "layers": (1, 1)}
SMALL = {"samples": 32, "batch_size": 16, "steps": 5}
BEZIER = {**SMALL, "curve": "bezier", "bend_epochs": 2, "plane_steps": 3, "bend_samples": 32}


def tiny(seed, **kwargs):
    torch.manual_seed(seed)
    return create_model("resnet_mini", **{**TINY, **kwargs}).eval()


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Two tiny resnet_mini digits checkpoints from different seeds."""
    folder = tmp_path_factory.mktemp("ends")
    paths = []
    for seed in (0, 1):
        model = tiny(seed)
        paths.append(
            save_checkpoint(
                folder / f"m{seed}.pt",
                model,
                model_name="resnet_mini",
                model_kwargs=model.model_kwargs,
                num_classes=10,
                dataset="digits",
            )
        )
    return paths


def batches():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(24, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (24,), generator=g)
    return [(x[:16], y[:16]), (x[16:], y[16:])]


def lerp_model(a, b, alpha, data, *, recompute=True):
    """theta(alpha) as a network: parameters and buffers interpolated, BatchNorm re-estimated on ``data``."""
    net = copy.deepcopy(a)
    sa, sb = a.state_dict(), b.state_dict()
    net.load_state_dict({k: (1 - alpha) * v + alpha * sb[k] if v.is_floating_point() else v for k, v in sa.items()})
    return reestimate_bn(net, data) if recompute else net.eval()


@torch.no_grad()
def loss_and_accuracy(net, data):
    n = sum(len(y) for _, y in data)
    loss = sum(F.cross_entropy(net(x), y, reduction="sum").item() for x, y in data) / n
    acc = sum((net(x).argmax(1) == y).sum().item() for x, y in data) / n
    return loss, acc


@pytest.mark.parametrize("bn", ["recompute", "eval"])
def test_line_equals_the_interpolated_networks_and_its_barrier(bn):
    a, b, data = tiny(0), tiny(1), batches()  # the ends as given; with recompute, re-estimated statistics between
    res = landscape.connect(a, b, data, steps=5, bn=bn, device="cpu", progress=False)
    assert res.kind == "connect" and res.attrs["bn"] == bn and list(res["splits"]) == ["train"]
    assert ("not re-estimated" in res.attrs["bn_statistics"]) == (bn == "eval")
    coords = np.asarray(res["line/coords"])
    np.testing.assert_array_equal(coords, np.linspace(0, 1, 5))
    want = np.array(
        [
            loss_and_accuracy(lerp_model(a, b, float(t), data, recompute=bn == "recompute" and 0 < t < 1), data)
            for t in coords
        ]
    )
    np.testing.assert_allclose(res["line/loss"][0], want[:, 0], rtol=1e-5)
    np.testing.assert_array_equal(res["line/accuracy"][0], want[:, 1])
    chord = (1 - coords) * want[0, 0] + coords * want[-1, 0]
    i = int(np.argmax(want[:, 0] - chord))
    found = res.attrs["barriers"]["line"]["train"]
    assert found["loss"] == pytest.approx(want[i, 0] - chord[i], abs=1e-5) and found["loss_at"] == coords[i]
    assert np.asarray(res["line/done"]).all() and "curve/done" not in res


def test_both_splits_and_the_curve_through_the_saved_bend(ckpts, tmp_path):
    out = tmp_path / "c.h5"
    res = run_connect(*ckpts, ConnectOptions(**BEZIER, split="both"), out=out, device="cpu", progress=False)
    assert list(res["splits"]) == ["train", "test"] and res["line/loss"].shape == (2, 5)
    assert res["curve/loss"].shape == (2, 5) and res["plane/loss"].shape == (2, 3, 3)
    assert np.asarray(res["plane/done"]).all() and res.attrs["bend_epochs_done"] == 2
    np.testing.assert_allclose(res["curve/loss"][:, [0, -1]], res["line/loss"][:, [0, -1]], rtol=1e-6)
    assert read_checkpoint(bend_path(out)).meta["epoch"] == 2 and len(res["bend/history"]) == 2
    assert res.attrs["split_samples"] == {"train": 32, "test": 32}
    assert res.attrs["bend_samples"] == 32 and res.attrs["bend_data"] == "32 images of the train split"
    assert "train split" in res.attrs["bn_statistics"]
    points = np.asarray(res["plane/points"])
    pa, pb = (read_checkpoint(c).state_dict for c in ckpts)
    distance = float(torch.sqrt(sum(((pb[n] - pa[n]).double() ** 2).sum() for n, _ in tiny(0).named_parameters())))
    assert points[1, 0] == pytest.approx(distance, rel=1e-9) and points[2, 1] > 0
    # the same run again is complete: nothing recomputed, the same numbers
    again = run_connect(*ckpts, ConnectOptions(**BEZIER, split="both"), out=out, device="cpu", progress=False)
    np.testing.assert_array_equal(again["curve/loss"], res["curve/loss"])
    figures = plot_files([out], tmp_path / "figs")
    assert sorted(p.name for p in figures) == ["c_paths.png", "c_plane.png"]
    page = write_report(tmp_path, interactive=False).read_text()
    assert "loss barrier (line)" in page and "c_plane" in page


def test_the_bend_is_trained_on_the_whole_training_split_by_default(ckpts):
    from landscape.data import load_dataset

    train_images = len(load_dataset("digits", "train"))
    options = ConnectOptions(**{**BEZIER, "bend_samples": None, "bend_epochs": 1, "steps": 2, "plane_steps": 2})
    assert options.attrs()["bend_samples"] == "all"
    res = run_connect(*ckpts, options, out=None, device="cpu", progress=False)
    assert res.attrs["bend_data"] == f"{train_images} images of the train split (all)"
    assert res.attrs["split_samples"] == {"train": 32}
    one_line_error(ConnectOptions, bend_samples=10, match="--bend-samples has no effect without --curve bezier")
    one_line_error(ConnectOptions, curve="bezier", bend_samples=0, match="--bend-samples")
    with pytest.raises(LandscapeError, match="bend_samples"):
        landscape.connect(tiny(0), tiny(1), batches(), curve="bezier", bend_samples=8, device="cpu")


def test_curve_points_are_the_bezier_networks_of_the_saved_bend(tmp_path):
    a, b, data = tiny(0), tiny(1), batches()
    out = tmp_path / "b.h5"
    res = landscape.connect(a, b, data, out=out, steps=3, curve="bezier", bend_epochs=2, plane_steps=2, device="cpu")
    bend = read_checkpoint(bend_path(out)).state_dict
    mid = copy.deepcopy(a)  # phi(1/2) = theta_A / 4 + theta_c / 2 + theta_B / 4, BatchNorm re-estimated
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    with torch.no_grad():
        for name, p in mid.named_parameters():
            p.copy_(0.25 * pa[name] + 0.5 * bend[name] + 0.25 * pb[name])
    loss, acc = loss_and_accuracy(reestimate_bn(mid, data), data)
    assert res["curve/loss"][0, 1] == pytest.approx(loss, rel=1e-5) and res["curve/accuracy"][0, 1] == acc
    history = np.asarray(res["bend/history"])
    assert history.shape == (2,) and np.isfinite(history).all()
    assert res.attrs["bend_data"] == "the given batches (24 images)"


def test_an_interrupted_run_resumes_from_the_bend_and_points_with_identical_numbers(ckpts, tmp_path):
    options = ConnectOptions(**BEZIER)
    whole = run_connect(*ckpts, options, out=tmp_path / "w.h5", device="cpu", progress=False)
    out = tmp_path / "r.h5"
    seen = []
    for stop_at in (("line", 3), ("bend", 1), ("curve", 2), ("plane", 4)):

        def stop(stage, done, total, at=stop_at):
            seen.append((stage, done))
            if (stage, done) == at:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            run_connect(*ckpts, options, out=out, device="cpu", progress=False, on_progress=stop)
        if stop_at[0] == "bend":
            assert read_checkpoint(bend_path(out)).meta["epoch"] == 1  # saved before the interruption
    # every point and epoch was done once: each run went on from where the one before stopped
    assert seen == [*(("line", i) for i in (1, 2, 3, 4, 5)), ("bend", 1), ("bend", 2)] + [
        ("curve", i) for i in (1, 2, 3, 4, 5)
    ] + [("plane", i) for i in range(1, 5)]
    assert read_checkpoint(bend_path(out)).meta["epoch"] == 2
    res = run_connect(*ckpts, options, out=out, device="cpu", progress=False)
    for name in whole.arrays:
        np.testing.assert_array_equal(res[name], whole[name], err_msg=name)
    assert res.attrs["barriers"] == whole.attrs["barriers"]


KILLED_JOB = """
import sys, time
from landscape.analyses.connect.run import run_connect
from landscape.options.connect import ConnectOptions

def slow(stage, done, total):
    print("POINT", stage, done, flush=True)
    time.sleep(60 if done >= 2 else 0)

options = ConnectOptions(samples=32, batch_size=16, steps=5, align="weights", repair=True, curvature=True)
run_connect(sys.argv[1], sys.argv[2], options, out=sys.argv[3], device="cpu", progress=False, on_progress=slow)
"""
#: the killed run's options: aligned, REPAIRed, and the curvature at every point
KILLED = {**SMALL, "align": "weights", "repair": True, "curvature": True}


@pytest.mark.slow
def test_a_killed_run_leaves_its_done_points_and_resumes_identically(ckpts, tmp_path):
    out, job = tmp_path / "k.h5", tmp_path / "job.py"
    job.write_text(KILLED_JOB)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": WORKTREE}
    proc = subprocess.Popen(
        [sys.executable, str(job), *map(str, ckpts), str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        for line in proc.stdout:
            if line.startswith("POINT line 2"):
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    with h5py.File(out, "r") as f:
        assert int(f["line/done"][()].sum()) == 2
    options = ConnectOptions(**KILLED)
    res = run_connect(*ckpts, options, out=out, device="cpu", progress=False)
    whole = run_connect(*ckpts, options, out=None, device="cpu", progress=False)
    for name in (
        "line/loss",
        "line/accuracy",
        "line/done",
        *(f"{g}/{n}" for g in ("line", "unaligned_line") for n in CURVATURE_QUANTITIES),
    ):
        np.testing.assert_array_equal(res[name], whole[name], err_msg=name)
    assert res.attrs["bn_statistics"] == whole.attrs["bn_statistics"]


@pytest.mark.slow
def test_two_rank_torchrun_equals_one(ckpts, tmp_path):
    out = tmp_path / "tr.h5"
    args = ["connect", "--ckpt", ckpts[0], "--ckpt", ckpts[1], "--samples", "32", "--batch-size", "16"]
    args += ["--steps", "3", "--curve", "bezier", "--bend-epochs", "1", "--plane-steps", "2", "--device", "cpu"]
    args += ["--align", "weights", "--repair", "--curvature"]  # REPAIR's and the curvature's data passes too
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": WORKTREE}
    proc = torchrun("-m", "landscape", *args, "--out", out, "--quiet", timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("wrote") == 1 and "line (train): loss barrier" in proc.stdout
    one = tmp_path / "one.h5"
    result = CliRunner().invoke(cli, [*map(str, args), "--out", str(one), "--quiet"])
    assert result.exit_code == 0, result.output
    two, ref = read_result(out), read_result(one)
    assert list(two["splits"]) == list(ref["splits"])
    for name in ref.arrays:
        if name != "splits":
            np.testing.assert_allclose(two[name], ref[name], rtol=1e-6, err_msg=name)
    assert two.attrs["barriers"].keys() == ref.attrs["barriers"].keys()


def test_bad_input_is_one_line_and_touches_nothing(ckpts, tmp_path):
    for steps in (float("nan"), 0, -3, 1, 2.5):
        one_line_error(ConnectOptions, steps=steps, match="--steps")
    one_line_error(ConnectOptions, bend_lr=0.0, match="--bend-lr")
    one_line_error(ConnectOptions, plane_steps=1, match="--plane-steps")
    one_line_error(ConnectOptions, bn="train", match="--bn")
    wide = tiny(0, widths=(4, 6))
    other = save_checkpoint(
        tmp_path / "wide.pt", wide, model_name="resnet_mini", model_kwargs=wide.model_kwargs, num_classes=10
    )
    out = tmp_path / "x.h5"
    msg = one_line_error(run_connect, ckpts[0], other, ConnectOptions(**SMALL), out=out, device="cpu")
    assert "architecture" in msg or "shape" in msg
    assert not out.exists()
    run_connect(*ckpts, ConnectOptions(**SMALL), out=out, device="cpu", progress=False)
    before = out.read_bytes()
    one_line_error(run_connect, *ckpts, ConnectOptions(**{**SMALL, "steps": 3}), out=out, device="cpu", match="--force")
    assert out.read_bytes() == before
    with pytest.raises(LandscapeError, match="both"):
        landscape.connect(tiny(0), tiny(1), batches(), split="both", device="cpu")


def test_cli_prints_barriers_and_errors_in_one_line(ckpts, tmp_path):
    out = tmp_path / "cli.h5"
    base = ["connect", "--ckpt", str(ckpts[0]), "--ckpt", str(ckpts[1]), "--samples", "32", "--device", "cpu"]
    result = CliRunner().invoke(cli, [*base, "--steps", "3", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "line (train): loss barrier" in result.output and read_result(out).kind == "connect"
    result = CliRunner().invoke(cli, ["connect", "--ckpt", str(ckpts[0]), "--out", str(tmp_path / "y.h5")])
    assert result.exit_code == 2 and "--ckpt A.pt --ckpt B.pt" in result.output
    result = CliRunner().invoke(cli, [*base, "--steps", "0", "--out", str(tmp_path / "z.h5")])
    assert result.exit_code == 2 and "--steps" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "z.h5").exists()


def test_the_ends_are_the_networks_as_given_and_only_the_points_between_are_re_estimated():
    """With bn="recompute" the ends keep their own BatchNorm statistics; a point between gets re-estimated ones."""
    from helpers import conv_bn_model, reestimate_bn

    a = conv_bn_model()
    b = copy.deepcopy(a)
    with torch.no_grad():
        for p in b.parameters():
            p.add_(0.3 * torch.randn_like(p))
        b[1].running_mean.uniform_(-0.5, 0.5)
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(20, 1, 6, 6, generator=g, dtype=torch.float64), torch.randint(0, 4, (20,), generator=g)
    batches = [(x[:12], y[:12]), (x[12:], y[12:])]
    res = landscape.connect(a, b, batches, steps=3, bn="recompute", progress=False)

    def loss(net):
        with torch.no_grad():
            return float(F.cross_entropy(net.eval()(x), y))

    line = res["line/loss"][0]
    assert line[0] == pytest.approx(loss(a), rel=1e-12)  # theta_A with its own statistics (0.144 vs 0.337 before)
    assert line[2] == pytest.approx(loss(b), rel=1e-12)
    middle = copy.deepcopy(a)
    middle.load_state_dict({k: (v + b.state_dict()[k]) / 2 for k, v in a.state_dict().items()})
    assert line[1] == pytest.approx(loss(reestimate_bn(middle, batches)), rel=1e-10)  # between: re-estimated
    assert loss(reestimate_bn(copy.deepcopy(a), batches)) != pytest.approx(loss(a), rel=1e-6)  # the test can fail
