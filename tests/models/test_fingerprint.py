"""A module's fingerprint changes with its structure, configuration, hooks and code, and with nothing else."""

import importlib
import sys

import torch
from torch import nn

from landscape.models import create_model
from landscape.models.fingerprint import module_fingerprint


def test_equal_for_the_same_model_whatever_its_weights():
    a = create_model("resnet_mini", num_classes=10)
    torch.manual_seed(5)
    b = create_model("resnet_mini", num_classes=10)
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert module_fingerprint(a) == module_fingerprint(b)
    assert module_fingerprint(a.eval()) == module_fingerprint(b.eval())
    assert module_fingerprint(a) != module_fingerprint(create_model("resnet_mini", num_classes=7))
    assert module_fingerprint(a) != module_fingerprint(create_model("vit_mini", num_classes=10))


def test_changes_with_configuration_mode_and_hooks():
    base = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten())
    ref = module_fingerprint(base)
    assert module_fingerprint(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten())) != ref
    assert module_fingerprint(nn.Sequential(nn.Conv2d(3, 4, 3), nn.GELU(), nn.Flatten())) != ref
    base.eval()
    assert module_fingerprint(base) != ref  # eval mode is another function (BatchNorm, dropout)
    base.train()
    base[1].some_flag = True  # a plain attribute a forward may read
    assert module_fingerprint(base) != ref
    del base[1].some_flag
    assert module_fingerprint(base) == ref
    handle = base[0].register_forward_hook(lambda m, i, o: o * 2)
    assert module_fingerprint(base) != ref
    handle.remove()
    assert module_fingerprint(base) == ref


def test_changes_with_the_code_of_the_models_file(tmp_path, monkeypatch):
    source = "import torch\nclass Scale(torch.nn.Module):\n    def forward(self, x):\n        return x * {}\n"
    (tmp_path / "my_model.py").write_text(source.format(2))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_model", None)
    first = module_fingerprint(importlib.import_module("my_model").Scale())
    (tmp_path / "my_model.py").write_text(source.format(3))
    assert module_fingerprint(importlib.import_module("my_model").Scale()) != first
    sys.modules.pop("my_model", None)


def test_a_class_without_a_file_is_hashed_by_its_code():
    namespace: dict = {}
    exec("import torch\nclass Two(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n", namespace)
    other: dict = {}
    exec("import torch\nclass Two(torch.nn.Module):\n    def forward(self, x):\n        return x * 3\n", other)
    assert module_fingerprint(namespace["Two"]()) != module_fingerprint(other["Two"]())
    again: dict = {}
    exec("import torch\nclass Two(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n", again)
    assert module_fingerprint(namespace["Two"]()) == module_fingerprint(again["Two"]())


def test_extra_code_counts():
    m = nn.Linear(2, 2)

    def loss_a(x):
        return x.sum()

    assert module_fingerprint(m, [loss_a]) != module_fingerprint(m)
