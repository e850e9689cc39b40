"""Checkpoints: save with metadata, read without ever executing code from the file.

A landscape checkpoint is a ``torch.save``-d dict::

    {"format_version": 1, "model": str, "model_kwargs": dict, "num_classes": int,
     "state_dict": {name: Tensor}, "dataset": str | None, "epoch": int | None, "metrics": dict,
     "train_options": dict, "extra": dict, "landscape_version": str, "torch_version": str,
     "cpu_capability": str, "torch_threads": int, "device": str,
     "created": ISO-8601 UTC str, "written_by": "written by landscape"}

holding only tensors, str, int, float, bool, None, lists, tuples and dicts, so that
``torch.load(weights_only=True)`` reads it. Every file is read that way: a file that needs other pickled
objects is refused, never loaded with ``weights_only=False``.

Besides that format `read_checkpoint` accepts a plain state dict (a dict of tensors), a ``.safetensors`` file
(read with ``safetensors.torch.load_file``, which holds tensors only) and the files of Paper A's repository
(``{"name": str, "state_dict": {...}, "optimizer": ...}``; any dict with a ``state_dict`` dict). Such files
name no model, so `load_model` needs ``model_name`` (a zoo name or a ``timm:`` / ``torchvision:`` / ``py:``
spec). A ``module.`` (DataParallel)
or ``_orig_mod.`` (torch.compile) prefix shared by every key is removed. Their number of classes, unless
given, is inferred from the classifier head: the last 2-D tensor whose name ends in ``weight`` and has a
``head``, ``fc``, ``linear``, ``classifier`` or ``logits`` component (e.g. ``head.weight``, ``fc.weight``),
else the last 2-D ``*weight`` tensor of the file; its first dimension is the class count.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import itertools
import os
import pickle
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from landscape.errors import LandscapeError, first_line
from landscape.models import create_model
from landscape.models.external import is_external, split_spec
from landscape.models.registry import resolve_model_name
from landscape.runtime.machine import machine
from landscape.store.files import WRITTEN_BY, atomic_write, file_type, landscape_kind, os_error, read_regular
from landscape.version import __version__

FORMAT_VERSION = 1
#: constructor options a checkpoint file may not set: they make a library load or download other files
UNTRUSTED_MODEL_KWARGS = frozenset(
    {
        "pretrained",
        "weights",
        "checkpoint_path",
        "pretrained_cfg",
        "pretrained_cfg_overlay",
        "cache_dir",
        "weights_backbone",
    }
)
HEAD_NAMES = ("head", "fc", "linear", "classifier", "logits")
#: what to do about weights that do not fit a model named by the user alone
TRAINED_WITH = "pass the --model and --model-kw it was trained with"
_PREFIXES = ("module.", "_orig_mod.")


@dataclass
class Checkpoint:
    """What `read_checkpoint` found: model name/options (None/{} for foreign files), weights, metadata.

    Attributes:
        model_name: The model spec stored in a landscape checkpoint; None for foreign files.
        model_kwargs: The stored constructor options ({} for foreign files).
        num_classes: The stored class count, or the one inferred from the head (see `infer_num_classes`).
        state_dict: The weights, on CPU, with a shared ``module.`` / ``_orig_mod.`` prefix removed.
        meta: Every other stored entry (landscape format) or ``{"format": ...}`` plus plain scalar entries.
        path: The file read.
        sha256: Hex SHA-256 of the file's bytes.
    """

    model_name: str | None
    model_kwargs: dict
    num_classes: int | None
    state_dict: dict[str, Tensor]
    meta: dict = field(default_factory=dict)
    path: Path = Path()
    sha256: str = ""


def _plain(value: Any, where: str) -> Any:
    """``value`` as data that weights_only loading accepts (numpy scalars/Paths/dtypes become plain)."""
    if value is None or isinstance(value, Tensor):
        return value
    for kind in (bool, int, float, str):  # exact types: subclasses (enums, TorchVersion) need pickled code
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, tuple):
        return tuple(_plain(v, where) for v in value)
    if isinstance(value, list):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, where) for k, v in value.items()}
    if isinstance(value, (Path, torch.device, torch.dtype)):
        return str(value)
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", None) == 0:
        return _plain(value.item(), where)  # numpy scalar
    raise LandscapeError(
        f"cannot store {type(value).__name__} value {value!r} in the checkpoint's {where}; "
        "use str, int, float, bool, None, lists or dicts"
    )


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    *,
    model_name: str,
    model_kwargs: dict,
    num_classes: int,
    dataset: str | None = None,
    epoch: int | None = None,
    metrics: dict | None = None,
    train_options: dict | None = None,
    extra: dict | None = None,
    force: bool = False,
) -> Path:
    """Write ``model``'s weights and metadata to ``path`` atomically (temporary file + os.replace).

    The metadata record what the weights were computed on: torch version, CPU capability, torch threads and the
    model's device (:func:`landscape.runtime.machine.machine`, at the time of saving).

    Parent folders are created. An existing checkpoint that landscape wrote is replaced; any other file only with
    ``force`` (see :func:`landscape.store.files.check_replaceable`). Returns the path.

    Args:
        path: Destination file.
        model: The model whose ``state_dict()`` is saved (copied to CPU, detached).
        model_name: The model spec that rebuilds it (stored as ``"model"``).
        model_kwargs: Constructor options that rebuild it.
        num_classes: Number of classes of the model.
        dataset: The dataset spec it was trained on, or None.
        epoch: The training epoch reached, or None.
        metrics: Plain-data metrics (accuracy, loss, ...).
        train_options: Plain-data training options.
        extra: Any other plain-data metadata.
        force: replace a file at ``path`` that landscape did not write (never what is not a regular file).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        LandscapeError: If a metadata value cannot be stored as plain data, or the file cannot be written.
    """
    path = Path(path)
    state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    obj = {
        "format_version": FORMAT_VERSION,
        "model": str(model_name),
        "model_kwargs": _plain(dict(model_kwargs), "model_kwargs"),
        "num_classes": int(num_classes),
        "state_dict": state,
        "dataset": None if dataset is None else str(dataset),
        "epoch": None if epoch is None else int(epoch),
        "metrics": _plain(dict(metrics or {}), "metrics"),
        "train_options": _plain(dict(train_options or {}), "train_options"),
        "extra": _plain(dict(extra or {}), "extra"),
        "landscape_version": __version__,
        **machine(next(itertools.chain(model.parameters(), model.buffers()), torch.empty(0)).device),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "written_by": WRITTEN_BY,
    }
    buffer = io.BytesIO()  # serialised first: a failed write of the file is then an OSError of our own write
    torch.save(obj, buffer)
    with atomic_write(path, force=force, kind="checkpoint") as f:
        f.write(buffer.getbuffer())
    return path


def is_landscape_checkpoint(path: str | os.PathLike) -> bool:
    """Whether the regular file at ``path`` is a checkpoint landscape wrote (:func:`save_checkpoint`).

    Args:
        path: a file (a link is never followed).

    Returns:
        True for a checkpoint with landscape's mark.
    """
    return landscape_kind(path) == "checkpoint"


def snapshot_path(out: Path, tag: str) -> Path:
    """Path of a snapshot beside ``out``: ``run.pt`` -> ``run.<tag>.pt``.

    Args:
        out: the final checkpoint's path (no suffix: ``.pt``).
        tag: the snapshot's tag, e.g. ``init``, ``warmup`` or ``epoch010``.

    Returns:
        The snapshot's path.
    """
    return out.with_name(f"{out.stem}.{tag}{out.suffix or '.pt'}")


def weights_sha256(module: nn.Module) -> str:
    """Hex SHA-256 of a module's weights: every state-dict entry's name, dtype, shape and bytes, in order.

    Two modules have the same digest exactly when their state dicts are equal entry by entry (names, dtypes,
    shapes and values), whatever their devices; it identifies a model held in memory as a file's SHA-256
    identifies a checkpoint.

    Args:
        module: the model.

    Returns:
        The hex digest.
    """
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def require_checkpoint_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path, when it names a file to read a checkpoint from (a link is followed).

    Args:
        path: the checkpoint's path as given.

    Returns:
        ``Path(path)``.

    Raises:
        LandscapeError: nothing is there ("not found"), or what is there is not a regular file (a folder, a FIFO,
            a device: named as what it is), or it cannot be looked at (permissions).
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise LandscapeError(f"checkpoint {path} not found: check the path") from None
    except OSError as exc:
        raise os_error(exc, path, "read") from exc
    if not stat.S_ISREG(mode):
        raise LandscapeError(f"checkpoint {path} is {file_type(mode)}, not a file: give the path of a checkpoint file")
    return path


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes.

    Args:
        path: The file.

    Returns:
        The 64-character lower-case hex digest.

    Raises:
        LandscapeError: If ``path`` is not an existing file.
    """
    path = require_checkpoint_file(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _is_state_dict(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and bool(obj)
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items())
    )


