"""Crafted result files: a file that contradicts itself is never summarised, drawn or reported as if it were sound.

Every registered kind gets files whose arrays disagree with each other or with the file's attributes (a file
marked complete with entries not done, a ``loss`` of another shape than its coordinates, ...): ``landscape
info`` prints the inconsistency as the summary line, ``plot`` refuses it in one line, the report gives it a
note and goes on. Values the checks cannot foresee, which fail while a figure is drawn, are one line too.
"""

import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from plot_results import well_formed, write_result

from landscape.analyses.registry import kinds, summarize
from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.plot import UndrawableError, plot_files
from landscape.plot.report import write_report
from landscape.store.read import read_result


def _undone(name):
    def bend(arrays, attrs):
        arrays[name] = np.zeros_like(arrays[name], bool)
        attrs["complete"] = True

    return bend


def _replace(name, value):
    def bend(arrays, attrs):
        arrays[name] = value(arrays[name]) if callable(value) else value

    return bend


def _attr(key, value):
    def bend(arrays, attrs):
        attrs[key] = value

    return bend


#: kind -> (what is bent, how, words the one-line message holds)
INCONSISTENT = [
    ("surface", "complete, no point done", _undone("done"), ["marked complete", "'done'"]),
    ("surface", "loss of another shape", _replace("loss", lambda a: a[:3]), ["'loss'", "along y"]),
    ("surface", "coordinates not rising", _replace("xcoordinates", lambda a: a[::-1]), ["'xcoordinates'", "rise"]),
    (
        "surface",
        "coordinates overflow",
        _replace("xcoordinates", np.array([-1.7, -1.6, -1.0, 1.0, 1.6, 1.7, 1.75]) * 1e308),
        ["rise"],
    ),
    ("surface", "done mask of NaN", _replace("done", lambda a: np.full(a.shape, np.nan)), ["'done'", "0 and 1"]),
    ("surface", "eigenvalue attribute text", _attr("direction_eigenvalues", [1.0, "a"]), ["direction_eigenvalues"]),
    ("hessian", "residuals of another length", _replace("residuals", np.ones(3)), ["'residuals'", "pair"]),
    ("hessian", "negative residuals", _replace("residuals", lambda a: -a), ["'residuals'", "negative"]),
    ("hessian", "density grid not rising", _replace("density/grid", lambda a: a[::-1]), ["'density/grid'"]),
    ("spectrum", "complete, no batch done", _undone("done"), ["marked complete", "3 of the 3"]),
    ("spectrum", "batch sizes of another length", _replace("batch_sizes", np.full(2, 16)), ["'batch_sizes'", "batch"]),
    (
        "spectrum",
        "done with NaN eigenvalues",
        _replace("eigenvalues", lambda a: a * np.nan),
        ["marked done", "3 batches"],
    ),
    ("spectrum", "batch sizes NaN", _replace("batch_sizes", np.full(3, np.nan)), ["'batch_sizes'", "not finite"]),
    ("fourier", "layer names of another length", _replace("layer_names", np.array(["a", "b"])), ["'layer_names'"]),
    ("fourier", "frequencies not finite", _replace("frequencies", lambda a: a * np.inf), ["'frequencies'", "finite"]),
    ("fourier", "complete, noise bands not done", _undone("noise/done"), ["marked complete", "'noise/done'"]),
    ("fourier", "noise strength text", _attr("noise_strength", "loud"), ["noise_strength"]),
    ("lesion", "complete, no block done", _undone("done"), ["marked complete", "'done'"]),
    ("lesion", "intact NLL text", _attr("intact_nll", "x"), ["intact_nll"]),
    ("lesion", "depth of another length", _replace("depth", np.zeros(2)), ["'depth'", "block"]),
    ("similarity", "names of another length", _replace("names_a", np.array(["a"])), ["'names_a'", "layer_a"]),
    ("curvature", "complete, a distance not done", _undone("distance/done"), ["marked complete", "'distance/done'"]),
    (
        "curvature",
        "angles of another operator count",
        _replace("spectra/angles", np.zeros((2, 2))),
        ["'spectra/angles'", "operator"],
    ),
    ("similarity", "sample count NaN", _attr("n_samples", float("nan")), ["n_samples"]),
    ("trajectory", "angles of another length", _replace("angle", np.zeros(2)), ["'angle'", "snapshot"]),
    ("trajectory", "distances as text", _replace("distance", np.array(["a"] * 4)), ["'distance'", "numbers"]),
    ("connect", "complete, no point done", _undone("line/done"), ["marked complete", "'line/done'"]),
    ("connect", "losses of another length", _replace("line/loss", lambda a: a[:, :3]), ["'line/loss'", "point"]),
    ("connect", "coordinates not finite", _replace("line/coords", lambda a: a * np.inf), ["'line/coords'"]),
    ("sharpness", "complete, no batch done", _undone("done"), ["marked complete", "'done'"]),
    ("sharpness", "values of another radius count", _replace("values", lambda a: a[:, :1]), ["'values'", "radius"]),
    ("sharpness", "negative radius", _replace("rho", lambda a: -a), ["'rho'", "negative"]),
    ("sharpness_track", "complete, no record done", _undone("done"), ["marked complete", "'done'"]),
    ("sharpness_track", "thresholds of another length", _replace("threshold", np.ones(2)), ["'threshold'", "record"]),
]


