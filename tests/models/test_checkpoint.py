import errno
import hashlib
import os
import sys

import numpy as np
import pytest
import torch
from helpers import one_line_error
from torch import nn

import landscape
from landscape.errors import LandscapeError
from landscape.models.checkpoint import (
    FORMAT_VERSION,
    file_sha256,
    infer_num_classes,
    load_model,
    read_checkpoint,
    save_checkpoint,
)


class TinyNet(nn.Module):
    """Conv + BN + linear head; ``head_bias`` and ``width`` change its keys and shapes."""

    def __init__(self, num_classes=10, width=4, head_bias=True, in_chans=1):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_chans, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(width, num_classes, bias=head_bias)

    def forward(self, x):
        return self.head(self.features(x))


@pytest.fixture
def fake_zoo(monkeypatch):
    """Register one extra model, 'tiny', in the real registry so load_model is tested on a small model."""
    from landscape.models import registry

    def tiny(num_classes=10, **kwargs):
        return TinyNet(num_classes=num_classes, **kwargs)

    monkeypatch.setitem(registry._MODELS, "tiny", tiny)
    return registry


def trained_tiny(**kwargs):
    torch.manual_seed(0)
    model = TinyNet(**kwargs)
    model.features[1].running_mean += torch.arange(model.features[1].num_features).float()
    return model


