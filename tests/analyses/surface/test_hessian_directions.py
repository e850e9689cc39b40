"""Surface directions along Hessian eigenvectors: dense references, the measured curvature, files of hessian."""

import shutil

import h5py
import numpy as np
import pytest
import torch
from helpers import one_line_error
from torch import nn

from landscape.analyses.hessian.run import run_hessian
from landscape.analyses.surface.evaluator import PointEvaluator
from landscape.analyses.surface.hessian_directions import (
    file_hessian_directions,
    hessian_directions,
    hessian_eigendirections,
    objective_attrs,
    quadratic_model,
    read_eigendirections,
)
from landscape.core import params as P
from landscape.core.front import batches_for, load_inputs
from landscape.core.objective import Objective
from landscape.core.regularizer import Regularizer
from landscape.models import create_model
from landscape.models.checkpoint import load_model, save_checkpoint
from landscape.options.hessian import HessianOptions


def small_objective():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(10, 3, generator=g, dtype=torch.float64), torch.arange(10) % 3
    return Objective(model, [(x[:6], y[:6]), (x[6:], y[6:])], regularizer=Regularizer("l2", 0.01))


def dense_hessian(obj, names):
    like = {n: obj.params[n] for n in names}

    def loss(flat):
        return obj.loss({**obj.params, **P.unflatten(flat, like)})

    return torch.func.hessian(loss)(P.flatten(like))


def flat(direction, names):
    return torch.cat([direction[n].reshape(-1) for n in names])


@pytest.mark.parametrize("which", ["LA", "SA", "LM"])
def test_directions_are_the_dense_eigenvectors_up_to_sign(which):
    obj = small_objective()
    names = list(obj.params)
    evals, evecs = torch.linalg.eigh(dense_hessian(obj, names))
    order = {
        "LA": torch.argsort(evals, descending=True),
        "SA": torch.argsort(evals),
        "LM": torch.argsort(evals.abs(), descending=True),
    }[which]
    eig = hessian_eigendirections(obj, 2, which=which, tol=1e-12, hvp="jvp")
    np.testing.assert_allclose(eig.eigenvalues, evals[order[:2]].numpy(), rtol=1e-9, atol=1e-12)
    for v, j in zip(eig.vectors, order[:2].tolist()):
        got, want = flat(v, names), evecs[:, j]
        sign = torch.sign(got @ want)
        torch.testing.assert_close(got, sign * want, rtol=0, atol=1e-7)
        assert float(torch.linalg.vector_norm(got)) == pytest.approx(1.0, abs=1e-14)
        assert got[got.abs().argmax()] > 0  # the sign rule
    d = eig.directions(2)
    assert d.kind == "hessian" and d.meta["which"] == which and d.meta["direction_eigenvalues"] == eig.eigenvalues
    assert d.meta["x_norm"] == pytest.approx(1.0, abs=1e-14) and abs(d.meta["cosine"]) < 1e-10


@pytest.mark.parametrize("operator", ["ggn", "kfac"])
def test_directions_of_another_operator_are_its_eigenvectors(operator):
    from analyses.hessian.references import dense_ggn, dense_kfac, regularizer_hessian

    obj = small_objective()
    names = list(obj.params)
    if operator == "ggn":
        dense = dense_ggn(obj, names)
    else:
        dense = dense_kfac(obj, obj.module)[0] + regularizer_hessian(obj, names)
    evals, evecs = torch.linalg.eigh(dense)
    eig = hessian_eigendirections(obj, 2, which="LA", tol=1e-12, operator=operator)
    np.testing.assert_allclose(eig.eigenvalues, evals[-2:].flip(0).numpy(), rtol=1e-9)
    for v, j in zip(eig.vectors, (-1, -2)):
        got = flat(v, names)
        torch.testing.assert_close(got, torch.sign(got @ evecs[:, j]) * evecs[:, j], rtol=0, atol=1e-7)
    d = eig.directions(2)
    assert d.meta["operator"] == operator and d.meta["eigen_source"] == (
        "kronecker" if operator == "kfac" else "lanczos"
    )