def crafted(path, kind, bend=None):
    arrays, attrs = well_formed(kind)
    if bend is not None:
        bend(arrays, attrs)
    return write_result(path, kind, arrays, **attrs)


def test_every_registered_kind_has_an_inconsistent_file_here():
    assert set(kinds()) <= {kind for kind, *_ in INCONSISTENT}


@pytest.mark.parametrize("kind", sorted({kind for kind, *_ in INCONSISTENT}))
def test_a_well_formed_file_of_each_kind_is_summarised(tmp_path, kind):
    assert "inconsistent" not in summarize(read_result(crafted(tmp_path / f"{kind}.h5", kind)))


@pytest.mark.parametrize(
    ("kind", "what", "bend", "words"), INCONSISTENT, ids=[f"{k}: {w}" for k, w, *_ in INCONSISTENT]
)
def test_an_inconsistent_file_is_summarised_as_such_and_plot_refuses_it_in_one_line(tmp_path, kind, what, bend, words):
    path = crafted(tmp_path / f"{kind}.h5", kind, bend)
    summary = summarize(read_result(path))
    assert "inconsistent file, not summarised" in summary and "\n" not in summary
    assert all(w in summary for w in words), summary
    with pytest.raises(LandscapeError) as caught:
        plot_files([path], tmp_path / "figures", "png")
    assert "\n" not in str(caught.value) and all(w in str(caught.value) for w in words)
    assert not list((tmp_path / "figures").glob("*.png"))


def test_info_prints_the_inconsistency_as_the_summary_line(tmp_path):
    path = crafted(tmp_path / "s.h5", "surface", _undone("done"))
    out = CliRunner().invoke(cli, ["info", str(path)])
    assert out.exit_code == 0, out.output
    (line,) = [ln for ln in out.output.splitlines() if ln.startswith("  summary:")]
    assert "inconsistent file, not summarised" in line and "marked complete but 28 of the 28" in line


def test_values_that_fail_while_drawn_are_one_line_naming_the_file(tmp_path):
    path = crafted(tmp_path / "s.h5", "surface", _replace("loss", lambda a: np.full(a.shape, 1e308)))
    with pytest.raises(UndrawableError) as caught:
        plot_files([path], tmp_path, "png", vtp=False)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "cannot be drawn" in message


def test_the_report_notes_each_crafted_file_and_still_draws_the_sound_one(tmp_path):
    crafted(tmp_path / "sound.h5", "trajectory")
    crafted(tmp_path / "huge.h5", "surface", _replace("loss", lambda a: np.full(a.shape, 1e308)))
    crafted(tmp_path / "undone.h5", "spectrum", _undone("done"))
    page = write_report(tmp_path, interactive=False).read_text()
    assert "huge.h5" in page and "undone.h5" in page
    assert page.count("no figures:") == 2 and "cannot be drawn" in page and "marked complete" in page
    assert "sound_trajectory.png" in page


@pytest.mark.parametrize("style", ["default", "paper"])
@pytest.mark.parametrize("log", [False, True])
def test_a_zmax_at_the_lowest_loss_is_one_line_in_every_style_and_with_log(tmp_path, style, log):
    path = crafted(tmp_path / "s.h5", "surface")
    lowest = float(np.nanmin(read_result(path)["loss"]))
    for zmax in (lowest, lowest - 1, -1e300):
        with pytest.raises(LandscapeError, match="is not above the lowest loss") as caught:
            plot_files([path], tmp_path / "figures", "png", zmax=zmax, style=style, log=log)
        assert "\n" not in str(caught.value)
    assert not list((tmp_path / "figures").iterdir())


