"""Figures in memory: ``Result.plot()`` draws what ``landscape plot`` writes, for every kind, writing nothing."""

import io
import os

import numpy as np
import pytest
from matplotlib.figure import Figure
from plot_results import axes_of, well_formed, write_result

from landscape.analyses.registry import kinds
from landscape.errors import LandscapeError
from landscape.plot import draw_figures, plot_files
from landscape.plot.common import DPI, caption_of, figure_metadata, read_caption
from landscape.store.read import read_result
from landscape.store.result import ResultFile


def _file(folder, kind):
    arrays, attrs = well_formed(kind)
    folder.mkdir(exist_ok=True)
    return write_result(folder / f"{kind}.h5", kind, arrays, axes=True, **attrs)


def _held(kind):
    arrays, attrs = well_formed(kind)
    f = ResultFile.memory(kind, attrs)
    for name, data in arrays.items():
        f.write(name, data, axes=axes_of(kind, name))
    held = f.snapshot()
    f.close()
    return held


def _png(fig):
    """The bytes save_figures writes for ``fig``."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata=figure_metadata("png", caption_of(fig)))
    return buffer.getvalue()


@pytest.mark.parametrize("kind", kinds())
def test_plot_returns_the_figures_of_landscape_plot_and_writes_nothing(tmp_path, monkeypatch, kind):
    path = _file(tmp_path / "data", kind)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    figures = read_result(path).plot()
    assert figures and all(isinstance(f, Figure) for f in figures.values())
    assert os.listdir(cwd) == [] and sorted(os.listdir(path.parent)) == [path.name]
    written = [p for p in plot_files([path], tmp_path / "out", vtp=False) if p.suffix == ".png"]
    assert [p.stem for p in written] == [f"{kind}_{name}" for name in figures]
    for p, fig in zip(written, figures.values()):
        assert p.read_bytes() == _png(fig), p.name
        caption = caption_of(fig)  # each figure says what it draws, in the file too
        assert len(caption) > 40 and read_caption(p.read_bytes(), "png") == caption, p.name


@pytest.mark.parametrize("kind", kinds())
def test_a_result_held_in_memory_draws_the_same_figures_under_its_model_s_name(tmp_path, kind):
    held = _held(kind)
    figures = held.plot()
    assert figures and all(isinstance(f, Figure) for f in figures.values())
    same = read_result(_file(tmp_path, kind)).plot()
    assert list(figures) == list(same)
    written = plot_files([held], tmp_path / "out", vtp=False)
    assert [p.name for p in written] == [f"toy_{kind}_{name}.png" for name in figures]


def test_plot_files_takes_results_and_paths_together_and_overlays_one_kind(tmp_path):
    arrays, attrs = well_formed("spectrum")
    a = read_result(write_result(tmp_path / "a.h5", "spectrum", arrays, axes=True, model="m1"))
    b = write_result(tmp_path / "b.h5", "spectrum", {**arrays, "eigenvalues": arrays["eigenvalues"] * 2}, model="m2")
    written = plot_files([a, b])
    assert [p.name for p in written] == ["spectrum_m1_vs_m2.png"] and written[0].parent == tmp_path
    assert list(draw_figures([a, b])) == ["spectrum_m1_vs_m2"]


def test_plot_files_of_a_result_held_in_memory_asks_for_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LandscapeError, match="give out_dir") as info:
        plot_files([_held("lesion")])
    assert "\n" not in str(info.value) and os.listdir(tmp_path) == []


def test_two_results_held_in_memory_of_one_model_get_two_names(tmp_path):
    first, second = _held("similarity"), _held("similarity")
    written = plot_files([first, second], tmp_path)
    assert [p.name for p in written] == ["toy_similarity_similarity.png", "toy_similarity_2_similarity.png"]


def test_plot_options_are_checked_and_an_unfinished_result_cannot_be_drawn(tmp_path):
    result = read_result(_file(tmp_path, "surface"))
    assert list(result.plot(levels=5, log=True)) == ["contour", "contourf", "heatmap", "3d"]
    with pytest.raises(LandscapeError, match="--levels"):
        result.plot(levels=1)
    arrays, attrs = well_formed("surface")
    arrays.update(done=np.zeros_like(arrays["done"]), loss=np.full(arrays["loss"].shape, np.nan))
    unfinished = read_result(write_result(tmp_path / "u.h5", "surface", arrays, axes=True, **attrs))
    with pytest.raises(LandscapeError, match="none of its 28 points"):
        unfinished.plot()
