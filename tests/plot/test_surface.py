import xml.etree.ElementTree as ET

import numpy as np
import pytest
from helpers import one_line_error
from plot_results import SURFACE_ATTRS, XS, YS, surface_arrays, write_result
from plot_results import bowl as f

from landscape.errors import LandscapeError
from landscape.plot import LEVEL_SPACINGS, grids, plot_files, scales, vtp
from landscape.plot import surface as S
from landscape.plot.common import caption_of
from landscape.store.read import read_result


def write_surface(path, xs=XS, ys=YS, ndim=2, done=None, trajectory=None):
    """A surface file of the analytic loss f(x, y) (accuracy = 1 / loss)."""
    arrays = surface_arrays(xs, ys, done)
    attrs = {**SURFACE_ATTRS, "surface_ndim": ndim}
    if trajectory is not None:
        arrays["trajectory/coordinates"] = trajectory
        attrs.update(direction_type="pca", explained_variance_ratio=[0.7, 0.2])
    return read_result(write_result(path, "surface", arrays, **attrs))


def test_heatmap_keeps_the_orientation_of_a_non_square_grid(tmp_path):
    res = write_surface(tmp_path / "s.h5")
    fig = S.heatmap_figure(res)
    mesh = fig.axes[0].collections[0]
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(len(YS), len(XS)), f(*np.meshgrid(XS, YS)))
    corners = mesh.get_coordinates()  # (ny+1, nx+1, 2) cell corners around the centres
    np.testing.assert_allclose((corners[0, 1:, 0] + corners[0, :-1, 0]) / 2, XS)
    np.testing.assert_allclose((corners[1:, 0, 1] + corners[:-1, 0, 1]) / 2, YS)


def test_contour_axes_follow_the_coordinates_and_levels_span_the_loss(tmp_path):
    res = write_surface(tmp_path / "s.h5")
    fig = S.contour_figure(res, levels=9)
    ax = fig.axes[0]
    assert ax.get_xlim() == pytest.approx((XS.min(), XS.max()))
    assert ax.get_ylim() == pytest.approx((YS.min(), YS.max()))
    cs = ax.collections[0]
    loss = f(*np.meshgrid(XS, YS))
    np.testing.assert_allclose(cs.levels, np.linspace(loss.min(), loss.max(), 9))
    log_levels = S.contour_figure(res, levels=5, log=True, zmax=3.0).axes[0].collections[0].levels
    np.testing.assert_allclose(log_levels, np.geomspace(loss.min(), 3.0, 5))


def test_trajectory_is_drawn_over_the_contour(tmp_path):
    traj = np.array([[-0.9, 1.8], [-0.5, 1.0], [0.0, 0.0]])
    res = write_surface(tmp_path / "p.h5", trajectory=traj)
    ax = S.contour_figure(res).axes[0]
    line = [ln for ln in ax.get_lines() if ln.get_label() == "trajectory"][0]
    np.testing.assert_array_equal(np.asarray(line.get_xydata()), traj)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("PC 1 (70.0% of variance)", "PC 2 (20.0% of variance)")


def test_paper_style_3d_is_loss_minus_min_clipped(tmp_path):
    res = write_surface(tmp_path / "s.h5")
    fig = S.surface3d_figure(res, style="paper", zmax=1.0)
    ax = fig.axes[0]
    assert ax.get_zlabel() == "loss - min"
    lo, hi = ax.get_zlim()
    assert lo <= 0.0 and hi <= 1.1  # clipped at zmax (plus matplotlib's margin)
    with pytest.raises(LandscapeError, match="style"):
        S.surface3d_figure(res, style="fancy")