def _strip_prefixes(state: dict[str, Tensor]) -> dict[str, Tensor]:
    for prefix in _PREFIXES:
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def infer_num_classes(state_dict: dict[str, Tensor]) -> int | None:
    """Class count from the classifier head's weight (rule in the module docstring), or None.

    Args:
        state_dict: Parameter names to tensors.

    Returns:
        ``shape[0]`` of the last 2-D ``*weight`` tensor under a :data:`HEAD_NAMES` component (else of the last
        2-D ``*weight`` tensor), or None when there is no 2-D weight.
    """
    weights = [k for k, v in state_dict.items() if k.endswith("weight") and v.ndim == 2]
    heads = [k for k in weights if any(part in HEAD_NAMES for part in k.split(".")[:-1])]
    chosen = (heads or weights or [None])[-1]
    return None if chosen is None else int(state_dict[chosen].shape[0])


def read_checkpoint(path: str | os.PathLike, *, companion: str | None = None) -> Checkpoint:
    """Read a checkpoint (landscape format, plain state dict, or ``{"name", "state_dict"}``) on CPU.

    Uses ``torch.load(map_location="cpu", weights_only=True)`` always; refuses files that need pickled code.
    A checkpoint the user names may be reached through a symbolic link; a file that landscape finds beside
    an output (a bend, a training snapshot: ``companion`` names it) is read without following a link and only
    when it is a regular file with one name (:func:`landscape.store.files.read_regular`).

    Args:
        path: A landscape checkpoint, a plain state dict, a dict with a ``state_dict`` entry, or ``.safetensors``.
        companion: what the file is, in words (e.g. ``"the bend"``), when landscape found it beside an output;
            None for a file the user named.

    Returns:
        The :class:`Checkpoint` read from the file.

    Raises:
        LandscapeError: If the file does not exist, needs pickled code, is not a PyTorch or safetensors file,
            has a newer format version, or holds no tensor state dict; a companion that is a link, not a regular
            file or a file of several names.
    """
    path = Path(path)
    if companion is not None:
        data = read_regular(path, companion)
        source: Any = io.BytesIO(data)
        sha = hashlib.sha256(data).hexdigest()
    else:
        source, sha = require_checkpoint_file(path), None
    if path.suffix == ".safetensors":
        state = _strip_prefixes(_read_safetensors(path, None if companion is None else data))
        return Checkpoint(
            None, {}, infer_num_classes(state), state, {"format": "safetensors"}, path, sha or file_sha256(path)
        )
    try:
        obj = torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only" in str(e).lower() or "weights_only" in str(e).lower():
            raise LandscapeError(
                f"refusing to load {path}: it needs arbitrary pickled code (not only tensors and plain data); "
                "if you trust it, re-save it as a plain state dict: torch.save(model.state_dict(), PATH)"
            ) from None
        raise LandscapeError(f"cannot read {path}: not a PyTorch checkpoint ({first_line(e)})") from None
    except Exception as e:  # any other failure means a damaged or foreign file
        raise LandscapeError(f"cannot read {path}: not a PyTorch checkpoint ({first_line(e)})") from None
    sha = sha or file_sha256(path)

    if isinstance(obj, dict) and "format_version" in obj:
        version = obj.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise LandscapeError(
                f"{path} has checkpoint format {version!r}, newer than this landscape's "
                f"{FORMAT_VERSION}: upgrade landscape"
            )
        state = obj.get("state_dict")
        if not isinstance(state, dict) or not _is_state_dict(state):
            raise LandscapeError(f"{path} is a damaged landscape checkpoint (no tensor state_dict): re-save it")
        meta = {k: v for k, v in obj.items() if k != "state_dict"}
        return Checkpoint(
            obj.get("model"),
            dict(obj.get("model_kwargs") or {}),
            obj.get("num_classes"),
            _strip_prefixes(state),
            meta,
            path,
            sha,
        )

    if _is_state_dict(obj):
        state, meta = obj, {"format": "state_dict"}
    elif isinstance(obj, dict) and _is_state_dict(obj.get("state_dict")):
        state = obj["state_dict"]
        meta = {"format": "dict_with_state_dict"}
        meta.update({k: v for k, v in obj.items() if isinstance(v, (str, int, float, bool)) or v is None})
    else:
        raise LandscapeError(
            f"{path} holds no state dict (expected a landscape checkpoint, a dict of tensors "
            "or a dict with a 'state_dict' entry): re-save it with landscape"
        )
    state = _strip_prefixes(state)
    return Checkpoint(None, {}, infer_num_classes(state), state, meta, path, sha)


