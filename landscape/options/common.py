"""Choices and defaults shared by several analyses, and the validation of the data options they all have."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from landscape.errors import LandscapeError
from landscape.options import checks

#: dataset splits, other names of them, and every name a user may give (``val`` is another name for ``test``)
SPLITS = ("train", "test")
SPLIT_ALIASES = {"val": "test"}
SPLIT_CHOICES = SPLITS + tuple(SPLIT_ALIASES)
#: data losses a user may choose, and every data loss (the augmented data's included)
CRITERIA = ("cross_entropy", "mse")
#: penalties added to the data loss, and the coefficient each takes by default
REGULARIZERS = ("none", "l2", "norm-sum")
REG_COEF_DEFAULTS = {"none": 0.0, "l2": 5e-4, "norm-sum": 0.05}
#: what an Objective's determinism check compares over two passes: the loss alone (an analysis of losses only,
#: such as a surface along random directions) or the loss and its gradient (every analysis that differentiates)
DETERMINISM_CHECKS = ("loss", "gradient")
#: channels-last inputs are timed against NCHW only when the 2D convolutions take at least this share of a CPU
#: forward (a ViT's patch embedding takes 1-2%: its layout cannot pay for the six forwards that time it)
LAYOUT_MIN_CONV_SHARE = 0.1
#: floating-point types of the Hessian computations
DTYPES = ("float32", "float64")
#: a model with its BatchNorms folded (:mod:`landscape.models.bn_fold`) is used only when its loss at the objective's
#: point agrees with the unfolded loss to this relative tolerance: in float64, and in every other dtype
FOLD_RTOL_FLOAT64, FOLD_RTOL = 1e-10, 1e-4
#: the data a surface or spectrum is measured on: fixed un-augmented images with hard labels (``none``), or
#: Paper A's training augmentation drawn once and held fixed (``paper-a``, see :mod:`landscape.data.augment`)
AUGMENTATIONS = ("none", "paper-a")
#: the data loss of augmented data: the cross-entropy against the mixed, smoothed label distributions
AUGMENTED_CRITERION = "soft_cross_entropy"
ALL_CRITERIA = (*CRITERIA, AUGMENTED_CRITERION)


def canonical_split(split: str) -> str:
    """The one name of a split: ``val`` is ``test``, case does not matter.

    Args:
        split: the split given.

    Returns:
        ``train`` or ``test``.

    Raises:
        LandscapeError: an unknown split.
    """
    name = SPLIT_ALIASES.get(str(split).lower(), str(split).lower())
    if name not in SPLITS:
        raise LandscapeError(f"unknown split {split!r}: use 'train' or 'test' ('val' is another name for 'test')")
    return name


def choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a one-line error listing them.

    Args:
        value: the value given.
        name: the option's name, for the message (e.g. ``--which``).
        choices: the allowed values.

    Returns:
        ``value`` as a string.

    Raises:
        LandscapeError: ``value`` is not one of ``choices``.
    """
    if value not in choices:
        raise LandscapeError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
    return str(value)


def auto_or_count(value: Any, name: str) -> int | str:
    """``"auto"``, or a whole number >= 1 (a string of digits is read as one).

    Args:
        value: the option's value.
        name: the CLI option, for the message.

    Returns:
        ``"auto"`` or the number as an ``int``.

    Raises:
        LandscapeError: anything else.
    """
    if isinstance(value, str):
        if value.strip() == "auto":
            return "auto"
        try:
            value = int(value.strip())
        except ValueError:
            raise LandscapeError(f"{name} must be a positive integer or auto, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise LandscapeError(f"{name} must be a positive integer or auto, got {value!r}")
    return checks.positive_int(value, name)


def check_data_options(split: str, samples: int | None, batch_size: int, seed: int) -> str:
    """Validate the options every analysis has: a known split, positive sample and batch counts, an int seed.

    Args:
        split: dataset split, one of :data:`SPLIT_CHOICES`.
        samples: number of samples (a positive integer), or None for the whole split.
        batch_size: samples per batch (a positive integer).
        seed: the analysis' seed (a whole number in ``[0, checks.MAX_SEED]``).

    Returns:
        The split's one name (:func:`canonical_split`), which the options keep so that ``val`` and ``test`` are
        the same run.

    Raises:
        LandscapeError: naming the first option that is invalid.
    """
    split = canonical_split(split)
    if samples is not None:
        checks.positive_int(samples, "--samples")
    checks.positive_int(batch_size, "--batch-size")
    checks.seed(seed, "--seed")
    return split


def check_regularizer(kind: str, coef: float | None) -> None:
    """Validate a regulariser kind and its coefficient (None: the kind's default).

    Args:
        kind: the regulariser, one of :data:`REGULARIZERS`.
        coef: its coefficient (finite, >= 0), or None for :data:`REG_COEF_DEFAULTS`.

    Raises:
        LandscapeError: an unknown kind, or a negative or non-finite coefficient.
    """
    choice(kind, "regulariser", REGULARIZERS)
    if coef is not None:
        checks.non_negative(coef, "--reg-coef")


def check_augment(augment: Any, copies: Any, criterion: str = "cross_entropy") -> None:
    """Validate the augmentation options: a known kind, a whole number of copies >= 1, a cross-entropy loss.

    Args:
        augment: one of :data:`AUGMENTATIONS`.
        copies: augmented copies drawn of each sample (a whole number >= 1).
        criterion: the data loss asked for; augmented data are measured with :data:`AUGMENTED_CRITERION`,
            so only the default ``cross_entropy`` goes with ``paper-a``.

    Raises:
        LandscapeError: an unknown ``augment``, ``copies`` not a whole number >= 1 or other than 1 without
            augmentation (it would have no effect), or ``paper-a`` with another criterion.
    """
    choice(augment, "--augment", AUGMENTATIONS)
    checks.positive_int(copies, "--augment-copies")
    if augment == "none" and copies != 1:
        raise LandscapeError(
            f"--augment-copies {copies} has no effect without augmentation (--augment none); add --augment "
            "paper-a, or leave --augment-copies out"
        )
    if augment != "none" and criterion != "cross_entropy":
        raise LandscapeError(
            f"--augment {augment} measures the soft-target cross-entropy of the mixed labels; "
            f"leave the criterion at cross_entropy (got {criterion!r})"
        )


def refuse_without(options: Any, active: bool, switch: str, names: Sequence[str]) -> None:
    """Refuse options set away from their defaults while the option they belong to is off: they would do nothing.

    Args:
        options: a dataclass of options.
        active: whether the option they belong to is on.
        switch: that option, as the user gives it (e.g. ``"--density"``).
        names: the fields that only act with it.

    Raises:
        LandscapeError: one of ``names`` differs from its declared default while ``active`` is false.
    """
    if active:
        return
    defaults = {f.name: f.default for f in fields(options)}
    for name in names:
        if getattr(options, name) != defaults[name]:
            flag = "--" + name.replace("_", "-")
            raise LandscapeError(f"{flag} has no effect without {switch}; add {switch}, or leave {flag} out")


class FieldDefaults:
    """Mixin of the options dataclasses: :meth:`defaults` lists every field's declared default."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Field name -> default value (what the CLI's options default to).

        Returns:
            A dict of every field's name and its declared default.
        """
        return {f.name: f.default for f in fields(cls)}  # type: ignore[arg-type]
