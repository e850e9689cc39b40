"""``--augment paper-a``: Paper A's augmented training data, drawn once from the seed and held fixed."""

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from helpers import one_line_error, tiny_resnet_checkpoint

from landscape.cli import cli
from landscape.core.criteria import batch_loss, hit_count, prediction_hits, soft_cross_entropy
from landscape.core.objective import Objective
from landscape.data.augment import LABEL_SMOOTHING, augmented_batches, sample_indices
from landscape.data.batches import fixed_batches
from landscape.data.loading import load_dataset
from landscape.options.hessian import HessianOptions, SpectrumOptions
from landscape.options.surface import SurfaceOptions
from landscape.store.read import read_result


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", "train")


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, u) and torch.equal(t, v) for (x, t), (u, v) in zip(a, b))


def test_one_seed_gives_the_same_batches_and_another_seed_others(digits):
    first = augmented_batches(digits, 10, 12, seed=3, copies=2, num_classes=10)
    again = augmented_batches(digits, 10, 12, seed=3, copies=2, num_classes=10)
    other = augmented_batches(digits, 10, 12, seed=4, copies=2, num_classes=10)
    assert same(first, again)
    assert not any(torch.equal(x, u) for (x, _), (u, _) in zip(first, other))
    assert [int(t.shape[0]) for _, t in first] == [10, 10, 4]  # copies x samples = 24 images
    x, t = first[0]
    assert x.dtype == torch.float32 and x.shape[1:] == digits[0][0].shape
    assert t.dtype == torch.float32 and t.shape == (10, 10)
    np.testing.assert_allclose(torch.cat([t for _, t in first]).sum(1).numpy(), 1.0, rtol=1e-6)
    assert float(torch.cat([t for _, t in first]).min()) >= LABEL_SMOOTHING / 10 - 1e-7  # smoothed


def test_the_callers_random_state_is_untouched_and_does_not_change_the_draw(digits):
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    before = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    a = augmented_batches(digits, 8, 8, seed=0, num_classes=10)
    assert torch.equal(torch.get_rng_state(), before[0])
    assert random.getstate() == before[1]
    assert np.array_equal(np.random.get_state()[1], before[2])
    torch.manual_seed(2)  # another global state: the same draw
    assert same(a, augmented_batches(digits, 8, 8, seed=0, num_classes=10))


def test_the_samples_are_those_of_the_fixed_batches(digits):
    idx = sample_indices(len(digits), 24, seed=5)
    plain = fixed_batches(digits, 24, 24, seed=5)[0]
    assert torch.equal(digits.images(idx), plain[0]) and torch.equal(digits.targets[idx], plain[1])
    # copy 0 of every sample comes first; each target mixes the sample's label with its neighbour's
    for _, t in augmented_batches(digits, 24, 24, seed=5, copies=2, num_classes=10):
        y = plain[1]
        mixed = (t - LABEL_SMOOTHING / 10) / (1 - LABEL_SMOOTHING)
        i = int(torch.nonzero(y != y.roll(1))[0])
        lam = float(mixed[i, y[i]])
        want = lam * F.one_hot(y, 10) + (1 - lam) * F.one_hot(y.roll(1), 10)
        torch.testing.assert_close(mixed, want.float(), rtol=0, atol=1e-6)


def test_targets_cover_the_models_outputs_and_too_few_outputs_are_refused(digits):
    (_, t), *_ = augmented_batches(digits, 4, 4, seed=0, num_classes=12)
    assert t.shape == (4, 12)
    one_line_error(augmented_batches, digits, 4, 4, num_classes=5, match="outputs 5 classes")
    one_line_error(augmented_batches, digits, 4, 4, copies=0, match="--augment-copies")


def test_the_soft_target_loss_is_the_hand_computation():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(5, 4, generator=g, dtype=torch.float64)
    t = torch.softmax(torch.randn(5, 4, generator=g, dtype=torch.float64), 1)
    hand = -(t * torch.log_softmax(z, 1)).sum(1).mean()
    torch.testing.assert_close(soft_cross_entropy(z, t), hand, rtol=1e-12, atol=0)
    torch.testing.assert_close(batch_loss(z, t, "soft_cross_entropy"), hand, rtol=1e-12, atol=0)
    y = torch.tensor([0, 3, 1, 1, 2])  # hard labels: the ordinary cross-entropy
    torch.testing.assert_close(soft_cross_entropy(z, y), F.cross_entropy(z, y))
    # far logits: finite where log(softmax) underflows to -inf
    far = torch.tensor([[0.0, 2000.0]])
    assert torch.isinf(torch.log(torch.softmax(far, 1))).any()
    assert torch.isfinite(soft_cross_entropy(far, torch.tensor([[0.5, 0.5]])))
    one_line_error(soft_cross_entropy, z, t[:, :3], match="do not fit")


def test_accuracy_against_soft_targets_compares_the_argmaxes():
    z = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 3.0], [0.0, 5.0, 1.0]])
    t = torch.tensor([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1], [0.2, 0.7, 0.1]])
    assert int(hit_count(z, t)) == 2 and prediction_hits(z, t) == 2
    assert prediction_hits(z, torch.tensor([0, 2, 0])) == 2  # hard labels as before


def test_an_objective_over_soft_targets_weights_batches_by_size():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4).double()
    x = torch.randn(7, 3, dtype=torch.float64)
    t = torch.softmax(torch.randn(7, 4, dtype=torch.float64), 1)
    obj = Objective(model, [(x[:5], t[:5]), (x[5:], t[5:])], criterion="soft_cross_entropy")
    with torch.no_grad():
        want = -(t * torch.log_softmax(model(x), 1)).sum(1).mean()
    assert obj.evaluate().loss == pytest.approx(float(want), rel=1e-12)