def assert_same_state(a, b):
    assert list(a) == list(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_round_trip_and_metadata(tmp_path):
    model = trained_tiny(width=5)
    path = save_checkpoint(
        tmp_path / "sub" / "ck.pt",
        model,
        model_name="tiny",
        model_kwargs={"width": 5, "shape": (2, 3)},
        num_classes=10,
        dataset="digits",
        epoch=3,
        metrics={"acc": np.float32(0.5), "loss": 1.25},
        train_options={"lr": 0.1, "out": tmp_path},
        extra={"note": "x"},
    )
    assert path == tmp_path / "sub" / "ck.pt" and path.is_file()
    assert os.listdir(path.parent) == ["ck.pt"]  # no temporary file left behind

    ck = read_checkpoint(path)
    assert_same_state(ck.state_dict, model.state_dict())
    assert ck.model_name == "tiny" and ck.num_classes == 10
    assert ck.model_kwargs == {"width": 5, "shape": (2, 3)}
    assert ck.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() == file_sha256(path)
    assert ck.path == path
    m = ck.meta
    assert m["format_version"] == FORMAT_VERSION and m["dataset"] == "digits" and m["epoch"] == 3
    assert m["metrics"] == {"acc": 0.5, "loss": 1.25} and type(m["metrics"]["acc"]) is float
    assert m["train_options"] == {"lr": 0.1, "out": str(tmp_path)} and m["extra"] == {"note": "x"}
    assert m["landscape_version"] == landscape.__version__ and m["torch_version"] == torch.__version__
    # what the weights were computed on (landscape.runtime.machine)
    assert m["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and m["device"] == "cpu"
    assert m["torch_threads"] == torch.get_num_threads()
    assert m["created"].endswith("+00:00") and "state_dict" not in m
    raw = torch.load(path, weights_only=True)
    assert set(raw) == {
        "format_version",
        "model",
        "model_kwargs",
        "num_classes",
        "state_dict",
        "dataset",
        "epoch",
        "metrics",
        "train_options",
        "extra",
        "landscape_version",
        "torch_version",
        "cpu_capability",
        "torch_threads",
        "device",
        "created",
        "written_by",
    }


def test_unstorable_metadata(tmp_path):
    one_line_error(
        save_checkpoint,
        tmp_path / "ck.pt",
        TinyNet(),
        model_name="tiny",
        model_kwargs={},
        num_classes=10,
        metrics={"f": object()},
        match="metrics",
    )
    assert not any(tmp_path.iterdir())


def test_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "ck.pt", TinyNet(), model_name="tiny", model_kwargs={}, num_classes=10)
    before = path.read_bytes()

    def full_disk(fd):  # the checkpoint's bytes are written, then the disk turns out full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(LandscapeError, match="no space left on the device") as e:
        save_checkpoint(path, trained_tiny(width=8), model_name="tiny", model_kwargs={"width": 8}, num_classes=10)
    assert "\n" not in str(e.value)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ck.pt"]


def test_load_model_from_landscape_checkpoint(tmp_path, fake_zoo):
    model = trained_tiny(width=6, num_classes=3).eval()
    save_checkpoint(tmp_path / "ck.pt", model, model_name="tiny", model_kwargs={"width": 6}, num_classes=3)
    loaded, ck = load_model(tmp_path / "ck.pt")
    assert not loaded.training and ck.model_name == "tiny"
    assert_same_state(loaded.state_dict(), model.state_dict())
    x = torch.randn(2, 1, 8, 8)
    torch.testing.assert_close(loaded(x), model(x))


def test_plain_state_dict_needs_a_model_name(tmp_path, fake_zoo):
    model = trained_tiny(num_classes=7)
    torch.save(model.state_dict(), tmp_path / "plain.pt")
    ck = read_checkpoint(tmp_path / "plain.pt")
    assert ck.model_name is None and ck.num_classes == 7 and ck.meta["format"] == "state_dict"
    one_line_error(load_model, tmp_path / "plain.pt", match="--model")
    loaded, _ = load_model(tmp_path / "plain.pt", "tiny")
    assert loaded.head.out_features == 7
    assert_same_state(loaded.state_dict(), model.state_dict())


def test_paper_a_file_and_dataparallel_prefix(tmp_path, fake_zoo):
    model = trained_tiny(width=3)
    state = {f"module.{k}": v for k, v in model.state_dict().items()}
    optimizer = {
        "state": {0: {"momentum_buffer": torch.ones(3, 1, 3, 3)}},  # as SGD.state_dict() has it
        "param_groups": [{"lr": 0.1, "momentum": 0.9, "nesterov": False, "params": [0, 1, 2]}],
    }
    torch.save({"name": "resnet_dnn_50", "state_dict": state, "optimizer": optimizer}, tmp_path / "paper.pth.tar")
    ck = read_checkpoint(tmp_path / "paper.pth.tar")
    assert ck.model_name is None and ck.meta["name"] == "resnet_dnn_50"
    assert list(ck.state_dict) == list(model.state_dict())
    one_line_error(load_model, tmp_path / "paper.pth.tar", match="--model")
    loaded, _ = load_model(tmp_path / "paper.pth.tar", "tiny", width=3)
    assert_same_state(loaded.state_dict(), {k[len("module.") :]: v for k, v in state.items()})


def test_mismatch_lists_keys(tmp_path, fake_zoo):
    torch.save(TinyNet(head_bias=False).state_dict(), tmp_path / "nobias.pt")
    msg = one_line_error(load_model, tmp_path / "nobias.pt", "tiny", num_classes=10)
    assert "'tiny'" in msg and "1 missing keys (head.bias)" in msg and "0 unexpected keys" in msg

    sd = TinyNet().state_dict()
    sd["extra.weight"] = torch.zeros(2, 2)
    sd["extra2.weight"] = torch.zeros(3)
    torch.save(sd, tmp_path / "extra.pt")
    msg = one_line_error(load_model, tmp_path / "extra.pt", "tiny", num_classes=10)
    assert "2 unexpected keys (extra.weight, extra2.weight)" in msg

    torch.save(TinyNet(width=4).state_dict(), tmp_path / "w4.pt")
    msg = one_line_error(load_model, tmp_path / "w4.pt", "tiny", width=8)
    assert "differ in shape" in msg and "features.0.weight (4, 1, 3, 3) vs (8, 1, 3, 3)" in msg
    assert msg.endswith("pass the --model and --model-kw it was trained with")


def test_a_wrong_model_for_a_checkpoint_that_names_its_own_says_so_and_that_model_can_be_dropped(tmp_path):
    from landscape.models import create_model

    model = create_model("resnet_mini", num_classes=10, in_chans=1, widths=(4, 8), layers=(1, 1))
    path = save_checkpoint(
        tmp_path / "r.pt", model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10
    )
    msg = one_line_error(load_model, path, "vit_mini")
    assert "does not fit model 'vit_mini'" in msg and "missing keys" in msg
    assert msg.endswith("the checkpoint itself names model 'resnet_mini': drop --model to use it")
    assert load_model(path)[1].model_name == "resnet_mini"


def test_infer_num_classes():
    z = torch.zeros
    assert infer_num_classes({"conv.weight": z(8, 3, 3, 3), "fc.weight": z(100, 8), "fc.bias": z(100)}) == 100
    vit = {
        "blocks.0.mlp.fc1.weight": z(32, 8),
        "blocks.0.mlp.fc2.weight": z(8, 32),
        "norm.weight": z(8),
        "head.weight": z(10, 8),
        "head.bias": z(10),
    }
    assert infer_num_classes(vit) == 10
    assert infer_num_classes({"head.weight": z(5, 4), "proj.weight": z(7, 4)}) == 5  # the head wins
    assert infer_num_classes({"a.weight": z(3, 4), "b.weight": z(6, 3)}) == 6  # else the last 2-D weight
    assert infer_num_classes({"a.bias": z(3)}) is None


def test_missing_and_damaged_files(tmp_path):
    one_line_error(read_checkpoint, tmp_path / "nope.pt", match="not found")
    one_line_error(file_sha256, tmp_path / "nope.pt", match="not found")
    (tmp_path / "junk.pt").write_bytes(b"this is not a checkpoint")
    one_line_error(read_checkpoint, tmp_path / "junk.pt", match="cannot read")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    one_line_error(read_checkpoint, tmp_path / "list.pt", match="no state dict")
    torch.save({"format_version": FORMAT_VERSION + 1, "state_dict": {}}, tmp_path / "future.pt")
    one_line_error(read_checkpoint, tmp_path / "future.pt", match="upgrade landscape")


def _write_marker(path):
    with open(path, "w") as f:
        f.write("code ran")
    return {}


class _Evil:
    def __init__(self, reduce):
        self.reduce = reduce

    def __reduce__(self):
        return self.reduce


@pytest.mark.parametrize("how", ["python", "os.system"])
def test_malicious_pickle_is_refused(tmp_path, how):
    marker = tmp_path / "pwned"
    reduce = (_write_marker, (str(marker),)) if how == "python" else (os.system, (f"touch {marker}",))
    torch.save({"state_dict": TinyNet().state_dict(), "payload": _Evil(reduce)}, tmp_path / "evil.pt")
    msg = one_line_error(read_checkpoint, tmp_path / "evil.pt", match="refusing to load")
    assert "arbitrary pickled code" in msg and "plain state dict" in msg
    assert not marker.exists()


# ---------------------------------------------------------------------------------- with the real zoo


def _real_zoo():
    zoo = pytest.importorskip("landscape.models")
    if not hasattr(zoo, "create_model") or "resnet_mini" not in getattr(zoo, "list_models", list)():
        pytest.skip("the model zoo has no resnet_mini yet")
    return zoo


def test_real_zoo_round_trip(tmp_path):
    zoo = _real_zoo()
    torch.manual_seed(0)
    model = zoo.create_model("resnet_mini", num_classes=10, in_chans=1).eval()
    save_checkpoint(
        tmp_path / "ck.pt",
        model,
        model_name=model.model_name,
        model_kwargs=model.model_kwargs,
        num_classes=model.num_classes,
        dataset="digits",
    )
    loaded, ck = load_model(tmp_path / "ck.pt")
    assert ck.model_name == model.model_name
    x = torch.randn(2, 1, 32, 32)
    torch.testing.assert_close(loaded(x), model(x))

    torch.save(model.state_dict(), tmp_path / "plain.pt")
    assert read_checkpoint(tmp_path / "plain.pt").num_classes == 10
    loaded, _ = load_model(tmp_path / "plain.pt", "resnet_mini", in_chans=1)
    torch.testing.assert_close(loaded(x), model(x))


def test_a_checkpoint_cannot_choose_code_or_files_to_load(tmp_path, monkeypatch):
    model = TinyNet()
    marker = tmp_path / "ran"
    monkeypatch.setattr(
        sys.modules[__name__], "ran_code", lambda **kw: (marker.write_text("x"), TinyNet())[1], raising=False
    )
    spec = f"py:{__name__}:ran_code"
    save_checkpoint(tmp_path / "py.pt", model, model_name=spec, model_kwargs={}, num_classes=10)
    msg = one_line_error(load_model, tmp_path / "py.pt", match="would import and call code")
    assert f"--model {spec}" in msg and not marker.exists()
    loaded, _ = load_model(tmp_path / "py.pt", spec)  # the user names it: trusted
    assert marker.exists() and isinstance(loaded, TinyNet)

    pytest.importorskip("timm")
    for key, value in [
        ("checkpoint_path", str(tmp_path / "other.pt")),
        ("pretrained", True),
        ("pretrained_cfg_overlay", {"file": "/etc/passwd"}),
    ]:
        save_checkpoint(
            tmp_path / "t.pt", model, model_name="timm:resnet10t", model_kwargs={key: value}, num_classes=10
        )
        one_line_error(load_model, tmp_path / "t.pt", match=f"model option '{key}'")


def test_a_checkpoint_path_that_names_no_file_says_what_is_there(tmp_path):
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    for path, what in ((fifo, "a named pipe"), ("/dev/null", "a character device"), (tmp_path, "a folder")):
        for read in (read_checkpoint, file_sha256):
            msg = one_line_error(read, path, match=rf"^checkpoint {path} is {what}")
            assert "not found" not in msg
    one_line_error(landscape.surface, str(fifo), match=r"is a named pipe \(FIFO\), not a file")
