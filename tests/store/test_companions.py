"""Files beside an output: never read through a link, replaced only when of their own kind, inputs never outputs.

The hostile inputs of each class are built here: links and foreign files at the names of bends, snapshots,
tracking records and lock sidecars; crafted sidecars and bends; outputs that name an input or another kind.
"""

import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import one_line_error

from landscape.analyses.connect.bendfile import bend_path, read_bend
from landscape.analyses.connect.run import run_connect
from landscape.cli import cli
from landscape.errors import LandscapeError
from landscape.models import create_model
from landscape.models.checkpoint import read_checkpoint, save_checkpoint
from landscape.options.connect import ConnectOptions
from landscape.store import open_result
from landscape.store.files import check_replaceable, landscape_kind, write_text
from landscape.store.locks import lock_path, sidecar_record

TINY = {"num_classes": 10, "in_chans": 1, "widths": (4, 8), "layers": (1, 1)}
BEZIER = {"samples": 32, "batch_size": 16, "steps": 3, "curve": "bezier", "bend_epochs": 1, "plane_steps": 2}


def _save(path, seed=0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = create_model("resnet_mini", **TINY).eval()
    return save_checkpoint(path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10)


@pytest.fixture(scope="module")
def ends(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ends")
    return _save(folder / "a.pt", 0), _save(folder / "b.pt", 1)


def _snapshot(folder):
    """Every file under ``folder`` (links as links) with its bytes: what a refused run must leave as it was."""
    seen = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                seen[path] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    seen[path] = ("file", f.read())
    return seen


def _attrs():
    return {"model": "m", "n_samples": 4}


# ------------------------------------------------------------------------------------------ lock sidecars
def test_a_user_file_at_the_lock_name_is_never_truncated_or_removed(tmp_path):
    out = tmp_path / "r.h5"
    lock_path(out).write_text("my notes, not a lock\n")
    one_line_error(open_result, out, "surface", _attrs(), match="holds something else than a landscape lock record")
    assert lock_path(out).read_text() == "my notes, not a lock\n" and not out.exists()


def test_a_planted_sidecar_does_not_make_a_user_file_replaceable(tmp_path):
    out = tmp_path / "r.h5"
    out.write_bytes(b"precious user data, not HDF5")
    with open_result(tmp_path / "probe.h5", "surface", _attrs()) as f:  # the identity such a run records
        identity = f._h5.attrs["identity"]
    lock_path(out).write_text(json.dumps({"pid": 1, "identity": str(identity)}))
    one_line_error(open_result, out, "surface", _attrs(), match="not an HDF5 file")
    assert out.read_bytes() == b"precious user data, not HDF5"


@pytest.mark.parametrize(
    "text",
    [
        '{"pid": "1234", "identity": "{}"}',
        '{"pid": [1], "identity": "{}"}',
        '{"pid": NaN, "identity": "{}"}',
        '{"pid": true, "identity": "{}"}',
        "[1, 2]",
        "[" * 200_000 + "]" * 200_000,
        '{"pid": ' + "[" * 200_000 + "]" * 200_000 + "}",
        "\xff\xfe not utf-8",
    ],
)
def test_a_crafted_sidecar_is_not_a_record(text):
    assert sidecar_record(text.encode("utf-8", errors="surrogateescape")) is None


def test_a_sidecar_keeps_only_entries_of_their_types():
    data = json.dumps({"pid": 7, "identity": "{}", "desc": "surface", "done": 3}).encode()
    assert sidecar_record(data) == {"pid": 7, "identity": "{}", "desc": "surface", "done": 3}
    crafted = b'{"pid": 7, "identity": "{}", "total": Infinity, "done": "x", "started": 1e300, "unit": [1]}'
    assert sidecar_record(crafted) == {"pid": 7, "identity": "{}"}


# ---------------------------------------------------------------------------------------- replacement rule
def test_a_report_never_replaces_a_checkpoint_or_a_result(tmp_path, ends):
    folder = tmp_path / "rep"
    with open_result(folder / "s.h5", "surface", _attrs()):  # unfinished: the report gives it a note
        pass
    model = tmp_path / "model.pt"
    model.write_bytes(ends[0].read_bytes())
    assert landscape_kind(model) == "checkpoint"
    before = model.read_bytes()
    result = CliRunner().invoke(cli, ["report", str(folder), "--out", str(model)])
    assert result.exit_code == 2 and "is a checkpoint that landscape wrote, not a report" in result.output
    assert model.read_bytes() == before
    page = tmp_path / "page.html"
    assert CliRunner().invoke(cli, ["report", str(folder), "--out", str(page)]).exit_code == 0
    assert landscape_kind(page) == "report"
    assert CliRunner().invoke(cli, ["report", str(folder), "--out", str(page)]).exit_code == 0  # its own kind


def test_each_writer_replaces_only_its_own_kind(tmp_path, ends):
    summary = tmp_path / "summary.md"
    write_text(summary, "# landscape demo\n\n<!-- written by landscape -->\n", kind="summary")
    assert landscape_kind(summary) == "summary"
    one_line_error(check_replaceable, summary, kind="figure", match="is a summary that landscape wrote, not a figure")
    check_replaceable(summary, kind="summary")
    check_replaceable(summary, kind="figure", force=True)
    one_line_error(check_replaceable, ends[0], kind="summary", match="is a checkpoint")


# ------------------------------------------------------------------------------------------------ bends
def test_a_link_at_the_bend_name_is_never_followed_not_even_with_force(tmp_path, ends):
    out = tmp_path / "c.h5"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = _save(elsewhere / "other.pt", 3)
    bend_path(out).symlink_to(target)
    before = _snapshot(tmp_path)
    for force in (False, True):
        msg = one_line_error(
            run_connect, *ends, ConnectOptions(**BEZIER), out=out, device="cpu", progress=False, force=force
        )
        assert "is a symbolic link, which is never followed" in msg
    assert _snapshot(tmp_path) == before


def test_an_input_at_the_bend_name_is_never_overwritten(tmp_path, ends):
    a = _save(tmp_path / "c.bend.pt", 0)  # theta_A sits where the bend of c.h5 goes
    before = a.read_bytes()
    for force in (False, True):
        msg = one_line_error(
            run_connect, a, ends[1], ConnectOptions(**BEZIER), out=tmp_path / "c.h5", device="cpu", force=force
        )
        assert "is the input" in msg
    assert a.read_bytes() == before and not (tmp_path / "c.h5").exists()


def test_another_checkpoint_at_the_bend_name_is_never_replaced(tmp_path, ends):
    out = tmp_path / "c.h5"
    other = _save(bend_path(out), 4)
    before = other.read_bytes()
    msg = one_line_error(run_connect, *ends, ConnectOptions(**BEZIER), out=out, device="cpu", force=True)
    assert "holds another file; it is never replaced, not even with --force" in msg
    assert other.read_bytes() == before


def _crafted_bend(path, identity, **changes):
    """A bend checkpoint for the run of ``identity``, with some of its fields replaced."""
    model = create_model("resnet_mini", **TINY)
    names = [n for n, _ in model.named_parameters()]
    extra = {
        "content": "bezier bend of landscape connect",
        "identity": identity,
        "parameter_names": names,
        "momentum": {},
        "history": [0.5],
    }
    extra.update(changes.pop("extra", {}))
    save_checkpoint(
        path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10, epoch=1, extra=extra
    )
    if changes:
        obj = torch.load(path, weights_only=True)
        obj.update(changes)
        torch.save(obj, path)
    return dict(model.named_parameters())


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"extra": {"parameter_names": ["ghost.weight"]}}, "ghost.weight"),
        ({"extra": {"parameter_names": "conv"}}, "parameter_names"),
        ({"epoch": "one"}, "epoch"),
        ({"epoch": None}, "epoch"),
        ({"extra": {"history": [float("nan")]}}, "history"),
        ({"extra": {"history": ["x"]}}, "history"),
        ({"extra": {"momentum": {"fc.weight": torch.zeros(2)}}}, "momentum"),
        ({"extra": {"momentum": [1, 2]}}, "momentum"),
        ({"extra": {"momentum": {"fc.weight": "text"}}}, "momentum"),
        ({"extra": {"momentum": {"fc.weight": torch.zeros(10, 8)}}}, "no buffer for parameter 'stem.0.weight'"),
    ],
)
def test_a_crafted_bend_is_one_line_naming_its_field(tmp_path, changes, field):
    path = tmp_path / "c.bend.pt"
    params = _crafted_bend(path, "ID", **changes)
    msg = one_line_error(read_bend, path, "ID", params=params, match="damaged bend|another connect run")
    assert field in msg
    assert read_bend(path, "ID", params=params, force=True) is None  # --force trains it anew


