"""The Paper B low-data benchmark script runs end to end at a tiny size and reports consistent numbers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from landscape.data.loading import load_dataset

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cnn_init_vit.py"


def _load():
    spec = importlib.util.spec_from_file_location("cnn_init_vit", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_low_data_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    argv = [
        "--fractions",
        "0.1",
        "--steps",
        "2",
        "--batch-size",
        "48",
        "--model-kw",
        "depth=1",
        "--model-kw",
        "embed_dim=18",
        "--model-kw",
        "head_dim=2",
        "--control",
        "--workdir",
        str(tmp_path),
        "--json",
        str(tmp_path / "out" / "paper_b.json"),
    ]
    table, rows = bench.main(argv)
    written = json.loads((tmp_path / "out" / "paper_b.json").read_text())
    assert written["rows"] == rows and written["command"].endswith("paper_b.json")
    (tmp_path / "out" / "paper_b.json").unlink()
    (tmp_path / "out").rmdir()
    assert capsys.readouterr().out.strip() == table
    assert "| 0.1 | 144 |" in table and "--fractions 0.1" in table
    (row,) = rows
    assert row["steps"] == 3 * row["epochs"]  # 144 images in batches of 48
    assert "2x steps" in table
    n_test = len(load_dataset("digits", "test"))
    for key in ("cnn", "vit_random", "vit_random_2x", "converted", "vit_cnn_init"):
        hits = row[key] * n_test  # an accuracy over the whole test split: a whole number of images
        assert hits == pytest.approx(round(hits), abs=1e-9) and 0 <= round(hits) <= n_test, (key, row[key])
    # conversion keeps the CNN's predictions: the logit difference is far below any decision margin here
    assert row["logit_diff"] < 1e-3
    assert abs(row["converted"] - row["cnn"]) <= 1 / 360 + 1e-12
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cnn_f0.1_s0.pt",
        "ft_f0.1_s0.pt",
        "init_f0.1_s0.pt",
        "vit2x_f0.1_s0.pt",
        "vit_f0.1_s0.pt",
    ]
