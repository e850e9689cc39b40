"""The CKA heat map stays readable where the report shows it (540 px wide): few, large enough labels, a short title."""

import numpy as np
from plot_results import write_result

from landscape.plot import similarity as SIM
from landscape.store.read import read_result


def write_similarity(path, n):
    names = [f"blocks.{i}" for i in range(n)]
    kinds = ["msa" if i % 3 == 2 else "mlp" for i in range(n)]
    cka = np.exp(-np.abs(np.subtract.outer(np.arange(n), np.arange(n))) / 6)
    arrays = {
        "cka": cka,
        "names_a": np.array(names),
        "kinds_a": np.array(kinds),
        "names_b": np.array(names),
        "kinds_b": np.array(kinds),
        "hsic_xy": cka,
        "hsic_xx": np.ones(n),
        "hsic_yy": np.ones(n),
        "n_batches": np.array(4),
    }
    return read_result(write_result(path, "similarity", arrays, model="vit_mini", comparison="within", n_samples=512))


def test_many_blocks_get_every_k_th_label_at_a_readable_size(tmp_path):
    fig = SIM.heatmap_figure(write_similarity(tmp_path / "s.h5", 60))
    ax = fig.axes[0]
    for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
        assert [t.get_text().split()[0] for t in labels] == [f"blocks.{i}" for i in range(0, 60, 3)]
        assert all(t.get_fontsize() >= 8 for t in labels)
    width, height = fig.get_size_inches()
    assert height == SIM.SIDE[1] and width <= SIM.SIDE[1] + 1.2
    assert ax.title.get_text() == "CKA vit_mini, 512 samples" and ax.title.get_fontsize() >= 10


def test_a_few_blocks_are_all_labelled(tmp_path):
    ax = SIM.heatmap_figure(write_similarity(tmp_path / "s.h5", 5)).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "blocks.0 (mlp)",
        "blocks.1 (mlp)",
        "blocks.2 (msa)",
        "blocks.3 (mlp)",
        "blocks.4 (mlp)",
    ]
