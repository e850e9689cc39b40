"""Connect figures: the plane at equal scale, or in a square box that says its stretch; captions; BN in titles."""

import numpy as np
import pytest
from plot_results import connect_arrays, write_result

from landscape.plot import connect as C
from landscape.plot.common import caption_of
from landscape.store.read import read_result


def with_plane(width, height, n=5):
    """A connect file with a curve and a plane of ``width`` x ``height`` (distances), loss ``1 + x^2 + y^2``."""
    arrays = connect_arrays(n)
    t = np.linspace(0.0, 1.0, n)
    xs, ys = np.linspace(0.0, width, 12), np.linspace(-0.1 * height, height, 6)
    X, Y = np.meshgrid(xs, ys)
    loss = 1 + (X / width) ** 2 + (Y / height) ** 2
    arrays.update(
        {
            "curve/coords": t,
            "curve/loss": (1 + t * (1 - t))[None],
            "curve/data_loss": (1 + t * (1 - t))[None],
            "curve/accuracy": np.full((1, n), 0.9),
            "curve/done": np.ones(n, bool),
            "plane/x": xs,
            "plane/y": ys,
            "plane/points": np.array([[0.0, 0.0], [width, 0.0], [width / 2, height * 0.8]]),
            "plane/curve": np.stack([t * width, 4 * t * (1 - t) * height * 0.8], axis=1),
            "plane/loss": loss[None],
            "plane/data_loss": loss[None],
            "plane/accuracy": (0.5 + 0 * loss)[None] + 0.1 * (X / width)[None],
            "plane/done": np.ones(loss.shape, bool),
        }
    )
    return arrays


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.mark.parametrize(("width", "height"), [(44.0, 0.083), (0.083, 44.0)])
def test_a_plane_much_longer_than_wide_is_drawn_square_and_says_its_stretch(tmp_path, width, height):
    res = read_result(write_result(tmp_path / "c.h5", "connect", with_plane(width, height), model="m", bn="eval"))
    fig = C.plane_figure(res)
    x_range, y_range = width, 1.1 * height  # the y coordinates run from -0.1 height to height
    factor = max(x_range, y_range) / min(x_range, y_range)
    axis = "y" if width > height else "x"
    assert f"{axis} stretched {factor:.3g}x" in texts(fig)
    assert f"{axis} stretched {factor:.3g}x" in caption_of(fig)
    assert all(ax.get_box_aspect() == 1 for ax in fig.axes if ax.get_label() != "<colorbar>")


def test_a_plane_of_comparable_sides_is_drawn_at_equal_scale(tmp_path):
    res = read_result(write_result(tmp_path / "c.h5", "connect", with_plane(3.0, 2.0), model="m", bn="eval"))
    fig = C.plane_figure(res)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2 and all(ax.get_aspect() == 1.0 for ax in panels)
    assert not any("stretched" in t for t in texts(fig)) and "equal scale" in caption_of(fig)
    assert "levels" in caption_of(fig) and "colour" in caption_of(fig)


def test_paths_are_captioned_and_bn_is_named_only_for_a_model_with_batchnorm(tmp_path):
    plain = read_result(write_result(tmp_path / "a.h5", "connect", with_plane(3.0, 2.0), model="m", bn="eval"))
    fig = C.paths_figure(plain)
    assert "BN" not in fig._suptitle.get_text()
    assert caption_of(fig).startswith("Loss (left) and error") and "Bezier curve (dashed)" in caption_of(fig)
    attrs = {"model": "m", "bn": "recompute", "has_batchnorm": True}
    bn = read_result(write_result(tmp_path / "b.h5", "connect", connect_arrays(), **attrs))
    assert "BN\u00a0recompute" in C.paths_figure(bn)._suptitle.get_text()
    assert "Bezier" not in caption_of(C.paths_figure(bn))  # a file without a curve: the line alone
