"""SurfaceOptions and FourierOptions: validation at construction, the attributes they record, the CLI's defaults."""

import dataclasses
import math
import subprocess
import sys

import click
import pytest
import torch
from helpers import one_line_error

from landscape.analyses.fourier.run import run_fourier
from landscape.analyses.surface.run import run_surface
from landscape.cli.fourier import command as fourier_command
from landscape.cli.fourier import parse_bands
from landscape.cli.surface import command as surface_command
from landscape.models import create_model
from landscape.models.checkpoint import save_checkpoint
from landscape.options import fourier as fourier_options
from landscape.options import surface as surface_options
from landscape.options.common import REGULARIZERS, SPLIT_CHOICES
from landscape.options.fourier import FourierOptions
from landscape.options.surface import SurfaceOptions
from landscape.store import result as store
from landscape.store.read import read_result


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Four resnet_mini checkpoints of different seeds (a centre, a target, snapshots)."""
    root = tmp_path_factory.mktemp("ckpts")
    paths = []
    for seed in range(4):
        torch.manual_seed(seed)
        model = create_model("resnet_mini", num_classes=10, in_chans=1)
        paths.append(
            save_checkpoint(
                root / f"m{seed}.pt",
                model,
                model_name="resnet_mini",
                model_kwargs=model.model_kwargs,
                num_classes=10,
                dataset="digits",
            )
        )
    return paths


# ------------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"x": "0:1:0"}, "bad grid --x"),
        ({"y": "1:0:3"}, "bad grid --y"),
        ({"x": "0:nan:3"}, "bad grid --x"),
        ({"norm": "spectral"}, "unknown normalisation 'spectral'"),
        ({"bn": "train"}, "unknown BatchNorm mode"),
        ({"batch_points": 0}, "--batch-points"),
        ({"batch_points": "many"}, "--batch-points"),
        ({"batch_points": True}, "--batch-points"),
        ({"compile": "sometimes"}, "--compile must be one of auto, on, off"),
        ({"compile": 1}, "--compile must be one of"),
        ({"samples": 0}, "--samples"),
        ({"batch_size": 2.5}, "--batch-size"),
        ({"split": "dev"}, "unknown split"),
        ({"regularizer": "l1"}, "unknown regulariser"),
        ({"reg_coef": math.nan}, "--reg-coef"),
        ({"reg_coef": -1.0}, "--reg-coef"),
        ({"target": "a.pt", "trajectory": ("b.pt",)}, "--target or --trajectory"),
        ({"y": None, "trajectory": ("a.pt",)}, "at least 2 --trajectory snapshots"),
        ({"y": "-1:1:3", "trajectory": ("a.pt", "b.pt")}, "at least 3 --trajectory snapshots"),
        ({"ignore_1d": "yes"}, "ignore_1d"),
        ({"store_directions": "quarter"}, "--store-directions"),
        ({"hvp": "double"}, "--hvp"),
        ({"hvp": "finite-difference"}, "use it with --directions hessian"),
        ({"hvp": "jvp", "directions": "hessian", "eigenvectors": "h.h5"}, "no --eigenvectors"),
        ({"operator": "ggn"}, "add --directions hessian"),
        ({"operator": "fisher", "directions": "hessian"}, "--operator"),
        ({"operator": "kfac", "directions": "hessian", "hvp": "jvp"}, "drop --hvp"),
    ],
)
def test_invalid_surface_options_are_one_line_errors(kwargs, match):
    one_line_error(SurfaceOptions, match=match, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"noise_strength": math.nan}, "--noise-strength"),
        ({"noise_strength": 0.0}, "--noise-strength"),
        ({"noise_width": math.inf}, "--noise-width"),
        ({"bands": (0.5, 1.5)}, "noise band centre"),
        ({"bands": (math.nan,)}, "noise band centre"),
        ({"bands": ()}, "no noise bands"),
        ({"profile": "spiral"}, "unknown profile"),
        ({"frequency_axis": "log"}, "unknown frequency axis"),
        ({"samples": -3}, "--samples"),
        ({"seed": 1.5}, "--seed"),
        ({"maps": 1}, "maps"),
        ({"first_samples": "yes"}, "first_samples"),
        ({"noise_construction": "disk"}, "unknown noise construction 'disk'"),
        ({"noise_eps": 0.0}, "--noise-eps"),
        ({"noise_eps": math.nan}, "--noise-eps"),
        ({"noise_eps": -0.1}, "--noise-eps"),
    ],
)
def test_invalid_fourier_options_are_one_line_errors(kwargs, match):
    one_line_error(FourierOptions, match=match, **kwargs)


def test_direction_storage_is_not_part_of_the_identity_and_hvp_is_recorded_only_when_chosen():
    assert SurfaceOptions(store_directions="full").attrs() == SurfaceOptions().attrs()
    assert "hvp" not in SurfaceOptions(directions="hessian").attrs()  # files made before --hvp still resume
    assert SurfaceOptions(directions="hessian", hvp="finite-difference").attrs()["hvp"] == "finite-difference"
    assert "operator" not in SurfaceOptions(directions="hessian").attrs()  # files made before --operator resume
    assert SurfaceOptions(directions="hessian", operator="ggn").attrs()["operator"] == "ggn"


def test_options_are_normalised_and_frozen():
    o = SurfaceOptions(
        batch_points="4", y=None, trajectory=["a.pt", "b.pt"], zero_patterns=("*a*,*b*", "*c*"), reg_coef=1
    )
    assert o.batch_points == 4 and o.trajectory == ("a.pt", "b.pt") and o.zero_patterns == ("*a*", "*b*", "*c*")
    assert isinstance(o.reg_coef, float)
    assert SurfaceOptions(zero_patterns=()).patterns == ()
    assert SurfaceOptions().patterns == surface_options.DEFAULT_ZERO_PATTERNS
    f = FourierOptions(bands=[0, 1], noise_width=1, taps=["stem=stem"])
    assert f.bands == (0.0, 1.0) and f.noise_width == 1.0 and f.taps == ("stem=stem",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.norm = "none"
    assert hash(SurfaceOptions()) == hash(SurfaceOptions())


def test_cli_rejects_invalid_options_before_loading_anything(tmp_path):
    from click.testing import CliRunner

    from landscape.cli import cli

    missing = str(tmp_path / "missing.pt")  # never read: the options fail first
    cases = [
        (["surface", "--x", "0:1:0"], "bad grid --x"),
        (["surface", "--batch-points", "0"], "--batch-points"),
        (["surface", "--batch-points", "100000000"], "more than the 441 points"),
        (["surface", "--x", "0:1:100000000"], "100000000 x 21 grid has 2,100,000,000 points"),
        (["surface", "--x", "0:1:100000000", "--y", "none"], "100000000 x 1 grid has 100,000,000 points"),
        (["surface", "--trajectory", "a.pt", "--trajectory", "b.pt"], "or --y none for a line"),
        (["surface", "--y", "0:1:100000"], "21 x 100000 grid"),
        (["surface", "--reg-coef", "nan"], "--reg-coef"),
        (["fourier", "--noise-strength", "nan"], "--noise-strength"),
        (["fourier", "--bands", "0.5,1.5"], "noise band centre"),
        (["fourier", "--bands", "0.5,high"], "--bands"),
        (["fourier", "--noise-eps", "inf"], "--noise-eps"),
    ]
    for args, match in cases:
        out = tmp_path / "r.h5"
        r = CliRunner().invoke(cli, [*args, "--ckpt", missing, "--out", str(out), "--device", "cpu"])
        assert r.exit_code == 2, (args, r.output)
        assert r.output.startswith("Error: ") and match in r.output and "missing.pt" not in r.output, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1 and not out.exists()


def test_run_refuses_anything_but_its_options_class(ckpts, tmp_path):
    one_line_error(run_surface, ckpts[0], {"x": "-1:1:3"}, out=tmp_path / "s.h5", match="SurfaceOptions")
    one_line_error(run_fourier, ckpts[0], SurfaceOptions(), out=tmp_path / "f.h5", match="FourierOptions")
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------ recorded attrs
def recorded(options, result):
    """The options' attrs that the file does not hold, or holds with another value (as written, then read back)."""
    as_read = {k: store.decode(store.encode(v)) for k, v in options.attrs().items()}
    return {k: (v, result.attrs.get(k, "<absent>")) for k, v in as_read.items() if result.attrs.get(k, KeyError) != v}


