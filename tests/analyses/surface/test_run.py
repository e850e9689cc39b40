import copy
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import interrupt_after, reestimate_bn, torchrun
from torch import nn

from landscape.analyses.surface import run as run_module
from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.evaluator import PointEvaluator
from landscape.analyses.surface.run import compute_surface, parse_grid
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.errors import LandscapeError
from landscape.runtime import compile_cache as compile_cache_module
from landscape.runtime import packages
from landscape.store.read import read_result

# A tiny float64 BatchNorm CNN with unequal batches, shared by the in-process tests and the subprocess jobs
# (torchrun, kill-and-resume): `python job.py OUT [DELAY]` computes the same surface as `build()` here. The job is
# self-contained (its model is tests/helpers.py's conv_bn_model, written out: a job cannot import the helpers).
JOB = """
import sys, time
import numpy as np
import torch
from torch import nn
from landscape.runtime import distributed
from landscape.analyses.surface.directions import random_directions
from landscape.core.objective import Objective
from landscape.analyses.surface.run import compute_surface

XS = np.linspace(-1.0, 1.0, 5)
YS = np.linspace(-0.5, 1.0, 4)


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(48, 4)).double()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(22, 1, 6, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (22,), generator=g)
    batches = [(x[:8], y[:8]), (x[8:16], y[8:16]), (x[16:], y[16:])]
    objective = Objective(model, batches)
    return model, batches, objective, random_directions(objective.params, ndim=2, seed=3)


if __name__ == "__main__":
    distributed.start("cpu")
    _, _, objective, dirs = build()
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0

    def on_round(done, total):
        if distributed.is_main():  # one writer: two ranks' unbuffered prints would interleave on the pipe
            print("ROUND", done, flush=True)
        time.sleep(delay if done >= 3 else 0.0)

    compute_surface(objective, dirs, XS, YS, out=sys.argv[1], batch_points=1, progress=False, on_round=on_round)
"""
NS: dict = {}
exec(compile(JOB, "job", "exec"), NS)
build, XS, YS = NS["build"], NS["XS"], NS["YS"]


@pytest.fixture(scope="module")
def reference(one_thread, tmp_path_factory):
    """The uninterrupted single-process surface of the JOB model."""
    _, _, objective, dirs = build()
    out = tmp_path_factory.mktemp("ref") / "ref.h5"
    return compute_surface(objective, dirs, XS, YS, out=out, batch_points=1, progress=False)


def job_file(tmp_path):
    path = tmp_path / "job.py"
    path.write_text(JOB)
    return path


