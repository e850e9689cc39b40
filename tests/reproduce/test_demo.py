"""`landscape demo --quick` end to end through the installed entry point on two worker processes, then a rerun
that resumes, and a run in one process whose files must equal those of two workers bit for bit."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.models.checkpoint import load_model, read_checkpoint
from landscape.reproduce.inputs import seed_folder
from landscape.reproduce.settings import MODELS, QUICK
from landscape.store.read import read_result

ENTRY = str(Path(sys.executable).parent / "landscape")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    # where notebooks/07_findings.ipynb keeps its quick demo when its WORKDIR is the folder made here
    out = tmp_path_factory.mktemp("notebooks") / "quick" / "demo"
    proc = subprocess.run([ENTRY, "demo", "--quick", "--out", str(out), "--jobs", "2"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"summary: {out / 'summary.md'}" in proc.stdout
    assert f"report: {out / 'report.html'}" in proc.stdout
    return out


def test_every_file_is_written_and_complete(demo_dir):
    assert QUICK.seeds == (0, 1) and sorted(p.name for p in demo_dir.glob("seed*")) == ["seed1"]
    x, y = load_dataset("digits", "test").tensors()
    weights = {}
    for model in MODELS:
        for seed in QUICK.seeds:
            folder = seed_folder(demo_dir, seed)
            ckpt = read_checkpoint(folder / f"{model}.pt")
            assert ckpt.model_name == model and ckpt.meta["train_options"]["seed"] == seed
            net, _ = load_model(folder / f"{model}.pt")
            weights[model, seed] = next(net.parameters()).detach()
            with torch.no_grad():
                hits = int((net.eval()(x).argmax(-1) == y).sum())
            assert ckpt.meta["metrics"]["test_accuracy"] == hits / len(y)  # the recorded number is the checkpoint's
            spectrum = read_result(folder / f"{model}_spectrum.h5")
            assert spectrum.attrs["complete"] and spectrum["eigenvalues"].shape[1] == 5
            fourier = read_result(folder / f"{model}_fourier.h5")
            assert fourier.attrs["complete"] and len(fourier["layer_names"]) == len(fourier["high_frequency"])
        assert not torch.equal(weights[model, 0], weights[model, 1])  # two trainings, not one twice
        surface = read_result(demo_dir / f"{model}_surface.h5")  # the first seed's model only
        assert surface.attrs["complete"] and surface["done"].all()
        assert surface["loss"].shape == (QUICK.grid, QUICK.grid) and np.isfinite(surface["loss"]).all()
        assert not (demo_dir / "seed1" / f"{model}_surface.h5").exists()
    assert not (demo_dir / "paper_b.json").exists()  # the quick demo leaves Paper B out
    for model in ("resnet_mini", "vit_mini"):  # the flatness rows' sharpness, every seed, both measures
        for seed in QUICK.seeds:
            for measure in ("average", "worst"):
                run = read_result(seed_folder(demo_dir, seed) / f"{model}_sharpness_{measure}.h5")
                assert run.attrs["complete"] and run.attrs["measure"] == measure and run["done"].all()
            negative = {}
            for operator in ("hessian", "residual"):  # the negative-curvature row's stage: the spectrum's batches
                run = read_result(
                    seed_folder(demo_dir, seed) / "negative_curvature" / f"{model}_negative_{operator}.h5"
                )
                assert run.attrs["complete"] and run.attrs["which"] == "SA" and run["done"].all()
                assert run.attrs.get("operator", "hessian") == operator
                negative[operator] = run["eigenvalues"]
            assert negative["hessian"].shape == (QUICK.spectrum_batches, 1)
            assert (negative["residual"] <= negative["hessian"] + 1e-4).all()  # G >= 0: lambda_min(R) <= lambda_min(H)
    assert not (demo_dir / "alternet_mini_sharpness_worst.h5").exists()
    assert not (demo_dir / "negative_curvature" / "alternet_mini_negative_residual.h5").exists()


def test_the_line_and_curve_between_two_seeds_are_in_the_summary(demo_dir):
    connect = read_result(demo_dir / "connect_resnet_mini.h5")
    assert connect.attrs["complete"] and connect.attrs["curve"] == "bezier" and connect["curve/done"].all()
    assert Path(connect.attrs["other_checkpoint"]).resolve() == (demo_dir / "seed1" / "resnet_mini.pt").resolve()
    section = (demo_dir / "summary.md").read_text().split("## Between two minima", 1)[1].split("\n## ", 1)[0]
    rows = _table(section, "path")
    barriers = connect.attrs["barriers"]
    assert connect.attrs["align"] == "weights" and "up to a permutation" in section
    assert [row[:2] for row in rows] == [["line", "train"], ["unaligned_line", "train"], ["curve", "train"]]
    for row in rows:
        assert float(row[2]) == pytest.approx(barriers[row[0]]["train"]["loss"], rel=1e-3)
        assert float(row[4]) == pytest.approx(barriers[row[0]]["train"]["error"], rel=1e-3, abs=1e-4)
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section):
        assert (demo_dir / link).is_file() and "connect" in link


def _table(text, first_cell):
    """The rows of the Markdown table whose header starts with ``| first_cell |``, as lists of stripped cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_cell} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.split("|")[1:-1]])
    return rows