def test_surface_attrs_are_what_the_file_records(ckpts, tmp_path):
    small = dict(samples=24, batch_size=12, x="-1:1:2")
    default = SurfaceOptions()
    # the defaults, made small: attrs() differ from the defaults' only in what was made small
    o = dataclasses.replace(default, **small)
    changed = {k for k in default.attrs() if default.attrs()[k] != o.attrs()[k]}
    assert changed == {"batch_size", "xgrid"}
    cases = [
        dataclasses.replace(o, y="-1:1:2"),
        SurfaceOptions(
            **small,
            y="-0.5:0.5:2",
            norm="dim0",
            data="digits",
            regularizer="norm-sum",
            seed=3,
            zero_patterns=("layer1*",),
            ignore_1d=False,
        ),
        SurfaceOptions(**small, y=None, target=str(ckpts[1])),
        SurfaceOptions(**small, y="-1:1:2", target=str(ckpts[1]), regularizer="l2", reg_coef=0.1),
        SurfaceOptions(**small, y="none", trajectory=(str(ckpts[1]), str(ckpts[2]))),
        SurfaceOptions(**small, y="-1:1:2", trajectory=tuple(str(p) for p in ckpts[1:])),
    ]
    for k, options in enumerate(cases):
        res = run_surface(ckpts[0], options, out=tmp_path / f"s{k}.h5", device="cpu", progress=False)
        assert recorded(options, res) == {}, options
    # and the same options resume the file, other options are refused
    again = run_surface(ckpts[0], cases[0], out=tmp_path / "s0.h5", device="cpu", progress=False)
    assert again.attrs["created"] == read_result(tmp_path / "s0.h5").attrs["created"]
    one_line_error(
        run_surface,
        ckpts[0],
        dataclasses.replace(cases[0], norm="layer"),
        out=tmp_path / "s0.h5",
        device="cpu",
        progress=False,
        match="--force",
    )


