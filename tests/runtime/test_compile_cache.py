"""The compile cache folder, the compile records and the pay-back rule of --compile auto."""

import json
import os

import pytest

from landscape.runtime import compile_cache as cc


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LANDSCAPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_pay_back_rule_with_given_numbers():
    # compile 30 s, compiled 0.5 s/point, eager 1.0 s/point: saves 0.5 s a point, so it pays after 60 points
    assert not cc.pays_back(30.0, 0.5, 1.0, 50)
    assert not cc.pays_back(30.0, 0.5, 1.0, 60)  # a tie is not a gain
    assert cc.pays_back(30.0, 0.5, 1.0, 61)
    assert not cc.pays_back(0.0, 1.0, 1.0, 10**6)  # no faster: never
    assert not cc.pays_back(1.0, 0.1, 1.0, 0)


def test_estimates_from_defaults_and_records():
    assert cc.estimate(None, False) == {
        "compile_s": cc.DEFAULT_COMPILE_SECONDS,
        "compiled_ratio": cc.DEFAULT_COMPILED_RATIO,
        "source": "defaults",
    }
    assert cc.estimate(None, True)["compile_s"] == cc.DEFAULT_LOAD_SECONDS
    built = cc.CompileRecord(compile_s=40.0, load_s=0.03, compiled_ratio=0.5, eager_point_s=0.6, n_builds=1)
    est = cc.estimate(built, False)  # the package is gone: build again, as long as the last build took
    assert est == {"compile_s": 40.0, "compiled_ratio": pytest.approx(0.5), "source": "record"}
    assert cc.estimate(built, True) == {"compile_s": 0.03, "compiled_ratio": pytest.approx(0.5), "source": "package"}
    stopped = cc.CompileRecord(stopped_s=45.0)  # stopped at a 45 s deadline: tried again only with twice that
    assert cc.estimate(stopped, False)["compile_s"] == 90.0
    assert cc.estimate(stopped, False)["compiled_ratio"] == cc.DEFAULT_COMPILED_RATIO
    failed = cc.CompileRecord(compile_s=5.0, failed=True)
    est = cc.estimate(failed, True)
    assert est["source"] == "record-failed"
    assert not cc.pays_back(est["compile_s"], est["compiled_ratio"], 1.0, 10**6)


def test_cache_folder_env_override_and_xdg(monkeypatch, tmp_path):
    assert cc.cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("LANDSCAPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cc.cache_dir() == tmp_path / "xdg" / "landscape"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cc.cache_dir() == tmp_path / "home" / ".cache" / "landscape"


def test_records_round_trip_and_are_written_and_read_safely(cache, tmp_path):
    key = cc.record_key(model="m", shapes=[[1, 2]], threads=1)
    assert key == cc.record_key(threads=1, shapes=[[1, 2]], model="m") and len(key) == 32
    assert key != cc.record_key(model="m", shapes=[[1, 3]], threads=1)
    assert cc.read_record(key) is None
    rec = cc.CompileRecord(compile_s=12.5, eager_work_s=0.04, compiled_ratio=0.5, vmap_points=8, vmap_ratio=3.1)
    assert cc.write_record(key, rec) and cc.read_record(key) == rec
    path = cache / "compile-records" / f"{key}.json"
    assert (os.stat(cache).st_mode & 0o777) == 0o700
    # a planted symlink in place of the record is replaced, its target never written
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    path.unlink()
    path.symlink_to(victim)
    assert cc.read_record(key) is None  # nor read through
    assert cc.write_record(key, rec)
    assert victim.read_text() == "keep" and not path.is_symlink() and cc.read_record(key) == rec
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    # unreadable records count as none
    for text in (
        "{",
        json.dumps({"compile_s": 1}),
        json.dumps({**json.loads(path.read_text()), "eager_point_s": -1}),
    ):
        path.write_text(text)
        assert cc.read_record(key) is None


def test_an_unsafe_cache_folder_is_not_used(cache):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    folder, why = cc.usable_cache_dir()
    assert folder is None and "writable by other users" in why
    assert not cc.write_record("k" * 32, cc.CompileRecord(compile_s=1.0))
    os.chmod(cache, 0o700)
    assert cc.usable_cache_dir() == (cache, "")


def test_inductor_cache_goes_to_the_cache_folder_unless_the_user_chose_one(cache, monkeypatch, tmp_path):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert cc.use_inductor_cache() == str(tmp_path / "mine")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.path.abspath(default_cache_dir()))  # torch's own default
    assert cc.use_inductor_cache() == str(cache / "inductor") == os.environ["TORCHINDUCTOR_CACHE_DIR"]
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert cc.use_inductor_cache() == str(cache / "inductor") and (cache / "inductor").is_dir()


def test_the_cuda_home_probe_warning_of_a_cpu_only_run_is_silenced_and_other_records_pass(tmp_path):
    import subprocess
    import sys

    toolkit = tmp_path / "cuda"  # a CUDA toolkit folder without a CUDA runtime: the probe warns on import
    toolkit.mkdir()
    script = """
import sys
import landscape.runtime.compile_cache as c
c.use_inductor_cache()
import torch.utils.cpp_extension as e
e._find_cuda_home()
e.logger.warning("another record")
print("UNFILTERED", file=sys.stderr, flush=True)
e.logger.filters.clear()
e._find_cuda_home()
"""
    env = {**os.environ, "CUDA_HOME": str(toolkit), "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    quiet, loud = run.stderr.split("UNFILTERED")
    assert "No CUDA runtime is found" not in quiet and "another record" in quiet
    assert "No CUDA runtime is found" in loud  # what a user saw without the filter