def _read_safetensors(path: Path, data: bytes | None = None) -> dict[str, Tensor]:
    from safetensors.torch import load, load_file

    try:
        state = load_file(path, device="cpu") if data is None else load(data)
    except Exception as e:  # safetensors raises its own error types, and OSError/ValueError on damaged files
        raise LandscapeError(f"cannot read {path}: not a safetensors file ({first_line(e)})") from None
    if not state:
        raise LandscapeError(f"{path} holds no tensors: re-save it with safetensors.torch.save_file")
    return state


def _keys(keys: list[str], n: int = 3) -> str:
    return ", ".join(keys[:n]) + (", ..." if len(keys) > n else "")


def load_model(
    path: str | os.PathLike, model_name: str | None = None, num_classes: int | None = None, **model_kwargs: Any
) -> tuple[nn.Module, Checkpoint]:
    """Rebuild the model of a checkpoint with `landscape.models.registry.create_model` and load its weights strictly.

    Args:
        path: a landscape checkpoint, a plain state dict, a ``{"state_dict": ...}`` file or ``.safetensors``.
        model_name: zoo name or ``timm:`` / ``torchvision:`` / ``py:`` spec; required for files that name no
            model, and replaces the file's model otherwise.
        num_classes: defaults to the file's count (or the one inferred from its classifier head).
        **model_kwargs: constructor options; they override the file's, which are used only when ``model_name``
            names the file's own model.

    A file never chooses code to run: a ``py:`` model named only by the file, or file options in
    `UNTRUSTED_MODEL_KWARGS` (weights or files to load), are refused.

    Returns:
        The model in eval mode on CPU (in float64 when the file's weights are float64, else as built), and what was
        read from the file.

    Raises:
        LandscapeError: unreadable file, no model name, weights that do not fit the model, a weight that is not
            finite (:func:`require_finite_weights`).
    """
    ck = read_checkpoint(path)
    name = model_name or ck.model_name
    if name is None:
        raise LandscapeError(
            f"{ck.path} is a plain state dict that names no model: pass --model NAME "
            "(a zoo name, timm:NAME, torchvision:NAME or py:module:factory)"
        )
    if model_name is None and split_spec(name)[0] == "py":
        raise LandscapeError(
            f"{ck.path} names the model {name}, which would import and call code the file chooses; "
            f"if you trust it, pass --model {name}"
        )
    same = ck.model_name is not None and (name if is_external(name) else resolve_model_name(name)) == ck.model_name
    kwargs = dict(ck.model_kwargs) if same else {}
    unsafe = sorted(set(kwargs) & UNTRUSTED_MODEL_KWARGS)
    if unsafe:
        raise LandscapeError(
            f"{ck.path} asks for model option {unsafe[0]!r}, which loads or downloads other files; "
            "a checkpoint may not: re-save it without that option"
        )
    kwargs.update(model_kwargs)
    n_classes = num_classes if num_classes is not None else ck.num_classes
    if n_classes is None:
        raise LandscapeError(f"cannot tell the number of classes of {ck.path}: pass --num-classes")
    model = create_model(name, num_classes=n_classes, **kwargs)
    hint = (
        f"the checkpoint itself names model {ck.model_name!r}: drop --model to use it"
        if model_name is not None and ck.model_name is not None and not same
        else TRAINED_WITH
    )
    what = f"{ck.path} does not fit model {name!r} (num_classes={n_classes}, {kwargs})"
    if floating_dtype(ck.state_dict) == torch.float64:  # a float64 model stays float64 (others load as built)
        model = model.to(torch.float64)
    load_weights(model, ck.state_dict, what, hint=hint)
    require_finite_weights(model, str(ck.path))
    model.eval()
    return model, ck