# ------------------------------------------------------------------------------------------------ grid
def test_parse_grid_is_an_inclusive_linspace():
    np.testing.assert_array_equal(parse_grid("-1:1:5"), [-1.0, -0.5, 0.0, 0.5, 1.0])
    np.testing.assert_array_equal(parse_grid("0:2:3"), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(parse_grid("0.5:0.5:1"), [0.5])
    np.testing.assert_array_equal(parse_grid("-1e-1:1e-1:3"), [-0.1, 0.0, 0.1])


@pytest.mark.parametrize("spec", ["1:2", "a:b:3", "1:0:5", "0:1:0", "0:1:2.5", "", "0:inf:3", "1:1:3"])
def test_bad_grid_specs_are_one_line_errors(spec):
    with pytest.raises(LandscapeError, match="bad grid --y") as exc:
        parse_grid(spec, "--y")
    assert "\n" not in str(exc.value)


# ------------------------------------------------------------------------------------------ exactness
def quadratic_problem(regularizer=None):
    """A bias-free linear model under MSE: the loss is an exact quadratic in its weights."""
    torch.manual_seed(0)
    model = nn.Linear(6, 4, bias=False).double()
    g = torch.Generator().manual_seed(2)
    X = torch.randn(10, 6, generator=g, dtype=torch.float64)
    Y = torch.randint(0, 4, (10,), generator=g)
    batches = [(X[:4], Y[:4]), (X[4:], Y[4:])]
    objective = Objective(model, batches, criterion="mse", regularizer=regularizer)
    dirs = random_directions(objective.params, ndim=2, seed=5, norm="layer")
    return model, X.numpy(), Y.numpy(), objective, dirs


def closed_form(W0, Dx, Dy, X, Y, a, b, reg=None):
    """L(W0 + a Dx + b Dy) = 1/(N C) ||R0 + a Ex + b Ey||^2 with R0 = X W0^T - T, E = X D^T, expanded."""
    T = np.eye(W0.shape[0])[Y]
    R0, Ex, Ey = X @ W0.T - T, X @ Dx.T, X @ Dy.T
    nc = R0.size
    loss = (
        (R0 * R0).sum()
        + 2 * a * (R0 * Ex).sum()
        + 2 * b * (R0 * Ey).sum()
        + a * a * (Ex * Ex).sum()
        + 2 * a * b * (Ex * Ey).sum()
        + b * b * (Ey * Ey).sum()
    ) / nc
    W = W0 + a * Dx + b * Dy
    if reg is not None and reg.kind == "l2":
        loss += 0.5 * reg.coef * (W * W).sum()
    if reg is not None and reg.kind == "norm-sum":
        loss += reg.coef * np.linalg.norm(W)
    acc = ((X @ W.T).argmax(1) == Y).mean()
    return loss, acc


@pytest.mark.parametrize("reg", [None, Regularizer("l2", 0.3), Regularizer("norm-sum", 0.05)])
def test_quadratic_model_reproduces_the_closed_form_on_a_non_square_grid(tmp_path, reg):
    model, X, Y, objective, dirs = quadratic_problem(reg)
    xs, ys = np.linspace(-1.0, 0.5, 4), np.linspace(0.0, 2.0, 3)  # non-square, 0 as an endpoint
    res = compute_surface(objective, dirs, xs, ys, out=tmp_path / "q.h5", batch_points=1, progress=False)
    W0 = model.weight.detach().numpy()
    Dx, Dy = dirs.x["weight"].numpy(), dirs.y["weight"].numpy()
    assert res["loss"].shape == (3, 4)
    np.testing.assert_array_equal(res["xcoordinates"], xs)
    np.testing.assert_array_equal(res["ycoordinates"], ys)
    for j, b in enumerate(ys):
        for i, a in enumerate(xs):
            loss, acc = closed_form(W0, Dx, Dy, X, Y, a, b, reg)
            assert res["loss"][j, i] == pytest.approx(loss, rel=1e-12), (j, i)
            assert res["accuracy"][j, i] == acc
    assert res["done"].all() and res.attrs["complete"]
    assert res.axes["loss"] == ["y", "x"]
    want = {"kind": reg.kind, "coef": reg.coef} if reg else {"kind": "none", "coef": 0.0}
    assert res.attrs["regularizer"] == want


def test_centre_point_is_the_model_loss(tmp_path, reference):
    model, batches, objective, _ = build()
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    with torch.no_grad():
        logits = model.eval()(x)
    expected = float(F.cross_entropy(logits, y))
    res = reference
    i0 = int(np.flatnonzero(res["xcoordinates"] == 0.0)[0])
    j0 = int(np.flatnonzero(res["ycoordinates"] == 0.0)[0])
    assert res["loss"][j0, i0] == pytest.approx(expected, rel=1e-12)
    assert res["accuracy"][j0, i0] == float((logits.argmax(1) == y).double().mean())
    assert res["loss"][j0, i0] == objective.evaluate().loss  # exactly the objective's own value
    one = compute_surface(
        objective,
        random_directions(objective.params, ndim=1, seed=3),
        XS,
        None,
        out=tmp_path / "line.h5",
        progress=False,
    )
    assert one["loss"].shape == (1, 5)
    assert one["loss"][0, i0] == objective.evaluate().loss  # exactly the objective's own value


def test_one_dimensional_surface_has_no_y_direction(tmp_path):
    _, _, objective, _ = build()
    dirs = random_directions(objective.params, ndim=1, seed=3)
    res = compute_surface(
        objective, dirs, np.linspace(0, 1, 3), None, out=tmp_path / "l.h5", progress=False, store_directions="full"
    )
    np.testing.assert_array_equal(res["ycoordinates"], [0.0])
    assert not any(k.startswith("directions/y/") for k in res.arrays)
    assert res.attrs["surface_ndim"] == 1 and res.attrs["ygrid"] is None
    names = {k.split("/", 2)[2] for k in res.arrays if k.startswith("directions/x/")}
    assert names == set(objective.params)


def test_surface_matches_a_brute_force_evaluation_of_each_point(reference):
    model, batches, _, dirs = build()
    res = reference
    for j, b in enumerate(YS[[0, -1]]):
        for i, a in enumerate(XS[[0, 3]]):
            m = copy.deepcopy(model).eval()
            with torch.no_grad():
                for name, p in m.named_parameters():
                    p.add_(a * dirs.x[name] + b * dirs.y[name])
                total = sum(F.cross_entropy(m(x), y, reduction="sum") for x, y in batches) / 22
            jj, ii = [0, -1][j], [0, 3][i]
            assert res["loss"][jj, ii] == pytest.approx(float(total), rel=1e-12)


def test_cosine_and_options_are_recorded(reference):
    attrs = reference.attrs
    assert attrs["kind"] == "surface" and attrs["bn"] == "eval" and attrs["norm"] == "filter"
    assert attrs["cosine"] == pytest.approx(build()[3].meta["cosine"])
    assert attrs["batch_points"] == 1 and attrs["direction_type"] == "random"


# ------------------------------------------------------------------------------------- vmap / loop / BN
def test_vectorised_and_looped_evaluation_agree(tmp_path, reference):
    _, _, objective, dirs = build()
    vec = compute_surface(objective, dirs, XS, YS, out=tmp_path / "v.h5", batch_points=3, progress=False)
    assert vec.attrs["batch_points"] == 3
    np.testing.assert_allclose(vec["loss"], reference["loss"], rtol=1e-12)
    np.testing.assert_array_equal(vec["accuracy"], reference["accuracy"])
    ev = PointEvaluator(objective, dirs.x, dirs.y)
    pts = [(0.3, -0.2), (1.0, 0.5)]
    np.testing.assert_allclose(ev.vectorised(pts), ev.loop(pts), rtol=1e-12)


def test_vmap_timing_is_per_point_and_none_when_vmap_cannot_batch(monkeypatch):
    _, _, objective, dirs = build()
    ev = PointEvaluator(objective, dirs.x, dirs.y)
    monkeypatch.setattr(ev, "vectorised", lambda points, batches=None: time.sleep(0.2))
    assert 0.2 / 4 <= ev.time_vmap(k=4) < 0.2  # one call of 4 points on the first batch, per point

    def cannot_batch(points, batches=None):
        raise RuntimeError("vmap: data-dependent control flow")

    monkeypatch.setattr(ev, "vectorised", cannot_batch)
    assert ev.time_vmap(k=4) is None


def test_vectorised_regulariser_agrees_with_loop():
    _, _, _, objective, dirs = quadratic_problem(Regularizer("norm-sum", 0.05))
    ev = PointEvaluator(objective, dirs.x, dirs.y)
    pts = [(0.1, 0.2), (-0.5, 1.0), (0.0, 0.0)]
    np.testing.assert_allclose(ev.vectorised(pts), ev.loop(pts), rtol=1e-12)


def test_bn_recompute_matches_a_direct_re_estimation(tmp_path):
    model, batches, objective, dirs = build()
    res = compute_surface(objective, dirs, [0.0, 0.7], [0.4], out=tmp_path / "bn.h5", bn="recompute", progress=False)
    assert res.attrs["bn"] == "recompute" and res.attrs["batch_points"] == 1
    for i, a in enumerate([0.0, 0.7]):
        m = copy.deepcopy(model)
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.add_(a * dirs.x[name] + 0.4 * dirs.y[name])
            reestimate_bn(m, batches)
            total = sum(F.cross_entropy(m(x), y, reduction="sum") for x, y in batches) / 22
        assert res["loss"][0, i] == pytest.approx(float(total), rel=1e-12)
    eval_mode = PointEvaluator(objective, dirs.x, dirs.y).loop([(0.7, 0.4)])[0][0]
    assert abs(eval_mode - res["loss"][0, 1]) > 1e-6  # the two modes really differ here


def test_bn_recompute_without_batchnorm_is_an_error(tmp_path):
    _, _, _, objective, dirs = quadratic_problem()
    with pytest.raises(LandscapeError, match="BatchNorm"):
        compute_surface(objective, dirs, [0.0], [0.0], out=tmp_path / "x.h5", bn="recompute")


# ----------------------------------------------------------------------------------- files and resume
def test_interrupt_and_resume_gives_identical_arrays(tmp_path, reference):
    _, _, objective, dirs = build()
    out = tmp_path / "r.h5"

    stop = interrupt_after(7)

    with pytest.raises(KeyboardInterrupt):
        compute_surface(objective, dirs, XS, YS, out=out, batch_points=1, progress=False, on_round=stop)
    with h5py.File(out, "r") as f:  # a valid, partial file
        assert int(f["done"][()].sum()) == 7 and not f.attrs["complete"]
        assert np.isnan(f["loss"][()][~f["done"][()]]).all()
    seen = []
    res = compute_surface(
        objective, dirs, XS, YS, out=out, batch_points=1, progress=False, on_round=lambda d, t: seen.append(d)
    )
    assert seen[0] == 8 and seen[-1] == 20  # only the missing points were computed
    for name in ("loss", "data_loss", "accuracy", "done"):
        np.testing.assert_array_equal(res[name], reference[name])


@pytest.mark.parametrize("storage", ["seed", "full"])
def test_resume_reuses_the_stored_directions(tmp_path, reference, storage):
    _, _, objective, dirs = build()
    out = tmp_path / "d.h5"

    stop = interrupt_after(3)
    kw = {"batch_points": 1, "progress": False, "store_directions": storage}

    with pytest.raises(KeyboardInterrupt):
        compute_surface(objective, dirs, XS, YS, out=out, on_round=stop, **kw)
    # a direction that differs below the fingerprint's precision: the file's directions must win
    nudged = copy.deepcopy(dirs)
    name = next(iter(nudged.x))
    nudged.x[name] = nudged.x[name] * (1 + 1e-12)
    res = compute_surface(objective, nudged, XS, YS, out=out, **kw)
    np.testing.assert_array_equal(res["loss"], reference["loss"])
    assert res.attrs["directions_storage"] == storage
    if storage == "full":
        np.testing.assert_array_equal(res[f"directions/x/{name}"], dirs.x[name].numpy())
    else:  # nothing but the recipe: drawn again on resume
        assert not any(k.startswith("directions/") for k in res.arrays)
        assert res.attrs["directions_recipe"]["seed"] == 3 and res.attrs["directions_recipe"]["ndim"] == 2


def test_other_options_refused_unless_force(tmp_path, reference):
    _, _, objective, dirs = build()
    out = tmp_path / "o.h5"
    compute_surface(objective, dirs, XS, YS, out=out, progress=False, batch_points=1)
    with pytest.raises(LandscapeError, match="--force") as exc:
        compute_surface(objective, dirs, XS[:3], YS, out=out, progress=False)
    assert "xgrid" in str(exc.value)
    res = compute_surface(objective, dirs, XS[:3], YS, out=out, progress=False, force=True, batch_points=1)
    np.testing.assert_array_equal(res["loss"], reference["loss"][:, :3])
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(LandscapeError, match="not an HDF5 file"):
        compute_surface(objective, dirs, XS, YS, out=tmp_path / "text.h5", progress=False)


def test_killed_process_leaves_a_valid_file_that_resumes(tmp_path, reference):
    out = tmp_path / "k.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(job_file(tmp_path)), str(out), "60"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        for line in proc.stdout:
            if line.startswith("ROUND 3"):
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    with h5py.File(out, "r") as f:  # the set-up's point written at once, the others in groups (WRITE_EVERY_S)
        done = f["done"][()]
        assert 1 <= int(done.sum()) <= 3 and np.isnan(f["loss"][()][~done]).all()
    _, _, objective, dirs = build()
    res = compute_surface(objective, dirs, XS, YS, out=out, batch_points=1, progress=False)
    np.testing.assert_array_equal(res["loss"], reference["loss"])
    np.testing.assert_array_equal(res["accuracy"], reference["accuracy"])


def test_two_rank_torchrun_equals_the_single_process_run(tmp_path, reference):
    out = tmp_path / "tr.h5"
    proc = torchrun(job_file(tmp_path), out, timeout=120, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rounds = [line for line in proc.stdout.splitlines() if line.startswith("ROUND")]
    assert rounds[:2] == ["ROUND 1", "ROUND 3"]  # the set-up's timed first point, then one point per rank
    from landscape.store.read import read_result

    res = read_result(out)
    for name in ("loss", "data_loss", "accuracy", "done"):
        np.testing.assert_allclose(res[name], reference[name], rtol=1e-13)
    for name in reference.arrays:
        if name.startswith("directions/"):
            np.testing.assert_array_equal(res[name], reference[name])


# ------------------------------------------------------------------------------------------- compile
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_compiled_package_agrees_with_eager_and_is_loaded_from_the_cache_next_time(tmp_path, reference, dtype):
    model, batches, _, _ = build()
    objective = Objective(model.to(dtype), [(x.to(dtype), y) for x, y in batches])
    dirs = random_directions(objective.params, ndim=2, seed=3)
    kw = {"progress": False}
    eager = compute_surface(objective, dirs, XS, YS, out=tmp_path / "e.h5", compile="off", batch_points=1, **kw)
    rtol = 1e-12 if dtype == torch.float64 else 1e-5
    if dtype == torch.float64:
        np.testing.assert_allclose(eager["loss"], reference["loss"], rtol=1e-12)
    cold = compute_surface(objective, dirs, XS, YS, out=tmp_path / "c.h5", compile=True, progress=False)
    assert cold.attrs["compiled"] and cold.attrs["compile"] and cold.attrs["batch_points"] == 1
    steps = [s for s, _ in cold.attrs["compile_decision"]["steps"]]
    assert "build built" in steps and "first point compiled" in steps
    np.testing.assert_allclose(cold["loss"], eager["loss"], rtol=rtol)
    np.testing.assert_array_equal(cold["accuracy"], eager["accuracy"])
    warm = compute_surface(objective, dirs, XS, YS, out=tmp_path / "w.h5", compile=True, progress=False)
    steps = [s for s, _ in warm.attrs["compile_decision"]["steps"]]
    assert warm.attrs["compiled"] and steps[1].startswith("package loaded") and not [s for s in steps if "build" in s]
    np.testing.assert_array_equal(warm["loss"], cold["loss"])
    record = compile_cache_module.read_record(warm.attrs["compile_decision"]["key"])
    assert record.n_builds == 1 and record.compiled_point_s > 0 and not record.failed


def test_compile_auto_tries_nothing_on_a_small_grid_and_resumes_as_the_same_run(tmp_path, reference, monkeypatch):
    monkeypatch.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path / "cache"))  # no record
    _, _, objective, dirs = build()
    out = tmp_path / "auto.h5"

    def stop(done, total):
        if done >= 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compute_surface(objective, dirs, XS, YS, out=out, batch_points=1, progress=False, on_round=stop)
    decision = read_result(out).attrs["compile_decision"]  # the first run's, made before its first point
    assert decision["reason"] == "does not fit the set-up budget" and decision["estimate_source"] == "defaults"
    assert decision["points_left"] == XS.size * YS.size and decision["eager_point_s"] > 0
    assert decision["compile_s_estimate"] == compile_cache_module.DEFAULT_COMPILE_SECONDS
    assert [s for s, _ in decision["steps"]] == ["fold", "fold checked", "layout", "first point"]
    res = compute_surface(objective, dirs, XS, YS, out=out, batch_points=1, progress=False)  # auto: resumes
    assert res.attrs["compile"] == "auto" and res.attrs["compile_option"] == "auto" and not res.attrs["compiled"]
    decision = res.attrs["compile_decision"]  # not decided again: the first run's choice is taken
    assert decision["reason"] == "as recorded by the run that began the file" and decision["option"] == "auto"
    assert decision["points_left"] == XS.size * YS.size - 6
    assert [s for s, _ in decision["steps"]] == ["fold", "fold checked"]  # the layout and compile not timed again
    np.testing.assert_allclose(res["loss"], reference["loss"], rtol=1e-12)
    with pytest.raises(LandscapeError, match="--compile must be one of auto, on, off"):
        compute_surface(objective, dirs, XS, YS, out=tmp_path / "bad.h5", compile="sometimes")


