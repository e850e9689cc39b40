"""landscape.analyses.trajectory.run: polar coordinates of training snapshots against numpy, ordering, errors, CLI and
plot."""

import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

from landscape.analyses.trajectory.run import compute_trajectory, polar_point, run_trajectory, snapshots_of
from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.options.trajectory import TrajectoryOptions
from landscape.plot import plot_files
from landscape.store.read import read_result

KW = dict(in_chans=1, img_size=16)


def _model(name="resnet_mini", seed=0):
    torch.manual_seed(seed)
    return create_model(name, num_classes=10, **KW)


def _save(path, model, name="resnet_mini", epoch=None, params=None):
    """Save ``model`` with its named parameters replaced by ``params`` (name -> tensor) when given."""
    if params is not None:
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(params[n])
    return save_checkpoint(path, model, model_name=name, model_kwargs=KW, num_classes=10, epoch=epoch)


def _flat(params):
    return np.concatenate([t.detach().double().numpy().ravel() for t in params.values()])


def _numpy_polar(theta0, theta):
    a, b = _flat(theta).astype(np.float64), _flat(theta0).astype(np.float64)
    u, w = a / np.linalg.norm(a), b / np.linalg.norm(b)
    angle = 2 * np.arctan2(np.linalg.norm(u - w), np.linalg.norm(u + w))  # Kahan's form: exact near 0, unlike arccos
    return np.linalg.norm(a - b), angle, np.linalg.norm(a)


@pytest.fixture
def run(tmp_path):
    """A start and three hand-made snapshots of known relations: scaled, orthogonally moved, random."""
    model = _model()
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    flat0 = _flat(theta0)
    gen = torch.Generator().manual_seed(1)
    noise = {n: torch.randn(t.shape, generator=gen) for n, t in theta0.items()}
    flat_noise = _flat(noise)
    coef = flat_noise @ flat0 / (flat0 @ flat0)
    orthogonal = {n: 0.3 * (noise[n] - coef * theta0[n]) for n in theta0}
    paths = [_save(tmp_path / "s0.pt", model, epoch=0)]
    snaps = {
        "scaled": {n: 1.7 * t for n, t in theta0.items()},
        "orthogonal": {n: theta0[n] + orthogonal[n] for n in theta0},
        "random": {n: theta0[n] + 0.05 * noise[n] for n in theta0},
    }
    for i, params in enumerate(snaps.values(), start=1):
        paths.append(_save(tmp_path / f"s{i}.pt", _model(), epoch=i, params=params))
    return dict(paths=paths, theta0=theta0, snaps=snaps, orthogonal=orthogonal)


def test_known_relations_against_numpy(run):
    traj = compute_trajectory(run["paths"])
    theta0, snaps = run["theta0"], run["snaps"]
    norm0 = np.linalg.norm(_flat(theta0))
    assert traj.distance[0] == 0 and traj.angle[0] == 0 and traj.norm[0] == pytest.approx(norm0, rel=1e-12)
    # theta_t = a theta_0: angle 0 and distance |a - 1| ||theta_0||
    assert traj.angle[1] == pytest.approx(0.0, abs=1e-7)
    assert traj.distance[1] == pytest.approx(0.7 * norm0, rel=1e-6)
    assert traj.norm[1] == pytest.approx(1.7 * norm0, rel=1e-6)
    # an orthogonal perturbation v: distance ||v||, angle atan(||v|| / ||theta_0||)
    v = np.linalg.norm(_flat(run["orthogonal"]))
    assert traj.distance[2] == pytest.approx(v, rel=1e-5)
    assert traj.angle[2] == pytest.approx(math.atan2(v, norm0), rel=1e-5)
    for i, params in enumerate(snaps.values(), start=1):
        d, a, n = _numpy_polar(theta0, params)
        assert traj.distance[i] == pytest.approx(d, rel=1e-9)
        assert traj.angle[i] == pytest.approx(a, rel=1e-6, abs=1e-7)
        assert traj.norm[i] == pytest.approx(n, rel=1e-9)
    assert list(traj.epoch) == [0, 1, 2, 3] and np.isnan(traj.step).all()
    # the parameter set is named_parameters(): no BatchNorm running statistics
    assert traj.parameter_names == list(theta0) and not any("running" in n for n in traj.parameter_names)


def test_tiny_angle_is_accurate_and_negative_scale_is_pi():
    theta0 = {"w": torch.tensor([3.0, 4.0], dtype=torch.float64)}
    tiny = polar_point(theta0, {"w": torch.tensor([3.0 - 4e-9, 4.0 + 3e-9], dtype=torch.float64)})
    assert tiny.angle == pytest.approx(5e-9 / 5.0, rel=1e-6)  # arccos of the cosine would give 0 or 2e-8
    flipped = polar_point(theta0, {"w": -2 * theta0["w"]})
    assert flipped.angle == pytest.approx(math.pi) and flipped.distance == pytest.approx(15.0)