def test_fourier_attrs_are_what_the_file_records(ckpts, tmp_path):
    cases = [
        FourierOptions(),
        FourierOptions(
            samples=8,
            batch_size=4,
            noise_bands=True,
            bands=(0.25, 0.75),
            noise_width=0.2,
            noise_strength=1.0,
            maps=True,
            profile="radial",
            data="digits",
            seed=2,
        ),
        FourierOptions(
            samples=8,
            batch_size=4,
            first_samples=True,
            noise_bands=True,
            bands=(0.25, 0.75),
            noise_construction="official",
            noise_eps=0.5,
        ),
    ]
    for k, options in enumerate(cases):
        res = run_fourier(ckpts[0], options, out=tmp_path / f"f{k}.h5", device="cpu", progress=False)
        assert recorded(options, res) == {}, options
        assert k == 0 or res["noise/frequencies"].tolist() == [0.25, 0.75]
    official = res.attrs
    assert official["noise_construction"] == "official" and official["noise_eps"] == 0.5
    assert official["noise_strength"] is None and official["first_samples"] is True
    # the defaults write exactly the attributes they wrote before these options existed: old files resume
    old = {"split", "seed", "profile", "frequency_axis", "maps", "batch_size", "noise_bands", "noise_width"}
    old |= {"noise_strength", "taps"}
    for options in (FourierOptions(), FourierOptions(noise_bands=True), FourierOptions(noise_eps=0.1)):
        assert set(options.attrs()) == old
    annulus = FourierOptions(noise_bands=True).attrs()
    assert annulus["noise_strength"] == 0.5 and annulus == FourierOptions(noise_bands=True, noise_eps=0.1).attrs()
    # an official file is not taken for an annulus one (nor the reverse)
    one_line_error(
        run_fourier,
        ckpts[0],
        dataclasses.replace(cases[2], noise_construction="annulus"),
        out=tmp_path / "f2.h5",
        device="cpu",
        progress=False,
        match="--force",
    )


