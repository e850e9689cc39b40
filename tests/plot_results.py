"""Result files for the plot tests, written with h5py directly so that any array can be left out or bent.

``*_arrays`` build the arrays of a well-formed result of each kind (a dict name -> array); tests drop or
replace entries to make hostile files, and :func:`write_result` writes them the way the store lays them out
(root attributes, ``kind``, strings as HDF5 strings).
"""

import json
import pathlib
import re

import h5py
import numpy as np

SCHEMA = pathlib.Path(__file__).resolve().parents[1] / "docs" / "schema.md"

XS = np.linspace(-1.0, 0.5, 7)
YS = np.linspace(0.0, 2.0, 4)


def bowl(x, y):
    """The analytic loss of the surface files."""
    return (x - 0.3) ** 2 + 2 * (y - 0.5) ** 2 + 1.0 + 0.1 * x * y


def schema_axes(kind):
    """The axes docs/schema.md gives each array of ``kind``: a list of ``(regex of the path, axes)``.

    Read from the tables of the kind's section (``| `path` | dtype | shape | `["axis", ...]` | ...``); ``NNN``
    in a path stands for a three-digit number, ``<param>`` for any name; arrays without axes are left out.
    """
    section = re.search(rf"^## {re.escape(kind)}\n(.*?)(?=^## |\Z)", SCHEMA.read_text(), re.S | re.M).group(1)
    found = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].startswith("`") or not cells[3].startswith("`["):
            continue
        paths = re.findall(r"`([^`]+)`", cells[0])
        axes = [json.loads(a) for a in re.findall(r"`(\[[^`]*\])`", cells[3])]
        for path, ax in zip(paths, axes if len(axes) == len(paths) else axes * len(paths)):
            pattern = re.escape(path).replace("NNN", r"\d{3}").replace("<param>", ".+")
            found.append((re.compile(pattern), ax))
    return found


def axes_of(kind, name):
    """The axes docs/schema.md gives array ``name`` of ``kind``, or None."""
    return next((ax for pattern, ax in schema_axes(kind) if pattern.fullmatch(name)), None)


def write_result(path, kind, arrays, **attrs):
    """Write a result file of ``kind`` holding ``arrays`` (None values are left out); return its path.

    The file is marked complete (attribute ``complete``) when every done mask is all set, as the store does,
    unless ``complete`` is given. With ``axes=True`` each array gets the ``axes`` attribute docs/schema.md gives
    it, as the store writes them; ``group_attrs`` (path -> dict) sets attributes of groups.
    """
    masks = [np.asarray(v) for k, v in arrays.items() if k.rpartition("/")[2] == "done" and v is not None]
    with_axes, group_attrs = attrs.pop("axes", False), attrs.pop("group_attrs", {})
    with h5py.File(path, "w") as f:
        f.attrs["kind"] = kind
        f.attrs["complete"] = attrs.pop("complete", all(bool(np.all(m)) for m in masks))
        for key, value in attrs.items():
            f.attrs[key] = json.dumps(value) if isinstance(value, (list, dict)) else value
        for name, data in arrays.items():
            if data is None:
                continue
            arr = np.asarray(data)
            if arr.dtype.kind == "U":
                ds = f.create_dataset(name, data=arr.astype(object), dtype=h5py.string_dtype())
            else:
                ds = f.create_dataset(name, data=arr)
            axes = axes_of(kind, name) if with_axes else None
            if axes is not None:
                ds.attrs["axes"] = json.dumps(axes)
        for group, values in group_attrs.items():
            node = f[group] if group in f else f.create_group(group)
            for key, value in values.items():
                node.attrs[key] = value
    return path


def surface_arrays(xs=XS, ys=YS, done=None):
    """A surface of :func:`bowl` (accuracy = 1 / loss); points not ``done`` are NaN."""
    X, Y = np.meshgrid(xs, ys)
    loss = bowl(X, Y)
    mask = np.ones_like(loss, bool) if done is None else done
    return {
        "xcoordinates": xs,
        "ycoordinates": ys,
        "loss": np.where(mask, loss, np.nan),
        "accuracy": np.where(mask, 1 / loss, np.nan),
        "done": mask,
    }


SURFACE_ATTRS = {"surface_ndim": 2, "model": "toy", "norm": "filter", "bn": "eval"}


def fourier_arrays(kinds, noise=False, hf_offset=0.0):
    """A Fourier result of one layer per entry of ``kinds`` (the last layer has fewer frequencies)."""
    n = len(kinds)
    freq = np.linspace(0, 1, 5)
    delta = -np.outer(np.arange(1, n + 1), freq)
    delta[-1, 3:] = np.nan
    arrays = {
        "frequencies": freq,
        "delta_log_amplitude": delta,
        "high_frequency": -np.arange(1, n + 1) + hf_offset,
        "depth": np.arange(n) / (n - 1),
        "layer_names": np.array([f"l{i}" for i in range(n)]),
        "layer_kinds": np.array(kinds),
        "variance": np.arange(1.0, n + 1),
        "maps/000": np.zeros((4, 4)),
    }
    if noise:
        arrays.update(
            {
                "noise/frequencies": np.array([0.1, 0.5, 0.9]),
                "noise/accuracy_drop": np.array([0.1, 0.2, 0.3]),
                "noise/done": np.array([True, False, True]),
            }
        )
    return arrays


