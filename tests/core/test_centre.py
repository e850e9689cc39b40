"""The front half says what it measured at the centre: a model fed inputs unlike its training is warned about."""

import math
import sys

import pytest
import torch
import torch.nn.functional as F
from helpers import one_line_error

import landscape
from landscape.analyses.surface.run import run_surface
from landscape.core.centre import CentreCheck
from landscape.core.source import ModelSource
from landscape.data.loading import load_dataset
from landscape.data.preprocess import Preprocess
from landscape.options.surface import SurfaceOptions

#: the issue's case: a small network of the user's own (an MLP here: it trains in a few seconds on 2 cores)
NETS = """
from torch import nn


def build(num_classes=10, in_chans=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_chans * 256, 64), nn.ReLU(), nn.Linear(64, num_classes))
"""


@pytest.fixture(scope="module")
def trained_on_unit_images(tmp_path_factory):
    """The network trained by a plain loop on digits scaled to [0, 1] (not standardised) at 16 px; a state dict."""
    folder = tmp_path_factory.mktemp("nets")
    (folder / "unit_nets.py").write_text(NETS)
    sys.path.insert(0, str(folder))
    import unit_nets

    unit = load_dataset("digits:16", "train", preprocess=Preprocess(mean=(0.0,), std=(1.0,)))
    x = unit.images(torch.arange(512))
    y = torch.as_tensor(unit.targets)[:512]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = unit_nets.build()
        optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
        for _ in range(60):
            optimizer.zero_grad()
            F.cross_entropy(net(x), y).backward()
            optimizer.step()
    path = folder / "w.pt"
    torch.save(net.state_dict(), path)
    yield path, net.eval()
    sys.path.remove(str(folder))
    sys.modules.pop("unit_nets", None)


def test_default_standardisation_on_a_model_trained_on_unit_images_warns(trained_on_unit_images, tmp_path, capsys):
    path, net = trained_on_unit_images
    options = SurfaceOptions(data="digits:16", x="0:1:2", y=None, samples=64)
    source = ModelSource(checkpoint=str(path), model="py:unit_nets:build")
    res = run_surface(source, options, out=tmp_path / "wrong.h5", device="cpu")
    err = capsys.readouterr().err
    standard = load_dataset("digits:16", "train")
    assert res.attrs["centre_loss"] > 2 * math.log(10)  # the silent wrong answer of the issue
    assert res.attrs["centre_loss"] == pytest.approx(float(res["loss"][0, 0]), rel=1e-6)  # the surface's centre
    assert "warning: " in err and all(o in err for o in ("--mean", "--std", "--input-size"))
    assert "preprocessing: 16 x 16 px" in err and "(the dataset's defaults)" in err
    assert res.attrs["preprocess_source"] == {"image_size": "dataset", "mean": "dataset", "std": "dataset"}
    assert res.attrs["preprocess_mean"] == pytest.approx(list(standard.info.mean))
    assert "surface: a 1D line of 2 points over [0, 1] on 64 samples of digits:16 (train), estimated" in err

    unit = Preprocess(mean=(0.0,), std=(1.0,))  # --mean 0 --std 1
    right = ModelSource(checkpoint=str(path), model="py:unit_nets:build", preprocess=unit)
    fixed = run_surface(right, options, out=tmp_path / "right.h5", device="cpu")
    err = capsys.readouterr().err
    assert "warning" not in err and "(image_size the dataset's defaults, mean yours, std yours)" in err
    assert fixed.attrs["preprocess_source"] == {"image_size": "dataset", "mean": "user", "std": "user"}
    assert fixed.attrs["centre_accuracy"] > 0.9 and fixed.attrs["centre_loss"] < 0.5
    run_surface(right, options, out=tmp_path / "quiet.h5", device="cpu", progress=False)  # --quiet
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "loss, accuracy, warned",
    [(0.3, 0.9, False), (2.3, 0.15, True), (2.3, 0.16, False), (4.7, 0.5, True), (4.6, 0.5, False)],
)
def test_warning_thresholds(loss, accuracy, warned):
    # near chance: accuracy <= 1.5 / 10 = 0.15; far above a uniform guess: loss > 2 log(10) = 4.605
    assert bool(CentreCheck(loss, accuracy, 10, 0.1).warning()) is warned