def _check_row(cells, folder, model):
    accuracy = read_checkpoint(folder / f"{model}.pt").meta["metrics"]["test_accuracy"]
    assert float(cells[0]) == pytest.approx(accuracy, abs=1e-4)
    eig = read_result(folder / f"{model}_spectrum.h5")["eigenvalues"]
    assert float(cells[1]) == pytest.approx(eig.max(), rel=1e-3)
    assert float(cells[2]) == pytest.approx((eig < 0).mean(), abs=1e-3)


def test_summary_puts_the_models_side_by_side(demo_dir):
    text = (demo_dir / "summary.md").read_text()
    assert "Computed on 2 worker processes of one torch thread." in text
    rows = _table(text, "model")  # the first table: the first seed's models
    assert [row[0] for row in rows] == list(MODELS)
    for model, row in zip(MODELS, rows):
        _check_row(row[1:], demo_dir, model)
    # MSA column: empty for the pure CNN, a number for the models with attention
    assert rows[0][4] == "–" and rows[1][4] != "–"
    every = _table(text, "model | seed")
    assert [(row[0], int(row[1])) for row in every] == [(m, s) for m in MODELS for s in QUICK.seeds]
    for row in every:
        _check_row(row[2:], seed_folder(demo_dir, int(row[1])), row[0])
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) >= 3 * len(MODELS)
    for link in links:
        assert (demo_dir / link).is_file(), link


def test_summary_has_a_findings_table_with_a_verdict_per_claim(demo_dir):
    from landscape.reproduce.findings import findings
    from landscape.reproduce.table import VERDICTS

    text = (demo_dir / "summary.md").read_text()
    assert "## Findings" in text
    section = text.split("## Findings", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    assert lines[0] == "| claim | paper | statistic | value [95% interval] | verdict |"
    rows = lines[2:]
    expected = findings(demo_dir, MODELS, training_seeds=QUICK.seeds, fourier_unit=QUICK.fourier_unit)
    assert len(rows) == len(expected) == 21  # 5 high-frequency, 5 variance, 3 spectrum, 2 negative curvature,
    # 2 sharpness, data size, accuracy, barrier against width, Paper B
    for row, finding in zip(rows, expected):
        verdict = row.split("|")[-2].strip()
        assert any(verdict.startswith(word) for word in VERDICTS), row
        assert verdict.startswith(finding.verdict) and row.split("|")[1].strip() == finding.claim
        assert finding.verdict == "not measured" or (finding.seeds == 2 and "(2 seeds, n = " in row)
    paragraph = " ".join(section.split("| claim |", 1)[0].split())
    assert "interval is over the seeds" in paragraph and "seeds 0, 1" in paragraph
    assert "t quantile of (seeds - 1) degrees of freedom times the delete-one-seed jackknife's" in paragraph
    # the same rows, as plain data, in findings.json, with what the run computed on
    record = json.loads((demo_dir / "findings.json").read_text())
    assert record["seeds"] == [0, 1] and record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert [r["claim"] for r in record["rows"]] == [f.claim for f in expected]
    assert [r["verdict"] for r in record["rows"]] == [f.verdict for f in expected]
    assert all(r["df"] == 1 for r in record["rows"] if r["verdict"] != "not measured")
    assert "quick demo" in expected[-1].where and expected[-1].verdict == "not measured"
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
    # the second seed's files, and the first seed's negative-curvature stage, are a section of their own each
    files = [
        *demo_dir.glob("*.h5"),
        *(demo_dir / "seed1").glob("*.h5"),
        *(demo_dir / "negative_curvature").glob("*.h5"),
    ]
    assert sorted(file for file, _ in page.details) == sorted(p.name for p in files)
    assert "Summary" in [text for _, text in page.headings]
    links = [url for url in page.urls if not url.startswith("data:image/png;base64,")]
    # nothing else is loaded or linked (the sections in the order their first file was written)
    assert links[: len(MODELS) + 1] == [f"#model-{m}" for m in MODELS] + ["#all-models"]
    assert sorted(links[len(MODELS) + 1 :]) == ["#folder-negative_curvature", "#folder-seed1"]


def _snapshot(demo_dir):
    """Checkpoint modification times and the arrays and creation time of every result file, of every seed."""
    stamps = {p.relative_to(demo_dir): p.stat().st_mtime_ns for p in demo_dir.rglob("*.pt")}
    results = {}
    for path in sorted(demo_dir.rglob("*.h5")):
        res = read_result(path)
        arrays = {k: v.tolist() if v.dtype.kind in "OUS" else v.tobytes() for k, v in res.arrays.items()}
        results[path.relative_to(demo_dir)] = (res.attrs["created"], arrays)
    assert len(stamps) == 2 * len(MODELS) + 1  # every model of both seeds, and the bend between two of them
    return stamps, results


def test_the_findings_notebook_resumes_the_demo_instead_of_recomputing(demo_dir):
    """notebooks/07_findings.ipynb runs the quick demo into its WORKDIR: given the folder the command line wrote,
    every stage is skipped (no checkpoint or result file rewritten), and the findings and the figure are shown."""
    from helpers import execute_notebook

    before = _snapshot(demo_dir)
    workdir = demo_dir.parent.parent
    assert execute_notebook("07_findings.ipynb", workdir) >= 1
    assert (workdir / "quick" / "figures" / "07_findings").is_dir()
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


def _verdicts(folder):
    """``{claim: verdict}`` of a demo folder's findings table (the first word of "not measured: ...")."""
    section = (folder / "summary.md").read_text().split("## Findings", 1)[1]
    rows = _table(section, "claim")
    return {row[0]: "not measured" if row[-1].startswith("not measured") else row[-1] for row in rows}


def _arrays(path):
    """Every dataset of an HDF5 file by its path (bytes of strings as they are)."""
    import h5py

    found = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: found.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None)
    return found