def fourier_attrs(model):
    """The root attributes of a Fourier result of ``model``."""
    return {"model": model, "profile": "diagonal", "frequency_axis": "normalised", "noise_strength": 0.5}


def hessian_arrays():
    """A hessian result: a Gaussian SLQ density around 1, two eigenvalues with residuals, trace samples."""
    grid = np.linspace(-1, 5, 200)
    return {
        "density/grid": grid,
        "density/values": np.exp(-((grid - 1) ** 2)) / np.sqrt(np.pi) + 1e-30,
        "density/nodes": np.array([[0.0, 1.0, 4.0]]),
        "density/weights": np.array([[0.5, 0.4, 0.1]]),
        "eigenvalues": np.array([3.0, 4.0]),
        "residuals": np.array([1e-3, 2e-3]),
        "trace/samples": np.array([10.0, 12.0, 11.0]),
    }


def spectrum_arrays(eig):
    """A spectrum result of the per-batch eigenvalues ``eig`` (batch x rank), every batch done."""
    return {"eigenvalues": eig, "batch_sizes": np.full(len(eig), 16), "done": np.ones(len(eig), bool)}


#: the ways a crafted HDF5 file keeps a dataset's bytes elsewhere (see :func:`foreign_surface`)
FOREIGN = ("external", "virtual", "soft-link", "external-link")


def foreign_surface(path, how, secret):
    """A surface file whose ``loss`` is read from (or written to) the file ``secret`` in one of :data:`FOREIGN` ways.

    ``secret`` is a plain file (``external``) or an HDF5 file with a dataset ``data`` of the loss's shape.
    """
    arrays = surface_arrays()
    shape = arrays["loss"].shape
    if how != "external":
        with h5py.File(secret, "w") as f:
            f["data"] = np.full(shape, 7.0)
    with h5py.File(path, "w") as f:
        f.attrs["kind"] = "surface"
        f.attrs["complete"] = True
        for key, value in SURFACE_ATTRS.items():
            f.attrs[key] = value
        for name, data in arrays.items():
            if name != "loss":
                f.create_dataset(name, data=data)
        if how == "external":
            f.create_dataset("loss", shape=shape, dtype="f8", external=[(str(secret), 0, 8 * int(np.prod(shape)))])
        elif how == "virtual":
            layout = h5py.VirtualLayout(shape=shape, dtype="f8")
            layout[:] = h5py.VirtualSource(str(secret), "data", shape=shape)
            f.create_virtual_dataset("loss", layout)
        elif how == "soft-link":
            f["elsewhere"] = arrays["loss"]
            f["loss"] = h5py.SoftLink("/elsewhere")
        else:
            f["loss"] = h5py.ExternalLink(str(secret), "/data")
    return path


def lesion_arrays(n=4):
    """A lesion result of ``n`` blocks, every block done."""
    return {
        "block_names": np.array([f"b{i}" for i in range(n)]),
        "block_kinds": np.array((["conv", "msa"] * n)[:n]),
        "depth": np.arange(n) / (n - 1),
        "stage": np.arange(n) // 2,
        "accuracy": np.linspace(0.5, 0.9, n),
        "nll": np.linspace(1.0, 0.5, n),
        "accuracy_drop": np.linspace(0.3, 0.05, n),
        "done": np.ones(n, bool),
    }


def similarity_arrays(n=3):
    """A within-model CKA result of ``n`` blocks."""
    names, kinds = np.array([f"b{i}" for i in range(n)]), np.array((["msa", "mlp"] * n)[:n])
    cka = np.eye(n) * 0.5 + 0.5
    return {
        "cka": cka,
        "names_a": names,
        "kinds_a": kinds,
        "names_b": names,
        "kinds_b": kinds,
        "hsic_xy": cka,
        "hsic_xx": np.ones(n),
        "hsic_yy": np.ones(n),
        "n_batches": np.array(4),
    }


def trajectory_arrays(n=4):
    """A trajectory of ``n`` snapshots (the first one, theta_0, has no angle)."""
    return {
        "distance": np.arange(n, dtype=float),
        "angle": np.concatenate([[np.nan], np.linspace(0.01, 0.1, n - 1)]),
        "norm": np.full(n, 10.0),
        "epoch": np.arange(n),
        "snapshots": np.array([f"e{i}.pt" for i in range(n)]),
    }


