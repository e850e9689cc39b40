import h5py
import numpy as np
import pytest
import torch

from landscape.analyses.fourier.features import fourier_profile
from landscape.analyses.fourier.noise import accuracy
from landscape.analyses.fourier.run import run_fourier
from landscape.core.front import batches_for, load_inputs
from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.options.fourier import FourierOptions


def make_checkpoint(path, name="vit_mini", seed=0):
    torch.manual_seed(seed)
    model = create_model(name, num_classes=10, in_chans=1)
    return save_checkpoint(
        path, model, model_name=name, model_kwargs=model.model_kwargs, num_classes=10, dataset="digits"
    )


@pytest.fixture(scope="module")
def vit_ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "vit.pt")


def test_file_matches_direct_profile_and_schema(vit_ckpt, tmp_path):
    out = tmp_path / "f.h5"
    res = run_fourier(
        vit_ckpt, FourierOptions(samples=12, batch_size=5, maps=True), out=out, progress=False, device="cpu"
    )
    inputs = load_inputs(vit_ckpt, split="test", device="cpu")
    direct = fourier_profile(inputs.model, batches_for(inputs, batch_size=12, n_samples=12), maps=True)
    n = len(direct.layers)
    assert list(res["layer_names"]) == direct.names and list(res["layer_kinds"]) == direct.kinds
    assert res["layer_kinds"][0] == "embed" and set(res["layer_kinds"][1:]) == {"msa", "mlp"}
    np.testing.assert_allclose(res["high_frequency"], direct.high_frequency, atol=1e-5)
    np.testing.assert_allclose(res["variance"], direct.variance, rtol=1e-5)
    np.testing.assert_allclose(res["depth"], np.arange(n) / (n - 1))
    for i in range(n):
        np.testing.assert_allclose(res[f"layers/{i:03d}/delta_log_amplitude"], direct.delta_log_amplitude(i), atol=1e-5)
        np.testing.assert_allclose(res[f"layers/{i:03d}/frequencies"], [0, 0.25, 0.5, 0.75])  # 8x8 tokens
        np.testing.assert_allclose(res[f"maps/{i:03d}"], direct.mean_map(i), atol=1e-5)
    # every layer is 8x8: the common normalised axis holds the native profiles
    np.testing.assert_allclose(res["frequencies"], np.linspace(0, 1, 4))
    np.testing.assert_allclose(res["delta_log_amplitude"][:, -1], res["high_frequency"])
    attrs = res.attrs
    assert attrs["kind"] == "fourier" and attrs["complete"]
    assert attrs["model"] == "vit_mini" and attrs["n_samples"] == 12 and attrs["profile"] == "diagonal"
    assert attrs["checkpoint_sha256"] and attrs["dataset"] == "digits" and attrs["split"] == "test"
    assert res.axes["delta_log_amplitude"] == ["layer", "frequency"]


def test_rerun_resumes_and_other_options_need_force(vit_ckpt, tmp_path):
    out = tmp_path / "f.h5"
    first = run_fourier(vit_ckpt, FourierOptions(samples=8), out=out, progress=False, device="cpu")
    created = first.attrs["created"]
    again = run_fourier(vit_ckpt, FourierOptions(samples=8), out=out, progress=False, device="cpu")
    assert again.attrs["created"] == created
    with pytest.raises(LandscapeError, match="--force"):
        run_fourier(vit_ckpt, FourierOptions(samples=8, profile="radial"), out=out, progress=False, device="cpu")
    radial = run_fourier(
        vit_ckpt, FourierOptions(samples=8, profile="radial"), out=out, force=True, progress=False, device="cpu"
    )
    assert radial.attrs["profile"] == "radial"
    with pytest.raises(LandscapeError, match="profile"):
        FourierOptions(profile="spiral")
    assert not (tmp_path / "g.h5").exists()


def test_noise_bands_resume_after_a_kill(vit_ckpt, tmp_path):
    out = tmp_path / "n.h5"
    opts = FourierOptions(samples=16, batch_size=8, noise_bands=True, bands=(0.25, 0.75), noise_strength=2.0)
    full = run_fourier(vit_ckpt, opts, out=out, progress=False, device="cpu")
    inputs = load_inputs(vit_ckpt, split="test", device="cpu")
    batches = batches_for(inputs, batch_size=8, n_samples=16)
    want = accuracy(inputs.model, batches, {"centre": 0.75, "width": 0.1, "strength": 2.0, "seed": 0})
    assert full["noise/accuracy"][1] == want
    clean = accuracy(inputs.model, batches)
    np.testing.assert_allclose(full["noise/accuracy_drop"], clean - full["noise/accuracy"])
    with h5py.File(out, "r+") as f:  # as if killed after the first band
        f["noise/done"][1] = False
        f["noise/accuracy"][1] = np.nan
        f.attrs["complete"] = False
    resumed = run_fourier(vit_ckpt, opts, out=out, progress=False, device="cpu")
    assert resumed.attrs["complete"]
    np.testing.assert_array_equal(resumed["noise/accuracy"], full["noise/accuracy"])


def test_resnet_layers_have_their_own_grids(tmp_path):
    ckpt = make_checkpoint(tmp_path / "r.pt", "resnet_mini")
    res = run_fourier(
        ckpt, FourierOptions(samples=4, frequency_axis="physical"), out=tmp_path / "r.h5", progress=False, device="cpu"
    )
    sizes = res["layer_sizes"][:, 0]
    assert sizes[0] == 32 and sizes[-1] < 32
    np.testing.assert_allclose(res["frequencies"], 2 * np.arange(16) / 32)
    for i, h in enumerate(sizes):
        native = res[f"layers/{i:03d}/delta_log_amplitude"]
        assert len(native) == (h + 1) // 2
        assert res["high_frequency"][i] == native[-1]
        row = res["delta_log_amplitude"][i]
        np.testing.assert_allclose(row[~np.isnan(row)][:: 32 // h], native, atol=1e-12)


def test_official_noise_and_first_samples_reach_the_file(vit_ckpt, tmp_path):
    opts = FourierOptions(
        samples=10,
        batch_size=4,
        first_samples=True,
        seed=3,
        noise_bands=True,
        bands=(0.25, 0.75),
        noise_construction="official",
        noise_eps=1.5,
    )
    res = run_fourier(vit_ckpt, opts, out=tmp_path / "o.h5", progress=False, device="cpu")
    inputs = load_inputs(vit_ckpt, split="test", device="cpu")
    first = batches_for(inputs, batch_size=4, n_samples=10, first_samples=True)
    x_all, y_all = load_dataset(inputs.dataset_spec, "test", preprocess=inputs.preprocess).tensors()
    assert torch.equal(torch.cat([x for x, _ in first]), x_all[:10]) and torch.equal(
        torch.cat([y for _, y in first]), y_all[:10]
    )
    direct = fourier_profile(inputs.model, first)
    np.testing.assert_allclose(res["variance"], direct.variance, rtol=1e-5)
    noise = {"centre": 0.75, "width": 0.1, "eps": 1.5, "seed": 3, "construction": "official"}
    assert res["noise/accuracy"][1] == accuracy(inputs.model, first, noise)
    assert res.attrs["n_samples"] == 10 and res.attrs["noise_construction"] == "official"
    seeded = batches_for(inputs, batch_size=4, n_samples=10, seed=3)
    assert not torch.equal(torch.cat([y for _, y in seeded]), y_all[:10])