def test_second_difference_along_the_top_eigenvector_is_the_top_eigenvalue():
    obj = small_objective()
    d = hessian_directions(obj, ndim=1, tol=1e-12, hvp="jvp")
    top = d.meta["direction_eigenvalues"][0]
    h = 1e-3
    (lm, _, _), (l0, _, _), (lp, _, _) = PointEvaluator(obj, d.x, None).loop([(-h, 0.0), (0.0, 0.0), (h, 0.0)])
    assert (lp - 2 * l0 + lm) / h**2 == pytest.approx(top, rel=1e-3)
    # the coordinates are distances: the quadratic model L(0) + lambda a^2 / 2 is the curve's even part
    assert (lm + lp) / 2 == pytest.approx(float(quadratic_model(l0, [top], h)), abs=1e-12)


def test_a_block_hessian_is_zero_outside_its_parameters():
    obj = small_objective()
    before = torch.get_rng_state()
    eig = hessian_eigendirections(obj, 2, patterns="2", tol=1e-12, hvp="jvp", seed=5)
    assert torch.equal(torch.get_rng_state(), before)  # the start vector comes from a private generator
    assert eig.names == ["2.weight", "2.bias"]
    for v in eig.vectors:
        assert not v["0.weight"].any() and not v["0.bias"].any()
    evals = torch.linalg.eigvalsh(dense_hessian(obj, eig.names))
    np.testing.assert_allclose(eig.eigenvalues, evals.flip(0)[:2].numpy(), rtol=1e-9)
    one_line_error(hessian_directions, obj, ndim=3, match="ndim")


TINY = {"widths": (4, 8), "layers": (1, 1)}
DATA = "synthetic:16:8"  # 16 images of 8x8: no dataset library to import


def checkpoint(path, seed):
    torch.manual_seed(seed)
    model = create_model("resnet_mini", num_classes=10, in_chans=3, **TINY)
    return save_checkpoint(
        path, model, model_name="resnet_mini", model_kwargs=model.model_kwargs, num_classes=10, dataset=DATA
    )


def this_surface(ckpt, regularizer=None, n_samples=8):
    """The objective a surface would build for ``ckpt`` and the attributes it checks a file against."""
    inputs = load_inputs(ckpt, device="cpu")
    model, _ = load_model(ckpt)
    batches = batches_for(inputs, batch_size=3, n_samples=n_samples, seed=0)
    obj = Objective(model, batches, dtype=torch.float64, regularizer=regularizer)
    return obj, {**inputs.provenance(obj.n_samples, 0), **objective_attrs(obj)}


def test_eigenvector_files_are_read_and_files_of_another_model_or_objective_refused(tmp_path):
    ckpt, other = checkpoint(tmp_path / "a.pt", 0), checkpoint(tmp_path / "b.pt", 1)
    out = tmp_path / "h.h5"
    options = HessianOptions(
        top_k=2, tol=1e-10, eigenvectors=True, params="fc", dtype="float64", samples=8, batch_size=3, hvp="jvp"
    )
    run_hessian(ckpt, options, out=out, device="cpu", progress=False)
    obj, expected = this_surface(ckpt)
    from_file = read_eigendirections(out, obj.params, expected=expected)
    computed = hessian_eigendirections(obj, 2, patterns="fc", tol=1e-10, hvp="jvp")
    assert from_file.names == ["fc.weight", "fc.bias"] and from_file.source == str(out)
    np.testing.assert_allclose(from_file.eigenvalues, computed.eigenvalues, rtol=1e-9)
    for v, w in zip(from_file.vectors, computed.vectors):
        for n in obj.params:
            torch.testing.assert_close(v[n], w[n], rtol=0, atol=1e-7)  # the same sign rule
    d = file_hessian_directions(out, obj.params, expected=expected, ndim=2)
    assert d.meta["eigen_source"] == str(out) and d.y is not None
    # another checkpoint (same model): its sha256 differs
    _, theirs = this_surface(other)
    msg = one_line_error(read_eigendirections, out, obj.params, expected=theirs)
    assert f"checkpoint_sha256 is '{expected['checkpoint_sha256']}' there but '{theirs['checkpoint_sha256']}'" in msg
    # the same checkpoint with another loss or other samples
    _, l2 = this_surface(ckpt, regularizer=Regularizer("l2", 0.01))
    msg = one_line_error(read_eigendirections, out, obj.params, expected=l2)
    assert 'regularizer is {"coef": 0.0, "kind": "none"} there but {"coef": 0.01, "kind": "l2"} here' in msg
    _, fewer = this_surface(ckpt, n_samples=6)
    one_line_error(read_eigendirections, out, obj.params, expected=fewer, match="n_samples is 8 there but 6 here")
    one_line_error(read_eigendirections, out, obj.params, expected={**expected, "model": "vit_mini"}, match="model is")
    # directions of another operator than the file's (a Hessian file records none)
    one_line_error(
        read_eigendirections,
        out,
        obj.params,
        expected={**expected, "operator": "ggn"},
        match="operator is 'hessian' there but 'ggn' here",
    )
    # a file without eigenvectors, and directions that need more eigenvectors than the file holds
    bare = tmp_path / "bare.h5"
    shutil.copy(out, bare)
    with h5py.File(bare, "r+") as f:
        del f["eigenvectors"]
    one_line_error(read_eigendirections, bare, obj.params, expected=expected, match="no eigenvectors")
    one_line_error(from_file.directions, 3, match="ndim")


