import os
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
from helpers import one_line_error
from plot_results import FOREIGN, foreign_surface

from landscape.errors import LandscapeError
from landscape.store import result as store
from landscape.store.attrs import identity_of
from landscape.store.locks import lock_path
from landscape.store.read import describe, read_result
from landscape.store.result import open_result


def _attrs(**over):
    base = {"model": "m", "model_kwargs": {"a": 1}, "grid": [0.0, 1.0, 3], "device": "cpu", "command": "x"}
    base.update(over)
    return base


def _finished(path, kind="surface", complete=True, **over):
    f = open_result(path, kind, _attrs(**over))
    f.allocate("loss", (2, 3), "f8", fill=np.nan, axes=["y", "x"])
    f.allocate("done", (2, 3), bool, fill=False, axes=["y", "x"])
    f.write_at("loss", (0, 1), 4.5)
    f.mark_done("done", (0, 1))
    if complete:
        f.mark_complete()
    f.close()
    return path


def test_create_then_resume_same_options(tmp_path):
    path = _finished(tmp_path / "r.h5", complete=False)
    # device and command are provenance, not identity: a rerun on another device still resumes, and so does one on
    # other CPU kernels or another thread count (what the run computed on, landscape.runtime.machine)
    other = {"device": "cuda", "command": "y", "cpu_capability": "AVX2", "torch_threads": 2, "torch_version": "x"}
    with open_result(path, "surface", _attrs(**other)) as f:
        assert f.resumed and f.writable and not f.complete
        assert f.read("loss")[0, 1] == 4.5 and np.isnan(f.read("loss")[1, 1])
        assert f.read("done").sum() == 1
    assert not lock_path(path).exists()  # a clean close leaves no sidecar


def test_complete_file_reopens_read_only(tmp_path):
    path = _finished(tmp_path / "r.h5")
    with open_result(path, "surface", _attrs()) as f:
        assert f.resumed and f.complete and not f.writable
        one_line_error(f.write, "x", np.zeros(2), match="read-only")
        f.mark_complete()  # nothing to do on a complete file


def test_other_options_refused_without_force(tmp_path):
    path = _finished(tmp_path / "r.h5")
    one_line_error(open_result, path, "surface", _attrs(grid=[0.0, 2.0, 3]), match="differs in: grid.*--force")
    one_line_error(open_result, path, "hessian", _attrs(), match="--force")
    with open_result(path, "surface", _attrs(grid=[0.0, 2.0, 3]), force=True) as f:
        assert not f.resumed and f.attr("grid") == [0.0, 2.0, 3] and "loss" not in f


def test_a_file_without_finished_work_is_replaced_by_other_options(tmp_path):
    path = tmp_path / "r.h5"
    f = open_result(path, "hessian", _attrs(top_k=10**9))
    f.close()  # the run failed before any result (e.g. --top-k larger than the parameter count)
    with open_result(path, "hessian", _attrs(top_k=5)) as f:
        assert not f.resumed and f.attr("top_k") == 5
    unfinished = _finished(tmp_path / "u.h5", complete=False)  # one point done: mark_done recorded results
    one_line_error(open_result, unfinished, "surface", _attrs(grid=[0.0, 2.0, 3]), match="differs in: grid")


def test_non_hdf5_file_never_overwritten(tmp_path):
    path = tmp_path / "notes.h5"
    path.write_text("precious")
    one_line_error(open_result, path, "surface", _attrs(), match="not an HDF5 file")
    one_line_error(read_result, path, match="not an HDF5 file")
    assert path.read_text() == "precious"


def test_truncated_file_is_reported_as_damaged(tmp_path):
    path = _finished(tmp_path / "r.h5")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    msg = one_line_error(read_result, path, match="damaged")
    assert "being written" not in msg
    one_line_error(open_result, path, "surface", _attrs(), match="damaged.*--force")
    with open_result(path, "surface", _attrs(), force=True) as f:
        assert not f.resumed


