import numpy as np
import pytest
from matplotlib.colors import to_rgba

from landscape.plot import plot_files
from landscape.plot.fourier import depth_figure, noise_figure, profile_figure
from landscape.store import mark_complete, open_result, read_result, write_array


def fake_result(path, model, kinds, noise=False, hf_offset=0.0):
    n = len(kinds)
    attrs = {"model": model, "profile": "diagonal", "frequency_axis": "normalised", "noise_strength": 0.5}
    f, _ = open_result(path, "fourier", attrs)
    with f:
        freq = np.linspace(0, 1, 5)
        delta = -np.outer(np.arange(1, n + 1), freq)
        delta[-1, 3:] = np.nan  # a layer with fewer points
        write_array(f, "frequencies", freq)
        write_array(f, "delta_log_amplitude", delta)
        write_array(f, "high_frequency", -np.arange(1, n + 1) + hf_offset)
        write_array(f, "depth", np.arange(n) / (n - 1))
        write_array(f, "layer_names", np.array([f"l{i}" for i in range(n)]))
        write_array(f, "layer_kinds", np.array(kinds))
        write_array(f, "variance", np.arange(1.0, n + 1))
        write_array(f, "maps/000", np.zeros((4, 4)))
        if noise:
            write_array(f, "noise/frequencies", np.array([0.1, 0.5, 0.9]))
            write_array(f, "noise/accuracy_drop", np.array([0.1, 0.2, 0.3]))
            write_array(f, "noise/done", np.array([True, False, True]))
        mark_complete(f)
    return read_result(path)


def test_profile_figure_draws_every_layer_coloured_by_depth(tmp_path):
    res = fake_result(tmp_path / "a.h5", "vit_ti", ["embed", "msa", "mlp", "msa", "mlp"])
    fig = profile_figure(res)
    lines = [ln for ln in fig.axes[0].get_lines() if len(ln.get_xdata()) > 2]
    assert len(lines) == 5
    np.testing.assert_allclose(lines[1].get_ydata(), res["delta_log_amplitude"][1])
    assert len(lines[-1].get_xdata()) == 3  # NaN points left out
    import matplotlib

    cmap = matplotlib.colormaps["plasma_r"]
    assert to_rgba(lines[0].get_color()) == pytest.approx(cmap(0.0))
    assert to_rgba(lines[-1].get_color()) == pytest.approx(cmap(1.0))
    assert fig.axes[1].get_ylabel() == "normalised depth"
    assert fig.axes[0].get_xticklabels()[-1].get_text() == "1.0π"


def test_depth_figure_groups_architectures_and_shades(tmp_path):
    kinds = ["stem", "conv", "downsample", "msa", "conv"]
    a = fake_result(tmp_path / "a.h5", "alternet", kinds)
    b = fake_result(tmp_path / "b.h5", "alternet", kinds, hf_offset=0.5)
    c = fake_result(tmp_path / "c.h5", "resnet", ["stem", "conv", "conv"])
    fig = depth_figure([a, b, c], "high_frequency", "y", "t")
    top, bottom = fig.axes
    assert len(top.get_lines()) == 2 and len(bottom.get_lines()) == 1
    np.testing.assert_allclose(top.get_lines()[1].get_ydata(), b["high_frequency"])
    assert top.get_lines()[0].get_marker() != top.get_lines()[1].get_marker() != bottom.get_lines()[0].get_marker()
    spans = [p for p in top.patches]
    assert len(spans) == 2  # one downsampling, one MSA block
    xs = sorted(p.get_x() for p in spans)
    np.testing.assert_allclose(xs, [0.5 - 0.125, 0.75 - 0.125])
    assert not bottom.patches
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert "alternet (a)" in legend and "MSA block" in legend and "downsampling block" in legend


def test_noise_figure_plots_done_bands_in_percent(tmp_path):
    res = fake_result(tmp_path / "a.h5", "vit", ["embed", "msa", "mlp"], noise=True)
    line = noise_figure([res]).axes[0].get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), [0.1, 0.9])
    np.testing.assert_allclose(line.get_ydata(), [10.0, 30.0])


def test_plot_files_writes_every_figure(tmp_path):
    fake_result(tmp_path / "a.h5", "vit", ["embed", "msa", "mlp"], noise=True)
    fake_result(tmp_path / "b.h5", "resnet", ["stem", "conv", "downsample"])
    paths = plot_files([tmp_path / "a.h5", tmp_path / "b.h5"], tmp_path / "figs", "png")
    names = sorted(p.name for p in paths)
    assert names == sorted(["a_delta_log_amplitude.png", "a_maps.png", "b_delta_log_amplitude.png", "b_maps.png",
                            "a+1_high_frequency.png", "a+1_variance.png", "a+1_noise.png"])
    assert all(p.stat().st_size > 1000 for p in paths)
