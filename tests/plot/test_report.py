"""`landscape report DIR`: one self-contained page, every figure embedded, provenance folded, nothing from the net."""

import base64
import html
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import one_line_error
from plot_results import (
    FOREIGN,
    SURFACE_ATTRS,
    foreign_surface,
    fourier_arrays,
    fourier_attrs,
    hessian_arrays,
    spectrum_arrays,
    surface_arrays,
    write_result,
)

from landscape.cli import cli
from landscape.plot.report import FIGURES_FOLDER, write_report
from landscape.store.read import describe

#: a model name that must come out escaped, never as markup
ODD = 'cnn<b>"x"</b>'


class Page(HTMLParser):
    """What the tests look at in a report page."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tags, self.urls, self.figures, self.images, self.details = [], [], [], [], []
        self.headings, self.scripts, self.svgs, self.skipped = [], [], 0, []
        self._heading = self._details = self._figure = self._script = self._li = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        for key in ("src", "href", "xlink:href", "data", "action"):
            if attrs.get(key):
                self.urls.append(attrs[key])
        if tag == "figure":
            self._figure = {"file": attrs.get("data-file"), "img": None, "svg": 0}
            self.figures.append(self._figure)
        elif tag == "img":
            self.images.append(attrs["src"])
            if self._figure is not None:
                self._figure["img"] = attrs["src"]
        elif tag == "svg":
            self.svgs += 1
            if self._figure is not None:
                self._figure["svg"] += 1
        elif tag in ("h1", "h2", "h3", "h4"):
            self._heading = [tag, ""]
        elif tag == "details":
            self._details = [attrs.get("data-file"), ""]
        elif tag == "script":
            self._script = [attrs.get("src"), ""]
        elif tag == "li":
            self._li = ""

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = None
        elif tag in ("h1", "h2", "h3", "h4") and self._heading:
            self.headings.append(tuple(self._heading))
            self._heading = None
        elif tag == "details" and self._details:
            self.details.append(tuple(self._details))
            self._details = None
        elif tag == "script" and self._script:
            self.scripts.append(tuple(self._script))
            self._script = None
        elif tag == "li" and self._li is not None:
            self.skipped.append(self._li)
            self._li = None

    def handle_data(self, data):
        for part in (self._heading, self._details, self._script):
            if part is not None:
                part[1] += data
        if self._li is not None:
            self._li += data


def build(folder, *, junk=True):
    """Small real result files of two models (the second with an odd name) and, optionally, two non-results."""
    folder.mkdir(exist_ok=True)
    write_result(folder / "toy_surface.h5", "surface", surface_arrays(), **SURFACE_ATTRS)
    write_result(
        folder / "toy_spectrum.h5", "spectrum", spectrum_arrays(np.array([[3.0, -0.5], [2.0, 1.0]])), model="toy"
    )
    write_result(folder / "toy_fourier.h5", "fourier", fourier_arrays(["conv", "msa", "mlp"]), **fourier_attrs("toy"))
    write_result(folder / "toy_hessian.h5", "hessian", hessian_arrays(), model="toy")
    write_result(folder / "odd_spectrum.h5", "spectrum", spectrum_arrays(np.array([[7.0, 1.0], [2.0, 1.0]])), model=ODD)
    write_result(folder / "odd_fourier.h5", "fourier", fourier_arrays(["conv", "conv", "mlp"]), **fourier_attrs(ODD))
    if junk:
        (folder / "junk.h5").write_text("not HDF5 at all")
        with h5py.File(folder / "plain.h5", "w") as f:
            f["x"] = np.arange(3)
    return folder


RESULTS = ["toy_surface.h5", "toy_spectrum.h5", "toy_fourier.h5", "toy_hessian.h5", "odd_spectrum.h5", "odd_fourier.h5"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = build(tmp_path_factory.mktemp("report") / "runs")
    path = write_report(folder, interactive=False)
    return folder, path, Page(path.read_text(encoding="utf-8"))


def assert_embeds_every_figure(folder, page, fmt="png"):
    files = sorted(p for p in (folder / FIGURES_FOLDER).rglob(f"*.{fmt}"))
    assert files
    by_file = {f["file"]: f for f in page.figures}
    assert sorted(by_file) == sorted(p.relative_to(folder).as_posix() for p in files)
    assert len(page.figures) == len(files)  # each once
    for path in files:
        figure = by_file[path.relative_to(folder).as_posix()]
        if fmt == "png":
            prefix = "data:image/png;base64,"
            assert figure["img"].startswith(prefix)
            data = base64.b64decode(figure["img"][len(prefix) :], validate=True)
            assert data.startswith(b"\x89PNG") and data == path.read_bytes()
        else:
            assert figure["svg"] >= 1 and figure["img"] is None


def assert_self_contained(page):
    for url in page.urls:
        assert not url.lower().startswith(("http:", "https:", "//", "file:")), url[:80]
    assert all(src is None for src, _ in page.scripts)
    assert "link" not in page.tags and "iframe" not in page.tags


def test_every_figure_is_embedded_as_png(report):
    folder, path, page = report
    assert path == folder / "report.html"
    assert_embeds_every_figure(folder, page)
    assert len(page.images) == len(page.figures)


def test_page_loads_nothing_from_the_network(report):
    assert_self_contained(report[2])


def test_every_result_has_its_provenance_under_its_figures(report):
    folder, _, page = report
    details = dict(page.details)
    assert sorted(details) == sorted(RESULTS)
    for name in RESULTS:
        assert describe(folder / name) in details[name]


def test_figures_are_grouped_by_model_and_kind(report):
    _, _, page = report
    h2 = [text for tag, text in page.headings if tag == "h2"]
    # models in the order of their files (no creation times here: by name), their names escaped
    assert h2 == ["Summary", ODD, "toy", "All models", "Skipped files"]
    h3 = [text for tag, text in page.headings if tag == "h3"]
    assert h3 == [
        f"Hessian spectrum ({ODD})",
        f"Fourier ({ODD})",
        "Loss surface (toy)",
        "Hessian (toy)",
        "Hessian spectrum (toy)",
        "Fourier (toy)",
    ]
    assert "b" not in page.tags  # the odd model name was escaped, never parsed as markup


def test_overlays_of_several_models_are_in_all_models(report):
    folder, _, _ = report
    shared = {p.name for p in (folder / FIGURES_FOLDER / "all-models").iterdir()}
    own = {p.name for p in (folder / FIGURES_FOLDER).glob("model-*/*")}
    assert shared and not shared & own  # the overlay figures only, no per-file figure twice
    assert len(shared) == 3  # the two spectra overlaid, the two Fourier files' high-frequency and variance
    assert not list((folder / FIGURES_FOLDER).rglob("*.vtp"))


def test_models_follow_the_order_their_results_were_computed(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    eig = spectrum_arrays(np.array([[1.0, 2.0]]))
    write_result(folder / "a.h5", "spectrum", eig, model="late", created="2024-05-02T00:00:00+00:00")
    write_result(folder / "b.h5", "spectrum", eig, model="early", created="2024-05-01T00:00:00+00:00")
    page = Page(write_report(folder, interactive=False).read_text())
    assert [text for tag, text in page.headings if tag == "h2"] == ["Summary", "early", "late", "All models"]


def test_files_that_are_not_results_are_noted_not_fatal(report):
    _, _, page = report
    notes = {line.split(":", 1)[0]: line for line in page.skipped}
    assert notes["junk.h5"] == "junk.h5: is not an HDF5 file and cannot be read"
    assert notes["plain.h5"] == "plain.h5: is not a landscape result (no 'kind' attribute)"


def test_summary_table_from_the_result_files(report):
    folder, _, _ = report
    text = (folder / "report.html").read_text()
    table = text.split('<h2 id="summary">Summary</h2>', 1)[1].split("</table>", 1)[0]
    rows = [r for r in table.split("<tr>")[2:]]
    assert len(rows) == len(RESULTS)
    cells = {r.split("<td>")[3].split("<")[0]: [c.split("<")[0] for c in r.split("<td>")[1:]] for r in rows}
    assert cells["toy_spectrum.h5"][4] == "3" and cells["odd_spectrum.h5"][4] == "7"
    assert cells["odd_spectrum.h5"][0] == "cnn&lt;b&gt;&quot;x&quot;&lt;/b&gt;"
    assert cells["toy_surface.h5"][3].startswith("1.075")
    header = [c.split("<")[0] for c in table.split("<tr>")[1].split("<th>")[1:]]
    msa = next(i for i, name in enumerate(header) if "MSA" in name)
    assert cells["toy_fourier.h5"][msa] == "-2.000"  # the MSA block's high-frequency value


def test_summary_md_table_is_rendered_escaped(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    write_result(folder / "s.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="m")
    (folder / "summary.md").write_text(
        "# run\n\nSome <words> & more.\n\n| model | note |\n| --- | --- |\n| `m` | <script>x</script> a\\|b |\n\n"
        "## m\n\n![fig](figures/x.png)\n"
    )
    page = Page(write_report(folder, interactive=False).read_text())
    text = (folder / "report.html").read_text()
    assert "<td><code>m</code></td><td>&lt;script&gt;x&lt;/script&gt; a|b</td>" in text
    assert "<p>Some &lt;words&gt; &amp; more.</p>" in text
    assert page.scripts == [] and "figures/x.png" not in page.urls


def test_later_summary_md_tables_come_under_their_heading(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    write_result(folder / "s.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="m")
    (folder / "summary.md").write_text(
        "# run\n\n| model | note |\n| --- | --- |\n| m | x |\n\n## Findings\n\nVerdicts.\n\n"
        "| claim | verdict |\n| --- | --- |\n| a | reproduced |\n\n## m\n\n![fig](figures/x.png)\n"
    )
    write_report(folder, interactive=False)
    text = (folder / "report.html").read_text()
    summary = text.split('<h2 id="summary">Summary</h2>', 1)[1]
    assert (
        summary.index("<td>m</td><td>x</td>") < summary.index("<h3>Findings</h3>") < summary.index("<p>Verdicts.</p>")
    )
    assert summary.index("<p>Verdicts.</p>") < summary.index("<td>a</td><td>reproduced</td>")


def test_svg_figures_are_inline(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    write_result(folder / "a.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="a")
    write_result(folder / "b.h5", "spectrum", spectrum_arrays(np.array([[3.0, 2.0]])), model="b")
    page = Page(write_report(folder, fmt="svg", interactive=False).read_text())
    assert_embeds_every_figure(folder, page, "svg")
    assert page.images == [] and page.svgs == 3  # a, b and their overlay
    assert_self_contained(page)


def test_cli_writes_the_page_and_prints_its_path(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    write_result(folder / "s.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="m")
    result = CliRunner().invoke(cli, ["report", str(folder), "--no-interactive"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(folder / "report.html")
    out = tmp_path / "elsewhere" / "r.html"
    result = CliRunner().invoke(cli, ["report", str(folder), "--out", str(out), "--format", "svg", "--no-interactive"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out) and "<svg" in out.read_text()


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda d: None, "does not exist"),
        (lambda d: d.mkdir(), "no landscape result files"),
        (lambda d: (d.mkdir(), (d / "x.h5").write_text("no")), "no landscape result files .*not an HDF5 file"),
    ],
    ids=["missing", "empty", "only-junk"],
)
def test_user_errors_are_one_line(tmp_path, setup, match):
    folder = tmp_path / "d"
    setup(folder)
    one_line_error(write_report, folder, match=match)
    result = CliRunner().invoke(cli, ["report", str(folder)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "Traceback" not in result.output


def test_unwritable_page_is_one_line_and_leaves_no_page(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    write_result(folder / "s.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="m")
    (tmp_path / "file").write_text("")
    one_line_error(write_report, folder, out=tmp_path / "file" / "r.html", interactive=False, match="cannot")
    shutil.rmtree(folder / FIGURES_FOLDER, ignore_errors=True)  # the page's folder is checked before any figure
    (folder / FIGURES_FOLDER).write_text("")  # the figures folder's name taken by a file
    one_line_error(write_report, folder, interactive=False, match="cannot create folder")
    assert not (folder / "report.html").exists()
    one_line_error(write_report, folder, fmt="pdf", match="png, svg")


def test_interactive_requires_plotly(tmp_path, monkeypatch):
    build(tmp_path / "d", junk=False)
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    msg = one_line_error(write_report, tmp_path / "d", interactive=True)
    assert "pip install 'landscape-toolkit[interactive]'" in msg
    page = Page(write_report(tmp_path / "d").read_text())  # default: without plotly, no 3D views, no error
    assert not any("Plotly" in text for _, text in page.scripts)


def test_interactive_3d_view_is_embedded_inline(tmp_path):
    pytest.importorskip("plotly")
    folder = tmp_path / "d"
    folder.mkdir()
    write_result(folder / "a_surface.h5", "surface", surface_arrays(), **SURFACE_ATTRS)
    write_result(folder / "b_surface.h5", "surface", surface_arrays(), **{**SURFACE_ATTRS, "model": "other"})
    text = write_report(folder, interactive=True).read_text()
    page = Page(text)
    assert text.count('class="interactive"') == 2
    bundles = [body for _, body in page.scripts if "plotly.js v" in body]
    assert len(bundles) == 1  # plotly's JavaScript embedded once, inline
    assert sum("Plotly.newPlot" in body for _, body in page.scripts) == 2
    assert_self_contained(page)
    assert_embeds_every_figure(folder, page)


def _browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def test_headless_browser_renders_the_images(report):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser (chromium, chromium-browser, google-chrome) installed")
    folder, path, page = report
    proc = subprocess.run(
        [browser, "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom", Path(path).resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Page(proc.stdout)
    assert len(dom.images) == len(page.images) and all(src.startswith("data:image/png;base64,") for src in dom.images)
    assert len(dom.details) == len(RESULTS)


def test_a_symlinked_page_is_replaced_with_force_never_followed(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write_result(folder / "s.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="m")
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    (folder / "report.html").symlink_to(target)
    one_line_error(write_report, folder, interactive=False, match="report.html is a symbolic link.*--force")
    page = write_report(folder, interactive=False, force=True)
    assert not page.is_symlink()
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert target.read_text() == "keep"


def test_an_out_page_landscape_did_not_write_needs_force_and_its_own_is_replaced(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write_result(folder / "s.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="m")
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    one_line_error(write_report, folder, out=mine, interactive=False, match="notes.html exists and landscape did not")
    assert mine.read_text() == "<html>my notes</html>"
    result = CliRunner().invoke(cli, ["report", str(folder), "--out", str(mine), "--no-interactive", "--force"])
    assert result.exit_code == 0 and "landscape report" in mine.read_text()
    write_report(folder, out=mine, interactive=False)  # a page it wrote is replaced without --force
    os.mkfifo(folder / "fifo.html")
    one_line_error(write_report, folder, out=folder / "fifo.html", force=True, match="named pipe.*never replaced")


def test_nothing_is_read_or_written_outside_the_folder(tmp_path):
    folder, outside = tmp_path / "run", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    write_result(folder / "s.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="m")
    write_result(outside / "theirs.h5", "spectrum", spectrum_arrays(np.array([[3.0, 4.0]])), model="theirs")
    (outside / "summary.md").write_text("| secret |\n| --- |\n| SECRET-TABLE |\n")
    (folder / "linked.h5").symlink_to(outside / "theirs.h5")
    (folder / "summary.md").symlink_to(outside / "summary.md")
    (folder / FIGURES_FOLDER).symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    one_line_error(write_report, folder, interactive=False, match="report_figures is a symbolic link.*only inside")
    assert sorted(p.name for p in outside.iterdir()) == before
    (folder / FIGURES_FOLDER).unlink()
    (folder / FIGURES_FOLDER).mkdir()
    (folder / FIGURES_FOLDER / "model-m").symlink_to(outside)
    one_line_error(write_report, folder, interactive=False, match="model-m is a symbolic link")
    (folder / FIGURES_FOLDER / "model-m").unlink()
    page = Page(write_report(folder, interactive=False).read_text())
    notes = {line.split(":", 1)[0]: line for line in page.skipped}
    assert "symbolic link to a file outside" in notes["linked.h5"] and "not read" in notes["summary.md"]
    assert "SECRET-TABLE" not in (folder / "report.html").read_text()
    assert all("theirs" not in text for _, text in page.headings)
    assert sorted(p.name for p in outside.iterdir()) == before


@pytest.mark.parametrize("how", FOREIGN)
def test_a_file_that_keeps_data_elsewhere_is_skipped_with_a_note(tmp_path, how):
    folder = tmp_path / "run"
    folder.mkdir()
    write_result(folder / "s.h5", "spectrum", spectrum_arrays(np.array([[1.0, 2.0]])), model="m")
    secret = tmp_path / "secret.bin"
    if how == "external":
        secret.write_bytes(b"SECRET!!" * 28)
    foreign_surface(folder / "crafted.h5", how, secret)
    text = write_report(folder, interactive=False).read_text()
    assert "crafted.h5: is refused" in text and "SECRET" not in text
    assert not list((folder / FIGURES_FOLDER).rglob("crafted*"))


def test_every_figure_is_captioned_with_what_it_draws_and_enlarges_on_a_click(report):
    from landscape.plot.common import read_caption

    folder, path, page = report
    text = path.read_text(encoding="utf-8")
    figure = r'<figure data-file="([^"]+)" tabindex="0"[^>]*>.*?<figcaption>(.*?)</figcaption>'
    captions = re.findall(figure, text, re.S)
    assert len(captions) == len(page.figures)  # every figure takes the focus: a click enlarges it (CSS, no script)
    assert "figure:focus" in text and all(src is None for src, _ in page.scripts)
    for file, caption in captions:
        shown, name = caption.split("<br><small>")  # every figure has a caption: what it draws first, its name below
        assert shown and name == f"{Path(file).name}</small>"
        written = read_caption((folder / file).read_bytes(), "png")  # the caption its drawing wrote into the file
        assert shown == html.escape(written)
    contours = [c for f, c in captions if f.endswith("_contour.png")]
    assert contours and all(c.startswith("Loss contours on the plane") for c in contours)


def test_a_sub_folder_of_several_models_keeps_each_files_own_figures(tmp_path):
    # a demo's seed1/: the overlay of two models' Fourier files shares names with each file's own figures
    folder = tmp_path / "demo"
    (folder / "seed1").mkdir(parents=True)
    for model, kinds in [("a", ["conv", "conv", "conv"]), ("b", ["conv", "msa", "mlp"])]:
        for where in (folder, folder / "seed1"):
            write_result(where / f"{model}_fourier.h5", "fourier", fourier_arrays(kinds), **fourier_attrs(model))
    page = Page(write_report(folder, interactive=False).read_text())
    assert [text for tag, text in page.headings if tag == "h2"][:5] == ["Summary", "a", "b", "All models", "seed1/"]
    assert_embeds_every_figure(folder, page)


def test_results_in_sub_folders_get_a_section_with_their_overlay_and_nothing_outside_is_read(tmp_path):
    folder, outside = tmp_path / "demo", tmp_path / "outside"
    (folder / "data_size").mkdir(parents=True)
    outside.mkdir()
    eig = spectrum_arrays(np.array([[1.0, 2.0], [0.5, 3.0]]))
    write_result(folder / "m_spectrum.h5", "spectrum", eig, model="m")
    for share in ("0.25", "0.5"):
        write_result(folder / "data_size" / f"m_data{share}_spectrum.h5", "spectrum", eig, model="m")
    write_result(outside / "theirs.h5", "spectrum", eig, model="theirs")
    (folder / "elsewhere").symlink_to(outside)
    page = Page(write_report(folder, interactive=False).read_text())
    h2 = [text for tag, text in page.headings if tag == "h2"]
    assert h2 == ["Summary", "m", "data_size/", "Skipped files"]
    assert "Hessian spectrum (data_size/)" in [text for tag, text in page.headings if tag == "h3"]
    drawn = {p.name for p in (folder / FIGURES_FOLDER / "folder-data_size").iterdir()}
    assert drawn == {"m_data0.25_spectrum_spectrum.png", "m_data0.5_spectrum_spectrum.png"}
    overlaid = {p.name for p in (folder / FIGURES_FOLDER / "folder-data_size-overlaid").iterdir()}
    assert overlaid == {"spectrum_m_data0.25_spectrum_vs_m_data0.5_spectrum.png"}  # the "more data" comparison
    assert_embeds_every_figure(folder, page)
    notes = {line.split(":", 1)[0]: line for line in page.skipped}
    assert "symbolic link to a file outside" in notes["theirs.h5"]
    assert all("theirs" not in text for _, text in page.headings)


def test_figures_drawn_by_two_workers_are_those_drawn_here(tmp_path):
    folder = build(tmp_path / "runs", junk=True)
    one = write_report(folder, out=tmp_path / "one.html", interactive=False).read_text(encoding="utf-8")
    figures = {p.relative_to(folder): p.read_bytes() for p in (folder / FIGURES_FOLDER).rglob("*.png")}
    two = write_report(folder, out=tmp_path / "two.html", interactive=False, jobs=2).read_text(encoding="utf-8")
    assert {p.relative_to(folder): p.read_bytes() for p in (folder / FIGURES_FOLDER).rglob("*.png")} == figures
    assert Page(two).figures == Page(one).figures and "junk.h5" in two
