"""Options shared by the analysis commands (surface, hessian, spectrum, fourier), declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])


def _apply(func: F, decorators: list[Callable[[F], F]]) -> F:
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def checkpoint_options(*, split: str = "train", model_dest: str = "model_name") -> Callable[[F], F]:
    """``--ckpt``, ``--model``, ``--data``, ``--split``: the model to analyse and the data to analyse it on."""

    def wrap(func: F) -> F:
        return _apply(
            func,
            [
                click.option(
                    "--ckpt", required=True, type=click.Path(dir_okay=False), help="Checkpoint of a zoo model."
                ),
                click.option("--model", model_dest, default=None, help="Zoo model name, for checkpoints without one."),
                click.option(
                    "--data", default=None, help="Dataset spec [default: the checkpoint's dataset, else digits]."
                ),
                click.option("--split", default=split, show_default=True, type=click.Choice(["train", "test"])),
            ],
        )

    return wrap


def regularizer_options(func: F) -> F:
    """``--regularizer none|l2|norm-sum`` and ``--reg-coef``."""
    return _apply(
        func,
        [
            click.option(
                "--regularizer",
                default="none",
                show_default=True,
                type=click.Choice(["none", "l2", "norm-sum"]),
                help="l2: 0.5*C*sum ||theta_p||^2; norm-sum: C*sum ||theta_p|| (Paper A's plotted loss).",
            ),
            click.option(
                "--reg-coef", default=None, type=float, help="Regulariser coefficient [l2: 5e-4, norm-sum: 0.05]."
            ),
            click.option("--allow-stochastic", is_flag=True, help="Do not refuse a model whose two passes differ."),
        ],
    )


def output_options(default_out: str) -> Callable[[F], F]:
    """``--device``, ``--out``, ``--force``, ``--quiet``: where the analysis runs and what it writes."""

    def wrap(func: F) -> F:
        return _apply(
            func,
            [
                click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda."),
                click.option("--out", default=default_out, show_default=True, type=click.Path(dir_okay=False)),
                click.option("--force", is_flag=True, help="Overwrite an existing result file from other options."),
                click.option("--quiet", is_flag=True, help="No progress bar."),
            ],
        )

    return wrap