def test_read_only_result_is_read_and_never_replaced(tmp_path):
    path = _finished(tmp_path / "r.h5")
    os.chmod(path, 0o444)
    try:
        assert read_result(path)["loss"][0, 1] == 4.5
        with open_result(path, "surface", _attrs()) as f:  # the same complete run: returned as it is
            assert f.complete
        one_line_error(open_result, path, "surface", _attrs(grid=[0.0, 2.0, 3]), force=True, match="read-only")
        assert read_result(path)["loss"][0, 1] == 4.5
        unfinished = _finished(tmp_path / "u.h5", complete=False)
        os.chmod(unfinished, 0o444)
        one_line_error(open_result, unfinished, "surface", _attrs(), match="read-only.*chmod")
    finally:
        os.chmod(path, 0o644)


def test_planted_symlinks_are_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = tmp_path / "r.h5"
    for name in ("r.h5.tmp", ".r.h5.tmp", ".r.h5.lock"):  # the old predictable temporary, and the lock sidecar
        (tmp_path / name).symlink_to(victim)
    with pytest.raises(LandscapeError, match="lock file .* is a symbolic link"):  # refused (O_NOFOLLOW)
        open_result(path, "surface", _attrs())
    (tmp_path / ".r.h5.lock").unlink()
    _finished(path)
    assert victim.read_text() == "precious"
    assert read_result(path)["loss"][0, 1] == 4.5
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]


def test_file_created_with_ordinary_permissions(tmp_path):
    path = _finished(tmp_path / "r.h5")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_read_roundtrip_and_describe(tmp_path):
    path = tmp_path / "r.h5"
    with open_result(path, "fourier", _attrs()) as f:
        f.write("delta", np.arange(6.0).reshape(2, 3), axes=["layer", "frequency"])
        f.write("names", np.array(["stem", "layer1.0"]))
        f.set_attrs({"sigma": 0.5}, at="density")
    res = read_result(path)
    assert res.kind == "fourier"
    assert res.attrs["model_kwargs"] == {"a": 1}
    assert res.attrs["grid"] == [0.0, 1.0, 3]
    np.testing.assert_array_equal(res["delta"], np.arange(6.0).reshape(2, 3))
    assert list(res["names"]) == ["stem", "layer1.0"]
    assert res.axes["delta"] == ["layer", "frequency"]
    assert res.attrs_at == {"density": {"sigma": 0.5}} and res.attr("density/sigma") == 0.5  # not the axes
    text = describe(path)
    assert "fourier result (incomplete)" in text and "delta: float64 (2, 3)" in text
    assert "    density: sigma=0.5" in text


def test_identity_ignores_provenance():
    assert identity_of(_attrs(device="a", command="b")) == identity_of(_attrs(device="c", command="d"))
    assert identity_of(_attrs(cpu_capability="AVX512", torch_threads=1)) == identity_of(
        _attrs(cpu_capability="DEFAULT", torch_threads=16)
    )
    assert identity_of(_attrs(seed=1)) != identity_of(_attrs(seed=2))


def test_read_errors(tmp_path):
    one_line_error(read_result, tmp_path / "none.h5", match="does not exist")
    with h5py.File(tmp_path / "y.h5", "w") as f:
        f["a"] = 1
    one_line_error(read_result, tmp_path / "y.h5", match="not a landscape result")


