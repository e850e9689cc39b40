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
    msg = one_line_error(compute_surface, objective, dirs, XS, YS, out=out, match="fingerprint", **KW)
    assert "--force" in msg
    assert out.read_bytes() == before  # nothing written
    with h5py.File(out, "r+") as f:  # restored, it resumes
        f.attrs["directions_recipe"] = recipe
    assert compute_surface(objective, dirs, XS, YS, out=out, **KW)["done"].all()


def test_an_old_file_with_stored_directions_and_no_storage_attributes_still_resumes(one_thread, tmp_path):
    _, _, objective, dirs = build()
    reference = compute_surface(objective, dirs, XS, YS, out=tmp_path / "ref.h5", **KW)
    out = tmp_path / "old.h5"
    killed_file(out, "full")
    with h5py.File(out, "r+") as f:  # what versions before the storage option wrote: the arrays and nothing else
        for name in ("directions_storage", "directions_digest", "directions_recipe"):
            del f.attrs[name]
        # directions that are not this seed's: an old file's own directions are used, not drawn again
        f["directions/x/4.weight"][...] *= 2
    objective, dirs = build()[2:]
    res = compute_surface(objective, dirs, XS, YS, out=out, **KW)
    assert "directions_storage" not in res.attrs and "directions/x/4.weight" in res.arrays
    np.testing.assert_array_equal(res["loss"][0, :3], reference["loss"][0, :3])  # the points of the first run
    assert not np.array_equal(res["loss"], reference["loss"])  # the rest along the file's (doubled) direction


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
        assert int(f["done"][()].sum()) == 3 and f.attrs["directions_storage"] == "seed"
    objective, dirs = ns["build"]()
    seed = compute_surface(objective, dirs, grid, grid, out=out, **KW)
    for name in ("loss", "data_loss", "accuracy", "done"):
        np.testing.assert_array_equal(seed[name], full[name])
    assert os.path.getsize(out) <= os.path.getsize(tmp_path / "full.h5") / 10
    assert torch.equal(torch.as_tensor(full["directions/y/fc.weight"]), dirs.y["fc.weight"])