def _tensors(path):
    """Every tensor of a checkpoint's state dict."""
    return read_checkpoint(path).state_dict


def test_a_unit_run_alone_in_a_fresh_process_writes_the_demos_files_bit_for_bit(demo_dir, tmp_path):
    """The default run's share of the check below: one unit (resnet_mini, seed 1: training, spectrum, both
    sharpness measures, negative curvature, Fourier), run by itself in a new process, writes the files the two-worker
    demo wrote."""
    code = (
        "import sys; from pathlib import Path; from landscape.reproduce.demo import QUICK, model_unit; "
        "model_unit('resnet_mini', QUICK, Path(sys.argv[1]), seed=1, device='cpu', force=False, quiet=True)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.suffix in (".h5", ".pt"))
    negative = [f"seed1/negative_curvature/resnet_mini_negative_{op}.h5" for op in ("hessian", "residual")]
    assert [f.as_posix() for f in files] == negative + [
        f"seed1/resnet_mini{end}"
        for end in (".pt", "_fourier.h5", "_sharpness_average.h5", "_sharpness_worst.h5", "_spectrum.h5")
    ]
    _assert_equal_files(tmp_path, demo_dir, files)


def _assert_equal_files(one_dir, two_dir, files):
    """Every checkpoint tensor and every array of every result file of ``files`` equal to the bit in both folders."""
    for name in files:
        read = _arrays if name.suffix == ".h5" else _tensors
        one, two = read(one_dir / name), read(two_dir / name)
        assert one.keys() == two.keys(), name
        for key in one:
            a, b = np.asarray(one[key]), np.asarray(two[key])
            assert a.dtype == b.dtype and a.shape == b.shape, (name, key)
            # numbers to the bit; strings (object arrays) by value
            assert a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes(), (name, key)


@pytest.mark.slow  # a second whole quick demo (over 3 min here): run with -m slow
def test_one_job_writes_the_files_of_two_jobs_bit_for_bit(demo_dir, tmp_path):
    # The fixture ran on two worker processes of one torch thread each; --jobs 1 runs every unit in this process
    # at one thread. Every checkpoint and every array of every result file must be equal to the bit.
    proc = subprocess.run(
        [ENTRY, "demo", "--quick", "--out", str(tmp_path), "--quiet", "--jobs", "1"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Computed in one process of one torch thread." in (tmp_path / "summary.md").read_text()
    assert "Computed on 2 worker processes of one torch thread." in (demo_dir / "summary.md").read_text()
    files = sorted(p.relative_to(demo_dir) for p in demo_dir.rglob("*") if p.suffix in (".h5", ".pt"))
    assert files == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.suffix in (".h5", ".pt"))
    assert len([f for f in files if f.suffix == ".h5"]) >= 10
    _assert_equal_files(tmp_path, demo_dir, files)
    assert _verdicts(tmp_path) == _verdicts(demo_dir)


def test_every_output_says_what_it_ran_on(demo_dir):
    """torch's version, the CPU capability, the threads and the device: in summary.md, report.html,
    timings.json, findings.json, every result file and every checkpoint."""
    facts = {
        "torch_version": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": 1,
        "device": "cpu",
    }
    line = f"torch {torch.__version__}, CPU capability {facts['cpu_capability']}, 1 torch thread, device cpu"
    assert f"Ran on: {line}." in (demo_dir / "summary.md").read_text()
    assert line in (demo_dir / "report.html").read_text(encoding="utf-8")
    for record in ("timings.json", "findings.json"):
        data = json.loads((demo_dir / record).read_text())
        assert {k: data[k] for k in facts} == facts, record
    for path in [*demo_dir.rglob("*.h5")]:
        attrs = read_result(path).attrs
        assert {k: attrs[k] for k in facts} == facts, path  # the workers' own thread count: one
    for path in demo_dir.rglob("*.pt"):
        meta = read_checkpoint(path).meta
        assert {k: meta[k] for k in facts} == facts, path


@pytest.mark.slow  # a second whole quick demo (over 3 min here): run with -m slow
@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"), reason="ATen's AVX2 kernels need an x86 CPU"
)
def test_the_verdicts_do_not_depend_on_the_cpus_vector_kernels(demo_dir, tmp_path):
    """The quick demo again with ATen's kernels of an AVX2-only CPU: other last bits, which training amplifies
    (other numbers), but every verdict the same."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    command = [ENTRY, "demo", "--quick", "--seeds", "0,1", "--out", str(tmp_path), "--quiet", "--jobs", "2"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((tmp_path / "findings.json").read_text())
    assert record["cpu_capability"] == "AVX2" and "CPU capability AVX2" in (tmp_path / "summary.md").read_text()
    assert all(read_result(p).attrs["cpu_capability"] == "AVX2" for p in tmp_path.rglob("*.h5"))
    assert _verdicts(tmp_path) == _verdicts(demo_dir)


def test_the_summary_and_timings_say_what_each_stage_cost(demo_dir):
    timings = json.loads((demo_dir / "timings.json").read_text())
    assert timings["jobs"] == 2 and timings["torch_threads_per_job"] == 1
    stages = {row["stage"]: row for row in timings["stages"]}
    assert {
        "train",
        "surface",
        "spectrum",
        "sharpness",
        "curvature",
        "fourier",
        "connect",
        "findings",
        "report",
    } <= set(stages)
    assert stages["train"]["units"] == len(MODELS) * len(QUICK.seeds)
    assert all(row["wall_seconds"] >= 0 and row["cpu_seconds"] >= 0 for row in timings["stages"])
    assert timings["wall_seconds"] >= max(row["wall_seconds"] for row in timings["stages"]) / 2
    section = (demo_dir / "summary.md").read_text().split("## What this run cost", 1)[1]
    assert [row[0] for row in _table(section, "stage")] == [row["stage"] for row in timings["stages"]]


def test_other_seeds_replace_the_demos_and_paper_bs(tmp_path):
    from landscape.reproduce.settings import FULL, with_seeds

    other = with_seeds(FULL, (3, 4, 5))
    assert other.seeds == (3, 4, 5) and other.paper_b.seeds == (3, 4, 5) and other.train == FULL.train
    assert with_seeds(QUICK, [7]).seeds == (7,) and with_seeds(QUICK, [7]).paper_b is None
    for bad in ((), (1, 1), (-1,), (1.5,), (True,)):
        with pytest.raises(LandscapeError, match="seed"):
            with_seeds(FULL, bad)


def test_bad_seeds_or_threads_on_the_command_line_are_one_line(tmp_path):
    from click.testing import CliRunner

    from landscape.cli import cli

    for bad, match in (
        (["--seeds", "3,x"], "--seeds takes"),
        (["--seeds", "2,2"], "distinct"),
        (["--threads", "0"], ""),
    ):
        r = CliRunner().invoke(cli, ["demo", "--quick", "--out", str(tmp_path / "d"), *bad])
        assert r.exit_code == 2 and match in r.output and len(r.output.strip().splitlines()) <= 3, r.output
        assert not (tmp_path / "d" / "summary.md").exists()