def test_a_bend_of_nan_momentum_is_refused(tmp_path):
    path = tmp_path / "c.bend.pt"
    model = create_model("resnet_mini", **TINY)
    momentum = {n: torch.full_like(p, float("nan")) for n, p in model.named_parameters()}
    params = _crafted_bend(path, "ID", extra={"momentum": momentum})
    one_line_error(read_bend, path, "ID", params=params, match="momentum of .* not finite")


def test_an_extra_that_is_a_list_is_not_a_bend(tmp_path):
    path = tmp_path / "c.bend.pt"
    _crafted_bend(path, "ID")
    obj = torch.load(path, weights_only=True)
    obj["extra"] = [1, 2]
    torch.save(obj, path)
    one_line_error(read_bend, path, "ID", match="holds another file")


# ---------------------------------------------------------------------------------- training's companions
def _train(tmp_path, out, *extra):
    args = ["train", "--model", "resnet_mini", "--model-kw", "widths=[4,8]", "--model-kw", "layers=[1,1]"]
    args += ["--data", "synthetic", "--subset", "32", "--epochs", "2", "--batch-size", "16", "--device", "cpu"]
    return CliRunner().invoke(cli, [*args, "--out", str(out), "--quiet", *extra])


def test_train_never_replaces_another_runs_snapshot_without_force(tmp_path):
    (tmp_path / "run.init.pt").write_bytes(_save(tmp_path / "x.pt").read_bytes())
    before = _snapshot(tmp_path)
    result = _train(tmp_path, tmp_path / "run.pt", "--snapshot-initial")
    assert result.exit_code == 2 and "run.init.pt exists" in result.output, result.output
    assert _snapshot(tmp_path) == before


