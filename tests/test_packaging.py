"""The package as it is installed: its distribution's name and metadata, one version, its licence and type hints."""

import importlib.metadata
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import landscape
from landscape.cli import cli
from landscape.errors import DISTRIBUTION, install_extra

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the package itself needs no TOML reader
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def test_the_distribution_is_named_once():
    assert PROJECT["name"] == DISTRIBUTION != "landscape"  # `landscape` on the index is another project
    assert PROJECT["scripts"] == {"landscape": "landscape.cli:main"}
    assert install_extra("timm") == f"pip install '{DISTRIBUTION}[timm]'"
    assert "timm" in PROJECT["optional-dependencies"]


def test_every_extra_an_error_names_exists():
    """Each ``pip install 'DIST[EXTRA]'`` the package's code or pages write names an extra of pyproject.toml."""
    texts = [p.read_text() for p in (ROOT / "landscape").rglob("*.py")]
    texts += [p.read_text() for p in (ROOT / "docs").rglob("*.md")] + [(ROOT / "README.md").read_text()]
    named = {e for text in texts for e in re.findall(r"missing_extra\([^)]*?\"(\w+)\"\)", text, flags=re.S)}
    named |= {e for text in texts for e in re.findall(rf"{DISTRIBUTION}\[(\w+)\]", text)}
    assert named, "no extra named anywhere: the pattern no longer matches the code"
    assert named <= set(PROJECT["optional-dependencies"]), named - set(PROJECT["optional-dependencies"])
    old = [text for text in texts if re.search(r"landscape\[\w+\]", text)]
    assert not old, "an install hint names the distribution `landscape`, which is another project"


def test_the_version_is_defined_once_in_the_package():
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "landscape.version.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", landscape.__version__)


def test_the_installed_metadata_has_the_package_version():
    try:
        installed = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed here (pip install -e . installs it)")
    assert installed == landscape.__version__


def test_the_command_reports_the_package_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"landscape {landscape.__version__}"


def test_the_package_ships_its_type_hints_and_declares_its_licence():
    assert (Path(landscape.__file__).parent / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["landscape"]
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "the landscape authors" in licence


def test_the_citation_file_names_the_toolkit_and_the_two_papers():
    yaml = pytest.importorskip("yaml")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["type"] == "software"
    assert citation["license"] == PROJECT["license"]
    assert [a["name"] for a in citation["authors"]] == [a["name"] for a in PROJECT["authors"]]
    papers = {ref["title"]: ref for ref in citation["references"]}
    assert set(papers) == {"How Do Vision Transformers Work?", "Can Vision Transformers Perform Convolution?"}
    arxiv = {title: [i["value"] for i in ref["identifiers"]] for title, ref in papers.items()}
    assert arxiv["How Do Vision Transformers Work?"] == ["arXiv:2202.06709"]
    assert arxiv["Can Vision Transformers Perform Convolution?"] == ["arXiv:2111.01353"]
    assert [a["family-names"] for a in papers["Can Vision Transformers Perform Convolution?"]["authors"]] == [
        "Li",
        "Chen",
        "He",
        "Hsieh",
    ]


def test_an_editable_install_is_a_plain_path_that_type_checkers_follow(tmp_path):
    """``pip install -e .`` must give mypy and pyright the package: a .pth of one path, not setuptools' import hook.

    The editable wheel is built (as pip builds it) from a copy of the project, and its .pth read.
    """
    import shutil
    import subprocess
    import sys
    import zipfile

    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, copy / name)
    shutil.copytree(ROOT / "landscape", copy / "landscape", ignore=shutil.ignore_patterns("__pycache__"))
    build = "import setuptools.build_meta as b, sys; print(b.build_editable(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", build, str(tmp_path)], cwd=copy, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    with zipfile.ZipFile(tmp_path / done.stdout.strip().splitlines()[-1]) as wheel:
        pth = [n for n in wheel.namelist() if n.endswith(".pth")]
        assert len(pth) == 1 and not [n for n in wheel.namelist() if n.endswith("_finder.py")]
        lines = wheel.read(pth[0]).decode().split()
    assert lines == [str(copy)]  # the folder that holds landscape/ and its py.typed, nothing to import
    assert "typing_extensions" in " ".join(PROJECT["dependencies"])  # Unpack of the typed keywords on 3.10