def test_order_is_the_order_given_and_exclude(run, tmp_path):
    paths = run["paths"]
    reordered = compute_trajectory([paths[0], paths[3], paths[1]])
    assert list(reordered.epoch) == [0, 3, 1]
    full = compute_trajectory(paths)
    assert reordered.distance[1] == full.distance[3] and reordered.distance[2] == full.distance[1]
    result = run_trajectory(paths, TrajectoryOptions(exclude=("fc",)), out=tmp_path / "t.h5")
    assert list(result["snapshots"]) == ["s0.pt", "s1.pt", "s2.pt", "s3.pt"]
    names = result.attrs["parameter_names"]
    assert names and not any("fc" in n for n in names)
    kept = {n: run["theta0"][n] for n in names}
    d, a, _ = _numpy_polar(kept, {n: run["snaps"]["random"][n] for n in names})
    assert result["distance"][3] == pytest.approx(d, rel=1e-9) and result["angle"][3] == pytest.approx(a, rel=1e-6)
    assert result.attrs["exclude"] == ["fc"] and result.attrs["parameter_set"] == "named_parameters"


def test_other_architecture_and_user_errors(run, tmp_path):
    other = _save(tmp_path / "vit.pt", _model("vit_mini"), name="vit_mini")
    msg = one_line_error(compute_trajectory, [run["paths"][0], other], match="same architecture")
    assert "vit.pt" in msg
    one_line_error(compute_trajectory, run["paths"][:1], match="at least one snapshot")
    one_line_error(compute_trajectory, run["paths"], TrajectoryOptions(exclude=("*",)), match="leaves no parameter")
    with pytest.raises(LandscapeError, match="non-empty"):
        TrajectoryOptions(exclude=("",))
    one_line_error(snapshots_of, run["paths"][0], match="--snapshot-initial")


def test_snapshots_of_finds_train_snapshots_in_order(tmp_path):
    model = _model()
    for tag, epoch in (("epoch010", 10), ("epoch002", 2), ("warmup", 2), ("init", 0)):
        _save(tmp_path / f"run.{tag}.pt", model, epoch=epoch)
    _save(tmp_path / "run.pt", model, epoch=12)
    _save(tmp_path / "other.epoch001.pt", model, epoch=1)
    names = [p.name for p in snapshots_of(tmp_path / "run.pt")]
    assert names == ["run.init.pt", "run.warmup.pt", "run.epoch002.pt", "run.epoch010.pt", "run.pt"]


def test_cli_on_train_snapshots_and_plot(tmp_path):
    runner = CliRunner()
    ckpt = tmp_path / "run.pt"
    trained = runner.invoke(
        cli,
        [
            "train",
            "--model",
            "resnet_mini",
            "--data",
            "digits:16",
            "--epochs",
            "3",
            "--subset",
            "0.05",
            "--snapshot-initial",
            "--snapshot-every",
            "1",
            "--quiet",
            "--out",
            str(ckpt),
        ],
    )
    assert trained.exit_code == 0, trained.output
    out = tmp_path / "traj.h5"
    done = runner.invoke(cli, ["trajectory", "--snapshots-of", str(ckpt), "--out", str(out)])
    assert done.exit_code == 0, done.output
    result = read_result(out)
    assert result.kind == "trajectory" and result.attrs["complete"]
    assert list(result["snapshots"]) == ["run.init.pt", "run.epoch001.pt", "run.epoch002.pt", "run.pt"]
    assert list(result["epoch"]) == [0, 1, 2, 3]
    assert result["distance"][0] == 0 and np.all(result["distance"][1:] > 0) and np.all(result["angle"][1:] > 0)
    assert result.attrs["model"] == "resnet_mini" and len(result.attrs["checkpoint_sha256"]) == 64
    # the same files given one by one are the same run: the complete file is returned as it is
    again = runner.invoke(
        cli,
        ["trajectory", *sum((["--ckpt", str(tmp_path / n)] for n in result["snapshots"]), [])] + ["--out", str(out)],
    )
    assert again.exit_code == 0, again.output
    both = runner.invoke(cli, ["trajectory", "--ckpt", str(ckpt), "--snapshots-of", str(ckpt)])
    assert both.exit_code == 2 and "one of the two" in both.output
    plotted = runner.invoke(cli, ["plot", str(out), "--out", str(tmp_path / "fig")])
    assert plotted.exit_code == 0, plotted.output
    assert (tmp_path / "fig" / "traj_trajectory.png").stat().st_size > 0


def test_polar_figure_overlays_files(run, tmp_path):
    a = run_trajectory(run["paths"], out=tmp_path / "a.h5")
    b = run_trajectory(run["paths"][:3], out=tmp_path / "b.h5")
    from landscape.plot.trajectory import polar_figure

    fig = polar_figure([a, b])
    ax = fig.axes[0]
    assert ax.name == "polar"
    lines = [line for line in ax.get_lines() if line.get_label() in ("resnet_mini (a)", "resnet_mini (b)")]
    assert len(lines) == 2 and lines[0].get_color() != lines[1].get_color()
    np.testing.assert_array_equal(lines[0].get_xdata(), a["angle"])
    np.testing.assert_array_equal(lines[0].get_ydata(), a["distance"])
    start = [line for line in ax.get_lines() if "start" in line.get_label()]
    assert len(start) == 1 and list(start[0].get_ydata()) == [0.0]
    written = plot_files([tmp_path / "a.h5", tmp_path / "b.h5"], tmp_path / "figs")
    assert [p.name for p in written] == ["trajectory_a_vs_b.png"]
