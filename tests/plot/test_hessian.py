"""Figures of hessian and spectrum results: files written, drawn data equal to the stored arrays."""

import numpy as np
import pytest
from matplotlib.figure import Figure
from plot_results import hessian_arrays, spectrum_arrays, write_result

from landscape.errors import LandscapeError
from landscape.plot import plot_files
from landscape.plot.hessian import density_figure, spectrum_figure
from landscape.store.read import read_result


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
    assert names == ["h_density.png", "h_eigenvalues.png", "spectrum_vit_mini_vs_resnet_mini.png"]
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


def test_spectrum_of_many_values_is_the_kernel_density_estimate(tmp_path):
    from scipy.stats import gaussian_kde

    rng = np.random.default_rng(1)
    eig = np.concatenate([rng.normal(-3, 1, (3, 3)), rng.normal(40, 8, (3, 12))], axis=1)  # 45 values
    a = write_spectrum(tmp_path / "a.h5", "vit_mini", eig)
    values = eig.ravel()
    neg, pos = spectrum_figure([a]).axes[:2]
    for ax, part in ((neg, values[values < 0]), (pos, values[values >= 0])):
        kde = gaussian_kde(part)  # the eigenvalues of the panel's sign alone, reflected at zero, times their share
        (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "vit_mini"]
        x, y = line.get_xdata(), line.get_ydata()
        assert len(x) > 100
        np.testing.assert_allclose(y, part.size / values.size * (kde(x) + kde(-x)), rtol=1e-12)
        assert not [p for p in ax.patches if p.get_label() == "vit_mini"]  # no bars
    assert pos.get_lines()[0].get_xdata()[[0, -1]] == pytest.approx([0.0, values.max()])
    # forced: bars for the same data
    hist_pos = spectrum_figure([a], style="hist").axes[1]
    assert not hist_pos.get_lines() and area(hist_pos, "vit_mini") == pytest.approx(np.mean(values >= 0))


def test_spectrum_of_few_values_is_a_histogram(tmp_path):
    eig = np.array([[-2.0, 5.0, 6.0], [1.0, 3.0, 9.0], [2.0, 4.0, 7.0]])  # 9 values < 20
    a = write_spectrum(tmp_path / "a.h5", "vit_mini", eig)
    neg, pos = spectrum_figure([a]).axes[:2]
    assert not pos.get_lines() and area(pos, "vit_mini") == pytest.approx(8 / 9)
    assert spectrum_figure([a], style="kde").axes[1].get_lines()  # forced
    constant = write_spectrum(tmp_path / "c.h5", "resnet_mini", np.ones((10, 3)))  # no spread: bars
    assert not spectrum_figure([constant], style="kde").axes[1].get_lines()


def test_overlay_figures_are_named_by_kind_and_models(tmp_path):
    eig = np.abs(np.random.default_rng(2).normal(5, 1, (4, 3)))
    paths = [write_spectrum(tmp_path / f"{m}_spectrum.h5", m, eig).path for m in ("a_m", "b_m", "c_m", "d_m")]
    names = [p.name for p in plot_files(paths[:3], tmp_path / "f", "png")]
    assert names == ["spectrum_a_m_vs_b_m_vs_c_m.png"]
    assert [p.name for p in plot_files(paths, tmp_path / "f", "png")] == ["spectrum_a_m_vs_b_m_and_2_more.png"]
    assert [p.name for p in plot_files(paths[:1], tmp_path / "f", "png")] == ["a_m_spectrum_spectrum.png"]
    assert [p.name for p in plot_files(paths, tmp_path / "f", "png", name="final")] == ["final_spectrum.png"]
    for bad in ("", "../x", "a/b", ".hidden", "x" * 101):
        with pytest.raises(LandscapeError, match="--name"):
            plot_files(paths, tmp_path / "f", "png", name=bad)
    with pytest.raises(LandscapeError, match="spectrum style"):
        plot_files(paths, tmp_path / "f", "png", spectrum_style="violin")


def notes(ax):
    """The texts of ``ax`` with their line breaks as spaces."""
    return [" ".join(t.get_text().split()) for t in ax.texts]


def test_a_spectrum_without_negative_eigenvalues_draws_nothing_in_the_negative_panel(tmp_path):
    rng = np.random.default_rng(3)
    positive = write_spectrum(tmp_path / "r.h5", "resnet_mini", 0.5 + np.abs(rng.normal(2, 3, (10, 5))))
    neg, pos = spectrum_figure([positive]).axes[:2]
    assert not neg.get_lines() and not neg.patches and not neg.collections
    assert notes(neg) == ["no negative eigenvalues: resnet_mini"]
    assert not pos.texts and pos.get_lines()[0].get_ydata().max() > 0
    # overlaid with a model that has negative eigenvalues: only that model draws in the negative panel
    mixed = write_spectrum(tmp_path / "v.h5", "vit_mini", rng.normal(5, 10, (10, 5)))
    for style in ("kde", "hist"):
        neg, pos = spectrum_figure([positive, mixed], bins=10, style=style).axes[:2]
        drawn = {a.get_label() for a in [*neg.get_lines(), *neg.patches] if not a.get_label().startswith("_")}
        assert drawn == {"vit_mini"}
        assert notes(neg) == ["no negative eigenvalues: resnet_mini"]
        assert {t.get_text() for t in pos.get_legend().get_texts()} == {"resnet_mini", "vit_mini"}


def test_the_density_of_one_sign_does_not_spill_across_zero(tmp_path):
    from scipy.integrate import trapezoid

    eig = np.concatenate([np.linspace(-0.5, -0.01, 10), np.linspace(0.01, 40.0, 30)]).reshape(8, 5)
    neg, pos = spectrum_figure([write_spectrum(tmp_path / "a.h5", "vit_mini", eig)], style="kde").axes[:2]
    (n_line,), (p_line,) = neg.get_lines(), pos.get_lines()
    assert n_line.get_xdata()[[0, -1]] == pytest.approx([-0.5, 0.0])
    # reflected at zero: the negative panel holds the share of negative eigenvalues (less the tail beyond -0.5)
    assert trapezoid(n_line.get_ydata(), n_line.get_xdata()) == pytest.approx(0.25, abs=0.03)
    assert trapezoid(p_line.get_ydata(), p_line.get_xdata()) == pytest.approx(0.75, abs=0.06)
