"""Every command on models outside the zoo: timm, torchvision and a user's own module (``py:``)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from helpers import one_line_error

from landscape.analyses.fourier.features import fourier_profile
from landscape.cli import cli
from landscape.core.front import batches_for, load_inputs
from landscape.core.source import ModelSource
from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import load_model, read_checkpoint
from landscape.options.fourier import MIN_PROFILE_SIDE
from landscape.store.read import read_result

pytest.importorskip("timm")

ENTRY = str(Path(sys.executable).parent / "landscape")
VIT = [
    "--model",
    "timm:vit_tiny_patch16_224",
    "--model-kw",
    "img_size=32",
    "--model-kw",
    "patch_size=4",
    "--model-kw",
    "depth=2",
]
USER_MODULE = '''
import torch
from torch import nn


class TinyNet(nn.Module):
    """A user's network: returns a dict, so the logits must be found in it."""

    def __init__(self, num_classes=10, width=4, in_chans=1):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_chans, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.body = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, padding=1, stride=2), nn.ReLU())
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        return {"logits": self.head(self.body(self.stem(x)).mean((2, 3))), "aux": x.mean()}


def build(num_classes=10, width=4, in_chans=1):
    return TinyNet(num_classes, width, in_chans)
'''


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("usermod")
    (folder / "my_nets.py").write_text(textwrap.dedent(USER_MODULE))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop("my_nets", None)


@pytest.fixture(scope="module")
def timm_resnet_ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("timm") / "r.pt"
    result = invoke(
        "train",
        "--model",
        "timm:resnet18",
        "--data",
        "digits",
        "--epochs",
        "1",
        "--subset",
        "32",
        "--batch-size",
        "16",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    return out


def test_train_records_the_spec_and_surface_rebuilds_it_from_the_file(timm_resnet_ckpt, tmp_path):
    ck = read_checkpoint(timm_resnet_ckpt)
    assert ck.model_name == "timm:resnet18" and ck.model_kwargs["in_chans"] == 1 and ck.num_classes == 10
    out = tmp_path / "s.h5"
    result = invoke(
        "surface",
        "--ckpt",
        timm_resnet_ckpt,
        "--x",
        "-1:1:3",
        "--y",
        "none",
        "--samples",
        "8",
        "--batch-size",
        "4",
        "--device",
        "cpu",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    res = read_result(out)
    assert res.attrs["model"] == "timm:resnet18" and res.attrs["checkpoint_sha256"] == ck.sha256
    model, _ = load_model(timm_resnet_ckpt)
    inputs = load_inputs(timm_resnet_ckpt, device="cpu")
    x, y = (torch.cat(t) for t in zip(*batches_for(inputs, batch_size=4, n_samples=8)))
    with torch.no_grad():
        centre = float(F.cross_entropy(model(x), y))
    assert res["loss"][0, 1] == pytest.approx(centre, rel=1e-5)
    assert np.isfinite(res["loss"]).all() and res["loss"][0, 0] != res["loss"][0, 1]


def test_hessian_spectrum_and_fourier_of_a_trained_timm_resnet(timm_resnet_ckpt, tmp_path):
    h = invoke(
        "hessian",
        "--ckpt",
        timm_resnet_ckpt,
        "--samples",
        "4",
        "--batch-size",
        "4",
        "--top-k",
        "1",
        "--ncv",
        "6",
        "--maxiter",
        "3",
        "--tol",
        "1e-2",
        "--device",
        "cpu",
        "--out",
        tmp_path / "h.h5",
        "--quiet",
    )
    assert h.exit_code == 0, h.output
    assert np.isfinite(read_result(tmp_path / "h.h5")["eigenvalues"]).all()
    s = invoke(
        "spectrum",
        "--ckpt",
        timm_resnet_ckpt,
        "--samples",
        "8",
        "--batch-size",
        "4",
        "--top-k",
        "1",
        "--ncv",
        "4",
        "--maxiter",
        "2",
        "--device",
        "cpu",
        "--out",
        tmp_path / "sp.h5",
        "--quiet",
    )
    assert s.exit_code == 0, s.output
    assert read_result(tmp_path / "sp.h5")["eigenvalues"].shape == (2, 1)
    f = invoke(
        "fourier",
        "--ckpt",
        timm_resnet_ckpt,
        "--samples",
        "8",
        "--batch-size",
        "4",
        "--device",
        "cpu",
        "--out",
        tmp_path / "f.h5",
        "--quiet",
    )
    assert f.exit_code == 0, f.output
    res = read_result(tmp_path / "f.h5")
    kinds = [k.decode() if isinstance(k, bytes) else str(k) for k in res["layer_kinds"]]
    assert kinds == ["stem", "conv", "conv", "downsample", "conv", "downsample", "conv", "downsample", "conv"]
    inputs = load_inputs(timm_resnet_ckpt, data="digits", split="test", device="cpu")
    direct = fourier_profile(inputs.model, batches_for(inputs, batch_size=4, n_samples=8))
    np.testing.assert_allclose(res["high_frequency"], direct.high_frequency, rtol=1e-6, atol=1e-9)


def test_timm_vit_random_init_through_the_entry_point(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "v.h5"
    proc = subprocess.run(
        [
            ENTRY,
            "fourier",
            *VIT,
            "--random-init",
            "--data",
            "digits",
            "--samples",
            "8",
            "--batch-size",
            "4",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    res = read_result(out)
    kinds = [k.decode() if isinstance(k, bytes) else str(k) for k in res["layer_kinds"]]
    assert kinds == ["embed", "msa", "mlp", "msa", "mlp"]
    assert tuple(res["layer_sizes"][0]) == (8, 8)
    assert res.attrs["checkpoint"] == "random-init (seed 0)" and res.attrs["model"] == "timm:vit_tiny_patch16_224"
    h = subprocess.run(
        [
            ENTRY,
            "hessian",
            *VIT,
            "--random-init",
            "--samples",
            "4",
            "--batch-size",
            "2",
            "--top-k",
            "1",
            "--ncv",
            "6",
            "--maxiter",
            "3",
            "--tol",
            "1e-2",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "h.h5"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert h.returncode == 0, h.stderr
    hres = read_result(tmp_path / "h.h5")
    assert hres.attrs["fused_attention_off"] == 2  # one per block: timm's fused kernel has no forward-mode rule
    assert np.isfinite(hres["eigenvalues"]).all()


def test_random_init_is_seeded_and_leaves_the_global_rng_alone():
    source = ModelSource(model="timm:resnet18", random_init=True, seed=3)
    state = torch.random.get_rng_state()
    a, _ = source.build("digits")
    assert torch.equal(state, torch.random.get_rng_state())
    b, _ = source.build("digits")
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert a.conv1.in_channels == 1 and a.num_classes == 10


def test_torchvision_resnet_state_dict_and_safetensors(tmp_path):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = create_model("torchvision:resnet18", num_classes=10)
    torch.save(model.state_dict(), tmp_path / "w.pth")
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
    common = [
        "--model",
        "torchvision:resnet18",
        "--data",
        "synthetic:8",
        "--samples",
        "4",
        "--batch-size",
        "4",
        "--device",
        "cpu",
        "--quiet",
    ]
    for weights in ("w.pth", "w.safetensors"):
        out = tmp_path / f"{weights}.h5"
        result = invoke("surface", "--ckpt", tmp_path / weights, *common, "--x", "0:1:2", "--y", "none", "--out", out)
        assert result.exit_code == 0, result.output
    a, b = read_result(tmp_path / "w.pth.h5"), read_result(tmp_path / "w.safetensors.h5")
    np.testing.assert_array_equal(a["loss"], b["loss"])
    x, y = (
        torch.cat(t)
        for t in zip(
            *batches_for(
                load_inputs(tmp_path / "w.pth", model_name="torchvision:resnet18", data="synthetic:8", device="cpu"),
                batch_size=4,
                n_samples=4,
            )
        )
    )
    with torch.no_grad():
        assert a["loss"][0, 0] == pytest.approx(float(F.cross_entropy(model.eval()(x), y)), rel=1e-5)
    f = invoke("fourier", "--ckpt", tmp_path / "w.safetensors", *common, "--out", tmp_path / "f.h5")
    assert f.exit_code == 0, f.output
    assert len(read_result(tmp_path / "f.h5")["high_frequency"]) == 1 + 8  # stem + 8 basic blocks


def test_user_module_with_dict_output_and_taps(user_module, tmp_path):
    common = [
        "--model",
        "py:my_nets:build",
        "--model-kw",
        "width=3",
        "--random-init",
        "--samples",
        "6",
        "--batch-size",
        "3",
        "--device",
        "cpu",
        "--quiet",
    ]
    h = invoke("hessian", *common, "--top-k", "2", "--dtype", "float64", "--tol", "1e-8", "--out", tmp_path / "h.h5")
    assert h.exit_code == 0, h.output
    # the dense Hessian of the same loss (the logits taken from the dict) in float64
    inputs = load_inputs(
        ModelSource(model="py:my_nets:build", model_kwargs={"width": 3}, random_init=True), device="cpu"
    )
    batches = batches_for(inputs, batch_size=3, n_samples=6)
    net = inputs.model.double()
    params = {k: v.detach() for k, v in net.named_parameters()}
    names = list(params)

    def loss(flat):
        chunks = torch.split(flat, [params[n].numel() for n in names])
        p = {n: c.view_as(params[n]) for n, c in zip(names, chunks)}
        return sum(
            len(yb) / 6 * F.cross_entropy(torch.func.functional_call(net, p, (xb.double(),))["logits"], yb)
            for xb, yb in batches
        )

    flat = torch.cat([params[n].flatten() for n in names])
    dense = torch.func.hessian(loss)(flat)
    top = torch.linalg.eigvalsh(dense).flip(0)[:2]  # the two largest (which=LA, the default)
    np.testing.assert_allclose(np.sort(read_result(tmp_path / "h.h5")["eigenvalues"])[::-1], top.numpy(), rtol=1e-6)

    taps = ["--taps", "stem=stem", "--taps", "body.1=conv", "--taps", "body.3=downsample"]
    f = invoke("fourier", *common, *taps, "--out", tmp_path / "f.h5")
    assert f.exit_code == 0, f.output
    res = read_result(tmp_path / "f.h5")
    assert [str(k.decode() if isinstance(k, bytes) else k) for k in res["layer_names"]] == ["stem", "body.1", "body.3"]
    assert list(res.attrs["taps"]) == ["stem=stem", "body.1=conv", "body.3=downsample"]
    no_taps = CliRunner().invoke(cli, ["fourier", *common, "--out", str(tmp_path / "g.h5")])
    assert no_taps.exit_code == 2 and "--taps" in no_taps.output and "body" in no_taps.output
    nothing = CliRunner().invoke(cli, ["fourier", *common, "--taps", "nope.*=conv", "--out", str(tmp_path / "n.h5")])
    assert nothing.exit_code == 2 and "nope.*" in nothing.output
    flat_map = CliRunner().invoke(cli, ["fourier", *common, "--taps", "head=conv", "--out", str(tmp_path / "m.h5")])
    assert flat_map.exit_code == 2 and "cannot be read as a feature map" in flat_map.output


def test_one_line_errors_for_names_extras_and_network(monkeypatch, tmp_path):
    msg = one_line_error(create_model, "timm:resnet1800")
    assert "resnet18" in msg
    one_line_error(create_model, "torchvision:resnet1800", match="resnet18")
    one_line_error(create_model, "py:no_such_module_here:build", match="cannot import")
    one_line_error(create_model, "resnet_mini", pretrained=True, match="no published weights")
    one_line_error(ModelSource, model="timm:resnet18", match="--pretrained")
    one_line_error(ModelSource, checkpoint="a.pt", pretrained=True, match="not --ckpt and --pretrained")

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [
            ENTRY,
            "fourier",
            "--model",
            "timm:resnet18",
            "--pretrained",
            "--data",
            "synthetic:4",
            "--out",
            str(tmp_path / "p.h5"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "pretrained weights" in proc.stderr and "--ckpt" in proc.stderr

    import torchvision.models._api as tv_api

    def offline(*args, **kwargs):
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(tv_api, "load_state_dict_from_url", offline, raising=False)
    monkeypatch.setattr("torch.hub.load_state_dict_from_url", offline)
    one_line_error(create_model, "torchvision:resnet18", pretrained=True, match="--ckpt weights.pth")

    monkeypatch.setitem(sys.modules, "timm", None)
    result = CliRunner().invoke(
        cli, ["fourier", "--model", "timm:resnet18", "--random-init", "--out", str(tmp_path / "t.h5")]
    )
    assert result.exit_code == 2 and "pip install 'landscape-toolkit[timm]'" in result.output


def test_torchvision_refuses_one_channel_data_and_labels_beyond_the_head():
    with pytest.raises(LandscapeError, match="3-channel"):
        ModelSource(model="torchvision:resnet18", random_init=True).build("digits")
    inputs = load_inputs(ModelSource(model="timm:resnet18", random_init=True, num_classes=3), device="cpu")
    from landscape.core.objective import Objective

    one_line_error(
        Objective, inputs.model, batches_for(inputs, batch_size=8, n_samples=8), match="but the model outputs 3 classes"
    )


def test_pretrained_preprocessing_comes_from_the_model():
    from landscape.core.source import resolve_preprocess

    vit = create_model("timm:vit_tiny_patch16_224", num_classes=10, img_size=32, patch_size=4)
    pre = resolve_preprocess(vit, "imagefolder:/nowhere")
    assert pre.image_size == 32 and pre.interpolation == "bicubic" and pre.crop_pct == pytest.approx(0.9)
    res = create_model("torchvision:resnet18")
    pre = resolve_preprocess(res, "cifar10:/x", pretrained=True)
    assert pre.mean == pytest.approx((0.485, 0.456, 0.406)) and pre.image_size is None
    assert resolve_preprocess(res, "cifar10:/x") is None
    ds = load_dataset("synthetic:4", "test", preprocess=resolve_preprocess(res, "synthetic:4", pretrained=True))
    assert ds.info.mean == pytest.approx((0.485, 0.456, 0.406))


KINDS = {
    "timm_vit": [*VIT, "--data", "digits"],
    "timm_resnet": ["--model", "timm:resnet18", "--data", "digits"],
    "torchvision_resnet": ["--model", "torchvision:resnet18", "--data", "synthetic:8"],
    "user_module": ["--model", "py:my_nets:build", "--data", "digits"],
}
RUNS = {
    "surface": ["--x", "-0.5:0.5:2", "--samples", "4", "--batch-size", "4"],
    "hessian": ["--samples", "4", "--batch-size", "4", "--top-k", "1", "--ncv", "4", "--maxiter", "2", "--tol", "0.1"],
    "spectrum": ["--samples", "4", "--batch-size", "2", "--top-k", "1", "--ncv", "4", "--maxiter", "2"],
    "fourier": ["--samples", "4", "--batch-size", "4"],
    "sharpness": ["--samples", "4", "--batch-size", "2", "--rho", "0.01", "--steps", "1", "--resamples", "10"],
}
ARRAY = {
    "surface": "loss",
    "hessian": "eigenvalues",
    "spectrum": "eigenvalues",
    "fourier": "high_frequency",
    "sharpness": "mean",
}


@pytest.mark.parametrize("command", sorted(RUNS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_command_on_every_kind_of_model(kind, command, user_module, tmp_path):
    taps = ["--taps", "stem=stem", "--taps", "body.?=conv"] if (kind, command) == ("user_module", "fourier") else []
    out = tmp_path / "r.h5"
    result = invoke(
        command, *KINDS[kind], "--random-init", *RUNS[command], *taps, "--device", "cpu", "--out", out, "--quiet"
    )
    assert result.exit_code == 0, result.output
    res = read_result(out)
    values = np.asarray(res[ARRAY[command]], dtype=float)
    if command == "fourier":  # a block whose maps are below 3 x 3 at 32 px has no profile: NaN, and it is named
        small = np.min(np.asarray(res["layer_sizes"]), axis=1) < MIN_PROFILE_SIDE
        assert np.isnan(values[small]).all() and (not small.any() or "too small" in result.output)
        values = values[~small]
    assert res.attrs["complete"] and values.size and np.isfinite(values).all()
    assert res.attrs["model"] == KINDS[kind][1] and res.attrs["checkpoint"] == "random-init (seed 0)"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_connect_between_two_inits_of_every_kind_of_model(kind, user_module, tmp_path):
    """theta_A a seeded random init (``--random-init``), theta_B another init saved as a plain state dict."""
    channels = ["--model-kw", "in_chans=1"] if kind.startswith("timm") else []  # a state dict keeps its stem
    given = [*KINDS[kind][:-2], *channels, *KINDS[kind][-2:]]
    spec, data = given[1], given[-1]
    kwargs = {k: int(v) for k, v in (a.split("=") for a in given[3:-2:2])}
    other = load_inputs(ModelSource(model=spec, model_kwargs=kwargs, random_init=True, seed=1), data=data, device="cpu")
    torch.save(other.model.state_dict(), tmp_path / "b.pth")
    out = tmp_path / "c.h5"
    args = ["--random-init", "--ckpt", tmp_path / "b.pth", "--steps", "3", "--samples", "4", "--batch-size", "4"]
    result = invoke("connect", *given, *args, "--device", "cpu", "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    res = read_result(out)
    assert res.attrs["complete"] and np.isfinite(res["line/loss"]).all()
    assert res.attrs["model"] == spec and res.attrs["other_checkpoint"] == str(tmp_path / "b.pth")
    assert res.attrs["checkpoint"] == "random-init (seed 0)"
