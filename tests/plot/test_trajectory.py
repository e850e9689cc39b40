"""The polar trajectory figure from a result file written directly: the drawn data and a title that fits."""

import numpy as np
from plot_results import write_result

from landscape.plot.trajectory import polar_figure
from landscape.store.read import read_result


def test_polar_figure_draws_the_snapshots_under_a_wrapped_title(tmp_path):
    angle = np.array([np.nan, 0.01, 0.05, 0.1])
    arrays = {
        "distance": np.array([0.0, 1.0, 2.0, 3.0]),
        "angle": angle,
        "norm": np.full(4, 10.0),
        "epoch": np.arange(4),
        "snapshots": np.array([f"e{i}.pt" for i in range(4)]),
    }
    res = read_result(write_result(tmp_path / "t.h5", "trajectory", arrays, model="resnet_mini"))
    ax = polar_figure([res]).axes[0]
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "resnet_mini"]
    np.testing.assert_array_equal(line.get_xdata(), angle[1:])
    assert ax.get_title() == "training trajectories: angle φ to θ₀ (degrees),\nradius ‖θ − θ₀‖"