# ------------------------------------------------------------------------------------------ CLI
def cli_defaults(command):
    """The value the command receives for each option not given (its default, converted by click)."""
    ctx = click.Context(command)
    return {p.name: p.process_value(ctx, p.get_default(ctx)) for p in command.params if isinstance(p, click.Option)}


def test_surface_cli_defaults_and_choices_are_the_options():
    got = cli_defaults(surface_command)
    want = SurfaceOptions.defaults()
    as_fields = {"trajectory": tuple(got["trajectory"])}  # every other option is named and valued as its field
    for name in want:
        assert as_fields.get(name, got.get(name, "<no option>")) == want[name], name
    params = {p.name: p for p in surface_command.params}
    assert tuple(params["norm"].type.choices) == surface_options.NORMS
    assert tuple(params["bn"].type.choices) == surface_options.BN_MODES
    assert tuple(params["regularizer"].type.choices) == REGULARIZERS
    assert tuple(params["split"].type.choices) == SPLIT_CHOICES
    assert tuple(params["store_directions"].type.choices) == surface_options.DIRECTION_STORAGE
    assert tuple(params["hvp"].type.choices) == surface_options.HVP_MODES


def test_surface_cli_compile_is_a_choice_and_alone_means_on():
    params = {p.name: p for p in surface_command.params}
    assert tuple(params["compile"].type.choices) == surface_options.COMPILE_MODES
    assert SurfaceOptions.defaults()["compile"] == "auto" == cli_defaults(surface_command)["compile"]
    for argv, want in (
        (["--compile"], "on"),
        (["--compile", "off"], "off"),
        (["--compile", "auto"], "auto"),
        ([], "auto"),
    ):
        ctx = surface_command.make_context("surface", [*argv, "--x", "-1:1:3"], resilient_parsing=True)
        assert ctx.params["compile"] == want, argv
    with pytest.raises(click.BadParameter):
        surface_command.make_context("surface", ["--compile", "sometimes"])


@pytest.mark.parametrize(
    "value, mode, attr",
    [("auto", "auto", "auto"), ("on", "on", True), (True, "on", True), (" OFF ", "off", False), (False, "off", False)],
)
def test_surface_compile_option_values_and_the_attribute_they_record(value, mode, attr):
    options = SurfaceOptions(compile=value)
    assert options.compile == mode and options.attrs()["compile"] == attr


def test_fourier_cli_defaults_and_choices_are_the_options():
    got = cli_defaults(fourier_command)
    want = FourierOptions.defaults()
    as_fields = {"bands": parse_bands(got["bands"]), "taps": tuple(got["taps"]) or None}
    for name in want:
        assert as_fields.get(name, got.get(name, "<no option>")) == want[name], name
    params = {p.name: p for p in fourier_command.params}
    assert tuple(params["profile"].type.choices) == fourier_options.PROFILES
    assert tuple(params["frequency_axis"].type.choices) == fourier_options.FREQUENCY_AXES


def test_library_constants_are_defined_once():
    from landscape.analyses.fourier import features, noise
    from landscape.analyses.surface import directions
    from landscape.analyses.surface import run as surface

    assert directions.NORMS is surface_options.NORMS and surface.BN_MODES is surface_options.BN_MODES
    assert directions.DEFAULT_ZERO_PATTERNS is surface_options.DEFAULT_ZERO_PATTERNS
    assert surface.parse_grid is surface_options.parse_grid
    assert features.PROFILES is fourier_options.PROFILES and features.FREQUENCY_AXES is fourier_options.FREQUENCY_AXES
    assert (noise.BANDS, noise.WIDTH, noise.STRENGTH) == (
        fourier_options.BANDS,
        fourier_options.WIDTH,
        fourier_options.STRENGTH,
    )
    assert noise.BANDS is fourier_options.BANDS


def test_options_modules_import_no_torch():
    code = (
        "import sys\nimport landscape.options.surface, landscape.options.fourier\n"
        "o = landscape.options.surface.SurfaceOptions(y='-1:1:3'); o.attrs()\n"
        "landscape.options.fourier.FourierOptions(noise_bands=True).attrs()\n"
        "assert 'torch' not in sys.modules, 'the options imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
