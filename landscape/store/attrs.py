"""The attributes of a result file: how values are encoded, and the identity that decides a resume."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: attributes that describe how a run happened, not what it computes; they never block a resume
#: (what a run computed on, landscape.runtime.machine, among them: another machine or thread count resumes a file)
VOLATILE = frozenset(
    {"created", "command", "landscape_version", "torch_version", "device", "complete", "identity", "has_results"}
    | {"cpu_capability", "torch_threads"}
) | frozenset(  # measured or derived before the work; a file from before these were written still resumes
    {
        "centre_loss",
        "centre_accuracy",
        "preprocess_source",
        "preprocess_image_size",
        "preprocess_mean",
        "preprocess_std",
    }
)

#: the root attributes that say where a result came from (docs/schema.md, the attributes shared by every kind); a
#: second model's (connect, similarity) are these names with ``other_`` in front
PROVENANCE = (
    "landscape_version",
    "created",
    "command",
    "model",
    "model_kwargs",
    "checkpoint",
    "checkpoint_sha256",
    "pretrained",
    "num_classes",
    "model_output",
    "dataset",
    "split",
    "preprocess",
    "n_samples",
    "seed",
    "device",
    "torch_version",
    "cpu_capability",
    "torch_threads",
)


def storable_text(text: str) -> str:
    """``text`` as valid UTF-8: each byte of a file name that is not UTF-8 written as a backslash escape.

    Python keeps such bytes as lone surrogates, which no UTF-8 writer accepts; everything else is unchanged.

    Args:
        text: a string, e.g. a path given on the command line.

    Returns:
        A string every UTF-8 writer (HDF5, an HTML page) accepts.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def encode(value: Any) -> Any:
    """An attribute value as HDF5 stores it: ``None``, dicts, lists and tuples as JSON, paths as strings.

    Text is stored as valid UTF-8 (:func:`storable_text`: a non-UTF-8 byte of a file name as an escape).

    Args:
        value: the value to store.

    Returns:
        A value h5py can store as an attribute.
    """
    if value is None or isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, Path):
        return storable_text(str(value))
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def decode(value: Any) -> Any:
    """An attribute value as read back: bytes as text, numpy scalars as Python ones, JSON strings decoded.

    Args:
        value: the value h5py read.

    Returns:
        The value as it was given to :func:`encode` (``"nan"`` stays a string); text that is not UTF-8 (a crafted
        file) with each foreign byte as a backslash escape (:func:`as_str`); text that is not JSON, or nested too
        deeply to decode, stays text (its reader then says what it should have been).
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bytes, str)):
        value = as_str(value)
    if isinstance(value, str) and value[:1] in "[{n" and value not in ("nan",):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


#: path attributes that are provenance only when the file's content hash (the value) is recorded beside them
CONTENT_HASHED = {
    "checkpoint": "checkpoint_sha256",
    "target": "target_sha256",
    "other_checkpoint": "other_checkpoint_sha256",
}


def identity_of(attrs: Mapping[str, Any]) -> str:
    """Canonical JSON of the attributes that determine a run's numbers.

    All attributes but :data:`VOLATILE`; a checkpoint (or target) is identified by its SHA-256 when that is
    recorded, not by the path it was given by (``../r.pt`` and ``/abs/r.pt`` are the same run).

    Args:
        attrs: the root attributes of a run (options, provenance, ...).

    Returns:
        A JSON string with sorted keys; two runs are the same run when their strings are equal.
    """
    hashed = {path for path, digest in CONTENT_HASHED.items() if attrs.get(digest)}
    kept = {k: encode(v) for k, v in attrs.items() if k not in VOLATILE and k not in hashed}
    return json.dumps(kept, sort_keys=True, default=str)


def now() -> str:
    """The current UTC time in ISO 8601.

    Returns:
        E.g. ``"2024-05-01T12:34:56+00:00"`` (whole seconds).
    """
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def as_str(value: Any) -> str:
    """``value`` as valid UTF-8 text: bytes decoded as UTF-8, each byte that is not UTF-8 as a backslash escape.

    h5py reads a variable-length string attribute that is not UTF-8 as text with lone surrogates, and a
    fixed-length one as bytes; both become the same valid text (:func:`storable_text`), so that no reader of a
    crafted file meets a decoding error.

    Args:
        value: a str, bytes or any value.

    Returns:
        The text.
    """
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return storable_text(str(value))
