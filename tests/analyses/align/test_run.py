"""``landscape align`` and ``landscape.align``: the aligned checkpoint, its record, and bad input in one line with
nothing written."""

import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

import landscape
from landscape.cli import cli
from landscape.models import create_model
from landscape.models.checkpoint import load_model, read_checkpoint, save_checkpoint

from .references import permuted_resnet, randomise_bn

KW = {"in_chans": 1, "widths": (4, 6), "layers": (1, 1)}


def _save(path, model):
    return save_checkpoint(
        path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10, dataset="digits"
    )


def _pair(tmp_path):
    torch.manual_seed(0)
    a = randomise_bn(create_model("resnet_mini", num_classes=10, **KW))
    b = permuted_resnet(a, ("stem.0", "stem.1"), "shortcut")
    return _save(tmp_path / "a.pt", a), _save(tmp_path / "b.pt", b), a


def _align(*args):
    return CliRunner().invoke(cli, ["align", *map(str, args), "--samples", "32", "--quiet"])


def test_the_command_writes_theta_b_aligned_with_its_record(tmp_path):
    a_path, b_path, a = _pair(tmp_path)
    out = tmp_path / "b_aligned.pt"
    result = _align("--ckpt", a_path, "--ckpt", b_path, "--method", "activations", "--out", out)
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "4 permutations (4 not the identity)" in result.output
    model, ck = load_model(out)
    assert all(torch.equal(model.state_dict()[n], t) for n, t in a.state_dict().items())
    record = ck.meta["extra"]["alignment"]
    assert record["method"] == "activations" and record["function_error"] <= 1e-5 and record["n_samples"] == 32
    assert sorted(record["permutations"]) == ["layer1.0.conv1", "layer2.0.conv1", "layer2.0.conv2", "stem.0"]
    assert record["aligned"] == str(b_path) and record["reference_sha256"] == read_checkpoint(a_path).sha256
    assert ck.model_name == "resnet_mini" and ck.meta["dataset"] == "digits"
    again = _align("--ckpt", a_path, "--ckpt", b_path, "--out", out)  # landscape's own file is replaced
    record = read_checkpoint(out).meta["extra"]["alignment"]
    assert again.exit_code == 0 and record["method"] == "weights"
    starts = record["starts"]  # every descent, its start, order and objective; a permuted copy: all find it
    assert [(d["start"], d["order"]) for d in starts] == [
        ("invariant", "seeded"),
        ("identity", "seeded"),
        ("invariant", "layers"),
        ("identity", "layers"),
    ]
    assert all(d["objective"] == pytest.approx(record["objective_after"]) for d in starts)
    assert "(the best of 4 descents: invariant, seeded order)" in again.output


def test_the_python_function_returns_the_aligned_network_and_writes_nothing_without_out(tmp_path, monkeypatch):
    _, _, a = _pair(tmp_path)
    b = permuted_resnet(a, ("stem.0", "stem.1"), "shortcut", seed=4)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = landscape.align(a, b, "digits", samples=16, batch_size=8, progress=False)
    assert all(torch.equal(r.model.state_dict()[n], t) for n, t in a.state_dict().items())
    assert r.out is None and sorted(p.name for p in tmp_path.iterdir()) == before
    assert "weights: 4 permutations" in repr(r) and r.meta["command"].startswith("landscape.align(<ResNet>, <ResNet>")
    one_line_error(landscape.align, a, b, method="nothing", match=r"^unknown method='nothing'; choose one of weights")


def _refused(tmp_path, *args, match):
    out = tmp_path / "out.pt"
    result = _align(*args, "--out", out)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert match in lines[0], lines[0]
    assert not out.exists()
    return lines[0]


def test_bad_input_is_one_line_and_nothing_is_written(tmp_path):
    a_path, b_path, _ = _pair(tmp_path)
    torch.manual_seed(1)
    other = _save(tmp_path / "other.pt", create_model("resnet_mini", num_classes=10, **{**KW, "widths": (4, 8)}))
    _refused(tmp_path, "--ckpt", a_path, "--ckpt", other, match="not the same architecture")
    broken = create_model("resnet_mini", num_classes=10, **KW)
    with torch.no_grad():
        broken.fc.weight[0, 0] = float("nan")
    nan = _save(tmp_path / "nan.pt", broken)
    _refused(tmp_path, "--ckpt", a_path, "--ckpt", nan, match="non-finite")
    before = b_path.read_bytes()
    line = CliRunner().invoke(cli, ["align", "--ckpt", str(a_path), "--ckpt", str(b_path), "--out", str(b_path)])
    assert line.exit_code == 2 and "is an input checkpoint" in line.output and b_path.read_bytes() == before
    foreign = tmp_path / "notes.pt"
    foreign.write_text("mine")
    line = _align("--ckpt", a_path, "--ckpt", b_path, "--out", foreign)
    assert line.exit_code == 2 and "landscape did not write it" in line.output and foreign.read_text() == "mine"


def test_a_result_file_at_out_is_named_as_a_result_landscape_wrote(tmp_path):
    a_path, b_path, _ = _pair(tmp_path)
    result = tmp_path / "s.h5"
    landscape.surface(load_model(a_path)[0], "digits", x="-1:1:3", y="none", samples=16, out=result, progress=False)
    before = result.read_bytes()
    line = _align("--ckpt", a_path, "--ckpt", b_path, "--out", result)
    assert line.exit_code == 2 and line.output.count("\n") == 1, line.output
    assert f"{result} is a result that landscape wrote, not a checkpoint" in line.output
    assert "did not write" not in line.output and result.read_bytes() == before


def test_a_theta_b_that_overflows_on_the_images_is_named_not_called_a_spec_bug():
    torch.manual_seed(0)
    a, b = (create_model("resnet_mini", num_classes=10, **KW) for _ in range(2))
    with torch.no_grad():
        for p in b.parameters():
            if p.ndim > 1:
                p.mul_(1e8)  # finite weights whose activations overflow float32
    for method in ("weights", "activations"):
        msg = one_line_error(landscape.align, a, b, "digits", method=method, samples=32, progress=False)
        assert msg.startswith("theta_B's outputs on batch 0 are not finite") and "spec" not in msg, msg
