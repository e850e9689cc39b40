import numpy as np
import pytest
from matplotlib.colors import to_rgba
from plot_results import fourier_arrays, fourier_attrs, write_result

from landscape.plot import plot_files
from landscape.plot.fourier import MAX_NAMED, depth_figure, noise_figure, profile_figure
from landscape.store.read import read_result


def fake_result(path, model, kinds, noise=False, hf_offset=0.0):
    arrays = fourier_arrays(kinds, noise=noise, hf_offset=hf_offset)
    return read_result(write_result(path, "fourier", arrays, **fourier_attrs(model)))


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
    np.testing.assert_allclose(xs, [0.5 - 0.1, 0.75 - 0.1])  # 80% of the depth cell of 0.25
    assert not bottom.patches
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert "alternet (a)" in legend and "MSA block" in legend and "downsampling block" in legend


def test_noise_figure_plots_done_bands_in_percent(tmp_path):
    res = fake_result(tmp_path / "a.h5", "vit", ["embed", "msa", "mlp"], noise=True)
    line = noise_figure([res]).axes[0].get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), [0.1, 0.9])
    np.testing.assert_allclose(line.get_ydata(), [10.0, 30.0])
    ax = line.axes
    assert ax.get_xlim() == (0.0, 1.0) and ax.get_xticklabels()[1].get_text() == "0.2π"
    assert ax.get_xlabel() == "noise frequency (centre of the band)"


def test_plot_files_writes_every_figure(tmp_path):
    fake_result(tmp_path / "a.h5", "vit", ["embed", "msa", "mlp"], noise=True)
    fake_result(tmp_path / "b.h5", "resnet", ["stem", "conv", "downsample"])
    paths = plot_files([tmp_path / "a.h5", tmp_path / "b.h5"], tmp_path / "figs", "png")
    names = sorted(p.name for p in paths)
    assert names == sorted(
        [
            "a_delta_log_amplitude.png",
            "a_maps.png",
            "b_delta_log_amplitude.png",
            "b_maps.png",
            "high_frequency_vit_vs_resnet.png",
            "variance_vit_vs_resnet.png",
            "a_noise.png",  # only a holds noise results: a one-file figure
        ]
    )
    assert all(p.stat().st_size > 1000 for p in paths)


def test_noise_figure_title_names_the_construction(tmp_path):
    arrays = fourier_arrays(["embed", "msa", "mlp"], noise=True)
    default = read_result(write_result(tmp_path / "a.h5", "fourier", arrays, **fourier_attrs("vit")))
    assert noise_figure([default]).axes[0].get_title().endswith("(RMS 0.5)")
    attrs = {**fourier_attrs("vit"), "noise_construction": "official", "noise_eps": 0.007}
    official = read_result(write_result(tmp_path / "b.h5", "fourier", arrays, **attrs))
    assert noise_figure([official]).axes[0].get_title().endswith("(official construction, eps 0.007)")


def test_profile_figure_paper_style_is_the_released_fig_2a(tmp_path):
    import matplotlib

    kinds = ["embed", "msa", "mlp", "msa", "mlp"]
    res = fake_result(tmp_path / "a.h5", "vit_ti", kinds)
    n = len(kinds)
    fig = profile_figure(res, style="paper")
    lines = fig.axes[0].get_lines()[:-1]  # the last line is the zero line
    assert len(lines) == n - 1  # the last block is left out
    cmap = matplotlib.colormaps["plasma_r"]
    # drawn deepest first, the i-th curve plasma_r(i / n_layers): the deepest block drawn is yellow
    assert to_rgba(lines[0].get_color()) == pytest.approx(cmap(0.0))
    for i, (line, k) in enumerate(zip(lines, range(n - 2, -1, -1))):
        assert to_rgba(line.get_color()) == pytest.approx(cmap(i / n))
        keep = ~np.isnan(res["delta_log_amplitude"][k])
        np.testing.assert_allclose(line.get_ydata(), res["delta_log_amplitude"][k][keep])
    # the colour bar maps each drawn block's depth to its colour
    mappable = fig.axes[1]._colorbar.mappable
    assert fig.axes[1].get_ylabel() == "normalised depth"
    for k in range(n - 1):
        assert mappable.to_rgba(res["depth"][k]) == pytest.approx(cmap((n - 2 - k) / n), abs=2e-3)
    # the default is unchanged: every block, plasma_r at its depth
    default = [ln for ln in profile_figure(res).axes[0].get_lines() if len(ln.get_xdata()) > 2]
    assert len(default) == n and to_rgba(default[0].get_color()) == pytest.approx(cmap(0.0))
    assert to_rgba(default[-1].get_color()) == pytest.approx(cmap(1.0))
    written = plot_files([tmp_path / "a.h5"], tmp_path / "figs", style="paper")
    assert tmp_path / "figs" / "a_delta_log_amplitude.png" in written


