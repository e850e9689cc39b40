"""The model source: the class count is one option, given by --num-classes or by --model-kw num_classes=N."""

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from landscape.cli import cli
from landscape.core.source import ModelSource
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.store.read import read_result

pytest.importorskip("timm")
pytest.importorskip("torchvision")

#: a model family, the weights' constructor options and the data they fit
FAMILIES = {
    "torchvision": ("torchvision:resnet18", {}, "synthetic:8"),
    "timm": ("timm:resnet18", {"in_chans": 1}, "digits"),
}
CLASSES = {"torchvision": 8, "timm": 10}
RUNS = {
    "surface": ["--x", "-0.5:0.5:2", "--y", "none"],
    "hessian": ["--top-k", "1", "--ncv", "4", "--maxiter", "2", "--tol", "0.1"],
    "spectrum": ["--top-k", "1", "--ncv", "4", "--maxiter", "2"],
    "fourier": [],
    "sharpness": ["--rho", "0.01", "--steps", "1", "--resamples", "10"],
    "similarity": [],
}


def test_num_classes_given_as_a_model_option_is_the_class_count():
    source = ModelSource(checkpoint="w.pth", model="torchvision:resnet18", model_kwargs={"num_classes": 7, "x": 1})
    assert source.num_classes == 7 and source.model_kwargs == {"x": 1}
    same = ModelSource(checkpoint="w.pth", model="m", model_kwargs={"num_classes": 7}, num_classes=7)
    assert same.num_classes == 7 and same.model_kwargs == {}
    with pytest.raises(LandscapeError, match="^--model-kw num_classes=7 and --num-classes 5 disagree"):
        ModelSource(checkpoint="w.pth", model="m", model_kwargs={"num_classes": 7}, num_classes=5)
    with pytest.raises(LandscapeError, match="^--model-kw num_classes must be a whole number >= 1, got 'ten'"):
        ModelSource(checkpoint="w.pth", model="m", model_kwargs={"num_classes": "ten"})


@pytest.fixture(scope="module")
def state_dicts(tmp_path_factory):
    """A resnet18 of each family at a seeded random init, saved as a plain state dict (no class count in it)."""
    folder = tmp_path_factory.mktemp("weights")
    paths = {}
    for family, (spec, kwargs, _) in FAMILIES.items():
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = create_model(spec, num_classes=CLASSES[family], **kwargs)
        paths[family] = folder / f"{family}.pth"
        torch.save(model.state_dict(), paths[family])
    return paths


def run_on_state_dict(family, command, path, out):
    spec, kwargs, data = FAMILIES[family]
    model_kw = [f"{key}={value}" for key, value in {**kwargs, "num_classes": CLASSES[family]}.items()]
    args = [command, "--model", spec, *[a for kw in model_kw for a in ("--model-kw", kw)], "--ckpt", path]
    args += ["--data", data, *RUNS[command], "--samples", "4", "--batch-size", "4", "--device", "cpu"]
    return CliRunner().invoke(cli, [*map(str, args), "--out", str(out), "--quiet"])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_state_dict_with_its_class_count_as_a_model_option_is_analysed(family, state_dicts, tmp_path):
    result = run_on_state_dict(family, "surface", state_dicts[family], tmp_path / "r.h5")
    assert result.exit_code == 0, result.output
    res = read_result(tmp_path / "r.h5")
    assert res.attrs["complete"] and np.isfinite(np.asarray(res["loss"])).all()


@pytest.mark.parametrize("command", sorted(set(RUNS) - {"surface"}))
def test_every_analysis_takes_the_class_count_as_a_model_option(command, state_dicts, tmp_path):
    result = run_on_state_dict("torchvision", command, state_dicts["torchvision"], tmp_path / "r.h5")
    assert result.exit_code == 0, result.output
    assert read_result(tmp_path / "r.h5").attrs["complete"]
