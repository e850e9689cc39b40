"""HessianOptions / SpectrumOptions: validation before any file, the recorded attributes, the CLI's defaults."""

import dataclasses
import importlib
import math

import click
import pytest
from click.testing import CliRunner
from helpers import tiny_resnet_checkpoint

from landscape.analyses.hessian.run import run_hessian, run_spectrum
from landscape.cli import cli
from landscape.cli.hessian import command as hessian_command
from landscape.cli.options import _MODEL_OPTIONS
from landscape.cli.spectrum import command as spectrum_command
from landscape.errors import LandscapeError
from landscape.options import common, hessian
from landscape.options.hessian import HessianOptions, SpectrumOptions
from landscape.store import result as store
from tests.helpers import one_line_error


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_resnet_checkpoint(tmp_path_factory.mktemp("ckpt"))[0]


BAD_HESSIAN = [
    ({"tol": math.nan}, "--tol"),
    ({"tol": 0.0}, "--tol"),
    ({"tol": math.inf}, "--tol"),
    ({"probes": -1}, "--probes"),
    ({"steps": 0}, "--steps"),
    ({"sigma": -0.1}, "--sigma"),
    ({"sigma": math.nan}, "--sigma"),
    ({"which": "XX"}, "--which"),
    ({"top_k": -1}, "--top-k"),
    ({"hvp": "fast"}, "--hvp"),
    ({"dtype": "float16"}, "--dtype"),
    ({"trace_method": "exact"}, "--trace-method"),
    ({"trace_samples": 5}, "--trace-samples"),
    ({"trace_method": "hutchinson", "trace_samples": 1}, "hutchinson"),
    ({"samples": 0}, "--samples"),
    ({"batch_size": 2.5}, "--batch-size"),
    ({"ncv": 0}, "--ncv"),
    ({"maxiter": -3}, "--maxiter"),
    ({"regularizer": "l1"}, "regulariser"),
    ({"reg_coef": math.nan}, "--reg-coef"),
    ({"split": "dev"}, "split"),
    ({"grid_points": 0}, "--grid-points"),
    ({"params": " , "}, "--params"),
    ({"top_k": 0}, "nothing to compute"),
    ({"density": "yes"}, "--density"),
    ({"operator": "fisher"}, "--operator"),
    ({"operator": "ggn", "hvp": "graph"}, "the ggn operator takes no second derivative"),
    ({"operator": "kfac", "hvp": "jvp"}, "drop --hvp"),
]
BAD_SPECTRUM = [
    ({"fraction": 0.0}, "--fraction"),
    ({"fraction": 1.5}, "--fraction"),
    ({"fraction": math.nan}, "--fraction"),
    ({"fraction": None}, "--samples"),
    ({"top_k": 0}, "--top-k"),
    ({"which": "XX"}, "--which"),
    ({"solver": "arpack"}, "--solver"),
    ({"tol": -1e-3}, "--tol"),
    ({"batch_size": 0}, "--batch-size"),
    ({"group": 0}, "--group"),
    ({"group": "many"}, "--group"),
    ({"group": 2.5}, "--group"),
    ({"group": True}, "--group"),
    ({"operator": "residual", "solver": "pyhessian"}, "--solver pyhessian computes Hessian eigenvalues only"),
    ({"operator": "ggn", "group": 4}, "--operator ggn runs one batch at a time"),
]


@pytest.mark.parametrize(("kwargs", "match"), BAD_HESSIAN)
def test_an_invalid_hessian_option_is_a_one_line_error(kwargs, match):
    assert match in one_line_error(HessianOptions, **kwargs)


@pytest.mark.parametrize(("kwargs", "match"), BAD_SPECTRUM)
def test_an_invalid_spectrum_option_is_a_one_line_error(kwargs, match):
    assert match in one_line_error(SpectrumOptions, **kwargs)


