"""How a surface file keeps its directions: by recipe (seed), in float16 (half) or in full; fingerprint checks."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import landscape
from landscape.analyses.surface.directions import target_directions
from landscape.analyses.surface.run import compute_surface
from landscape.errors import LandscapeError
from tests.analyses.surface.test_run import XS, YS, build
from tests.helpers import interrupt_after, one_line_error

KW = {"batch_points": 1, "progress": False}


def killed_file(path, storage, points=3):
    """A surface file of the test_run JOB model interrupted after ``points`` points, stored as ``storage``."""
    _, _, objective, dirs = build()
    with pytest.raises(KeyboardInterrupt):
        compute_surface(
            objective, dirs, XS, YS, out=path, on_round=interrupt_after(points), store_directions=storage, **KW
        )
    return objective, dirs


def test_a_file_whose_recipe_was_altered_is_refused_in_one_line_and_kept(one_thread, tmp_path):
    out = tmp_path / "t.h5"
    objective, dirs = killed_file(out, "seed")
    with h5py.File(out, "r+") as f:
        recipe = f.attrs["directions_recipe"]
        f.attrs["directions_recipe"] = recipe.replace('"seed": 3', '"seed": 4')
    before = out.read_bytes()
    msg = one_line_error(compute_surface, objective, dirs, XS, YS, out=out, match="drawn with seed 4", **KW)
    assert "this run's with 3" in msg and "--force" in msg
    assert out.read_bytes() == before  # nothing written
    with h5py.File(out, "r+") as f:  # restored, it resumes
        f.attrs["directions_recipe"] = recipe
    assert compute_surface(objective, dirs, XS, YS, out=out, **KW)["done"].all()


def test_a_recipe_of_another_seed_without_its_digest_is_not_resumed(one_thread, tmp_path):
    # the hostile case: the recipe says another seed and the fingerprint that would catch it is gone; resuming
    # would append points along other directions under the file's identity (rows of two surfaces in one file)
    out = tmp_path / "t.h5"
    objective, dirs = killed_file(out, "seed")
    with h5py.File(out, "r+") as f:
        f.attrs["directions_recipe"] = f.attrs["directions_recipe"].replace('"seed": 3', '"seed": 4')
        del f.attrs["directions_digest"]
    before = out.read_bytes()
    msg = one_line_error(compute_surface, objective, dirs, XS, YS, out=out, match="no valid storage or finger", **KW)
    assert "--force" in msg and out.read_bytes() == before


NESTED = "[" * 100000 + "]" * 100000


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda r: "[1, 2, 3]", "it is list"),
        (lambda r: r.replace('"seed": 3, ', ""), "it has no seed"),
        (lambda r: r.replace('"seed": 3', '"seed": "abc"'), "its seed is 'abc'"),
        (lambda r: r.replace('"seed": 3', f'"seed": {2**70}'), f"its seed is '{2**70}'"),
        (lambda r: r.replace('"seed": 3', '"seed": 3.5'), "its seed is '3.5'"),
        (lambda r: r.replace('"seed": 3', '"seed": true'), "its seed is 'True'"),
        (lambda r: r[: r.index('"params"')] + '"params": "abc", ' + r[r.index('"seed"') :], "its params are not"),
        (lambda r: r.replace('"ndim": 2', '"ndim": 7'), "its ndim is '7'"),
        (lambda r: r.replace('"norm": "filter"', '"norm": "abc"'), "its norm is 'abc'"),
        (lambda r: NESTED, "it is str"),
    ],
)
def test_a_tampered_recipe_is_one_line_naming_it_and_the_file_is_kept(one_thread, tmp_path, change, says):
    out = tmp_path / "t.h5"
    objective, dirs = killed_file(out, "seed")
    with h5py.File(out, "r+") as f:
        recipe = f.attrs["directions_recipe"]
        assert '"seed": 3' in recipe and '"ndim": 2' in recipe and '"norm": "filter"' in recipe
        f.attrs["directions_recipe"] = change(recipe)
    before = out.read_bytes()
    msg = one_line_error(compute_surface, objective, dirs, XS, YS, out=out, match="recipe is damaged", **KW)
    assert says in msg and "--force" in msg and len(msg) < 400
    assert out.read_bytes() == before


@pytest.mark.parametrize("value", ['"abc"', "[1, 2]", '{"x_norm": 1.0}', "[" * 100000 + "]" * 100000])
def test_a_digest_that_is_not_a_fingerprint_is_not_resumed(one_thread, tmp_path, value):
    out = tmp_path / "t.h5"
    objective, dirs = killed_file(out, "full")
    with h5py.File(out, "r+") as f:
        f.attrs["directions_digest"] = value
    before = out.read_bytes()
    one_line_error(compute_surface, objective, dirs, XS, YS, out=out, match="no valid storage or fingerprint", **KW)
    assert out.read_bytes() == before


def test_an_old_file_without_a_fingerprint_is_not_resumed(one_thread, tmp_path):
    # what versions before the storage option wrote: the arrays and nothing else. Nothing in the file can show
    # that its directions are this run's (here they were doubled), so it is not resumed: rows of two surfaces
    # would share one file
    out = tmp_path / "old.h5"
    killed_file(out, "full")
    with h5py.File(out, "r+") as f:
        for name in ("directions_storage", "directions_digest", "directions_recipe"):
            del f.attrs[name]
        f["directions/x/4.weight"][...] *= 2
    objective, dirs = build()[2:]
    before = out.read_bytes()
    msg = one_line_error(compute_surface, objective, dirs, XS, YS, out=out, match="no valid storage", **KW)
    assert "--force" in msg and out.read_bytes() == before
    res = compute_surface(objective, dirs, XS, YS, out=out, force=True, **KW)  # started again
    assert res["done"].all() and res.attrs["directions_storage"] == "seed"


def test_half_storage_evaluates_along_the_float16_directions_and_records_their_error(one_thread, tmp_path):
    out = tmp_path / "h.h5"
    objective, dirs = killed_file(out, "half")
    res = compute_surface(objective, dirs, XS, YS, out=out, store_directions="half", **KW)
    rounded = {axis: {n: t.half().double() for n, t in getattr(dirs, axis).items()} for axis in "xy"}
    for axis in "xy":
        exact = np.concatenate([t.numpy().ravel() for t in getattr(dirs, axis).values()])
        stored = np.concatenate([res[f"directions/{axis}/{n}"].ravel() for n in getattr(dirs, axis)])
        assert res[f"directions/{axis}/4.weight"].dtype == np.float16
        error = np.linalg.norm(exact - stored.astype(np.float64)) / np.linalg.norm(exact)
        assert res.attrs["directions_half_error"][axis] == pytest.approx(error, rel=1e-12)
        assert 0 < error <= 2.0**-11
    # the same numbers as a run along the rounded directions (stored in full): the rounding, not the storage
    objective2, dirs2 = build()[2:]
    dirs2.x, dirs2.y = rounded["x"], rounded["y"]
    full = compute_surface(objective2, dirs2, XS, YS, out=tmp_path / "f.h5", store_directions="full", **KW)
    np.testing.assert_array_equal(res["loss"], full["loss"])


def test_directions_without_a_recipe_are_stored_in_full_and_the_file_says_so(one_thread, tmp_path):
    _, _, objective, _ = build()
    other = {n: t + 0.1 for n, t in objective.params.items()}
    dirs = target_directions(objective.params, other, ndim=1)
    res = compute_surface(objective, dirs, XS, None, out=tmp_path / "t.h5", **KW)
    assert res.attrs["directions_storage"] == "full" and "cannot be drawn again" in res.attrs["directions_storage_note"]
    assert "directions/x/4.weight" in res.arrays
    with pytest.raises(LandscapeError, match="--store-directions must be one of seed, half, full"):
        compute_surface(objective, dirs, XS, None, out=tmp_path / "u.h5", store_directions="quarter", **KW)


RESNET_JOB = """
import sys, time
import numpy as np
import torch
from landscape.analyses.surface.directions import random_directions
from landscape.analyses.surface.run import compute_surface
from landscape.core.objective import Objective
from landscape.models import create_model