def test_the_check_is_the_weighted_mean_over_the_batches_and_leaves_the_random_state_alone():
    from landscape.core.centre import check_centre
    from landscape.core.front import load_inputs

    class Noisy(torch.nn.Module):  # draws from the global generator in eval mode
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x.flatten(1)) + 0 * torch.rand(())

    torch.manual_seed(1)
    net = Noisy().eval()
    batches = [(torch.randn(3, 1, 2, 2), torch.tensor([0, 1, 2])), (torch.randn(1, 1, 2, 2), torch.tensor([2]))]
    inputs = load_inputs(net, data="digits", device="cpu")
    before = torch.get_rng_state()
    check = check_centre(inputs, batches, "cross_entropy")
    assert torch.equal(torch.get_rng_state(), before)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    with torch.no_grad():
        logits = net.fc(x.flatten(1))
    assert check.loss == pytest.approx(float(F.cross_entropy(logits, y)), rel=1e-6)  # (3/4) L_1 + (1/4) L_2
    assert check.accuracy == float((logits.argmax(-1) == y).float().mean()) and check.classes == 3


def test_the_issues_command_line_says_it_before_the_work(trained_on_unit_images, tmp_path):
    from click.testing import CliRunner

    from landscape.cli import cli

    path, _ = trained_on_unit_images
    common = ["--ckpt", str(path), "--model", "py:unit_nets:build", "--data", "digits:16", "--device", "cpu"]
    grid = ["--x", "0:1:2", "--y", "none", "--samples", "64"]
    result = CliRunner().invoke(cli, ["surface", *common, *grid, "--out", str(tmp_path / "s.h5")])
    assert result.exit_code == 0, result.output
    plan, setup, preprocessing, centre, warning = result.stderr.splitlines()[:5]
    assert plan.startswith("surface: a 1D line of 2 points over [0, 1] on 64 samples of digits:16 (train)")
    assert "s in all (" in plan and "s of set-up done, then " in plan  # the estimate counts the set-up
    assert setup.startswith("set-up: ") and setup.endswith("(the model, the data, the centre's pass, the checks)")
    assert preprocessing.startswith("preprocessing: 16 x 16 px") and centre.startswith("centre: loss ")
    assert warning.startswith("warning: the centre's loss") and warning.endswith("check --mean, --std and --input-size")
    quiet = CliRunner().invoke(cli, ["surface", *common, *grid, "--quiet", "--out", str(tmp_path / "q.h5")])
    assert quiet.exit_code == 0 and quiet.stderr == ""


# --------------------------------------------------------------- what the centre's pass raises, and whose it is
def _linear():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3)).eval()


def _batches(*shapes):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 1, *s, generator=g), torch.randint(0, 3, (4,), generator=g)) for s in shapes]


def test_a_later_batch_the_model_cannot_take_is_named_with_its_own_shape():
    msg = one_line_error(
        landscape.surface, _linear(), _batches((4, 4), (4, 4), (5, 5)), x="-1:1:3", y="none", progress=False
    )
    assert msg.startswith("your model's forward (Sequential) raised RuntimeError")
    assert "it was given batch 2, inputs of shape (4, 1, 5, 5)" in msg and "(4, 1, 4, 4)" not in msg


def test_int32_labels_give_the_int64_labels_surface():
    batches = _batches((4, 4), (4, 4))
    grid = {"x": "-1:1:3", "y": "none", "progress": False, "seed": 3, "batch_points": 1}
    want = landscape.surface(_linear(), batches, **grid)["loss"]
    got = landscape.surface(_linear(), [(x, y.int()) for x, y in batches], **grid)["loss"]
    assert (got == want).all()


class _Returns(torch.nn.Module):
    def __init__(self, make):
        super().__init__()
        self.fc, self.make = torch.nn.Linear(16, 3), make

    def forward(self, x):
        return self.make(self.fc(x.flatten(1)))


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda z: z.sum(), r"the model's logits have shape \(\), not \(batch, classes\)"),
        (lambda z: z[0], r"the model's logits have shape \(3,\), not \(batch, classes\)"),
        (lambda z: z.unsqueeze(-1), r"the model's logits have shape \(1, 3, 1\)"),
        (lambda z: {"logits": z[:1]}, r"logits of shape \(1, 3\) for a batch of 4 samples"),
    ],
)
def test_an_output_that_is_no_logits_is_one_line(make, words):
    one_line_error(landscape.hessian, _Returns(make).eval(), _batches((4, 4)), top_k=1, progress=False, match=words)


def test_what_a_callable_criterion_raises_is_named_as_the_callers():
    from landscape.core.objective import Objective
    from landscape.errors import ForeignError

    def mine(logits, targets):
        raise ValueError("my bug")

    objective = Objective(_linear(), _batches((4, 4)), criterion=mine, check=False)
    with pytest.raises(ForeignError, match=r"^your criterion \(callable:test_what_a_callable_criterion_raises"):
        objective.evaluate()