def test_vtp_parses_with_the_right_points_and_quads(tmp_path):
    done = np.ones((len(YS), len(XS)), bool)
    done[2, 3] = False  # an unfinished point removes the 4 quads around it
    res = write_surface(tmp_path / "s.h5", done=done)
    path = vtp.write_vtp(res, tmp_path / "s.vtp")
    root = ET.parse(path).getroot()
    assert root.get("type") == "PolyData"
    piece = root.find("PolyData/Piece")
    n = len(XS) * len(YS)
    assert int(piece.get("NumberOfPoints")) == n
    assert int(piece.get("NumberOfPolys")) == (len(XS) - 1) * (len(YS) - 1) - 4
    pts = np.array(piece.find("Points/DataArray").text.split(), dtype=float).reshape(-1, 3)
    assert pts.shape == (n, 3)
    X, Y = np.meshgrid(XS, YS)
    Z = np.where(done, f(X, Y), np.nan)
    np.testing.assert_allclose(pts[:, 0], X.ravel())
    np.testing.assert_allclose(pts[:, 1], Y.ravel())
    np.testing.assert_allclose(pts[:, 2], Z.ravel(), rtol=1e-9)
    arrays = {a.get("Name"): a for a in piece.findall("PointData/DataArray")}
    acc = np.array(arrays["accuracy"].text.split(), dtype=float)
    np.testing.assert_allclose(acc, np.where(done, 1 / f(X, Y), np.nan).ravel(), rtol=1e-9)
    conn = np.array(piece.find("Polys/DataArray[@Name='connectivity']").text.split(), dtype=int).reshape(-1, 4)
    assert tuple(conn[0]) == (0, 1, len(XS) + 1, len(XS))
    assert 2 * len(XS) + 3 not in conn  # the unfinished point is in no quad


def test_one_dimensional_curves_overlay_files(tmp_path):
    a = write_surface(tmp_path / "a.h5", ys=np.zeros(1), ndim=1)
    b = write_surface(tmp_path / "b.h5", xs=np.linspace(0, 1, 3), ys=np.zeros(1), ndim=1)
    fig = S.lines_figure([a, b], log=True)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    lines = ax.get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), f(XS, 0.0))
    np.testing.assert_allclose(lines[1].get_xdata(), np.linspace(0, 1, 3))


