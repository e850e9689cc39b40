"""The Python calls' signatures, docstrings and messages, from the options classes."""

import inspect
from dataclasses import dataclass

import pytest

from landscape.core.calls import UnexpectedKeywordError, analysis_function, field_docs, python_message
from landscape.errors import LandscapeError


@dataclass(frozen=True)
class ToyOptions:
    """Options of a toy.

    Attributes:
        data: dataset spec.
        batch_size: images per batch, a long description that goes on
            over two lines.
        exact: stop at once.
    """

    CLI_FLAGS = {"--fast": "exact=True"}

    data: str | None = None
    batch_size: int = 128
    exact: bool = False

    def __post_init__(self):
        if self.batch_size < 1:
            raise LandscapeError(f"--batch-size must be positive, got {self.batch_size}; or use --fast or --other")


@analysis_function(ToyOptions)
def toy(model, data=None, *, out=None, force=False, **fields):
    """Run the toy.

    Args:
        model: the model.
        data: the data.
        out: the file.
        force: replace it.
        **fields: the options.

    Returns:
        The options.
    """
    if force and out is None:
        raise LandscapeError("--force needs --out; e.g. --batch-size 64 --out x.h5")
    return ToyOptions(**fields)


def test_the_signature_and_docstring_come_from_the_options_class():
    params = inspect.signature(toy).parameters
    assert list(params) == ["model", "data", "out", "force", "batch_size", "exact"]
    assert params["batch_size"].default == 128 and params["batch_size"].annotation is int
    assert (
        "    batch_size: images per batch, a long description that goes on over two lines. Default: ``128``."
        in toy.__doc__
    )
    assert (
        "**fields" not in toy.__doc__
        and "    data: the data." in toy.__doc__
        and "data: dataset spec" not in toy.__doc__
    )
    assert field_docs(ToyOptions)["exact"] == "stop at once."
    assert toy(None, batch_size=3).batch_size == 3


def test_unknown_keywords_name_the_nearest():
    with pytest.raises(
        UnexpectedKeywordError,
        match=r"^landscape.toy\(\) got an unexpected keyword argument 'batchsize'; did you mean batch_size\?$",
    ):
        toy(None, batchsize=3)
    with pytest.raises(TypeError, match=r"'zzz'; help\(landscape.toy\) lists its options$"):
        toy(None, zzz=1)


def test_errors_name_the_python_keywords():
    with pytest.raises(LandscapeError) as e:
        toy(None, batch_size=0)
    assert str(e.value) == "batch_size= must be positive, got 0; or use exact=True or --other"
    with pytest.raises(LandscapeError) as e:
        toy(None, force=True)
    assert str(e.value) == "force=True needs out=; e.g. batch_size=64 out= x.h5"
    sig = inspect.signature(toy)
    assert python_message("bad grid --batch-size '1:0'", sig) == "bad grid batch_size='1:0'"
    assert python_message("--batch-sizes and x--force stay", sig) == "--batch-sizes and x--force stay"


def test_a_python_call_is_recorded_without_memory_addresses():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from landscape.core.front import python_call
    from landscape.data.given import GivenData

    loader = DataLoader(TensorDataset(torch.zeros(5, 1), torch.zeros(5)), batch_size=2)

    def pick(b):
        return b

    text = python_call(
        "landscape.surface",
        torch.nn.Linear(1, 1),
        data=GivenData(loader),
        batch=pick,
        x=(-1, 1, 3),
        y=[0.0, 1.0],
        other=object(),
        t=torch.zeros(2, 3),
    )
    assert text == (
        "landscape.surface(<Linear>, data=<DataLoader of 3 batches>, batch=<function "
        "test_a_python_call_is_recorded_without_memory_addresses.<locals>.pick>, x=(-1, 1, 3), y=[0.0, 1.0], "
        "other=<object>, t=<Tensor (2, 3)>)"
    )