def test_train_force_never_replaces_a_foreign_file_at_a_snapshot_name(tmp_path):
    (tmp_path / "run.epoch001.pt").write_text("my notes")
    result = _train(tmp_path, tmp_path / "run.pt", "--snapshot-every", "1", "--force")
    assert result.exit_code == 2 and "never replaced, not even with --force" in result.output, result.output
    assert (tmp_path / "run.epoch001.pt").read_text() == "my notes" and not (tmp_path / "run.pt").exists()


def test_train_force_never_replaces_another_kind_at_the_tracking_name(tmp_path):
    sidecar = tmp_path / "run.sharpness.h5"
    with open_result(sidecar, "sharpness", _attrs()) as f:
        f.allocate("loss", (2,), np.float64, fill=1.0, axes=["x"])
        f.flush()
    before = sidecar.read_bytes()
    result = _train(tmp_path, tmp_path / "run.pt", "--track-sharpness", "1", "--optimizer", "sgd", "--force")
    assert result.exit_code == 2 and "never replaced, not even with --force" in result.output, result.output
    assert sidecar.read_bytes() == before


def test_train_init_is_never_its_own_output(tmp_path):
    init = _save(tmp_path / "run.pt")
    before = init.read_bytes()
    result = _train(tmp_path, init, "--init", str(init), "--force")
    assert result.exit_code == 2 and "is the input" in result.output, result.output
    assert init.read_bytes() == before