def non_finite(named: Mapping[str, Tensor], kind: str = "parameter") -> str | None:
    """The first tensor holding NaN or Inf, described; None when every one is finite.

    The one test of finite weights: every analysis, ``landscape convert``, ``--init`` and training apply it.

    Args:
        named: names to tensors (integer tensors are skipped).
        kind: what they are, for the description (``"parameter"`` or ``"buffer"``).

    Returns:
        ``"parameter 'fc.weight' holds 3 non-finite value(s) (NaN or Inf) of 640"``, or None.
    """
    for name, t in named.items():
        if t.is_floating_point() or t.is_complex():
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                return f"{kind} {name!r} holds {bad} non-finite value(s) (NaN or Inf) of {t.numel()}"
    return None


def invalid_statistic(named: Mapping[str, Tensor]) -> str | None:
    """The first running variance (a buffer named ``running_var``) holding a negative value, described.

    A normalisation layer divides by ``sqrt(running_var + eps)``: a negative variance, which no training makes,
    gives NaN losses downstream.

    Args:
        named: buffer names to tensors.

    Returns:
        ``"buffer 'bn1.running_var' holds 2 negative value(s) of 8 (a variance is >= 0)"``, or None.
    """
    for name, t in named.items():
        if name.rsplit(".", 1)[-1] == "running_var" and t.is_floating_point():
            bad = int((t < 0).sum())
            if bad:
                return f"buffer {name!r} holds {bad} negative value(s) of {t.numel()} (a variance is >= 0)"
    return None


