"""The README's promises: its test command is what CI runs, and every documented command exists."""

import re
from pathlib import Path

from landscape.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _setup_commands() -> list[str]:
    section = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_exactly_two_setup_commands():
    assert len(_setup_commands()) == 2


def test_ci_runs_the_readme_test_command():
    test_command = _setup_commands()[1].strip()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_every_documented_subcommand_is_registered():
    documented = set(re.findall(r"^### `landscape (\w+)", README, flags=re.M))
    assert documented <= set(COMMANDS), documented - set(COMMANDS)
    assert set(COMMANDS) <= documented, set(COMMANDS) - documented
