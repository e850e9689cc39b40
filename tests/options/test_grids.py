"""Surface grids as Python gives them: text, a (MIN, MAX, NUM) tuple, or the coordinates themselves."""

import numpy as np
import pytest
import torch
from helpers import one_line_error

from landscape.options.surface import SurfaceOptions, grid_text, parse_grid


def test_a_tuple_is_min_max_num_and_the_same_run_as_its_text():
    a, b = SurfaceOptions(x=(-1, 1, 5), y=(0, 2, 3)), SurfaceOptions(x="-1:1:5", y="0:2:3")
    np.testing.assert_array_equal(a.xcoords, np.linspace(-1, 1, 5))
    np.testing.assert_array_equal(a.ycoords, [0.0, 1.0, 2.0])
    assert a.attrs() == b.attrs() and "xgrid_points" not in a.attrs()


@pytest.mark.parametrize("points", [[-1.0, -0.25, 0.5], np.array([-1.0, -0.25, 0.5]), torch.tensor([-1.0, -0.25, 0.5])])
def test_coordinates_are_kept_exactly_and_recorded(points):
    o = SurfaceOptions(x=points, y=None)
    np.testing.assert_array_equal(o.xcoords, [-1.0, -0.25, 0.5])
    assert o.x == "-1.0,-0.25,0.5" and o.attrs()["xgrid"] == [-1.0, 0.5, 3]
    assert o.attrs()["xgrid_points"] == [-1.0, -0.25, 0.5] and "ygrid_points" not in o.attrs()
    third = [0.1, 0.2, 1 / 3]
    np.testing.assert_array_equal(parse_grid(grid_text(third)), third)  # repr: no digit lost


def test_bad_grids_name_the_option():
    one_line_error(SurfaceOptions, x=(1, 2), match=r"bad grid --x \(1, 2\): a tuple is \(MIN, MAX, NUM\)")
    one_line_error(SurfaceOptions, x=(0, 1, 2.5), match="NUM must be a whole number")
    one_line_error(SurfaceOptions, y=[[0.0, 1.0]], match=r"bad grid --y: give the coordinates in one dimension")
    one_line_error(SurfaceOptions, x=[0.0, 0.0], match="the coordinates must increase")
    one_line_error(SurfaceOptions, x=[0.0, float("inf")], match="must be finite")
    one_line_error(SurfaceOptions, x=[], match="at least one coordinate")
    one_line_error(SurfaceOptions, x=5, match=r"give MIN:MAX:NUM \(text\), a \(MIN, MAX, NUM\) tuple or a list")


@pytest.mark.parametrize(
    "spec, grid, point", [("-1,1,21", "-1:1:21", "-1,1,21.0"), (" 0, 1, 11 ", "0:1:11", "0,1,11.0")]
)
def test_min_max_num_written_with_commas_is_refused_naming_both_readings(spec, grid, point):
    msg = one_line_error(parse_grid, spec, "--x", match="looks like MIN:MAX:NUM written with commas")
    assert f"give {grid} for" in msg and f"or {point} for those three points" in msg
    one_line_error(SurfaceOptions, x=spec, match=f"give {grid} for")


@pytest.mark.parametrize("spec", ["-1,1,21.0", "-2,0,2", "0,0.5,1", "1,2,3", "-1,1,5,21"])
def test_point_lists_that_are_not_min_max_num_stay_points(spec):
    np.testing.assert_array_equal(parse_grid(spec, "--x"), [float(p) for p in spec.split(",")])
    np.testing.assert_array_equal(SurfaceOptions(x=[-1, 1, 21]).xcoords, [-1.0, 1.0, 21.0])  # a list: points


def test_the_plan_line_lists_points_given_unevenly():
    from landscape.analyses.surface.run import _plan

    assert (
        _plan(np.array([-1.0, 1.0, 21.0]), None)
        == "surface: a 1D line of 3 points over {-1, 1, 21} (the points as given)"
    )
    assert (
        _plan(np.linspace(-1, 1, 21), np.linspace(0, 1, 3)) == "surface: 21 x 3 grid over [-1, 1] x [0, 1] (63 points)"
    )
