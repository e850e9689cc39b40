"""The Python API at the top: one function per analysis, a module and batches in, a result out."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import one_line_error, tiny_resnet_checkpoint

import landscape
from landscape.analyses.registry import analyses
from landscape.analyses.surface.run import run_surface
from landscape.data import fixed_batches, load_dataset
from landscape.options.surface import SurfaceOptions


def test_import_landscape_imports_no_torch_and_offers_every_analysis():
    code = "import sys, landscape; print('torch' in sys.modules, sorted(n for n in dir(landscape) if n.islower()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("False")
    for item in (a for a in analyses() if a.api):
        assert item.api.partition(":")[2] in out and callable(getattr(landscape, item.api.partition(":")[2]))
    assert landscape.lanczos.__module__ == "landscape.analyses.hessian.lanczos"
    assert landscape.Objective.__name__ == "Objective"
    with pytest.raises(AttributeError):
        landscape.nothing_of_that_name  # noqa: B018


def test_a_module_and_batches_give_the_checkpoint_s_surface_in_memory(tmp_path, monkeypatch):
    path, model = tiny_resnet_checkpoint(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    grid = {"x": "-1:1:3", "y": "-1:1:3", "samples": 24, "batch_size": 12}
    by_file = run_surface(path, SurfaceOptions(**grid), out=tmp_path / "s.h5", progress=False)
    batches = fixed_batches(load_dataset("digits", "train"), 12, 24, seed=0)
    held = landscape.surface(model, batches, progress=False, **grid)
    np.testing.assert_allclose(held["loss"], by_file["loss"], rtol=1e-6)
    assert held.path.name == "<memory>" and held.attrs["dataset"] == "batches" and held.attrs["data_sha256"]
    assert held.attrs["command"].startswith("landscape.surface(<ResNet>, data=<2 batches>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5", "tiny.pt"]  # nothing written without out=
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters()) and not model.training
    by_spec = landscape.hessian(model, "digits", top_k=1, samples=24, batch_size=12, progress=False)
    assert by_spec.attrs["dataset"] == "digits" and by_spec["eigenvalues"].shape == (1,)


def test_out_writes_the_file_and_the_same_weights_resume_it(tmp_path):
    _, model = tiny_resnet_checkpoint(tmp_path)
    out = tmp_path / "h.h5"
    first = landscape.hessian(model, "digits", out=out, top_k=1, samples=24, batch_size=12, progress=False)
    again = landscape.hessian(model, "digits", out=out, top_k=1, samples=24, batch_size=12, progress=False)
    assert out.exists() and again["eigenvalues"] == first["eigenvalues"]
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    one_line_error(landscape.hessian, model, "digits", out=out, top_k=1, samples=24, progress=False, match="differs in")


@pytest.mark.parametrize("function", sorted(a.api.partition(":")[2] for a in analyses() if a.api))
def test_an_out_ending_with_a_slash_names_a_folder_and_nothing_is_written(tmp_path, monkeypatch, function):
    monkeypatch.chdir(tmp_path)
    model = torch.nn.Linear(2, 2)
    models = [["a.pt"]] if function == "trajectory" else [model, model] if function in ("connect", "align") else [model]
    one_line_error(
        getattr(landscape, function),
        *models,
        out="newdir/",
        match=rf"^out='newdir/' names a folder: give a file in it, e.g. out='newdir/{function}.h5'$",
    )
    assert list(tmp_path.iterdir()) == []


def test_options_are_given_once():
    one_line_error(landscape.surface, torch.nn.Linear(2, 2), options=SurfaceOptions(), x="-1:1:3", match="not both")
    one_line_error(
        landscape.surface,
        torch.nn.Linear(2, 2),
        "digits",
        samples=0,
        match=r"^samples= must be a whole number >= 1, got 0$",
    )


def test_a_type_checker_sees_every_name_offered_at_the_top():
    import ast
    import inspect as inspect_module

    tree = ast.parse(inspect_module.getsource(landscape))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {alias.asname: f"{node.module}:{alias.name}" for node in block.body for alias in node.names}
    offered = {**landscape.PIECES, **{a.api.partition(":")[2]: a.api for a in analyses() if a.api}}
    assert seen == offered


# ---------------------------------------------------------------------- what a file records of given data
def _loader_problem(batch_size=8):
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3)).eval()
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(24, 1, 4, 4, generator=g), torch.randint(0, 3, (24,), generator=g))
    return model, data, DataLoader(data, batch_size=batch_size)


def test_a_loaders_batches_are_the_batch_size_every_file_records():
    from landscape.analyses.registry import summarize
    from landscape.plot.sharpness import curve_figure

    model, _, loader = _loader_problem()
    quiet = {"progress": False}
    files = {
        "sharpness": landscape.sharpness(model, loader, measure="average", rho=0.05, draws=2, **quiet),
        "surface": landscape.surface(model, loader, x="-1:1:3", y="none", **quiet),
        "hessian": landscape.hessian(model, loader, top_k=1, **quiet),
        "connect": landscape.connect(model, model, loader, steps=2, **quiet),
    }
    for name, result in files.items():
        assert result.attrs["batch_size"] == 8, name  # the loader's, not the option's default 128
    sharp = files["sharpness"]
    assert "of 3 batches of 8" in summarize(sharp) and "batches of 128" not in summarize(sharp)
    titles = [ax.get_title() for ax in curve_figure([sharp]).axes]
    assert any("m = 8" in t for t in titles), titles


def test_a_batch_size_that_is_not_the_loaders_has_no_effect_and_is_refused():
    model, data, loader = _loader_problem()
    grid = {"x": "-1:1:3", "y": "none", "progress": False}
    for given in (loader, list(loader)):
        msg = one_line_error(landscape.surface, model, given, batch_size=4, match="^batch_size=4 has no effect", **grid)
        assert "of 8 images" in msg
        assert landscape.surface(model, given, batch_size=8, **grid).attrs["batch_size"] == 8  # the same: harmless
    assert landscape.surface(model, loader, batch_size=8, samples=5, **grid).attrs["batch_size"] == 5  # computed
    held = landscape.surface(model, data, batch_size=4, **grid)  # a Dataset: cut into batches of 4 here
    assert held.attrs["batch_size"] == 4


def test_your_own_model_without_data_is_refused_naming_data():
    from landscape.core.source import ModelSource

    own = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    for call in (
        lambda: landscape.surface(own, progress=False),
        lambda: landscape.hessian(ModelSource(module=own), progress=False),
        lambda: landscape.connect(own, own, progress=False),
    ):
        one_line_error(call, match=r"^give data=: your model \(Sequential\) brings no dataset of its own")
    zoo = landscape.create_model("resnet_mini", num_classes=10, in_chans=1)  # a zoo model's data is digits
    assert landscape.lesion(zoo, samples=16, progress=False).attrs["dataset"] == "digits"
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    named = landscape.surface(net, "digits:8", x="-1:1:3", y="none", samples=16, progress=False)  # a spec: fine
    assert named.attrs["dataset"] == "digits:8"
