"""The lesion study: each lesion equals a hand-built model with that branch zeroed; the model is untouched; resume."""

import copy

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from landscape.analyses.lesion.run import hits_and_nll, lesion_blocks, lesion_study, run_lesion, stage_claims
from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.models.vit import Block
from landscape.options.lesion import LesionOptions
from landscape.store.read import read_result


def batches(n=2, b=6, c=1, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(b, c, size, size, generator=g), torch.randint(0, 10, (b,), generator=g)) for _ in range(n)]


def zero_branch(model, block):
    """A copy of ``model`` whose branch of ``block`` is zero because its final layer's weights are zero."""
    net = copy.deepcopy(model)
    path = block.name.rsplit(".", 1)[0] if block.name.startswith("blocks.") else block.name
    blk = net.get_submodule(path)
    if block.name.endswith(".msa"):
        layers = [blk.attn.proj]
    elif block.name.endswith(".mlp"):
        layers = [blk.mlp.fc2]
    elif block.kind == "msa":  # AlterNet's MSA block
        layers = [blk.attn.proj]
    elif blk.preact:  # out = conv_n(relu(bn_n(.))) + skip
        layers = [getattr(blk, f"conv{blk.num_convs}")]
    else:  # out = relu(bn_n(conv_n(.)) + skip)
        layers = [getattr(blk, f"bn{blk.num_convs}")]
    with torch.no_grad():
        for layer in layers:
            layer.weight.zero_()
            if layer.bias is not None:
                layer.bias.zero_()
    return net


def scores(model, data):
    correct, nll, total = hits_and_nll(model.eval(), data)
    return correct / total, nll / total


@pytest.mark.parametrize(
    "name,kwargs",
    [("resnet_mini", {}), ("resnet_mini", {"preact": True}), ("vit_mini", {"depth": 2}), ("alternet_mini", {})],
)
def test_each_lesion_equals_the_model_with_that_branch_zeroed(name, kwargs):
    torch.manual_seed(1)
    model = create_model(name, num_classes=10, in_chans=1, **kwargs).eval()
    data = batches()
    table = lesion_study(model, data)
    assert (table.intact_accuracy, table.intact_nll) == scores(model, data)
    assert [b.name for b in table.blocks] == [b.name for b in lesion_blocks(model)]
    for i, block in enumerate(table.blocks):
        acc, nll = scores(zero_branch(model, block), data)
        assert table.accuracy[i] == acc and table.nll[i] == nll, block.name
    assert np.all(table.nll != table.intact_nll)  # every lesion changes the function
    np.testing.assert_array_equal(table.accuracy_drop, table.intact_accuracy - table.accuracy)


def test_blocks_kinds_stages_and_projected_shortcuts():
    alter = lesion_blocks(create_model("alternet_mini", num_classes=10))
    assert [(b.name, b.kind, b.stage) for b in alter] == [
        ("layer1.0", "conv", 0),
        ("layer2.0", "downsample", 1),
        ("layer2.1", "msa", 1),
        ("layer3.0", "downsample", 2),
        ("layer3.1", "msa", 2),
        ("layer4.0", "downsample", 3),
        ("layer4.1", "msa", 3),
    ]
    assert [b.projected_shortcut for b in alter] == [True, True, False, True, False, True, False]
    vit = lesion_blocks(create_model("vit_mini", num_classes=10, depth=2))
    assert [(b.name, b.kind, b.stage) for b in vit] == [
        ("blocks.0.msa", "msa", 0),
        ("blocks.0.mlp", "mlp", 0),
        ("blocks.1.msa", "msa", 0),
        ("blocks.1.mlp", "mlp", 0),
    ]
    conv = lesion_blocks(create_model("convvit_mini", num_classes=10))
    assert {b.kind for b in conv} == {"conv", "mlp"}


