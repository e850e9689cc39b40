"""Choices of ``landscape train``: its optimisers, their momentum, the BatchNorm mode of ``--track-sharpness``."""

from __future__ import annotations

from landscape.errors import LandscapeError
from landscape.options import checks

#: ``--optimizer``: AdamW (decoupled weight decay), Adam (L2 decay in the gradient), plain SGD, SGD with Nesterov
#: momentum, SGD with heavy-ball momentum (``--momentum``); each has its stability threshold (docs/analyses.md)
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-nesterov", "heavy-ball")
#: the optimisers that use ``--momentum`` (it is refused with the others: it would have no effect)
MOMENTUM_OPTIMIZERS = ("sgd-nesterov", "heavy-ball")
#: their momentum when ``--momentum`` is not given
DEFAULT_MOMENTUM = 0.9
#: ``--track-mode``: the BatchNorm mode of the tracked Hessian; ``train``: each batch normalised by its own
#: statistics (the function the optimiser follows), running statistics neither used nor updated; ``eval``: the
#: running statistics (every other Hessian of the toolkit)
TRACK_MODES = ("train", "eval")


def momentum_applied(optimizer: str, momentum: float | None) -> float | None:
    """The momentum ``optimizer`` applies: ``momentum``, or :data:`DEFAULT_MOMENTUM` when None; None without one.

    Args:
        optimizer: one of :data:`OPTIMIZERS`.
        momentum: the momentum asked for (None: not given).

    Returns:
        The momentum of an optimiser of :data:`MOMENTUM_OPTIMIZERS`, in (0, 1); None for the others.

    Raises:
        LandscapeError: a momentum outside (0, 1) (NaN included), or one given to an optimiser that has none (it
            would have no effect).
    """
    if optimizer in MOMENTUM_OPTIMIZERS:
        momentum = DEFAULT_MOMENTUM if momentum is None else momentum
        checks.in_range(momentum, "momentum", 0.0, 1.0, low_open=True, high_open=True)
        return momentum
    if momentum is not None:
        raise LandscapeError(
            f"--momentum {momentum!r} has no effect with --optimizer {optimizer}: only "
            f"{' and '.join(MOMENTUM_OPTIMIZERS)} have a momentum; drop --momentum or choose one of them"
        )
    return None
