"""benchmarks/demo.py's side-by-side tables and benchmarks/coverage.py's simulation, on small hand-made inputs."""

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from landscape.reproduce.table import Finding

ROOT = Path(__file__).resolve().parents[2]


def _module(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _row(claim, verdict, value=0.5):
    return Finding(claim, "A", "a statistic", value, value - 0.1, value + 0.1, 9, verdict, "files", 3, 0.02, 2)


def test_rows_side_by_side_say_which_verdicts_differ():
    demo = _module("demo")
    native = [_row("one", "reproduced"), _row("two", "inconclusive")]
    runs = {"native": native, "avx2": [_row("one", "reproduced", 0.6), _row("two", "reproduced")]}
    table, agree = demo.side_by_side(runs)
    lines = table.splitlines()
    assert not agree and lines[0] == "| claim | native | avx2 | same verdict |"
    assert lines[2] == "| one | 0.5 [0.4, 0.6] reproduced | 0.6 [0.5, 0.7] reproduced | yes |"
    assert lines[3].endswith("| **no** |")
    _, agree = demo.side_by_side({"native": native, "threads2": native})
    assert agree
    docs = demo.with_other_runs(runs).splitlines()
    assert docs[0].endswith("| verdict | avx2 |") and docs[2].endswith("| reproduced | same verdict |")
    assert docs[3].endswith("| 0.5 [0.4, 0.6] | **not stable** | native inconclusive; avx2 reproduced |")


def test_the_coverage_simulation_prints_both_intervals():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "coverage.py"), "--reps", "40", "--seeds", "3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = re.findall(
        r"^\| between only \| 3 \| 3 \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \|$", proc.stdout, re.M
    )
    assert len(rows) == 1 and all(0 <= float(x) <= 100 for x in rows[0])
    agreement = re.findall(r"^\| 0 \| 3 \| ([\d.]+)% \| ([\d.]+)% \|", proc.stdout, re.M)
    assert len(agreement) == 1 and not math.isnan(float(agreement[0][0]))


def test_write_docs_fills_every_marked_block_and_only_it(tmp_path):
    demo = _module("demo")
    for name, marks in demo.DOCS.items():  # the lead's run must find every block in the repository's files
        text = (ROOT / name).read_text()
        for mark in marks:
            assert text.count(f"<!-- {mark} -->") == 1 and text.count(f"<!-- /{mark} -->") == 1, (name, mark)
    (tmp_path / "docs").mkdir()
    for name, marks in demo.DOCS.items():
        blocks = "".join(f"<!-- {m} -->\nold\n<!-- /{m} -->\n\n" for m in marks)
        (tmp_path / name).write_text(f"# head\n\n{blocks}tail\n")
    native = [_row("one", "reproduced"), _row("two", "inconclusive"), _row("three", "contradicted", math.nan)]
    runs = {"native": native, "avx2": [native[0], _row("two", "reproduced"), native[2]]}
    about = {"seeds": [0, 1, 2], "torch_version": "2.x", "torch_threads": 1, "device": "cpu"}
    records = {"native": {**about, "cpu_capability": "AVX512"}, "avx2": {**about, "cpu_capability": "AVX2"}}
    demo.write_docs(runs, records, tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# head\n\n<!-- findings-summary -->\nOn CPU capability AVX512, 1 of its 3 rows")
    assert "1 **contradicted**, 1 **inconclusive**." in readme
    assert "1 more run (avx2): 2 rows take one verdict in all 2 (1 reproduced, 1 contradicted)" in readme
    assert "and 1 are **not stable**: two." in readme
    assert "old" not in readme and readme.endswith("<!-- /findings-summary -->\n\ntail\n")
    page = (tmp_path / "docs" / "reproduction.md").read_text()
    assert "- avx2: seeds 0, 1, 2; torch 2.x, CPU capability AVX2, 1 torch thread, device cpu" in page
    assert (
        "| two | A | a statistic (3 seeds, n = 9) | 0.5 [0.4, 0.6] | **not stable** "
        "| native inconclusive; avx2 reproduced |" in page
    )
    assert "| two | 0.5 [0.4, 0.6] inconclusive | 0.5 [0.4, 0.6] reproduced | **no** |" in page
    assert "Every verdict the same in all 2 runs: no." in page and "the kernels and threads" not in page
    seeds = {**records, "seeds3": {**about, "seeds": [3, 4, 5], "cpu_capability": "AVX512"}}
    three = {**runs, "seeds3": [native[0], _row("two", "reproduced"), native[2]]}
    said = demo.doc_blocks(three, seeds)["findings-side"]
    assert said.endswith(
        "On the same seeds the kernels and threads (avx2) change the verdict of 1 rows; other seeds (seeds3) change"
        " 1 of them as well."
    )
    assert "- **reproduced** (1): one (0.5 [0.4, 0.6])" in page and "three (– [–, –])" in page
    assert "- **inconclusive**" not in page  # its one row, two, is not stable: no verdict another run reverses
    assert "- **not stable** (1, another run gives another verdict): two (native inconclusive, avx2 reproduced)" in page
    with pytest.raises(ValueError, match="findings-table"):
        demo.fill_block("no marks", "findings-table", "x")