def test_options_validate_and_record_the_augmentation():
    assert "augment" not in SurfaceOptions().attrs() and "augment_copies" not in HessianOptions().attrs()
    assert HessianOptions().attrs()["criterion"] == "cross_entropy"
    s = SurfaceOptions(augment="paper-a", augment_copies=3).attrs()
    assert (s["augment"], s["augment_copies"], s["criterion"]) == ("paper-a", 3, "soft_cross_entropy")
    for cls in (HessianOptions, SpectrumOptions):
        o = cls(augment="paper-a")
        assert o.loss_criterion == "soft_cross_entropy" and o.attrs()["criterion"] == "soft_cross_entropy"
        assert o.attrs()["augment"] == "paper-a" and o.attrs()["augment_copies"] == 1
    for cls in (SurfaceOptions, HessianOptions, SpectrumOptions):
        one_line_error(cls, augment="randaugment", match="--augment")
        one_line_error(cls, augment="paper-a", augment_copies=0, match="--augment-copies")
        one_line_error(cls, augment_copies=1.5, match="--augment-copies")
    one_line_error(HessianOptions, augment="paper-a", criterion="mse", match="cross_entropy")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_resnet_checkpoint(tmp_path_factory.mktemp("ckpt"))


def test_surface_centre_is_the_soft_target_loss_on_the_same_augmented_batches(ckpt, tmp_path, digits):
    path, model = ckpt
    out = tmp_path / "aug.h5"
    args = ["surface", "--ckpt", str(path), "--samples", "24", "--batch-size", "10", "--x", "-1:1:3", "--y", "none"]
    r = CliRunner().invoke(
        cli, [*args, "--augment", "paper-a", "--augment-copies", "2", "--out", str(out), "--device", "cpu", "--quiet"]
    )
    assert r.exit_code == 0, r.output
    res = read_result(out)
    batches = augmented_batches(digits, 10, 24, seed=0, copies=2, num_classes=10)
    n = sum(int(t.shape[0]) for _, t in batches)
    with torch.no_grad():
        outs = [(model(x), t) for x, t in batches]
    loss = sum(t.shape[0] / n * -(t * torch.log_softmax(z, 1)).sum(1).mean() for z, t in outs)
    acc = sum(int((z.argmax(1) == t.argmax(1)).sum()) for z, t in outs) / n
    assert res["loss"][0, 1] == pytest.approx(float(loss), rel=1e-5)  # x = 0 is the centre
    assert res["accuracy"][0, 1] == pytest.approx(acc)
    assert np.isfinite(res["loss"]).all()
    a = res.attrs
    assert (a["augment"], a["augment_copies"], a["criterion"], a["n_samples"]) == (
        "paper-a",
        2,
        "soft_cross_entropy",
        48,
    )


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--augment-copies", "0"], "--augment-copies"),
        (["--augment", "bogus"], "--augment"),
    ],
)
@pytest.mark.parametrize("command", ["surface", "hessian", "spectrum"])
def test_bad_augment_options_are_one_line_errors_before_any_file(ckpt, tmp_path, command, extra, words):
    out = tmp_path / "x.h5"
    args = [command, "--ckpt", str(tmp_path / "missing.pt"), "--out", str(out), "--augment", "paper-a", *extra]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and words in lines[0]
    assert not out.exists()


def test_spectrum_and_hessian_run_on_augmented_batches(ckpt, tmp_path):
    path, _ = ckpt
    common = ["--ckpt", str(path), "--device", "cpu", "--quiet", "--augment", "paper-a", "--augment-copies", "2"]
    spec = tmp_path / "sp.h5"
    r = CliRunner().invoke(
        cli, ["spectrum", *common, "--samples", "4", "--batch-size", "4", "--top-k", "1", "--out", str(spec)]
    )
    assert r.exit_code == 0, r.output
    s = read_result(spec)
    assert s["eigenvalues"].shape == (2, 1) and np.isfinite(s["eigenvalues"]).all()
    assert s.attrs["criterion"] == "soft_cross_entropy" and s.attrs["augment_copies"] == 2
    hess = tmp_path / "h.h5"
    args = ["hessian", *common, "--samples", "4", "--batch-size", "4", "--top-k", "1", "--params", "fc.*"]
    r = CliRunner().invoke(cli, [*args, "--hvp", "jvp", "--out", str(hess)])
    assert r.exit_code == 0, r.output
    h = read_result(hess)
    assert h.attrs["n_samples"] == 8 and h.attrs["augment"] == "paper-a" and np.isfinite(h["eigenvalues"]).all()


def test_vectorised_and_looped_points_agree_on_soft_targets():
    from landscape.analyses.surface.directions import random_directions
    from landscape.analyses.surface.evaluator import PointEvaluator

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4)).double()
    x = torch.randn(7, 3, dtype=torch.float64)
    t = torch.softmax(torch.randn(7, 4, dtype=torch.float64), 1)
    obj = Objective(model, [(x[:5], t[:5]), (x[5:], t[5:])], criterion="soft_cross_entropy")
    dirs = random_directions(obj.params, ndim=2, seed=1, ignore_1d=False)
    ev = PointEvaluator(obj, dirs.x, dirs.y)
    points = [(0.0, 0.0), (0.5, -0.25), (-1.0, 1.0)]
    np.testing.assert_allclose(np.array(ev.vectorised(points)), np.array(ev.loop(points)), rtol=1e-10)
