"""Choices of ``landscape train``: its optimisers and the BatchNorm mode of ``--track-sharpness``. No torch here."""

from __future__ import annotations

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