def test_plot_files_writes_every_figure(tmp_path):
    write_surface(tmp_path / "s.h5")
    write_surface(tmp_path / "l.h5", ys=np.zeros(1), ndim=1)
    paths = plot_files([tmp_path / "s.h5", tmp_path / "l.h5"], tmp_path / "figs", "png", style="paper")
    names = sorted(p.name for p in paths)
    assert names == ["l_1d.png", "s.vtp", "s_3d.png", "s_contour.png", "s_contourf.png", "s_heatmap.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert (tmp_path / "figs" / "s_3d.png").read_bytes()[:4] == b"\x89PNG"


def test_figures_drawn_directly_check_the_surface_first(tmp_path):
    res = write_surface(tmp_path / "e.h5", done=np.zeros((len(YS), len(XS)), bool))
    for draw in (S.contour_figure, S.heatmap_figure, S.surface3d_figure):
        msg = one_line_error(draw, res, match="no grid point has a finite loss")
        assert "none of its 28 points is done yet" in msg
    one_line_error(vtp.write_vtp, res, tmp_path / "e.vtp", match="no grid point has a finite loss")
    assert not (tmp_path / "e.vtp").exists()


def test_plot_files_checks_every_option_before_writing(tmp_path):
    write_surface(tmp_path / "s.h5")
    for options, words in (
        ({"style": "fancy"}, "surface style"),
        ({"zmax": float("nan")}, "--zmax"),
        ({"levels": 1}, "--levels"),
        ({"levels": 2.5}, "--levels"),
        ({"bins": 0}, "bins"),
    ):
        assert words in one_line_error(plot_files, [tmp_path / "s.h5"], tmp_path / "figs", "png", **options)
    assert "figure format" in one_line_error(plot_files, [tmp_path / "s.h5"], tmp_path / "figs", "jpg")
    assert not (tmp_path / "figs").exists()


def wide_loss(x, y):
    """A basin of 0.003 + x^2 + y^2 around the centre under a wall rising to ~900 at the corner (1, 1)."""
    return 0.003 + x**2 + y**2 + 900 * ((1 + x) * (1 + y) / 4) ** 16


def write_wide(path):
    grid = np.linspace(-1, 1, 11)
    arrays = surface_arrays(grid, grid)
    arrays["loss"] = wide_loss(*np.meshgrid(grid, grid))
    return read_result(write_result(path, "surface", arrays, **SURFACE_ATTRS))


def crossing_inner_square(levels):
    """How many of ``levels`` lie strictly between the lowest and highest loss on |x|, |y| <= 0.5."""
    grid = np.linspace(-1, 1, 11)
    X, Y = np.meshgrid(grid, grid)
    inner = wide_loss(X, Y)[(np.abs(X) <= 0.5) & (np.abs(Y) <= 0.5)]
    levels = np.asarray(levels)
    return int(np.sum((levels > inner.min()) & (levels < inner.max())))


def test_default_levels_ring_the_basin_of_a_wide_range_surface(tmp_path):
    from matplotlib.colors import BoundaryNorm, LogNorm

    res = write_wide(tmp_path / "w.h5")
    loss = wide_loss(*np.meshgrid(np.linspace(-1, 1, 11), np.linspace(-1, 1, 11)))
    assert loss.min() == pytest.approx(0.003, rel=1e-3) and loss.max() > 900
    assert crossing_inner_square(np.linspace(loss.min(), loss.max(), 20)) == 0  # what linear levels gave
    for filled in (False, True):
        cs = S.contour_figure(res, filled=filled).axes[0].collections[0]
        assert crossing_inner_square(cs.levels) >= 6
        assert cs.levels[0] > loss.min() and cs.levels[-1] == pytest.approx(loss.max())
        assert isinstance(cs.norm, BoundaryNorm)  # the colours follow the levels: one colour per level
    mesh = S.heatmap_figure(res).axes[0].collections[0]
    assert isinstance(mesh.norm, LogNorm)  # no levels: the loss spans more than two decades
    # explicit choices win: linear spacing, the count, zmax
    linear = S.contour_figure(res, levels=7, spacing="linear", zmax=50.0).axes[0].collections[0].levels
    np.testing.assert_allclose(linear, np.linspace(loss.min(), 50.0, 7))
    with pytest.raises(LandscapeError, match="level spacing"):
        S.contour_figure(res, spacing="cubic")


def test_3d_view_is_clipped_at_a_robust_maximum_unless_zmax_is_given(tmp_path):
    res = write_wide(tmp_path / "w.h5")
    _, _, loss, _ = grids.grid_of(res)
    top = scales.robust_max(loss)
    assert top is not None and float(loss.min()) < top < 100
    for style, clip in (("default", top), ("paper", top - float(loss.min()))):
        hi = S.surface3d_figure(res, style=style).axes[0].get_zlim()[1]
        assert hi <= clip * 1.1
        assert S.surface3d_figure(res, style=style, zmax=500.0).axes[0].get_zlim()[1] >= 450
    # a bowl without a spike is not clipped, and its default levels stay evenly spaced
    bowl = write_surface(tmp_path / "s.h5")
    _, _, bowl_loss, _ = grids.grid_of(bowl)
    assert scales.robust_max(bowl_loss) is None and not scales.is_skewed(bowl_loss)


def colorbar_labels(fig, index=1):
    """The tick labels of the colour bar drawn in ``fig.axes[index]``."""
    return [t.get_text() for t in fig.axes[index].get_yticklabels()]


def test_log_colour_bars_have_readable_ticks_and_the_axes_are_square(tmp_path):
    wide = write_wide(tmp_path / "w.h5")  # 0.003 .. 900: a log colour scale
    assert colorbar_labels(S.contour_figure(wide, filled=True, log=True)) == ["0.01", "0.1", "1", "10", "100"]
    above = S.contour_figure(wide, filled=True)  # levels above the minimum: one colour per level, levels as ticks
    levels = above.axes[0].collections[0].levels
    labels = colorbar_labels(above)
    assert 3 <= len(labels) <= scales.MAX_TICKS and len(set(labels)) == len(labels)
    assert all(np.isclose(levels, float(t), rtol=5e-3).any() for t in labels)
    assert colorbar_labels(S.heatmap_figure(wide)) == ["0.01", "0.1", "1", "10", "100"]
    bowl = write_surface(tmp_path / "s.h5")  # 1.07 .. 6.68: geometric levels under a linear colour scale
    assert colorbar_labels(S.contour_figure(bowl, filled=True, log=True)) == ["2", "3", "4", "5", "6"]
    assert colorbar_labels(S.contour_figure(bowl, filled=True, spacing="linear")) == ["2", "3", "4", "5", "6"]
    uneven = colorbar_labels(S.contour_figure(bowl, filled=True, spacing="above-min"))
    assert 3 <= len(uneven) <= scales.MAX_TICKS and all(len(t) <= 4 and float(t) > 0 for t in uneven)
    for fig in (S.contour_figure(wide), S.contour_figure(wide, filled=True), S.heatmap_figure(wide)):
        assert [ax.get_box_aspect() for ax in fig.axes if ax.get_label() != "<colorbar>"] in ([1.0], [1.0, 1.0])
    x, y, _ = S.surface3d_figure(wide).axes[0].get_box_aspect()
    assert x == pytest.approx(y)


def test_log_ticks_are_decades_or_one_two_five_and_at_least_three():
    np.testing.assert_allclose(scales.log_ticks(0.003, 900), [0.01, 0.1, 1, 10, 100])
    np.testing.assert_allclose(scales.log_ticks(0.5, 30), [0.5, 1, 2, 5, 10, 20])
    np.testing.assert_allclose(scales.log_ticks(1.07, 6.7), [2, 3, 4, 5, 6])
    np.testing.assert_allclose(scales.log_ticks(1.0, 1.2), [1.0, 1.05, 1.1, 1.15, 1.2])  # too narrow: linear
    many = scales.log_ticks(1e-3, 1e12)
    assert len(many) <= scales.MAX_TICKS and [scales.short(t) for t in many[:4]] == ["0.001", "0.1", "10", "1e+03"]


def texts(ax):
    return [t.get_text() for t in ax.texts]


def test_the_3d_view_says_where_it_is_clipped(tmp_path):
    wide = write_wide(tmp_path / "w.h5")
    _, _, loss, _ = grids.grid_of(wide)
    lo, top, hi = float(loss.min()), scales.robust_max(loss), float(loss.max())
    assert texts(S.surface3d_figure(wide).axes[0]) == [
        f"clipped at loss = {scales.short(top)}, max {scales.short(hi)} (robust maximum; --zmax to change)"
    ]
    assert texts(S.surface3d_figure(wide, style="paper").axes[0]) == [
        f"clipped at loss - min = {scales.short(top - lo)}, max {scales.short(hi - lo)} "
        "(robust maximum; --zmax to change)"
    ]
    assert texts(S.surface3d_figure(wide, zmax=50.0).axes[0]) == [
        f"clipped at loss = 50, max {scales.short(hi)} (--zmax)"
    ]
    assert texts(S.surface3d_figure(wide, log=True, zmax=1.0).axes[0]) == [
        f"clipped at log10 loss = 1, max {scales.short(np.log10(hi))} (--zmax)"
    ]
    assert not S.surface3d_figure(wide, zmax=2 * hi).axes[0].texts  # nothing above zmax: nothing said
    assert not S.surface3d_figure(write_surface(tmp_path / "s.h5")).axes[0].texts  # a bowl is not clipped


def test_a_heatmap_over_decades_is_log_coloured_from_the_minimum_to_the_maximum(tmp_path):
    from matplotlib.colors import LogNorm

    _, _, loss, _ = grids.grid_of(write_wide(tmp_path / "w.h5"))
    norm = S.heatmap_figure(write_wide(tmp_path / "w.h5")).axes[0].collections[0].norm
    assert isinstance(norm, LogNorm) and (norm.vmin, norm.vmax) == (float(loss.min()), float(loss.max()))
    assert norm(float(np.ma.median(loss))) > 0.4  # the basin's points are told apart, not all dark
    bowl = S.heatmap_figure(write_surface(tmp_path / "s.h5")).axes[0].collections[0].norm
    assert not isinstance(bowl, LogNorm)


def write_line(path, loss, **attrs):
    xs = np.linspace(-1, 1, len(loss))
    arrays = {**surface_arrays(xs, np.zeros(1)), "loss": np.asarray(loss, float)[None]}
    return read_result(write_result(path, "surface", arrays, **{**SURFACE_ATTRS, "surface_ndim": 1, **attrs}))


def test_a_line_over_decades_gets_a_log_axis_unless_the_loss_is_not_positive(tmp_path):
    decades = write_line(tmp_path / "d.h5", 0.003 + 900 * np.linspace(-1, 1, 21) ** 8)
    narrow = write_line(tmp_path / "n.h5", 1 + np.linspace(-1, 1, 21) ** 2)
    signed = write_line(tmp_path / "s.h5", np.linspace(-1, 1, 21) ** 3 * 900 + 0.01)
    assert S.lines_figure([decades]).axes[0].get_yscale() == "log"
    assert S.lines_figure([narrow, decades]).axes[0].get_yscale() == "log"  # the files together span decades
    assert S.lines_figure([narrow]).axes[0].get_yscale() == "linear" and not S.lines_figure([narrow]).axes[0].texts
    assert S.lines_figure([narrow], log=True).axes[0].get_yscale() == "log"
    for log in (False, True):
        ax = S.lines_figure([signed], log=log).axes[0]
        assert ax.get_yscale() == "linear"
        assert texts(ax) == ["linear loss axis: the loss is negative at some points"]
    target = write_line(tmp_path / "t.h5", 1 + np.linspace(-1, 1, 21) ** 2, direction_type="target")
    legend = [t.get_text() for t in S.lines_figure([target]).axes[0].get_legend().get_texts()]
    assert legend == ["t loss", "t accuracy"]  # the marks at alpha = 0 and 1 are not in the legend


def test_a_zmax_not_above_the_lowest_loss_is_a_one_line_error_before_any_figure(tmp_path):
    write_surface(tmp_path / "s.h5")
    lowest = float(np.min(f(*np.meshgrid(XS, YS))))
    for zmax in (0.5, lowest):
        msg = one_line_error(plot_files, [tmp_path / "s.h5"], tmp_path / "figs", "png", zmax=zmax)
        assert f"--zmax {zmax:g} is not above the lowest loss of the surface, {lowest:.6g}" in msg
        assert not list((tmp_path / "figs").iterdir())
    res = read_result(tmp_path / "s.h5")
    one_line_error(S.contour_figure, res, zmax=0.5, match="not above the lowest loss")
    one_line_error(S.surface3d_figure, res, zmax=0.5, match="not above the lowest loss")
    one_line_error(S.surface3d_figure, res, style="paper", zmax=-0.1, match="lowest loss - min of the surface, 0")
    assert S.surface3d_figure(res, style="paper", zmax=0.5).axes[0].texts  # 0.5 above the minimum: drawn, clipped
    assert len(plot_files([tmp_path / "s.h5"], tmp_path / "figs", "png", zmax=lowest + 0.5)) == 5


def test_the_paper_style_ignores_log_and_keeps_its_robust_clip(tmp_path):
    wide = write_wide(tmp_path / "w.h5")
    _, _, loss, _ = grids.grid_of(wide)
    clip = scales.robust_max(loss) - float(loss.min())
    ax = S.surface3d_figure(wide, style="paper", log=True).axes[0]
    assert ax.get_zlabel() == "loss - min" and ax.get_zlim()[1] <= clip * 1.1
    assert texts(ax)[0].startswith(f"clipped at loss - min = {scales.short(clip)}")


@pytest.mark.parametrize(
    "attrs, labels",
    [
        ({}, ("direction 1 (filter-normalised)", "direction 2 (filter-normalised)")),
        ({"norm": "none"}, ("direction 1 (not normalised)", "direction 2 (not normalised)")),
        ({"direction_type": "target", "norm": "x:none,y:layer"}, ("towards target", "direction 2 (layer-normalised)")),
        ({"direction_type": "pca", "norm": "none"}, ("PC 1", "PC 2")),
        (
            {"direction_type": "pca", "norm": "none", "explained_variance_ratio": [0.614, 0.0252]},
            ("PC 1 (61.4% of variance)", "PC 2 (2.5% of variance)"),
        ),
        ({"direction_eigenvalues": [12.34, 0.5]}, ("eigenvector 1 (λ = 12.3)", "eigenvector 2 (λ = 0.5)")),
        ({"norm": "drop"}, ("direction 1", "direction 2")),  # a file that does not record the normalisation
    ],
)
def test_axes_name_the_directions_from_the_file(tmp_path, attrs, labels):
    attrs = {k: v for k, v in {**SURFACE_ATTRS, **attrs}.items() if v != "drop"}
    res = read_result(write_result(tmp_path / "s.h5", "surface", surface_arrays(), **attrs))
    assert grids.direction_labels(res) == labels
    for fig in (S.contour_figure(res), S.contour_figure(res, filled=True), S.heatmap_figure(res)):
        assert (fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()) == labels
    ax3 = S.surface3d_figure(res).axes[0]
    assert (ax3.get_xlabel(), ax3.get_ylabel()) == labels


def test_a_target_line_is_labelled_towards_the_target(tmp_path):
    line = write_line(tmp_path / "t.h5", 1 + np.linspace(-1, 1, 21) ** 2, direction_type="target", norm="none")
    assert S.lines_figure([line]).axes[0].get_xlabel() == "towards target"


def test_titles_are_short_wrapped_and_not_tiny(tmp_path):
    res = write_surface(tmp_path / "s.h5")  # records no BatchNorm: the title does not name a BN mode
    title = S.contour_figure(res).axes[0].title
    assert title.get_text() == "toy" and title.get_fontsize() >= 10
    attrs = {**SURFACE_ATTRS, "has_batchnorm": True}
    with_bn = read_result(write_result(tmp_path / "b.h5", "surface", surface_arrays(), **attrs))
    assert S.contour_figure(with_bn).axes[0].title.get_text() == "toy (BN\u00a0eval)"
    attrs = {**SURFACE_ATTRS, "model": "vit_mini_patch4_window8_depth12", "regularizer": {"kind": "l2", "coef": 5e-4}}
    attrs["has_batchnorm"] = True
    long = read_result(write_result(tmp_path / "l.h5", "surface", surface_arrays(), **attrs))
    assert grids.title_of(long) == "vit_mini_patch4_window8_depth12 (BN\u00a0eval,\nl2\u00a00.0005)"
    for fig in (S.contour_figure(long), S.surface3d_figure(long), S.heatmap_figure(long)):
        text = (fig._suptitle or fig.axes[0].title).get_text()
        assert text == grids.title_of(long) and max(map(len, text.splitlines())) <= 48


@pytest.mark.parametrize(
    ("spacing", "norm", "words"),
    [
        ("linear", "Normalize", "evenly spaced"),
        ("log", "LogNorm", "spaced geometrically in the values"),
        ("above-min", "BoundaryNorm", "spaced geometrically above the minimum"),
    ],
)
def test_the_contour_caption_and_colour_scale_follow_the_levels_drawn(tmp_path, spacing, norm, words):
    wide = write_wide(tmp_path / "w.h5")  # spans decades: the colours still follow the levels
    for filled in (False, True):
        fig = S.contour_figure(wide, spacing=spacing, levels=9, filled=filled)
        cs = fig.axes[0].collections[0]
        assert type(cs.norm).__name__ == norm
        levels = np.asarray(cs.levels)
        if spacing == "linear":
            np.testing.assert_allclose(np.diff(levels), levels[1] - levels[0])
        if spacing == "log":
            np.testing.assert_allclose(levels[1:] / levels[:-1], levels[1] / levels[0])
        caption = caption_of(fig)
        assert f"9 levels {words}" in caption and caption.startswith("Filled loss" if filled else "Loss contours")
        scale = {"LogNorm": "log colour scale", "BoundaryNorm": "one colour per level"}.get(norm, "linear colour scale")
        assert scale in caption


def test_colour_bar_labels_are_distinct_where_levels_are_close(tmp_path):
    grid = np.linspace(-1, 1, 11)
    arrays = surface_arrays(grid, grid)
    X, Y = np.meshgrid(grid, grid)
    arrays["loss"] = 2.32 + 1e-4 * (X**2 + Y**2) + 5 * ((1 + X) * (1 + Y) / 4) ** 16  # levels 2.3200x, then a wall
    res = read_result(write_result(tmp_path / "c.h5", "surface", arrays, **SURFACE_ATTRS))
    for spacing in LEVEL_SPACINGS:
        labels = colorbar_labels(S.contour_figure(res, filled=True, spacing=spacing))
        assert len(set(labels)) == len(labels) >= 3, (spacing, labels)
    assert scales.distinct_labels(np.array([2.3201, 2.3204, 2.5])) == ["2.3201", "2.3204", "2.5"]
    assert scales.distinct_labels(np.array([0.1, 1.0, 10.0])) == ["0.1", "1", "10"]


def test_the_3d_caption_says_what_is_drawn_and_where_it_is_clipped(tmp_path):
    wide = write_wide(tmp_path / "w.h5")
    _, _, loss, _ = grids.grid_of(wide)
    top = scales.robust_max(loss)
    default = caption_of(S.surface3d_figure(wide))
    assert default.startswith("The loss over the plane") and f"clipped at {scales.short(top)}" in default
    paper = caption_of(S.surface3d_figure(wide, style="paper"))
    assert paper.startswith("The loss - min over the plane") and "wireframe" in paper
    assert caption_of(S.surface3d_figure(wide, log=True)).startswith("The log10 loss") and "clipped" not in (
        caption_of(S.surface3d_figure(wide, log=True))
    )
    bowl = write_surface(tmp_path / "s.h5")
    assert "clipped" not in caption_of(S.surface3d_figure(bowl))


class FakePlotly:
    """Just what :func:`landscape.plot.surface.interactive` calls of ``plotly.graph_objects``."""

    class Figure:
        def __init__(self, surface):
            self.surface = surface

        def update_layout(self, **layout):
            self.layout = layout

    @staticmethod
    def Surface(**kwargs):  # noqa: N802 (plotly's name)
        return kwargs


def test_the_interactive_view_is_clipped_by_the_rule_of_the_static_one(tmp_path):
    wide = write_wide(tmp_path / "w.h5")
    _, _, loss, _ = grids.grid_of(wide)
    top, _ = S.clip_3d(loss)
    view = S.interactive(wide, FakePlotly, "w")
    assert top == scales.robust_max(loss) and float(np.nanmax(view.surface["z"])) == pytest.approx(top)
    assert f"clipped at loss = {scales.short(top)}" in view.layout["title"]
    static = S.surface3d_figure(wide).axes[0].get_zlim()[1]
    assert static <= top * 1.1  # the same top, with matplotlib's margin
    bowl = write_surface(tmp_path / "s.h5")
    assert "clipped" not in S.interactive(bowl, FakePlotly, "s").layout["title"]
