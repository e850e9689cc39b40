"""Figures of hessian and spectrum results: files written, drawn data equal to the stored arrays."""

import numpy as np
import pytest
from matplotlib.figure import Figure
from plot_results import hessian_arrays, spectrum_arrays, write_result

from landscape.plot import plot_files
from landscape.plot.hessian import density_figure, spectrum_figure
from landscape.store import read_result


def write_hessian(path, model="resnet_mini"):
    return read_result(write_result(path, "hessian", hessian_arrays(), model=model, which="LA"))


def write_spectrum(path, model, eig):
    return read_result(write_result(path, "spectrum", spectrum_arrays(eig), model=model))


def test_plot_files_draws_hessian_and_spectrum_figures(tmp_path):
    write_hessian(tmp_path / "h.h5")
    rng = np.random.default_rng(0)
    write_spectrum(tmp_path / "a.h5", "vit_mini", rng.normal(20, 30, (10, 5)))
    write_spectrum(tmp_path / "b.h5", "resnet_mini", np.abs(rng.normal(50, 10, (10, 5))))
    paths = plot_files([tmp_path / "h.h5", tmp_path / "a.h5", tmp_path / "b.h5"], tmp_path / "figs", "png")
    names = sorted(p.name for p in paths)
    assert names == ["a+1_spectrum.png", "h_density.png", "h_eigenvalues.png"]
    assert all(p.stat().st_size > 5000 for p in paths)


def test_density_figure_uses_log_y_and_the_stored_curve(tmp_path):
    res = write_hessian(tmp_path / "h.h5")
    fig = density_figure([res])
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    line = ax.get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), res["density/grid"])
    floor = res["density/values"].max() * 1e-8
    np.testing.assert_allclose(line.get_ydata(), np.maximum(res["density/values"], floor))
    assert "trace 11" in line.get_label() and line.get_label().startswith("resnet_mini")


def area(ax, label):
    """Area under the outline step curves drawn for ``label``."""
    patches = [p for p in ax.patches if p.get_label() == label and not p.get_fill()]
    total = 0.0
    for p in patches:
        values, edges, _ = p.get_data()
        total += float(np.sum(values * np.diff(edges)))
    return total


def test_spectrum_panels_split_signs_and_share_one_normalisation(tmp_path):
    eig = np.array([[-10.0, -2.0, 5.0, 50.0, 100.0], [-1.0, 3.0, 4.0, 60.0, 90.0]])
    a = write_spectrum(tmp_path / "a.h5", "vit_mini", eig)
    b = write_spectrum(tmp_path / "b.h5", "vit_mini", eig[:, 2:])
    fig = spectrum_figure([a, b], bins=10)
    neg, pos = fig.axes[:2]
    assert neg.get_xlim() == (-10.0, 0.0) and pos.get_xlim() == (0.0, 100.0)
    assert area(neg, "vit_mini (a)") == pytest.approx(0.3)  # 3 of 10 eigenvalues are negative
    assert area(pos, "vit_mini (a)") == pytest.approx(0.7)
    assert area(pos, "vit_mini (b)") == pytest.approx(1.0)
    assert area(neg, "vit_mini (b)") == 0.0
    assert {t.get_text() for t in pos.get_legend().get_texts()} == {"vit_mini (a)", "vit_mini (b)"}


def test_a_single_trace_sample_has_no_error_bar(tmp_path):
    arrays = {**hessian_arrays(), "trace/samples": np.array([7.0])}
    res = read_result(write_result(tmp_path / "h.h5", "hessian", arrays, model="m"))
    label = density_figure([res]).axes[0].get_lines()[0].get_label()
    assert label == "m (trace 7)"