def _hold(path):
    """A subprocess that holds ``path`` open for writing until its stdin closes."""
    code = textwrap.dedent(f"""
        import sys
        from landscape.store.result import open_result
        f = open_result({str(path)!r}, "surface", {{"model": "m"}})
        print("open", flush=True)
        sys.stdin.read()
        f.close()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "open"
    return proc


def test_a_live_writer_is_detected_by_its_lock_and_force_is_refused(tmp_path):
    path = tmp_path / "r.h5"
    proc = _hold(path)
    try:
        for call in (
            lambda: read_result(path),
            lambda: open_result(path, "surface", {"model": "m"}),
            lambda: open_result(path, "surface", {"model": "other"}, force=True),
        ):
            msg = one_line_error(call, match=f"being written by a running analysis \\(pid {proc.pid}\\)")
            assert "damaged" not in msg
        assert path.exists()
    finally:
        proc.stdin.close()
        proc.wait()
    with open_result(path, "surface", {"model": "m"}) as f:  # the writer ended: the file resumes
        assert f.resumed


def test_a_killed_writer_leaves_a_resumable_file(tmp_path):
    path = tmp_path / "r.h5"
    proc = _hold(path)
    proc.kill()
    proc.wait()
    with open_result(path, "surface", {"model": "m"}) as f:
        assert f.resumed


def test_write_past_the_file_size_limit_is_one_line_and_the_same_run_recovers(tmp_path):
    path = tmp_path / "r.h5"
    code = textwrap.dedent(f"""
        import resource, signal
        import numpy as np
        from landscape.errors import LandscapeError
        from landscape.store.result import open_result
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        f = open_result({str(path)!r}, "surface", {{"model": "m"}})
        f.allocate("loss", (300, 300), "f8", fill=np.nan)
        f.allocate("done", (300, 300), bool, fill=False)
        resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))
        try:
            for j in range(300):
                for i in range(300):
                    f.write_at("loss", (j, i), 1.0)
                    f.mark_done("done", (j, i))
        except LandscapeError as e:
            print(e)
        try:
            f.close()
        except LandscapeError:
            pass
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and "file size limit" in lines[0], (out.stdout, out.stderr)
    # the limit is gone: the same run opens the file again (resumed, or started again if the write damaged it)
    with open_result(path, "surface", {"model": "m"}) as f:
        f.allocate("loss", (300, 300), "f8", fill=np.nan)
        assert f.writable


def test_a_checkpoint_is_identified_by_its_content_not_its_path():
    a = _attrs(checkpoint="../r.pt", checkpoint_sha256="ab12")
    assert identity_of(a) == identity_of(_attrs(checkpoint="/abs/r.pt", checkpoint_sha256="ab12"))
    assert identity_of(a) != identity_of(_attrs(checkpoint="../r.pt", checkpoint_sha256="cd34"))
    # without a hash (published weights, a random init) the description itself is the identity
    assert identity_of(_attrs(checkpoint="random-init (seed 1)", checkpoint_sha256="")) != identity_of(
        _attrs(checkpoint="random-init (seed 2)", checkpoint_sha256="")
    )


def test_a_symlink_as_the_output_is_never_written_through(tmp_path):
    (tmp_path / "dangling.h5").symlink_to(tmp_path / "nowhere.h5")
    (tmp_path / "a.h5").symlink_to(tmp_path / "b.h5")
    (tmp_path / "b.h5").symlink_to(tmp_path / "a.h5")
    (tmp_path / "live.h5").symlink_to(_finished(tmp_path / "r.h5", complete=False))
    for name in ("dangling.h5", "a.h5", "live.h5"):
        one_line_error(open_result, tmp_path / name, "surface", _attrs(), match="is a symbolic link, which is never")
    f = open_result(tmp_path / "dangling.h5", "surface", _attrs(), force=True)  # --force replaces the link
    f.close()
    assert not (tmp_path / "dangling.h5").is_symlink() and not (tmp_path / "nowhere.h5").exists()
    with open_result(tmp_path / "live.h5", "surface", _attrs(), force=True) as f:
        assert not f.resumed
    assert read_result(tmp_path / "r.h5")["loss"][0, 1] == 4.5 and not (tmp_path / "live.h5").is_symlink()


def test_a_file_another_run_made_while_this_one_started_is_judged_not_replaced(tmp_path, monkeypatch):
    path = tmp_path / "r.h5"
    real, raced = store.WriterLock, []

    def late_lock(file, identity):  # another run creates and finishes the file before this one gets its lock
        if not raced:
            raced.append(True)
            _finished(path, grid=[0.0, 2.0, 3])
        return real(file, identity)

    monkeypatch.setattr(store, "WriterLock", late_lock)
    one_line_error(open_result, path, "surface", _attrs(), match="differs in: grid")
    assert read_result(path)["loss"][0, 1] == 4.5 and not lock_path(path).exists()


