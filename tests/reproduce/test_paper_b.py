"""landscape.reproduce.paper_b and training: the demo's own Paper B run at a tiny size, resumed, and kept apart
from rows the demo did not write."""

import dataclasses
import json
import time

import pytest

from landscape.errors import LandscapeError
from landscape.models.checkpoint import read_checkpoint
from landscape.reproduce import findings as F
from landscape.reproduce.paper_b import PaperBSettings, measure_paper_b, written_by_demo
from landscape.reproduce.training import same_options, train_or_reuse
from landscape.reproduce.widths import WidthSweep
from landscape.train import TrainConfig

TINY = PaperBSettings(fraction=0.05, steps=3, seeds=(0,), batch_size=32)


def test_same_options_ignores_device_and_init_and_fills_defaults():
    config = TrainConfig(model="resnet_mini", epochs=2, seed=1, device="cpu", init="a.pt")
    stored = dataclasses.asdict(config) | {"device": "cuda", "init": "elsewhere/a.pt"}
    assert same_options(config, stored)
    assert same_options(config, {k: v for k, v in stored.items() if k != "cutmix"})  # older file: the default
    assert not same_options(config, stored | {"seed": 0})
    assert not same_options(dataclasses.replace(config, cutmix=0.5), {k: v for k, v in stored.items() if k != "cutmix"})


def test_train_or_reuse_refuses_a_checkpoint_of_other_options(tmp_path):
    config = TrainConfig(
        model="resnet_mini", epochs=1, subset=0.05, device="cpu", model_kwargs={"widths": (4, 8), "layers": (1, 1)}
    )
    out = train_or_reuse(config, tmp_path / "m.pt", quiet=True)
    stamp = out.stat().st_mtime_ns
    assert train_or_reuse(config, out, quiet=True).stat().st_mtime_ns == stamp  # reused
    with pytest.raises(LandscapeError, match="other options"):
        train_or_reuse(dataclasses.replace(config, seed=1), out, quiet=True)


def test_the_demo_measures_paper_b_and_resumes(tmp_path):
    start = time.perf_counter()
    path = measure_paper_b(TINY, tmp_path, device="cpu", quiet=True)
    data = json.loads(path.read_text())
    assert written_by_demo(path) and data["settings"]["steps"] == 3 and data["description"] == TINY.describe()
    (row,) = data["rows"]
    folder = tmp_path / "paper_b" / "seed0"
    n_train, per_epoch = row["n_train"], -(-row["n_train"] // 32)
    assert row["fraction"] == 0.05 and row["seed"] == 0 and row["steps"] == row["epochs"] * per_epoch
    assert read_checkpoint(folder / "cnn.pt").meta["train_options"]["subset"] == 0.05 and 0 < n_train < 1797 * 0.06
    for key, name in [("cnn", "cnn.pt"), ("vit_cnn_init", "cnn_init.pt"), ("vit_random_2x", "random_2x.pt")]:
        assert row[key] == read_checkpoint(folder / name).meta["metrics"]["test_accuracy"]
    control = read_checkpoint(folder / "random_2x.pt").meta["train_options"]
    assert control["epochs"] == 2 * row["epochs"] and control["model"] == "vit_rpe_mini"
    assert read_checkpoint(folder / "cnn_init.pt").meta["train_options"]["init"] == str(folder / "init.pt")
    # a rerun trains nothing again
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.pt")}
    measure_paper_b(TINY, tmp_path, device="cpu", quiet=True)
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.pt")} == stamps
    # the findings' row names the run's size; one seed: no interval
    f = F._paper_b_finding(F.DemoFiles(tmp_path, {0: tmp_path}, (), 16, WidthSweep()))
    assert f.value == pytest.approx(row["vit_cnn_init"] - row["vit_random_2x"]) and f.verdict == "inconclusive"
    assert f.where == f"paper_b.json: fraction 0.05, {row['steps']} steps per stage, over 1 seed(s)"
    print(f"tiny Paper B run and rerun: {time.perf_counter() - start:.1f} s")


def test_rows_the_demo_did_not_write_are_kept(tmp_path):
    mine = json.dumps({"command": "python benchmarks/cnn_init_vit.py ...", "rows": []})
    (tmp_path / "paper_b.json").write_text(mine)
    assert not written_by_demo(tmp_path / "paper_b.json")
    lines = []
    measure_paper_b(TINY, tmp_path, device="cpu", quiet=True, log=lines.append)
    assert (tmp_path / "paper_b.json").read_text() == mine and not (tmp_path / "paper_b").exists()
    assert "not written by the demo" in lines[0]
    with pytest.raises(LandscapeError):
        measure_paper_b(dataclasses.replace(TINY, seeds=()), tmp_path)