@pytest.fixture(scope="module")
def eigen_file(tmp_path_factory):
    """A good ``landscape hessian --eigenvectors`` file of two fc pairs, and the surface it belongs to."""
    folder = tmp_path_factory.mktemp("eigen")
    ckpt = checkpoint(folder / "a.pt", 0)
    out = folder / "h.h5"
    options = HessianOptions(
        top_k=2, tol=1e-10, eigenvectors=True, params="fc", dtype="float64", samples=8, batch_size=3, hvp="jvp"
    )
    run_hessian(ckpt, options, out=out, device="cpu", progress=False)
    obj, expected = this_surface(ckpt)
    return out, obj, expected


def _craft(path, change):
    with h5py.File(path, "r+") as f:
        change(f)


def _replace(name, value):
    def change(f):
        del f[name]
        f[name] = value

    return change


def _scale_column(j, factor):
    def change(f):
        v = f["eigenvectors"][()]
        v[:, j] *= factor
        f["eigenvectors"][...] = v

    return change


def _mix_columns(f):
    v = f["eigenvectors"][()]
    v[:, 1] = (v[:, 0] + v[:, 1]) / np.sqrt(2)  # unit, but at 45 degrees to the first
    f["eigenvectors"][...] = v


HOSTILE_EIGENVECTORS = {
    "fewer columns than eigenvalues": (lambda f: _replace("eigenvectors", f["eigenvectors"][:, :1])(f), "eigenvalues"),
    "no eigenvalues": (lambda f: f.__delitem__("eigenvalues"), "eigenvalues are missing"),
    "nan eigenvalues": (lambda f: _replace("eigenvalues", [np.nan, 1.0])(f), "eigenvalues hold NaN"),
    "a repeated name": (lambda f: f.attrs.__setitem__("parameter_names", ["fc.weight", "fc.weight"]), "repeat"),
    "string vectors": (lambda f: _replace("eigenvectors", np.array([[b"a", b"b"]] * 3))(f), "eigenvectors are not"),
    "a zero vector": (_scale_column(1, 0.0), "eigenvector 2 has norm 0, not 1"),
    "an overflowing vector": (_scale_column(0, 1e300), "eigenvector 1 has norm"),
    "a nan vector": (_scale_column(0, np.nan), "NaN or Inf"),
    "non-orthogonal vectors": (_mix_columns, "eigenvectors 1 and 2 have cosine 0.707"),
    "an unknown which": (lambda f: f.attrs.__setitem__("which", "XX"), "which is 'XX'"),
    "text n_params": (lambda f: f.attrs.__setitem__("n_params", "650"), "n_params='650'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_EIGENVECTORS))
def test_a_crafted_eigenvector_file_is_one_line_naming_the_file_and_field(eigen_file, tmp_path, case):
    good, obj, expected = eigen_file
    path = tmp_path / "crafted.h5"
    shutil.copy(good, path)
    change, words = HOSTILE_EIGENVECTORS[case]
    _craft(path, change)
    msg = one_line_error(read_eigendirections, path, obj.params, expected=expected)
    assert msg.startswith(str(path)) and words in msg, msg


def test_which_must_agree_with_the_eigenvector_file(eigen_file):
    good, obj, expected = eigen_file
    assert read_eigendirections(good, obj.params, expected=expected, wanted="LA").which == "LA"
    msg = one_line_error(read_eigendirections, good, obj.params, expected=expected, wanted="SA")
    assert msg.startswith(f"--which SA asks for other eigenvectors than {good} holds (which=LA): give --which LA")