@pytest.mark.parametrize("levels", [10**9, 1001])
def test_more_contour_levels_than_a_figure_shows_are_refused_before_any_figure(tmp_path, levels):
    path = crafted(tmp_path / "s.h5", "surface")
    with pytest.raises(LandscapeError, match="--levels must be at most 1000") as caught:
        plot_files([path], tmp_path / "figures", "png", levels=levels)
    assert "\n" not in str(caught.value) and not (tmp_path / "figures").exists()


def test_a_summary_that_overflows_is_a_line_that_says_so(tmp_path):
    from landscape.analyses.registry import Analysis, register_analysis, unregister_analysis

    def overflows(result):
        return f"{int(float('inf'))}"

    register_analysis(Analysis(kind="toy", title="Toy", description="d", summary=overflows, figures=SimpleNamespace()))
    try:
        path = write_result(tmp_path / "t.h5", "toy", {"a": np.zeros(2)})
        assert summarize(read_result(path)) == "Toy: the arrays do not fit (OverflowError)"
    finally:
        unregister_analysis("toy")


# ------------------------------------------------------------------------------ names read from the files
def _texts(fig):
    """Every text a figure shows: titles, the suptitle, axis labels, legends, free texts."""
    artists = list(fig.texts)
    for ax in fig.axes:
        artists += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        if ax.get_legend() is not None:
            artists += ax.get_legend().get_texts()
    return [a.get_text() for a in artists if a.get_text()]


@pytest.mark.parametrize("kind", kinds())
def test_a_two_megabyte_model_name_is_cut_in_every_title_and_legend(tmp_path, kind):
    arrays, attrs = well_formed(kind)
    path = write_result(tmp_path / "r.h5", kind, arrays, **{**attrs, "model": "m" * 2_000_000})
    for fig in read_result(path).plot().values():
        for text in _texts(fig):
            assert "m" * 61 not in text and len(text) < 400, text[:100]


@pytest.mark.parametrize("kind", ["surface", "fourier", "connect"])
def test_control_characters_of_a_model_name_are_shown_escaped(tmp_path, kind):
    arrays, attrs = well_formed(kind)
    path = write_result(tmp_path / "r.h5", kind, arrays, **{**attrs, "model": "toy\nfaked_line: yes\r\x9b\x7f"})
    shown = [t for fig in read_result(path).plot().values() for t in _texts(fig) if "toy" in t]
    assert shown and all("toy\\nfaked_line: yes\\r\\x9b\\x7f" in t.replace("\n", " ") for t in shown), shown


def test_report_folders_of_long_model_names_are_short_and_apart(tmp_path):
    for name, tail in (("a", "1"), ("b", "2")):
        arrays, attrs = well_formed("surface")
        write_result(tmp_path / f"{name}.h5", "surface", arrays, **{**attrs, "model": "m" * 2_000_000 + tail})
    page = write_report(tmp_path, interactive=False)
    folders = sorted(p.name for p in (tmp_path / "report_figures").iterdir())
    assert len(folders) == 3 and all(len(f) <= 80 for f in folders), folders  # two models and all-models
    outside_details = re.sub(r"<pre>.*?</pre>", "", page.read_text(), flags=re.S)  # the files' full description
    assert "m" * 61 not in outside_details


def test_a_file_name_that_is_not_utf8_is_drawn_under_its_own_name(tmp_path):
    arrays, attrs = well_formed("surface")
    arrays = {k: (v[:1] if k in ("ycoordinates",) else v[:1] if k != "xcoordinates" else v) for k, v in arrays.items()}
    path = tmp_path / "n\udcffame.h5"  # the bytes b"n\xffame.h5" on disk
    write_result(path, "surface", arrays, **{**attrs, "surface_ndim": 1})
    code_output = CliRunner().invoke(cli, ["plot", str(path), "--out", str(tmp_path / "fig")])
    assert code_output.exit_code == 0, code_output.output
    assert os.listdir(os.fsencode(tmp_path / "fig")) == [b"n\xffame_1d.png"]
    legend = [t for fig in read_result(path).plot().values() for t in _texts(fig) if "ame" in t]
    assert legend and all("n\\xffame" in t for t in legend), legend
