"""Figures of lesion results: one band per shaded block, block names on the depth axis, bars of the stored values."""

import numpy as np
import pytest
from plot_results import write_result

from landscape.plot.lesion import lesion_figure
from landscape.store.read import read_result

KINDS = ["conv", "downsample", "msa", "msa", "msa", "mlp"]


def write_lesion(path, kinds=KINDS, model="alternet_mini"):
    n = len(kinds)
    arrays = {
        "block_names": np.array([f"layer{i // 3 + 1}.{i % 3}" for i in range(n)]),
        "block_kinds": np.array(kinds),
        "depth": np.arange(n) / (n - 1),
        "stage": np.arange(n) // 3,
        "accuracy": np.linspace(0.5, 0.9, n),
        "nll": np.linspace(1.0, 0.5, n),
        "accuracy_drop": np.linspace(0.3, 0.05, n),
        "done": np.ones(n, bool),
    }
    return read_result(write_result(path, "lesion", arrays, model=model, intact_nll=0.4))


def heights(ax):
    """The heights of the bars of ``ax`` (the patches without an alpha: the bands have one), left to right."""
    return [b.get_height() for b in sorted((p for p in ax.patches if p.get_alpha() is None), key=lambda p: p.get_x())]


def test_three_consecutive_msa_blocks_are_three_bands_and_the_blocks_are_named(tmp_path):
    res = write_lesion(tmp_path / "l.h5")
    (ax,) = lesion_figure([res], "accuracy_drop", "y", "t").axes
    step = 1 / (len(KINDS) - 1)
    bands = sorted((p.get_x(), p.get_x() + p.get_width()) for p in ax.patches if p.get_alpha() is not None)
    assert len(bands) == 4  # the downsampling block and the three MSA blocks
    np.testing.assert_allclose([a for a, _ in bands], (np.arange(1, 5) - 0.4) * step)
    assert all(end < start for (_, end), (start, _) in zip(bands, bands[1:]))
    assert [t.get_text() for t in ax.get_xticklabels()] == list(res["block_names"])
    np.testing.assert_allclose(ax.get_xticks(), res["depth"])
    assert heights(ax) == pytest.approx(res["accuracy_drop"])
    assert heights(lesion_figure([res], "nll_increase", "y", "t").axes[0]) == pytest.approx(res["nll"] - 0.4)


def test_many_blocks_are_named_every_k_th(tmp_path):
    res = write_lesion(tmp_path / "l.h5", kinds=["conv"] * 34)
    (ax,) = lesion_figure([res], "accuracy_drop", "y", "t").axes
    assert [t.get_text() for t in ax.get_xticklabels()] == list(res["block_names"][::3])
