"""benchmarks/weight_starts.py: every start's share of the best objective, per pair and over the pairs."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "weight_starts.py"


def test_one_pair_prints_every_start_and_the_tally(capsys) -> None:
    spec = importlib.util.spec_from_file_location("weight_starts_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--widths", "64-8-6-10", "--pairs", "0-1", "--epochs", "1"])
    out = capsys.readouterr().out.splitlines()
    row = next(line for line in out if line.startswith("64-8-6-10"))
    shares = [float(v) for v in re.findall(r"(\d\.\d{5}) \(\d+ sw\)", row)]
    assert len(shares) == 4 and max(shares) == 1.0 and all(0 < v <= 1.0 for v in shares)
    assert sum("of 1," in line for line in out) == 4  # each start's tally over the one pair