XS = YS = np.linspace(-1.0, 1.0, 3)


def build():
    torch.manual_seed(0)
    model = create_model("resnet_mini", num_classes=10, in_chans=1).eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(12, 1, 12, 12, generator=g), torch.randint(0, 10, (12,), generator=g)
    objective = Objective(model, [(x[:6], y[:6]), (x[6:], y[6:])])
    return objective, random_directions(objective.params, ndim=2, seed=5)


if __name__ == "__main__":
    objective, dirs = build()

    def on_round(done, total):
        print("ROUND", done, flush=True)
        time.sleep(60 if done >= 3 else 0.0)

    compute_surface(objective, dirs, XS, YS, out=sys.argv[1], batch_points=1, progress=False, on_round=on_round)
"""


def test_resnet_mini_by_recipe_is_a_tenth_of_full_equal_and_resumes_after_kill_9(one_thread, tmp_path):
    job = tmp_path / "job.py"
    job.write_text(RESNET_JOB)
    ns: dict = {}
    exec(compile(RESNET_JOB, "job", "exec"), ns)
    objective, dirs = ns["build"]()
    grid = ns["XS"]
    full = compute_surface(objective, dirs, grid, grid, out=tmp_path / "full.h5", store_directions="full", **KW)
    out = tmp_path / "seed.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(landscape.__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, str(job), str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stdout:
            if line.startswith("ROUND 3"):
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=120)
    with h5py.File(out, "r") as f:
        # the set-up's point is written at once, the others in groups (WRITE_EVERY_S): a kill loses at most one
        assert 1 <= int(f["done"][()].sum()) <= 3 and f.attrs["directions_storage"] == "seed"
    objective, dirs = ns["build"]()
    seed = compute_surface(objective, dirs, grid, grid, out=out, **KW)
    for name in ("loss", "data_loss", "accuracy", "done"):
        np.testing.assert_array_equal(seed[name], full[name])
    assert os.path.getsize(out) <= os.path.getsize(tmp_path / "full.h5") / 10
    assert torch.equal(torch.as_tensor(full["directions/y/fc.weight"]), dirs.y["fc.weight"])


# ------------------------------------------------------------------------------------- writing points
def test_points_are_written_as_the_rows_they_touch_values_then_flags():
    from landscape import store
    from landscape.analyses.surface.file import create_arrays, read_grid, write_points

    f = store.ResultFile.memory("surface", {})
    create_arrays(f, np.linspace(-1, 1, 4), np.linspace(-1, 1, 3))
    grid = read_grid(f)
    write_points(f, [(0, 1, 1.5, 1.25, 0.5), (2, 3, 2.5, 2.25, 0.75)], grid)
    write_points(f, [(1, 0, 3.5, 3.25, 1.0)], grid)  # the mirror keeps what was written before
    loss, done = f.read("loss"), f.read("done")
    want = np.full((3, 4), np.nan)
    want[0, 1], want[2, 3], want[1, 0] = 1.5, 2.5, 3.5
    np.testing.assert_array_equal(loss, want)
    np.testing.assert_array_equal(done, ~np.isnan(want))
    assert f.read("data_loss")[2, 3] == 2.25 and f.read("accuracy")[1, 0] == 1.0
    writes = []
    original = f.write_at
    f.write_at = lambda name, index, value: (writes.append((name, index)), original(name, index, value))
    write_points(f, [(2, 1, 5.5, 5.25, 0.0), (2, 2, 6.5, 6.25, 0.0)], grid)  # the box of the points, not whole rows
    assert writes and all(index == (slice(2, 3), slice(1, 3)) for _, index in writes)
    f.write_at = original
    write_points(f, [(1, 2, 4.5, 4.25, 0.0)])  # without a mirror: read from the file first
    assert f.read("loss")[1, 2] == 4.5 and f.read("loss")[0, 1] == 1.5 and int(f.read("done").sum()) == 6
    assert f.read("loss")[2, 1] == 5.5 and f.read("loss")[2, 3] == 2.5  # the box kept the earlier point beside it


def test_pending_points_wait_for_the_interval_or_a_write():
    from landscape.analyses.surface.file import PendingPoints

    groups = []
    held = PendingPoints(groups.append, every_s=3600.0)
    held.add([(0, 0, 1.0, 1.0, 1.0)])  # the first points at once: a live file shows them
    held.add([(0, 1, 2.0, 2.0, 1.0)])
    held.add([(0, 2, 3.0, 3.0, 1.0)])
    assert groups == [[(0, 0, 1.0, 1.0, 1.0)]]
    held.write()
    held.write()  # nothing waits: nothing is written
    assert groups[1:] == [[(0, 1, 2.0, 2.0, 1.0), (0, 2, 3.0, 3.0, 1.0)]]
    at_once = PendingPoints(groups.append, every_s=0.0)
    at_once.add([(1, 0, 3.0, 3.0, 0.0)])
    assert groups[-1] == [(1, 0, 3.0, 3.0, 0.0)] and at_once.points == []