def test_valid_edge_values_pass():
    HessianOptions(top_k=0, trace=True, trace_method="hutchinson", trace_samples=2, samples=None)
    HessianOptions(top_k=0, density=True, sigma=1e-3)
    SpectrumOptions(fraction=1.0)
    SpectrumOptions(fraction=None, samples=3)
    assert SpectrumOptions(group="8").group == 8 and SpectrumOptions(group=" auto ").group == "auto"


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("hessian", ["--tol", "nan"]),
        ("hessian", ["--probes", "-1"]),
        ("hessian", ["--top-k", "-2"]),
        ("spectrum", ["--fraction", "0"]),
        ("spectrum", ["--tol", "inf"]),
    ],
)
def test_the_cli_refuses_invalid_options_before_loading_or_writing_anything(name, args, tmp_path):
    out = tmp_path / "r.h5"
    # a missing checkpoint: were the options not checked first, the error would be about the checkpoint
    result = CliRunner().invoke(cli, [name, "--ckpt", str(tmp_path / "missing.pt"), *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    message = result.output.strip().splitlines()
    assert len(message) == 1 and message[0].startswith("Error: --") and "missing" not in message[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_run_refuses_options_of_the_wrong_type_before_any_file(ckpt, tmp_path):
    one_line_error(run_hessian, ckpt, {"top_k": 1}, out=tmp_path / "h.h5", match="HessianOptions")
    one_line_error(run_spectrum, ckpt, HessianOptions(), out=tmp_path / "s.h5", match="SpectrumOptions")
    assert list(tmp_path.iterdir()) == []


def test_the_defaults_record_todays_attributes():
    assert HessianOptions().attrs() == {
        "batch_size": 128,
        "top_k": 5,
        "which": "LA",
        "tol": 1e-4,
        "ncv": None,
        "maxiter": None,
        "eigenvectors": False,
        "density": False,
        "probes": 4,
        "steps": 64,
        "sigma": None,
        "grid_points": 1000,
        "trace": False,
        "trace_samples": 99,
        "trace_method": "hutch++",
        "params": [],
        "criterion": "cross_entropy",
        "regularizer": '{"kind": "none", "coef": 0.0}',
        "hvp": "auto",
        "dtype": None,  # the model's own: the front half records it (tests/core/test_front.py)
        "bn_mode": "eval",
        "allow_stochastic": False,
    }
    assert SpectrumOptions().attrs() == {
        "batch_size": 16,
        "fraction": 0.1,
        "top_k": 5,
        "which": "LM",
        "solver": "lanczos",
        "tol": 1e-3,
        "ncv": None,
        "maxiter": None,
        "criterion": "cross_entropy",
        "regularizer": '{"kind": "none", "coef": 0.0}',
        "hvp": "auto",
        "dtype": None,  # the model's own: the front half records it (tests/core/test_front.py)
        "bn_mode": "eval",
        "allow_stochastic": False,
    }
    assert HessianOptions(params="fc.*, conv1.*", regularizer="l2").attrs()["params"] == ["fc.*", "conv1.*"]
    assert HessianOptions(regularizer="norm-sum").attrs()["regularizer"] == '{"kind": "norm-sum", "coef": 0.05}'
    assert HessianOptions(operator="kfac").attrs()["operator"] == "kfac"  # recorded when not the Hessian
    assert SpectrumOptions(operator="residual", hvp="graph").attrs()["operator"] == "residual"


def test_the_file_records_exactly_the_options_attrs_and_progress_shows_when_asked(ckpt, tmp_path, capsys):
    opts = HessianOptions(samples=6, batch_size=3, top_k=1, tol=1e-2, params="fc", hvp="jvp", regularizer="l2")
    res = run_hessian(ckpt, opts, out=tmp_path / "h.h5", device="cpu", progress=True)
    assert "lanczos" in capsys.readouterr().err
    for name, value in opts.attrs().items():  # dtype None: the model's own, recorded as it is (float32 here)
        value = "float32" if name == "dtype" and value is None else value
        assert res.attrs[name] == store.decode(store.encode(value)), name
    assert res.attrs["seed"] == opts.seed and res.attrs["split"] == opts.split and res.attrs["n_samples"] == 6
    sopts = SpectrumOptions(samples=4, batch_size=2, top_k=1, tol=1e-2)
    sres = run_spectrum(ckpt, sopts, out=tmp_path / "s.h5", device="cpu", progress=True)
    assert "spectrum" in capsys.readouterr().err
    for name, value in sopts.attrs().items():
        value = "float32" if name == "dtype" and value is None else value
        assert sres.attrs[name] == store.decode(store.encode(value)), name
    assert sres.attrs["group"] >= 1 and sres.attrs["group_option"] == "auto"  # how it ran, beside what it computes
    assert sres.attrs["group_choice"]["group"] == sres.attrs["group"] and "hvp_choice" in sres.attrs
    assert res.attrs["hvp_choice"]["mode"] == "jvp" and res.attrs["hvp_choice"]["ways"] == {"jvp": 2}
    run_spectrum(ckpt, sopts, out=tmp_path / "s2.h5", device="cpu", progress=False)
    assert capsys.readouterr().err == ""


RUN_TIME = {"out", "device", "force", "quiet"}
MODEL_SOURCE = set(_MODEL_OPTIONS)  # the model-source options, declared once in landscape.cli.options


@pytest.mark.parametrize(
    ("command", "cls", "choices"),
    [
        (
            hessian_command,
            HessianOptions,
            {
                "which": hessian.WHICH,
                "hvp": hessian.HVP_MODES,
                "operator": hessian.OPERATORS,
                "dtype": common.DTYPES,
                "trace_method": hessian.TRACE_METHODS,
                "split": common.SPLIT_CHOICES,
                "regularizer": common.REGULARIZERS,
            },
        ),
        (
            spectrum_command,
            SpectrumOptions,
            {
                "which": hessian.WHICH,
                "hvp": hessian.HVP_MODES,
                "operator": hessian.OPERATORS,
                "dtype": common.DTYPES,
                "solver": hessian.SOLVERS,
                "split": common.SPLIT_CHOICES,
                "regularizer": common.REGULARIZERS,
            },
        ),
    ],
)
def test_cli_defaults_and_choices_are_the_dataclass_defaults_and_the_library_constants(command, cls, choices):
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    params = {p.name: p for p in command.params if p.name not in RUN_TIME | MODEL_SOURCE}
    assert set(params) <= set(fields)  # the command builds cls(**options) from exactly these
    assert set(fields) - set(params) <= {"grid_points", "criterion"}  # left at their defaults by the CLI
    received = command.make_context(command.name, [], resilient_parsing=True).params  # what the command gets
    for name in params:
        assert received[name] == fields[name], name
    for name, values in choices.items():
        assert isinstance(params[name].type, click.Choice) and tuple(params[name].type.choices) == values, name
    assert {p.name for p in command.params} >= RUN_TIME


def test_the_library_modules_use_the_options_constants():
    lanczos, operator, spectrum, trace = (
        importlib.import_module(f"landscape.analyses.hessian.{name}")
        for name in ("lanczos", "operator", "spectrum", "trace")
    )
    assert lanczos.WHICH is hessian.WHICH and operator.HVP_MODES is hessian.HVP_MODES
    assert trace.TRACE_METHODS is hessian.TRACE_METHODS and spectrum.SOLVERS is hessian.SOLVERS
    with pytest.raises(LandscapeError, match="which"):
        HessianOptions(which="la")
