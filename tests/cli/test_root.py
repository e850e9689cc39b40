import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from landscape.cli import COMMANDS, cli

ENTRY = str(Path(sys.executable).parent / "landscape")


def test_help_lists_every_command():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output


def test_help_does_not_import_torch():
    code = (
        "import sys\nfrom landscape.cli import cli\n"
        "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'landscape --help imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_every_command_module_imports_and_has_help():
    for name in COMMANDS:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage" in result.output


def test_entry_point_user_error_is_one_line_without_traceback(tmp_path):
    proc = subprocess.run([ENTRY, "info", str(tmp_path / "missing.h5")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_option_value_is_one_line_naming_the_option_and_the_help():
    for args, option in [
        (["spectrum", "--top-k", "abc"], "'--top-k'"),
        (["hessian", "--which", "XX"], "'--which'"),
        (["surface", "--no-such-option"], "'--no-such-option'"),
    ]:
        result = CliRunner().invoke(cli, args, prog_name="landscape")
        assert result.exit_code == 2, args
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and option in lines[0], result.output
        assert f"'landscape {args[0]} --help'" in lines[0] and "Usage" not in result.output


def test_models_counts_for_the_default_data_as_the_docs_table():
    result = CliRunner().invoke(cli, ["models", "--pattern", "resnet_mini"])
    assert result.exit_code == 0, result.output
    assert "1 input channel, 10 classes" in result.output and "223,034" in result.output
    three = CliRunner().invoke(cli, ["models", "--pattern", "resnet_mini", "--in-chans", "3"])
    assert "3 input channels" in three.output and "223,034" not in three.output