def test_a_file_being_written_is_not_read_through_a_symlink(tmp_path):
    path = _finished(tmp_path / "r.h5", complete=False)
    (tmp_path / "link.h5").symlink_to(path)
    with open_result(path, "surface", _attrs()) as f:
        assert f.writable
        one_line_error(open_result, tmp_path / "link.h5", "surface", _attrs(), match="being written by a running")
        one_line_error(read_result, tmp_path / "link.h5", match="being written by a running analysis")
    assert read_result(tmp_path / "link.h5")["loss"][0, 1] == 4.5 and not lock_path(path).exists()


def test_a_file_of_several_hard_links_is_never_resumed(tmp_path):
    path = _finished(tmp_path / "r.h5", complete=False)
    os.link(path, tmp_path / "other.h5")
    before = (tmp_path / "other.h5").read_bytes()
    one_line_error(open_result, path, "surface", _attrs(), match="has 2 hard links .*--force")
    with open_result(path, "surface", _attrs(), force=True) as f:  # --force replaces this name only
        assert not f.resumed
    assert (tmp_path / "other.h5").read_bytes() == before and os.stat(path).st_nlink == 1


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "folder"])
def test_what_is_not_a_regular_file_is_never_replaced_or_read(tmp_path, make):
    path = tmp_path / "r.h5"
    make(path)
    what = "a named pipe \\(FIFO\\)" if make is os.mkfifo else "a folder"
    one_line_error(read_result, path, match=f"is {what}, not a result file")
    for force in (False, True):
        one_line_error(open_result, path, "surface", _attrs(), force=force, match=f"is {what}, not a regular file")
    assert path.exists() and not path.is_file()


@pytest.mark.parametrize("how", FOREIGN)
def test_a_file_that_keeps_data_elsewhere_is_refused_on_read_and_resume(tmp_path, how):
    secret = tmp_path / "secret.bin"
    if how == "external":
        secret.write_bytes(np.full(28, 3.0).tobytes())
    before = None
    path = foreign_surface(tmp_path / "r.h5", how, secret)
    before = secret.read_bytes()
    words = {"external": "external storage", "virtual": "virtual dataset", "soft-link": "soft link"}
    match = f"{path} is refused: .*loss.*{words.get(how, 'external link')}"
    one_line_error(read_result, path, match=match)
    one_line_error(describe, path, match=match)
    with h5py.File(path, "r+") as f:  # the same run's attributes: a resume would write the points into `secret`
        f.attrs["complete"] = False
        f.attrs["identity"] = identity_of({"kind": "surface", **_attrs()})
    one_line_error(open_result, path, "surface", _attrs(), match=match)
    assert secret.read_bytes() == before and not lock_path(path).exists()
    with open_result(path, "surface", _attrs(), force=True) as f:  # --force replaces the file, never the other
        assert not f.resumed and "loss" not in f
    assert secret.read_bytes() == before


def test_a_hard_link_planted_at_the_lock_name_is_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = tmp_path / "r.h5"
    os.link(victim, lock_path(path))
    one_line_error(open_result, path, "surface", _attrs(), match=r"lock file .*\.r\.h5\.lock has 2 hard links")
    assert victim.read_text() == "precious"
    lock_path(path).unlink()
    _finished(path)
    os.link(victim, lock_path(path))
    assert read_result(path)["loss"][0, 1] == 4.5 and victim.read_text() == "precious"


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "folder"])
def test_a_fifo_or_folder_at_the_lock_name_is_named_and_never_blocks(tmp_path, make):
    path = _finished(tmp_path / "r.h5", complete=False)
    make(lock_path(path))
    assert read_result(path)["loss"][0, 1] == 4.5  # reading does not wait on the pipe
    what = "a named pipe \\(FIFO\\)" if make is os.mkfifo else "a folder"
    one_line_error(open_result, path, "surface", _attrs(), match=f"lock file .* is {what}, not a regular file")
