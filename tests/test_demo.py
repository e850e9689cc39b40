"""`landscape demo --quick` end to end through the installed entry point, then a rerun that resumes."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from landscape.checkpoint import read_checkpoint
from landscape.demo import MODELS, QUICK
from landscape.store import read_result

ENTRY = str(Path(sys.executable).parent / "landscape")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    proc = subprocess.run([ENTRY, "demo", "--quick", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"summary: {out / 'summary.md'}" in proc.stdout
    return out


def test_every_file_is_written_and_complete(demo_dir):
    for model in MODELS:
        ckpt = read_checkpoint(demo_dir / f"{model}.pt")
        assert ckpt.model_name == model
        assert 0.0 <= ckpt.meta["metrics"]["test_accuracy"] <= 1.0
        surface = read_result(demo_dir / f"{model}_surface.h5")
        assert surface.attrs["complete"] and surface["done"].all()
        assert surface["loss"].shape == (QUICK.grid, QUICK.grid) and np.isfinite(surface["loss"]).all()
        spectrum = read_result(demo_dir / f"{model}_spectrum.h5")
        assert spectrum.attrs["complete"] and spectrum["eigenvalues"].shape[1] == 5
        fourier = read_result(demo_dir / f"{model}_fourier.h5")
        assert fourier.attrs["complete"] and len(fourier["layer_names"]) == len(fourier["high_frequency"])


def test_summary_puts_the_models_side_by_side(demo_dir):
    text = (demo_dir / "summary.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split("|")[1].strip() for row in rows] == list(MODELS)
    for model, row in zip(MODELS, rows):
        cells = [c.strip() for c in row.split("|")[2:-1]]
        accuracy = read_checkpoint(demo_dir / f"{model}.pt").meta["metrics"]["test_accuracy"]
        assert float(cells[0]) == pytest.approx(accuracy, abs=1e-4)
        eig = read_result(demo_dir / f"{model}_spectrum.h5")["eigenvalues"]
        assert float(cells[1]) == pytest.approx(eig.max(), rel=1e-3)
        assert float(cells[2]) == pytest.approx((eig < 0).mean(), abs=1e-3)
    # MSA column: empty for the pure CNN, a number for the models with attention
    assert rows[0].split("|")[5].strip() == "–"
    assert rows[1].split("|")[5].strip() != "–"
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) >= 3 * len(MODELS)
    for link in links:
        assert (demo_dir / link).is_file(), link


def _snapshot(demo_dir):
    """Checkpoint modification times and the arrays and creation time of every result file."""
    stamps = {p.name: p.stat().st_mtime_ns for p in demo_dir.glob("*.pt")}
    results = {}
    for path in sorted(demo_dir.glob("*.h5")):
        res = read_result(path)
        arrays = {k: v.tolist() if v.dtype.kind in "OUS" else v.tobytes() for k, v in res.arrays.items()}
        results[path.name] = (res.attrs["created"], arrays)
    return stamps, results


def test_rerun_resumes_instead_of_recomputing(demo_dir):
    before = _snapshot(demo_dir)
    proc = subprocess.run([ENTRY, "demo", "--quick", "--out", str(demo_dir), "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _snapshot(demo_dir) == before
