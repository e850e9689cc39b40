"""The analysis registry: a new analysis registered in a test reaches plot, info and report untouched."""

import ast
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from landscape.analyses import registry
from landscape.analyses.registry import Analysis, analyses, analysis_of, kinds, register_analysis
from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.plot import plot_files
from landscape.plot.common import save_figures, single_axes
from landscape.plot.report import write_report
from landscape.store import open_result

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _toy_figures():
    def check(result):
        if "values" not in result:
            raise LandscapeError(f"{result.path}: a toy file needs its values")

    def plot(results, out_dir, fmt, **options):
        def figures():
            for r in results:
                fig, ax = single_axes((3, 3))
                ax.plot(r["values"])
                yield f"{r.path.stem}_toy", fig

        return save_figures(figures(), out_dir, fmt, force=options.get("force", False))

    return SimpleNamespace(check=check, plot=plot)


@pytest.fixture
def toy():
    item = register_analysis(
        Analysis(
            kind="toy",
            title="Toy analysis",
            description="Sums of squares, for the registry's test.",
            summary=lambda r: f"{len(r['values'])} values summing to {float(np.sum(r['values'])):g}",
            numbers=lambda r: {"toy total": f"{float(np.sum(r['values'])):g}" if "values" in r else "–"},
            figures=_toy_figures(),
            order=999,
        )
    )
    yield item
    registry.unregister_analysis("toy")


def _toy_file(path, values):
    with open_result(path, "toy", {"model": "toy_model", "command": "test"}) as f:
        f.write("values", np.asarray(values, dtype=float), axes=["i"])
        f.mark_done()
    return path


def test_the_builtin_analyses_are_registered_once_each_in_report_order():
    assert kinds() == (
        "surface",
        "connect",
        "hessian",
        "curvature",
        "spectrum",
        "sharpness",
        "fourier",
        "lesion",
        "similarity",
        "trajectory",
        "sharpness_track",
    )
    assert all(a.options is not None and a.run and a.api for a in analyses() if a.command)
    assert all(a.docs for a in analyses())
    assert [a.kind for a in analyses() if not a.command] == ["sharpness_track"]  # written by landscape train
    assert [a.kind for a in analyses() if a.output] == ["align"]  # writes a checkpoint
    with pytest.raises(ValueError, match="declared twice"):
        register_analysis(Analysis(kind="surface", title="x", description="x", summary=str, figures="x"))
    with pytest.raises(LandscapeError, match="no analysis writes result kind 'nothing'"):
        analysis_of("nothing")
    with pytest.raises(LandscapeError, match="landscape align writes a checkpoint"):
        analysis_of("align")


def test_a_registered_analysis_reaches_plot_info_and_report(toy, tmp_path):
    path = _toy_file(tmp_path / "run" / "t.h5", [1.0, 2.0, 3.0])
    written = plot_files([path], tmp_path / "figs")
    assert [p.name for p in written] == ["t_toy.png"] and written[0].read_bytes()[:4] == b"\x89PNG"
    info = CliRunner().invoke(cli, ["info", str(path)])
    assert info.exit_code == 0 and "summary: 3 values summing to 6" in info.output
    page = write_report(tmp_path / "run", interactive=False).read_text()
    assert (
        "<h3>Toy analysis (toy_model)</h3>" in page and 'data-file="report_figures/model-toy_model/t_toy.png"' in page
    )
    header = page.split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert "toy total" in header and "<td>6</td>" in page


def test_plot_info_and_report_name_no_result_kind():
    sources = ["landscape/plot/__init__.py", "landscape/plot/report.py", "landscape/cli/info.py"]
    for source in sources:
        tree = ast.parse((ROOT / source).read_text())
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not strings & set(kinds()), (source, strings & set(kinds()))
        compared = [
            n for n in ast.walk(tree) if isinstance(n, ast.Compare) and "kind" in ast.unparse(n.left).split(".")[-1]
        ]
        assert all(not isinstance(c, ast.Constant) for n in compared for c in n.comparators), source