def test_snapshots_are_never_found_through_a_link_nor_mixed_across_runs(tmp_path):
    assert _train(tmp_path, tmp_path / "run.pt", "--snapshot-initial", "--snapshot-every", "1").exit_code == 0
    assert _train(tmp_path, tmp_path / "new.pt", "--snapshot-initial").exit_code == 0
    args = ["trajectory", "--snapshots-of", str(tmp_path / "run.pt"), "--out", str(tmp_path / "t.h5")]
    assert CliRunner().invoke(cli, args).exit_code == 0
    os.replace(tmp_path / "new.init.pt", tmp_path / "run.init.pt")  # the start of another run, by that name
    result = CliRunner().invoke(cli, [*args, "--force"])
    assert result.exit_code == 2 and "snapshot of another training run" in result.output, result.output
    (tmp_path / "run.init.pt").unlink()
    (tmp_path / "run.init.pt").symlink_to(tmp_path / "run.epoch001.pt")
    result = CliRunner().invoke(cli, [*args, "--force"])
    assert result.exit_code == 2 and "symbolic link, which is never followed" in result.output, result.output


def test_a_companion_is_read_from_the_one_descriptor_it_checked(tmp_path, ends):
    link = tmp_path / "link.pt"
    link.symlink_to(ends[0])
    with pytest.raises(LandscapeError, match="symbolic link"):
        read_checkpoint(link, companion="the snapshot")
    assert read_checkpoint(link).sha256 == read_checkpoint(ends[0], companion="the snapshot").sha256


# ---------------------------------------------------------------------- every value written or resumed is finite
@pytest.mark.parametrize(
    ("lr", "match"),
    [
        (1e30, "^bend training diverged in epoch 1: after its last step the bend's "),
        (1e300, "^--bend-lr 1e.300 overflows"),
    ],
)
def test_a_bend_whose_last_step_diverges_is_not_saved_and_the_run_stops(ends, tmp_path, lr, match):
    out = tmp_path / "c.h5"
    # one batch of the bend's data: its only step is its last
    bend = {"bend_samples": 16, "bend_lr": lr, "bend_momentum": 0.0}
    options = ConnectOptions(**{**BEZIER, "samples": 16, "batch_size": 16, **bend})
    one_line_error(run_connect, *ends, options, out=out, device="cpu", match=match)
    assert not bend_path(out).exists()
    from landscape.store.read import read_result

    assert not read_result(out).attrs["complete"]


def _negative_variance(path, seed):
    model = read_checkpoint(_save(path, seed)).state_dict
    name = next(n for n in model if n.endswith("running_var"))
    obj = torch.load(path, weights_only=True)
    obj["state_dict"][name][2] = -1.0
    torch.save(obj, path)
    return name


@pytest.mark.parametrize("end", [0, 1])
def test_a_negative_running_variance_at_either_end_is_named_as_an_invalid_buffer(ends, tmp_path, end):
    bad = tmp_path / "bad.pt"
    name = _negative_variance(bad, 3)
    given = [ends[0], bad] if end else [bad, ends[1]]
    args = ["connect", "--ckpt", given[0], "--ckpt", given[1], "--samples", "16", "--steps", "3", "--device", "cpu"]
    result = CliRunner().invoke(cli, [*map(str, args), "--out", str(tmp_path / "c.h5"), "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"Error: {bad}: buffer {name!r} holds 1 negative value(s) of {torch.load(bad)['state_dict'][name].numel()} "
        "(a variance is >= 0): the checkpoint is damaged or its training diverged; use another checkpoint"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt"]