def test_the_users_model_is_unchanged():
    torch.manual_seed(0)
    model = create_model("alternet_mini", num_classes=10, in_chans=1)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    lesion_study(model, batches(n=1))
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all(m.training for m in model.modules())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


class TimmStyle(nn.Module):
    """timm's ViT layout: ``blocks[i]`` with attn, mlp, drop_path1, drop_path2 (here the zoo's Block)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 16)
        self.blocks = nn.Sequential(*[Block(16, 2, None, 2.0, True, 0.0, None) for _ in range(2)])
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x.flatten(2).transpose(1, 2)[..., :4])).mean(1))


def test_timm_style_blocks_are_supported_and_other_models_are_one_line_errors():
    torch.manual_seed(0)
    model = TimmStyle().eval()
    data = [(torch.randn(5, 4, 2, 2), torch.randint(0, 10, (5,)))]
    table = lesion_study(model, data)
    assert [b.name for b in table.blocks] == ["blocks.0.msa", "blocks.0.mlp", "blocks.1.msa", "blocks.1.mlp"]
    for i, block in enumerate(table.blocks):
        assert table.nll[i] == scores(zero_branch(model, block), data)[1]
    with pytest.raises(LandscapeError, match="supports the zoo's resnet") as err:
        lesion_blocks(nn.Sequential(nn.Flatten(), nn.Linear(4, 10)))
    assert "\n" not in str(err.value) and "Sequential" in str(err.value)


def test_stage_claims():
    names = ["a", "b", "c", "d", "e"]
    kinds = ["conv", "msa", "conv", "msa", "mlp"]
    claims = stage_claims(names, kinds, [0, 0, 1, 1, 1], [0.1, 0.3, 0.5, 0.2, np.nan])
    assert [(c.stage, c.last_msa, c.holds, c.top_block) for c in claims] == [(0, "b", True, "b"), (1, "d", False, "c")]
    assert stage_claims(["a"], ["conv"], [0], [0.1]) == []


def make_checkpoint(path, name, seed=0):
    torch.manual_seed(seed)
    model = create_model(name, num_classes=10, in_chans=1)
    return save_checkpoint(
        path, model, model_name=name, model_kwargs=model.model_kwargs, num_classes=10, dataset="digits"
    )


def test_run_matches_the_study_and_resumes_after_a_kill(tmp_path):
    from landscape.core.front import batches_for, load_inputs

    ckpt = make_checkpoint(tmp_path / "a.pt", "alternet_mini")
    opts = LesionOptions(samples=10, batch_size=4)
    full = run_lesion(ckpt, opts, out=tmp_path / "full.h5", device="cpu", progress=False)
    inputs = load_inputs(ckpt, split="test", device="cpu")
    table = lesion_study(inputs.model, batches_for(inputs, batch_size=4, n_samples=10, seed=0))
    np.testing.assert_array_equal(full["accuracy"], table.accuracy)
    np.testing.assert_array_equal(full["nll"], table.nll)
    assert full.attrs["intact_accuracy"] == table.intact_accuracy and full.attrs["intact_nll"] == table.intact_nll
    assert full.attrs["kind"] == "lesion" and full.attrs["complete"] and full["done"].all()
    assert full.attrs["n_samples"] == 10 and full.attrs["split"] == "test"
    assert full.axes["accuracy"] == ["block"]

    out = tmp_path / "part.h5"
    seen = []

    def kill(i):
        seen.append(i)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_lesion(ckpt, opts, out=out, device="cpu", progress=False, on_block=kill)
    part = read_result(out)
    assert not part.attrs["complete"] and part["done"].sum() == 3 and np.isnan(part["accuracy"][3:]).all()
    resumed_blocks = []
    again = run_lesion(ckpt, opts, out=out, device="cpu", progress=False, on_block=resumed_blocks.append)
    assert resumed_blocks == [3, 4, 5, 6] and again.attrs["created"] == part.attrs["created"]
    for key in ("block_names", "block_kinds", "depth", "stage", "accuracy", "nll", "accuracy_drop", "done"):
        np.testing.assert_array_equal(again[key], full[key])
    assert again.attrs["intact_nll"] == full.attrs["intact_nll"]
    with pytest.raises(LandscapeError, match="--force"):
        run_lesion(ckpt, LesionOptions(samples=8, batch_size=4), out=out, device="cpu", progress=False)


def test_options_are_checked():
    with pytest.raises(LandscapeError, match="--samples"):
        LesionOptions(samples=0)
    with pytest.raises(LandscapeError, match="split"):
        LesionOptions(split="dev")


@pytest.mark.parametrize("name", ["resnet_mini", "vit_mini", "alternet_mini"])
def test_cli_and_plot(tmp_path, name):
    ckpt = make_checkpoint(tmp_path / f"{name}.pt", name)
    out = tmp_path / f"{name}.h5"
    args = ["lesion", "--ckpt", str(ckpt), "--samples", "6", "--batch-size", "3", "--device", "cpu"]
    result = CliRunner().invoke(cli, [*args, "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    res = read_result(out)
    n = len(res["block_names"])
    assert f"wrote {out}: {n} blocks, 6 samples; intact accuracy" in result.output
    if name == "resnet_mini":
        assert "no MSA blocks" in result.output
    else:
        assert "accuracy drop of each MSA block" in result.output and "largest drop in its stage" in result.output
        stages = {int(s) for s, k in zip(res["stage"], res["block_kinds"]) if k == "msa"}
        assert result.output.count("last MSA") == len(stages)
    drawn = CliRunner().invoke(cli, ["plot", str(out), "--out", str(tmp_path / "fig")])
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "fig" / f"{name}_accuracy_drop.png").exists()
    assert (tmp_path / "fig" / f"{name}_nll_increase.png").exists()


def test_plot_overlays_several_files_and_refuses_an_unsupported_model(tmp_path):
    from landscape.plot import plot_files

    paths = []
    for name, seed in (("alternet_mini", 0), ("alternet_mini", 1), ("vit_mini", 0)):
        ckpt = make_checkpoint(tmp_path / f"{name}{seed}.pt", name, seed)
        out = tmp_path / f"{name}{seed}.h5"
        run_lesion(ckpt, LesionOptions(samples=4, batch_size=4), out=out, device="cpu", progress=False)
        paths.append(out)
    written = plot_files(paths, tmp_path / "fig")
    assert [p.name for p in written] == [
        "accuracy_drop_alternet_mini0_vs_alternet_mini1_vs_vit_mini0.png",
        "nll_increase_alternet_mini0_vs_alternet_mini1_vs_vit_mini0.png",
    ]


def test_cli_refuses_an_unsupported_model_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "lesion_plain_net.py").write_text(
        "from torch import nn\n\n\ndef build(num_classes=10, in_chans=1):\n"
        "    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_chans, num_classes))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["lesion", "--model", "py:lesion_plain_net:build", "--random-init", "--samples", "4", "--device", "cpu"]
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "x.h5")])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "supports the zoo's resnet*, alternet* and vit*" in result.output and "Sequential" in result.output
    assert not (tmp_path / "x.h5").exists()


def test_cli_hostile_inputs_are_one_line_errors_that_leave_no_file(tmp_path):
    ckpt = make_checkpoint(tmp_path / "a.pt", "resnet_mini")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(ckpt.read_bytes()[:500])
    out = tmp_path / "x.h5"
    for args, message in [
        (["--ckpt", str(ckpt), "--samples", "100000"], "out of range: use 1..360"),
        (["--ckpt", str(truncated)], "not a PyTorch checkpoint"),
    ]:
        result = CliRunner().invoke(cli, ["lesion", *args, "--device", "cpu", "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert message in result.output and result.output.strip().count("\n") == 0
        assert not out.exists()