def bands(ax):
    """The shaded bands of ``ax`` as sorted ``(start, end)`` pairs along x (in data units)."""
    return sorted((p.get_x(), p.get_x() + p.get_width()) for p in ax.patches)


def tick_names(ax):
    return [t.get_text() for t in ax.get_xticklabels()]


def test_consecutive_msa_blocks_are_separate_bands_and_every_block_is_named(tmp_path):
    kinds = ["stem", "conv", "msa", "msa", "msa", "downsample", "conv"]
    res = fake_result(tmp_path / "a.h5", "alternet", kinds)
    for key in ("high_frequency", "variance"):
        (ax,) = depth_figure([res], key, "y", "t").axes
        spans = bands(ax)
        assert len(spans) == 4  # three MSA blocks and one downsampling block, each its own band
        step = 1 / (len(kinds) - 1)
        np.testing.assert_allclose([a for a, _ in spans], np.array([2, 3, 4, 5]) * step - 0.4 * step)
        assert all(end < start for (_, end), (start, _) in zip(spans, spans[1:]))  # a gap between neighbours
        assert tick_names(ax) == [f"l{i}" for i in range(len(kinds))]
        np.testing.assert_allclose(ax.get_xticks(), res["depth"])


def test_many_blocks_are_named_every_k_th(tmp_path):
    kinds = ["conv"] * 20 + ["msa"] * 20
    res = fake_result(tmp_path / "a.h5", "vit", kinds)
    (ax,) = depth_figure([res], "high_frequency", "y", "t").axes
    assert tick_names(ax) == [f"l{i}" for i in range(0, 40, 3)] and len(tick_names(ax)) <= MAX_NAMED
    assert all(t.get_rotation() == 45 for t in ax.get_xticklabels())
    ticked = np.sort(np.concatenate([ax.get_xticks(), ax.get_xticks(minor=True)]))
    np.testing.assert_allclose(ticked, res["depth"])  # every block still ticked, the others by minor ticks
    assert len(bands(ax)) == 20


def test_architectures_in_one_figure_keep_their_own_block_names(tmp_path):
    a = fake_result(tmp_path / "a.h5", "alternet", ["stem", "msa", "msa", "conv"])
    b = fake_result(tmp_path / "b.h5", "resnet", ["stem", "conv", "conv"])
    top, bottom = depth_figure([a, b], "variance", "y", "t").axes
    assert tick_names(top) == ["l0", "l1", "l2", "l3"] and tick_names(bottom) == ["l0", "l1", "l2"]
    np.testing.assert_allclose(bottom.get_xticks(), [0.0, 0.5, 1.0])


def test_long_titles_are_wrapped(tmp_path):
    from landscape.plot.fourier import maps_figure

    res = fake_result(tmp_path / "a.h5", "vit_tiny_patch16_224_in21k_finetuned", ["embed", "msa", "mlp"])
    title = profile_figure(res, style="paper").axes[0].get_title()
    assert title == "vit_tiny_patch16_224_in21k_finetuned:\ndiagonal profile (last block left out)"
    assert all(len(line) <= 60 for line in maps_figure(res)._suptitle.get_text().splitlines())