def test_a_model_that_cannot_be_exported_stays_eager(tmp_path, reference, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("data-dependent control flow")

    monkeypatch.setattr(torch.export, "export", broken)
    _, _, objective, dirs = build()
    res = compute_surface(objective, dirs, XS, YS, out=tmp_path / "e.h5", compile=True, batch_points=1, progress=False)
    assert res.attrs["compile"] and not res.attrs["compiled"]
    assert res.attrs["compile_decision"]["reason"] == "torch.export failed (RuntimeError)"
    np.testing.assert_array_equal(res["loss"], reference["loss"])


class BackgroundBuild:
    """A build left running (in place of packages.BuildJob) that ends, built, after ``polls`` polls."""

    polls = 5
    made: list = []

    def __init__(self, program, key, *, threads, compile_threads=None):
        self.left, self.stopped, self.key = BackgroundBuild.polls, False, key
        BackgroundBuild.made.append(self)

    def poll(self):
        self.left -= 1
        return packages.Build(packages.package_path(self.key), 1.0, "built") if self.left <= 0 else None

    def stop(self, outcome="stopped"):
        self.stopped = True
        return self.poll() if self.left <= 1 else packages.Build(None, 1.0, outcome)


@pytest.fixture
def background(monkeypatch, tmp_path):
    """Builds left running where a core is spare and a build is expected to be free; the package a stand-in: the
    run's own eager per-batch loss, called as a package is (and taken to measure half of eager's time)."""
    monkeypatch.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(run_module, "spare_cores", lambda device: 1)
    monkeypatch.setattr(compile_cache_module, "DEFAULT_COMPILE_SECONDS", 0.0)
    monkeypatch.setattr(packages, "BuildJob", BackgroundBuild)
    built = set()
    monkeypatch.setattr(packages, "cached_package", lambda key: packages.package_path(key) if key in built else None)
    stand_in = object()

    def load(key, path, device):
        built.add(key)
        return stand_in

    monkeypatch.setattr(packages, "load_package", load)
    use_package = PointEvaluator.use_package

    def use(self, runner, *args, **kwargs):
        if runner is stand_in:
            names = sorted(self._point_state(self.theta))
            runner = lambda inputs: list(self._batch_eval_state(dict(zip(names, inputs[:-2])), *inputs[-2:]))  # noqa: E731
        return use_package(self, runner, *args, **kwargs)

    monkeypatch.setattr(PointEvaluator, "use_package", use)
    monkeypatch.setattr(PointEvaluator, "compiled_ratio", lambda self, at, rounds=3: 0.5)  # the stand-in is eager
    BackgroundBuild.made = []
    return BackgroundBuild


def test_a_build_left_running_takes_over_the_points_when_it_ends(tmp_path, reference, background):
    _, _, objective, dirs = build()
    res = compute_surface(objective, dirs, XS, YS, out=tmp_path / "b.h5", batch_points=1, progress=False)
    d = res.attrs["compile_decision"]
    assert res.attrs["compiled"] and d["reason"] == "pays back (built in the background)" and d["build"] == "built"
    assert d["compiled_from"] == 5  # the set-up's first point, then one poll per point until the fifth
    assert [s for s, _ in d["steps"]][-1] == "export" and len(background.made) == 1
    np.testing.assert_allclose(res["loss"], reference["loss"], rtol=1e-12)
    np.testing.assert_array_equal(res["accuracy"], reference["accuracy"])


@pytest.mark.parametrize("stop_at", [3, 12])
def test_a_run_interrupted_before_or_after_the_switch_resumes_the_same_way(tmp_path, reference, background, stop_at):
    _, _, objective, dirs = build()
    out = tmp_path / "b.h5"

    def stop(done, total):
        if done >= stop_at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compute_surface(objective, dirs, XS, YS, out=out, batch_points=1, progress=False, on_round=stop)
    switched = stop_at > 5
    assert read_result(out).attrs["compiled"] == switched
    assert background.made[0].stopped != switched  # a build still running is stopped with the run
    res = compute_surface(objective, dirs, XS, YS, out=out, batch_points=1, progress=False)
    assert res.attrs["compiled"] == switched and len(background.made) == 1  # not built again on the resume
    assert res.attrs["compile_decision"]["reason"] == "as recorded by the run that began the file"
    np.testing.assert_allclose(res["loss"], reference["loss"], rtol=1e-12)


def test_no_build_is_left_running_without_a_spare_core(tmp_path, background, monkeypatch):
    monkeypatch.setattr(run_module, "spare_cores", lambda device: 0)
    monkeypatch.setattr(packages, "build_package", lambda *a, **k: packages.Build(None, 0.1, "failed", "waited for"))
    _, _, objective, dirs = build()
    res = compute_surface(objective, dirs, XS, YS, out=tmp_path / "b.h5", batch_points=1, progress=False)
    assert not background.made and res.attrs["compile_decision"]["reason"] == "the build failed: waited for"


def test_the_progress_line_shows_the_set_up(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("LANDSCAPE_PROGRESS_SECONDS", "1000")
    _, _, objective, dirs = build()
    compute_surface(objective, dirs, XS, YS, out=tmp_path / "p.h5", batch_points=1, progress=True)
    err = capfd.readouterr().err
    line = [text for text in err.splitlines() if text.startswith("surface: 20/20 points done")]
    assert line and "set-up" in line[0] and "fold" in line[0] and "first point" in line[0] and line[0].endswith("eager")


def test_a_file_killed_while_writing_directions_is_completed_on_resume(tmp_path, reference):
    _, _, objective, dirs = build()
    out = tmp_path / "w.h5"

    def stop(done, total):
        raise KeyboardInterrupt

    kw = {"batch_points": 1, "progress": False, "store_directions": "full"}
    with pytest.raises(KeyboardInterrupt):
        compute_surface(objective, dirs, XS, YS, out=out, on_round=stop, **kw)
    with h5py.File(out, "r+") as f:  # as if killed half-way through writing the directions
        f["done"][...] = False
        del f["directions/y"]
        del f.attrs["directions_written"]
    res = compute_surface(objective, dirs, XS, YS, out=out, **kw)
    for name in reference.arrays:
        np.testing.assert_array_equal(res[name], reference[name])


def test_a_grid_too_large_is_refused_with_its_size_and_time_before_any_file(tmp_path):
    _, _, objective, dirs = build()
    out = tmp_path / "big.h5"
    with pytest.raises(LandscapeError, match=r"1001 x 1000 grid has 1,001,000 points: .* GB .* hours") as e:
        compute_surface(objective, dirs, np.linspace(-1, 1, 1001), np.linspace(-1, 1, 1000), out=out)
    assert "\n" not in str(e.value) and not out.exists()


def test_non_finite_grid_coordinates_are_refused(tmp_path):
    _, _, objective, dirs = build()
    with pytest.raises(LandscapeError, match="finite"):
        compute_surface(objective, dirs, [0.0, float("nan")], YS, out=tmp_path / "n.h5")
    assert not (tmp_path / "n.h5").exists()


# ------------------------------------------------------------------------------- a resumed run's choices
def _wide_conv():
    """A float32 CNN whose 32-channel convolutions give other last bits in the channels-last layout on a CPU."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 4),
    ).eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 3, 8, 8, generator=g), torch.randint(0, 4, (24,), generator=g)
    return model, [(x[:12], y[:12]), (x[12:], y[12:])]


def _timed_as(layout):
    """A memory-format timing that comes out as ``layout`` (as another machine's, or another moment's, might)."""

    def choose(self, repeats=2):
        if layout:
            self.use_channels_last()
        return layout

    return choose


def test_a_resumed_surface_takes_the_recorded_layout_and_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    from landscape.core.forward import EvalForward

    model, batches = _wide_conv()

    def run(out, layout, on_round=None):
        monkeypatch.setattr(EvalForward, "choose_memory_format", _timed_as(layout))
        objective = Objective(model, batches)
        dirs = random_directions(objective.params, ndim=2, seed=3)
        kw = {"batch_points": 1, "compile": "off", "progress": False, "on_round": on_round}
        return compute_surface(objective, dirs, XS, YS, out=out, **kw)

    whole = run(tmp_path / "whole.h5", False)
    other = run(tmp_path / "other.h5", True)
    assert not np.array_equal(whole["loss"], other["loss"])  # the layouts differ in the last bits here
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut.h5", False, on_round=interrupt_after(8))
    resumed = run(tmp_path / "cut.h5", True)  # this run's timing prefers channels-last: the file's choice wins
    np.testing.assert_array_equal(resumed["loss"], whole["loss"])
    np.testing.assert_array_equal(resumed["accuracy"], whole["accuracy"])
    assert resumed.attrs["channels_last"] is False or resumed.attrs["channels_last"] == 0


def test_a_real_build_the_grid_outruns_is_stopped_with_its_compilers(tmp_path, reference, monkeypatch):
    monkeypatch.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(run_module, "spare_cores", lambda device: 1)
    monkeypatch.setattr(compile_cache_module, "DEFAULT_COMPILE_SECONDS", 0.0)
    started = []
    job_class = packages.BuildJob

    def job(*args, **kwargs):
        started.append(job_class(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(packages, "BuildJob", job)
    _, _, objective, dirs = build()
    res = compute_surface(objective, dirs, XS, YS, out=tmp_path / "b.h5", batch_points=1, progress=False)
    d = res.attrs["compile_decision"]
    assert len(started) == 1 and started[0].result.outcome == "stopped" and not res.attrs["compiled"]
    assert d["build"] == "stopped" and d["reason"] == "the background build did not end before the points (stopped)"
    assert compile_cache_module.read_record(d["key"]).stopped_s > 0
    assert not list(packages.packages_dir().iterdir())  # neither the program nor a half-written package is left
    np.testing.assert_array_equal(res["loss"], reference["loss"])
