"""Errors raised by code landscape did not write: one line naming whose code raised, its trace on demand."""

import sys
import textwrap

import pytest
import torch
from click.testing import CliRunner
from torch import nn

import landscape
from landscape.cli import cli
from landscape.errors import ForeignError, LandscapeError, calling

USER_MODULE = """
from torch import nn


class Broken(nn.Module):
    def __init__(self, num_classes=10, in_chans=1):
        super().__init__()
        self.head = nn.Linear(in_chans, num_classes)

    def forward(self, x):
        raise ValueError("my forward is broken")


def refuses(num_classes=10, in_chans=1):
    raise KeyError("no such width")


def broken(num_classes=10, in_chans=1):
    return Broken(num_classes, in_chans)
"""

SURFACE = ["surface", "--random-init", "--data", "digits", "--x", "-1:1:3", "--samples", "4", "--batch-size", "4"]
TAIL = ["--device", "cpu", "--quiet"]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "hostile_nets.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield
    sys.modules.pop("hostile_nets", None)


def invoke(*args, env=None):
    result = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    return result.exit_code, result.output.strip()


def one_line(code, output, start):
    assert code == 2, output
    assert output.count("\n") == 0 and "Traceback" not in output, output
    assert output.startswith(f"Error: {start}"), output
    assert output.endswith("(landscape --traceback ... shows its full trace)"), output


def test_a_factory_that_raises_is_named_with_the_exception(user_module):
    code, output = invoke(*SURFACE, "--model", "py:hostile_nets:refuses", "--out", "s.h5", *TAIL)
    one_line(code, output, "your factory py:hostile_nets:refuses raised KeyError: 'no such width'; ")


def test_a_forward_that_raises_is_named_as_the_users_model(user_module):
    code, output = invoke(*SURFACE, "--model", "py:hostile_nets:broken", "--out", "s.h5", *TAIL)
    one_line(code, output, "your model's forward (py:hostile_nets:broken) raised ValueError: my forward is broken;")


@pytest.mark.parametrize("library", ["timm", "torchvision"])
def test_a_library_constructor_that_refuses_its_arguments_is_named(library, tmp_path, monkeypatch):
    pytest.importorskip(library)
    monkeypatch.chdir(tmp_path)
    data = ["--data", "synthetic:4"] if library == "torchvision" else []
    args = ["fourier", "--model", f"{library}:resnet18", "--random-init", *data, "--model-kw", "no_such_option=1"]
    code, output = invoke(*args, "--out", "f.h5", *TAIL)
    one_line(code, output, f"{library}'s constructor of {library}:resnet18 raised TypeError: ")
    assert "no_such_option" in output and "--model-kw" in output


@pytest.mark.parametrize("how", ["option", "environment"])
def test_the_full_trace_is_shown_on_demand(how, user_module):
    root, env = (["--traceback"], None) if how == "option" else ([], {"LANDSCAPE_TRACEBACK": "1"})
    code, output = invoke(*root, *SURFACE, "--model", "py:hostile_nets:broken", "--out", "s.h5", *TAIL, env=env)
    assert code == 2 and "Traceback (most recent call last)" in output
    assert 'raise ValueError("my forward is broken")' in output  # the user's own line, in the trace
    assert output.splitlines()[-1].startswith("Error: your model's forward (py:hostile_nets:broken) raised")


def test_calling_classifies_by_where_the_call_was_made():
    with pytest.raises(ForeignError) as e, calling("your factory py:m:f", "fix it"):
        raise RuntimeError("CUDA error: device-side assert\nmore")
    assert str(e.value) == "your factory py:m:f raised RuntimeError: CUDA error: device-side assert; fix it"
    assert isinstance(e.value.__cause__, RuntimeError) and isinstance(e.value, LandscapeError)
    with pytest.raises(LandscapeError, match="^ours$"), calling("your factory py:m:f"):  # a hook of ours: unchanged
        raise LandscapeError("ours")
    with pytest.raises(MemoryError), calling("your factory py:m:f", passing=(MemoryError,)):
        raise MemoryError


def test_a_module_given_from_python_whose_forward_raises_is_named_by_its_class():
    class Refusing(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            raise IndexError("tuple index out of range")

    batches = [(torch.zeros(2, 1, 2, 2), torch.zeros(2, dtype=torch.long))]
    with pytest.raises(ForeignError) as e:
        landscape.surface(Refusing(), batches, x="-1:1:3", progress=False)
    assert str(e.value).startswith("your model's forward (Refusing) raised IndexError: tuple index out of range;")