def non_finite_weight(model: nn.Module) -> str | None:
    """The first parameter, else buffer, of ``model`` holding NaN or Inf, else an invalid running variance.

    Args:
        model: the model.

    Returns:
        The description (:func:`non_finite`, :func:`invalid_statistic`), or None when every parameter and
        buffer is finite and every running variance is >= 0.
    """
    buffers = dict(model.named_buffers())
    return (
        non_finite(dict(model.named_parameters()), "parameter")
        or non_finite(buffers, "buffer")
        or invalid_statistic(buffers)
    )


def _damaged(found: str | None, where: str) -> None:
    if found is not None:
        raise LandscapeError(
            f"{where + ': ' if where else ''}{found}: the checkpoint is damaged or its training diverged; "
            "use another checkpoint"
        )


def require_finite(named: Mapping[str, Tensor], kind: str = "parameter", where: str = "") -> None:
    """Refuse tensors holding NaN or Inf: name the first such tensor and how many of its entries (:func:`non_finite`).

    Args:
        named: names to tensors (integer tensors are skipped).
        kind: what they are, for the message (``"parameter"`` or ``"buffer"``).
        where: what holds them (e.g. the checkpoint's path), put before the message; empty: nothing.

    Raises:
        LandscapeError: a floating or complex tensor holds a non-finite value.
    """
    _damaged(non_finite(named, kind), where)


def require_finite_weights(model: nn.Module, where: str = "") -> None:
    """Refuse a model with a parameter or buffer holding NaN or Inf (:func:`non_finite_weight`).

    Args:
        model: the model.
        where: what holds it, for the message (e.g. the checkpoint's path); empty: nothing.

    Raises:
        LandscapeError: naming the first non-finite parameter, else buffer, else invalid running variance.
    """
    _damaged(non_finite_weight(model), where)


def floating_dtype(weights: nn.Module | Mapping[str, Tensor]) -> torch.dtype | None:
    """The floating-point type of a model (its first floating parameter's, else buffer's) or of a state dict.

    Args:
        weights: the model, or its tensors by name.

    Returns:
        The dtype, or None where no tensor is floating.
    """
    tensors = weights.values() if isinstance(weights, Mapping) else [*weights.parameters(), *weights.buffers()]
    return next((t.dtype for t in tensors if isinstance(t, Tensor) and t.is_floating_point()), None)


def load_weights(model: nn.Module, state_dict: dict[str, Tensor], what: str, *, hint: str = TRAINED_WITH) -> None:
    """Load ``state_dict`` into ``model`` strictly; a key or shape mismatch is a one-line error starting ``what``.

    Args:
        model: The model to load into (modified in place).
        state_dict: Parameter and buffer names to tensors.
        what: Start of the error message, naming the file and model.
        hint: what to do, ending the error message.

    Raises:
        LandscapeError: If keys are missing or unexpected, or a tensor's shape differs from the model's.
    """
    expected = model.state_dict()
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    if missing or unexpected:
        raise LandscapeError(
            f"{what}: {len(missing)} missing keys ({_keys(missing)}) and {len(unexpected)} unexpected keys "
            f"({_keys(unexpected)}); {hint}"
        )
    shapes = [
        f"{k} {tuple(state_dict[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if state_dict[k].shape != v.shape
    ]
    if shapes:
        raise LandscapeError(f"{what}: {len(shapes)} tensors differ in shape (file vs model: {_keys(shapes)}); {hint}")
    model.load_state_dict(state_dict, strict=True)