def connect_arrays(n=5):
    """A line between two networks on the train split: loss ``1 + 4 a (1 - a)``, accuracy ``1 - a (1 - a)``."""
    a = np.linspace(0.0, 1.0, n)
    return {
        "splits": np.array(["train"]),
        "line/coords": a,
        "line/loss": (1 + 4 * a * (1 - a))[None],
        "line/data_loss": (1 + 4 * a * (1 - a))[None],
        "line/accuracy": (1 - a * (1 - a))[None],
        "line/done": np.ones(n, bool),
    }


def sharpness_arrays(n=3):
    """Per-batch sharpness at two radii, the mean and an interval."""
    values = np.array([[0.01, 0.2], [0.02, 0.3], [0.03, 0.4]])[:n]
    return {
        "rho": np.array([0.01, 0.05]),
        "values": values,
        "done": np.ones(n, bool),
        "mean": values.mean(0),
        "low": values.min(0),
        "high": values.max(0),
    }


def track_arrays(n=4):
    """Sharpness recorded every 10 steps against the SGD threshold 2 / 0.1."""
    return {
        "step": np.arange(n) * 10.0,
        "sharpness": np.linspace(1.0, 15.0, n),
        "threshold": np.full(n, 20.0),
        "done": np.ones(n, bool),
    }


def curvature_arrays(k=2, blocks=2):
    """The Hessian and two approximations: top-k pairs, SLQ nodes, densities on one grid, distances, blocks."""
    grid = np.linspace(-1.0, 3.0, 50)
    values = np.stack([np.exp(-((grid - c) ** 2)) / np.sqrt(np.pi) for c in (0.5, 0.3, 0.8)])
    return {
        "operators": np.array(["hessian", "ggn", "kfac"]),
        "approximations": np.array(["ggn", "kfac"]),
        "spectra/eigenvalues": np.array([[1.0, 2.0], [0.8, 1.9], [0.3, 0.9]])[:, :k],
        "spectra/residuals": np.full((3, k), 1e-6),
        "spectra/converged": np.ones((3, k), bool),
        "spectra/angles": np.array([[0.0, 0.0], [0.1, 0.4], [0.5, 1.2]])[:, :k],
        "spectra/nodes": np.tile(np.linspace(-0.5, 2.5, 4), (3, 2, 1)),
        "spectra/weights": np.full((3, 2, 4), 0.25),
        "spectra/done": np.ones(3, bool),
        "distance/spectral": np.array([0.4, 0.9]),
        "distance/spectral_converged": np.ones(2, bool),
        "distance/frobenius": np.array([0.5, 0.95]),
        "distance/frobenius_stderr": np.array([0.02, 0.01]),
        "distance/done": np.ones(2, bool),
        "density/grid": grid,
        "density/values": values,
        "blocks/names": np.array([f"b{i}" for i in range(blocks)]),
        "blocks/kinds": np.array(["conv", "other"][:blocks]),
        "blocks/size": np.array([40, 10][:blocks]),
        "blocks/spectral": np.full((blocks, 2), 0.5),
        "blocks/spectral_converged": np.ones((blocks, 2), bool),
        "blocks/frobenius": np.full((blocks, 2), 0.6),
        "blocks/frobenius_stderr": np.full((blocks, 2), 0.01),
        "blocks/hessian_spectral_norm": np.full(blocks, 2.0),
        "blocks/done": np.ones(blocks, bool),
    }


def well_formed(kind):
    """``(arrays, attrs)`` of a well-formed result of ``kind`` (every registered kind)."""
    return {
        "surface": lambda: (surface_arrays(), dict(SURFACE_ATTRS)),
        "hessian": lambda: (hessian_arrays(), {"model": "toy"}),
        "spectrum": lambda: (spectrum_arrays(np.array([[1.0, 3.0], [-1.0, 4.0], [2.0, 5.0]])), {"model": "toy"}),
        "fourier": lambda: (fourier_arrays(["conv", "msa", "mlp"], noise=True), fourier_attrs("toy")),
        "lesion": lambda: (lesion_arrays(), {"model": "toy", "intact_accuracy": 0.9, "intact_nll": 0.4}),
        "similarity": lambda: (similarity_arrays(), {"model": "toy", "comparison": "within", "n_samples": 64}),
        "trajectory": lambda: (trajectory_arrays(), {"model": "toy"}),
        "connect": lambda: (connect_arrays(), {"model": "toy", "steps": 5}),
        "sharpness": lambda: (sharpness_arrays(), {"model": "toy", "measure": "worst", "batch_size": 16}),
        "sharpness_track": lambda: (track_arrays(), {"model": "toy", "optimizer": "sgd"}),
        "curvature": lambda: (curvature_arrays(), {"model": "toy", "n_params": 50, "n_samples": 16}),
    }[kind]()
