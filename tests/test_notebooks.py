"""The figure notebooks: each runs with QUICK = True from a clean kernel; committed without outputs; generated.

The notebooks share one temporary WORKDIR (``LANDSCAPE_NOTEBOOK_WORKDIR``) for the whole session, so the
checkpoints trained by the first notebook are reused by the others, as they would be for a user.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest
from helpers import execute_notebook

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb"))
#: the least number of figures each notebook must display
MIN_FIGURES = {
    "01_loss_landscapes.ipynb": 6,  # 3D + contour per model
    "02_hessian_spectra.ipynb": 6,  # one per model, one per stage, the data size sweep
    "03_fourier.ipynb": 4,  # Fig 2a per timm model, Fig 8, Fig 2b
    "04_feature_variance.ipynb": 3,
    "05_alternet.ipynb": 6,  # 3D per model, spectra, window sweep (negative share / accuracy, spectra)
    "06_paper_b_conv_to_attention.ipynb": 2,
    "07_findings.ipynb": 1,  # the spectra behind the Hessian rows (the findings table is markdown)
    "own_model.ipynb": 8,  # one figure per analysis from Python: surface to trajectory
}


def _generator():
    spec = importlib.util.spec_from_file_location("make_notebooks", NOTEBOOK_DIR / "make_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("notebooks")


def test_every_notebook_is_listed() -> None:
    assert NOTEBOOKS == sorted(MIN_FIGURES) == sorted(_generator().NOTEBOOKS)
    assert set(SLOW) <= set(NOTEBOOKS) and not set(SLOW) & set(RUN_ELSEWHERE)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_equals_generated(name: str) -> None:
    assert (NOTEBOOK_DIR / name).read_text() == _generator().render(name), (
        f"{name} is stale: run python notebooks/make_notebooks.py"
    )


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_has_no_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{name} has no code cells"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, f"{name}: cell {cell.id} has outputs"
    first = code[0]
    assert "parameters" in first.metadata.get("tags", [])
    assert "QUICK = True" in first.source and "WORKDIR" in first.source and "DATA" in first.source


#: run by tests/reproduce/test_demo.py on the quick demo folder that file's fixture computes (the notebook's
#: run_demo then resumes it: a second quick demo from nothing here would cost minutes and test nothing more)
RUN_ELSEWHERE = ("07_findings.ipynb",)
#: over 40 s each here: run with ``-m slow`` (the others, and 07 through the demo's tests, run by default)
SLOW = (
    "01_loss_landscapes.ipynb",
    "02_hessian_spectra.ipynb",
    "05_alternet.ipynb",
    "06_paper_b_conv_to_attention.ipynb",
)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NOTEBOOKS if n not in RUN_ELSEWHERE]
)
def test_notebook_runs_quick(name: str, workdir: Path) -> None:
    """Execute the notebook as committed (QUICK = True) in a fresh python3 kernel; any cell error fails."""
    images = execute_notebook(name, workdir)
    assert images >= MIN_FIGURES[name], f"{name} displayed {images} figures"
    assert (workdir / "quick" / "figures" / Path(name).stem).is_dir()
