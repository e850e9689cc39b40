"""benchmarks/ascent.py --mlps: the default's and the previous default's shares of a 50 times longer ascent."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "ascent.py"


def test_one_mlp_and_batch_prints_every_share_and_the_tally(capsys) -> None:
    spec = importlib.util.spec_from_file_location("ascent_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shares = module.mlps(["64-8-6-10"], [0], 1)
    out = capsys.readouterr().out
    assert all(len(by[name]) == 2 for by in shares.values() for name in ("default", "previous"))
    assert all(0 < s <= 1.5 for by in shares.values() for values in by.values() for s in values)
    assert "gradients per batch and radius: the default 92 (8 ascents of 10 iterations" in out
    assert "the previous 42, the long ascent 4623" in out
    assert out.count("below 0.99 on") == 4  # per norm, the default and the previous one
