"""`landscape demo --quick` end to end through the installed entry point, then a rerun that resumes."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from landscape.data.loading import load_dataset
from landscape.models.checkpoint import load_model, read_checkpoint
from landscape.reproduce.demo import MODELS, QUICK
from landscape.store.read import read_result

ENTRY = str(Path(sys.executable).parent / "landscape")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    proc = subprocess.run([ENTRY, "demo", "--quick", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"summary: {out / 'summary.md'}" in proc.stdout
    assert f"report: {out / 'report.html'}" in proc.stdout
    return out


def test_every_file_is_written_and_complete(demo_dir):
    for model in MODELS:
        ckpt = read_checkpoint(demo_dir / f"{model}.pt")
        assert ckpt.model_name == model
        net, _ = load_model(demo_dir / f"{model}.pt")
        x, y = load_dataset("digits", "test").tensors()
        with torch.no_grad():
            hits = int((net.eval()(x).argmax(-1) == y).sum())
        assert ckpt.meta["metrics"]["test_accuracy"] == hits / len(y)  # the recorded number is the checkpoint's
        surface = read_result(demo_dir / f"{model}_surface.h5")
        assert surface.attrs["complete"] and surface["done"].all()
        assert surface["loss"].shape == (QUICK.grid, QUICK.grid) and np.isfinite(surface["loss"]).all()
        spectrum = read_result(demo_dir / f"{model}_spectrum.h5")
        assert spectrum.attrs["complete"] and spectrum["eigenvalues"].shape[1] == 5
        fourier = read_result(demo_dir / f"{model}_fourier.h5")
        assert fourier.attrs["complete"] and len(fourier["layer_names"]) == len(fourier["high_frequency"])


def test_summary_puts_the_models_side_by_side(demo_dir):
    text = (demo_dir / "summary.md").read_text()
    main_table = text.split("## Findings", 1)[0]
    rows = [line for line in main_table.splitlines() if line.startswith("| ") and "---" not in line][1:]
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


def test_summary_has_a_findings_table_with_a_verdict_per_claim(demo_dir):
    from landscape.reproduce.findings import VERDICTS, findings

    text = (demo_dir / "summary.md").read_text()
    assert "## Findings" in text
    section = text.split("## Findings", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    assert lines[0] == "| claim | paper | statistic | value [95% interval] | verdict |"
    rows = lines[2:]
    expected = findings(demo_dir, MODELS, resamples=QUICK.resamples, fourier_unit=QUICK.fourier_unit)
    assert len(rows) == len(expected) == 16  # 5 high-frequency, 5 variance, 4 spectrum, accuracy, Paper B
    for row, finding in zip(rows, expected):
        verdict = row.split("|")[-2].strip()
        assert any(verdict.startswith(word) for word in VERDICTS), row
        assert verdict.startswith(finding.verdict) and row.split("|")[1].strip() == finding.claim
    html = (demo_dir / "report.html").read_text(encoding="utf-8")
    assert "<h3>Findings</h3>" in html and html.count("<table>") >= 2


def test_report_embeds_every_figure_of_the_demo(demo_dir):
    import base64

    from plot.test_report import Page

    page = Page((demo_dir / "report.html").read_text(encoding="utf-8"))
    embedded = {}
    for figure in page.figures:
        prefix = "data:image/png;base64,"
        assert figure["img"].startswith(prefix)
        embedded[figure["file"]] = base64.b64decode(figure["img"][len(prefix) :])
    drawn = sorted(p.relative_to(demo_dir).as_posix() for p in (demo_dir / "report_figures").rglob("*.png"))
    assert sorted(embedded) == drawn
    for name, data in embedded.items():
        assert data.startswith(b"\x89PNG") and data == (demo_dir / name).read_bytes()
    # every figure the demo drew itself is in the page too (drawn again, of the same name)
    names = {Path(name).name for name in embedded}
    demo_figures = {p.name for p in (demo_dir / "figures").rglob("*.png")}
    assert demo_figures and demo_figures <= names, demo_figures - names
    assert [text for tag, text in page.headings if tag == "h2"][1:4] == list(MODELS)
    assert sorted(file for file, _ in page.details) == sorted(p.name for p in demo_dir.glob("*.h5"))
    assert "Summary" in [text for _, text in page.headings]
    links = [url for url in page.urls if not url.startswith("data:image/png;base64,")]
    assert links == [f"#model-{m}" for m in MODELS] + ["#all-models"]  # nothing else is loaded or linked


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


def test_data_size_stages_keep_one_checkpoint_and_spectrum_per_fraction(tmp_path):
    import dataclasses

    from landscape.reproduce.demo import _data_size_stages

    settings = dataclasses.replace(QUICK, data_fractions=(0.06, 0.3))
    files = _data_size_stages(settings, tmp_path, device="cpu", force=False, quiet=True)
    folder = tmp_path / "data_size"
    assert [p.name for p in files] == ["vit_mini_data0.06_spectrum.h5", "vit_mini_data0.3_spectrum.h5"]
    subsets = {p.name: read_checkpoint(p).meta["train_options"]["subset"] for p in folder.glob("*.pt")}
    assert subsets == {"vit_mini_data0.06.pt": 0.06, "vit_mini_data0.3.pt": 0.3}
    for path in files:
        assert read_result(path).attrs["complete"]
