"""Options shared by the analysis commands (surface, hessian, spectrum, fourier), declared once."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from landscape.options.common import SPLIT_CHOICES

if TYPE_CHECKING:
    from landscape.core.source import ModelSource

F = TypeVar("F", bound=Callable[..., object])

#: the help of ``--dtype``, whose default is the model's own type
DTYPE_HELP = "Floating-point type of the computation (default: the model's own; the file records the type used)."


def _apply(func: F, decorators: list[Callable[[F], F]]) -> F:
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def command_line() -> str:
    """The command line this process was started with, as a result file records it (``landscape surface ...``).

    Returns:
        ``landscape`` and the arguments, quoted for a shell.
    """
    import shlex
    import sys

    return shlex.join(["landscape", *sys.argv[1:]])


def parse_model_kw(items: tuple[str, ...]) -> dict[str, object]:
    """``key=value`` pairs; values are parsed as JSON when they can be (numbers, lists, booleans)."""
    from landscape.errors import LandscapeError

    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LandscapeError(f"--model-kw expects key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _numbers(text: str | None, option: str) -> tuple[float, ...] | None:
    from landscape.errors import LandscapeError

    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise LandscapeError(f"{option} takes comma-separated numbers, e.g. 0.485,0.456,0.406 (got {text!r})") from None


def _input_size(text: str | None) -> int | tuple[int, int] | None:
    from landscape.errors import LandscapeError

    if text is None:
        return None
    parts = text.lower().split("x")
    if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
        raise LandscapeError(f"--input-size takes SIZE or HxW, e.g. 224 or 224x320 (got {text!r})")
    sizes = tuple(int(p) for p in parts)
    return sizes[0] if len(sizes) == 1 else (sizes[0], sizes[1])


class WholeNumber(click.ParamType):
    """The type of every integer option: a whole number from ``least`` to 2**62 (:data:`checks.MAX_INTEGER`).

    A number beyond 64 bits would otherwise reach torch, numpy or HDF5 as a Python object and fail there. The
    range is checked by :func:`landscape.options.checks.whole`, as the options classes check it for callers from
    Python, so both say the same one line (``--steps must be a whole number >= 1, got 0``).

    Args:
        least: the smallest value the option takes.
    """

    name = "integer"

    def __init__(self, least: int = 0) -> None:
        self.least = least

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """``value`` (text or a number) as an int in ``[least, MAX_INTEGER]``.

        Raises:
            click.BadParameter: ``value`` is not a whole number.
            LandscapeError: it lies outside the range (one line naming the option).
        """
        from landscape.options.checks import whole

        number = click.INT.convert(value, param, ctx)
        option = param.opts[0] if param is not None and param.opts else "the number"
        return whole(number, option, self.least)

    def __repr__(self) -> str:
        return f"WholeNumber({self.least})"


class OutputFile(click.Path):
    """The type of every ``--out`` that names a file: a path that is not an existing folder nor ends with a slash.

    ``--out newdir/`` means a folder, and the file would be written as ``newdir``: refused in one line.
    """

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """``value`` as click's file path; an error when it ends with a path separator.

        Raises:
            LandscapeError: ``value`` ends with ``/`` (a folder's name).
        """
        from landscape.options.checks import output_file

        option = param.opts[0] if param is not None and param.opts else "the output"
        return super().convert(output_file(value, option, self._example(param)), param, ctx)

    @staticmethod
    def _example(param: click.Parameter | None) -> str:
        default = param.default if param is not None and isinstance(param.default, str) else None
        return default or "FILE"


#: the type of every ``--out`` that names a file (not a folder)
OUTPUT = OutputFile()
#: a count: a whole number >= 1
COUNT = WholeNumber(1)
#: a whole number >= 0
NATURAL = WholeNumber(0)
#: the type of every seed option: a whole number a seed of torch can be, offsets included (see checks.MAX_SEED)
SEED = WholeNumber(0)


def model_source(
    ckpt: str | None,
    model: str | None,
    model_kw: tuple[str, ...],
    num_classes: int | None,
    pretrained: bool,
    random_init: bool,
    model_output: str | None,
    input_size: str | None,
    mean: str | None,
    std: str | None,
    seed: int = 0,
) -> ModelSource:
    """Build the :class:`~landscape.core.source.ModelSource` of the model options (all validated here)."""
    from landscape.core.source import ModelSource
    from landscape.data.preprocess import Preprocess

    preprocess = Preprocess(
        image_size=_input_size(input_size), mean=_numbers(mean, "--mean"), std=_numbers(std, "--std")
    )
    output: str | int | None = int(model_output) if model_output and model_output.isdigit() else model_output
    return ModelSource(
        checkpoint=ckpt,
        model=model,
        model_kwargs=parse_model_kw(model_kw),
        num_classes=num_classes,
        pretrained=pretrained,
        random_init=random_init,
        seed=seed,
        output=output,
        preprocess=None if preprocess == Preprocess() else preprocess,
    )


_MODEL_OPTIONS = (
    "ckpt",
    "model",
    "model_kw",
    "num_classes",
    "pretrained",
    "random_init",
    "model_output",
    "input_size",
    "mean",
    "std",
)


def checkpoint_options(
    *, split: str = "train", splits: tuple[str, ...] = SPLIT_CHOICES, endpoints: int = 1
) -> Callable[[F], F]:
    """The model to analyse and the data to analyse it on; the command receives ``source`` (a ModelSource).

    ``--ckpt``, ``--model``, ``--model-kw``, ``--num-classes``, ``--pretrained``, ``--random-init``,
    ``--model-output``, ``--input-size``, ``--mean``, ``--std`` become one ``source`` argument; ``--data`` and
    ``--split`` are passed as they are. With ``endpoints=2`` (the two ends of a path) ``--ckpt`` is given twice,
    or once after ``--pretrained`` / ``--random-init`` (which then make the first end), every other model option
    holds for both, and the command receives ``sources``: the two ModelSources, in order.

    Args:
        split: the default of ``--split``.
        splits: the choices of ``--split``.
        endpoints: 1 (one model) or 2 (two models of one architecture).

    Returns:
        The decorator.
    """

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in _MODEL_OPTIONS}
            seed = int(kwargs.get("seed") or 0)
            if endpoints == 1:
                return func(source=model_source(**given, seed=seed), **kwargs)
            return func(sources=_two_sources(given, seed), **kwargs)

        ckpt_help = (
            "Weights: a landscape checkpoint, a state dict (.pt/.pth) or .safetensors."
            if endpoints == 1
            else "Weights of an end (give twice: theta_A, then theta_B; once after --pretrained or --random-init, "
            "which make theta_A): a landscape checkpoint, a state dict (.pt/.pth) or .safetensors."
        )
        return _apply(
            command,  # type: ignore[arg-type]
            [
                click.option(
                    "--ckpt",
                    default=None if endpoints == 1 else (),
                    multiple=endpoints != 1,
                    type=click.Path(dir_okay=False),
                    help=ckpt_help,
                ),
                click.option(
                    "--model",
                    default=None,
                    help="Zoo name, timm:NAME, torchvision:NAME or py:module:factory [default: the checkpoint's].",
                ),
                click.option("--model-kw", multiple=True, help="Model constructor option key=value (repeatable)."),
                click.option(
                    "--num-classes",
                    default=None,
                    type=COUNT,
                    help="Output classes [default: the checkpoint's, the weights' or the data's].",
                ),
                click.option(
                    "--pretrained",
                    is_flag=True,
                    help="The library's published weights (timm/torchvision; needs a network).",
                ),
                click.option("--random-init", is_flag=True, help="Analyse the model at its seeded initialisation."),
                click.option(
                    "--model-output",
                    default=None,
                    help="Key or index of the logits when the model returns a dict or tuple.",
                ),
                click.option(
                    "--input-size", default=None, help="Input size SIZE or HxW [default: the model's or the data's]."
                ),
                click.option("--mean", default=None, help="Per-channel input mean, e.g. 0.485,0.456,0.406."),
                click.option("--std", default=None, help="Per-channel input std, e.g. 0.229,0.224,0.225."),
                click.option(
                    "--data", default=None, help="Dataset spec [default: the checkpoint's dataset, else digits]."
                ),
                click.option(
                    "--split",
                    default=split,
                    show_default=True,
                    type=click.Choice(splits),
                    help="val is another name for test" + ("; both: train, then test." if "both" in splits else "."),
                ),
            ],
        )

    return wrap


def _two_sources(given: dict[str, Any], seed: int) -> tuple[ModelSource, ModelSource]:
    """The two ends of a path: two ``--ckpt``, or one after ``--pretrained`` / ``--random-init`` (theta_A)."""
    from landscape.errors import LandscapeError

    ckpts = tuple(given.pop("ckpt") or ())
    flag = given["pretrained"] or given["random_init"]
    if len(ckpts) + int(bool(flag)) != 2:
        made = f"{len(ckpts)} --ckpt" + (" and --pretrained/--random-init" if flag else "")
        raise LandscapeError(
            f"give the two ends as --ckpt A.pt --ckpt B.pt (or --pretrained/--random-init for theta_A and one "
            f"--ckpt for theta_B), got {made}"
        )
    first = model_source(ckpt=None if flag else ckpts[0], **given, seed=seed)
    second = model_source(ckpt=ckpts[-1], **{**given, "pretrained": False, "random_init": False}, seed=seed)
    return first, second


def other_model_options(func: F) -> F:
    """A second model, each option of :func:`checkpoint_options` prefixed ``--other``; the command receives ``other``.

    ``--other FILE`` (the checkpoint), ``--other-model``, ``--other-model-kw``, ``--other-num-classes``,
    ``--other-pretrained``, ``--other-random-init``, ``--other-model-output``, ``--other-input-size``,
    ``--other-mean``, ``--other-std`` and ``--other-seed`` (of its random initialisation; default: ``--seed``)
    become one ``other`` argument: a :class:`~landscape.core.source.ModelSource` built by :func:`model_source`, or
    None when no source of weights is given (then no other model option may be given either).
    """
    from landscape.errors import LandscapeError

    names = [f"other_{name}" for name in _MODEL_OPTIONS if name != "ckpt"]

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        ckpt = kwargs.pop("other")
        given = {name[len("other_") :]: kwargs.pop(name) for name in names}
        seed = kwargs.pop("other_seed")
        if ckpt is None and not given["pretrained"] and not given["random_init"]:
            extra = [f"--other-{name.replace('_', '-')}" for name, value in given.items() if value]
            if extra or seed is not None:
                raise LandscapeError(
                    f"{(extra or ['--other-seed'])[0]} describes a second model: give its weights with --other FILE, "
                    "--other-pretrained or --other-random-init"
                )
            return func(other=None, **kwargs)
        seed = int(kwargs.get("seed") or 0) if seed is None else seed
        return func(other=model_source(ckpt=ckpt, **given, seed=seed), **kwargs)

    return _apply(
        command,  # type: ignore[arg-type]
        [
            click.option(
                "--other",
                default=None,
                type=click.Path(dir_okay=False),
                help="Weights of a second model to compare with (as --ckpt).",
            ),
            click.option("--other-model", default=None, help="The second model's name (as --model)."),
            click.option("--other-model-kw", multiple=True, help="The second model's option key=value (repeatable)."),
            click.option("--other-num-classes", default=None, type=COUNT, help="As --num-classes."),
            click.option("--other-pretrained", is_flag=True, help="The second model with published weights."),
            click.option("--other-random-init", is_flag=True, help="The second model at its seeded initialisation."),
            click.option(
                "--other-seed", default=None, type=SEED, help="Seed of --other-random-init [default: --seed]."
            ),
            click.option("--other-model-output", default=None, help="As --model-output, for the second model."),
            click.option("--other-input-size", default=None, help="As --input-size, for the second model."),
            click.option("--other-mean", default=None, help="As --mean, for the second model."),
            click.option("--other-std", default=None, help="As --std, for the second model."),
        ],
    )


def regularizer_options(func: F) -> F:
    """``--regularizer`` (one of :data:`~landscape.options.common.REGULARIZERS`) and ``--reg-coef``."""
    from landscape.options.common import REG_COEF_DEFAULTS, REGULARIZERS

    defaults = ", ".join(f"{kind}: {coef:g}" for kind, coef in REG_COEF_DEFAULTS.items() if kind != "none")
    return _apply(
        func,
        [
            click.option(
                "--regularizer",
                default=REGULARIZERS[0],
                show_default=True,
                type=click.Choice(REGULARIZERS),
                help="l2: 0.5*C*sum ||theta_p||^2; norm-sum: C*sum ||theta_p|| (Paper A's plotted loss).",
            ),
            click.option("--reg-coef", default=None, type=float, help=f"Regulariser coefficient [{defaults}]."),
            click.option("--allow-stochastic", is_flag=True, help="Do not refuse a model whose two passes differ."),
        ],
    )


def augment_options(func: F) -> F:
    """``--augment`` (one of :data:`~landscape.options.common.AUGMENTATIONS`) and ``--augment-copies``.

    Both are validated by the command's options class (a one-line error naming the option), not by click.
    """
    from landscape.options.common import AUGMENTATIONS

    return _apply(
        func,
        [
            click.option(
                "--augment",
                default=AUGMENTATIONS[0],
                show_default=True,
                metavar="|".join(AUGMENTATIONS),
                help="Data of the loss: the fixed images with hard labels (none), or Paper A's training "
                "augmentation (crop, flip, RandAugment, MixUp/CutMix, label smoothing 0.1) drawn once from "
                "--seed and held fixed, measured by the soft-target cross-entropy (paper-a).",
            ),
            click.option(
                "--augment-copies",
                default=1,
                show_default=True,
                type=COUNT,
                help="Augmented copies of each sample (--augment paper-a): the data are copies x samples images.",
            ),
        ],
    )


def output_options(default_out: str) -> Callable[[F], F]:
    """``--device``, ``--out``, ``--force``, ``--quiet``: where the analysis runs and what it writes."""

    def wrap(func: F) -> F:
        return _apply(
            func,
            [
                click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda."),
                click.option("--out", default=default_out, show_default=True, type=OUTPUT),
                click.option("--force", is_flag=True, help="Overwrite an existing result file from other options."),
                click.option("--quiet", is_flag=True, help="No plan before the work, no progress."),
            ],
        )

    return wrap


#: the help of ``--operator``, shared by every command that takes it
OPERATOR_HELP = (
    "The curvature operator: the Hessian H, the generalised Gauss-Newton G = J^T H_z J, the empirical Fisher "
    "(1/N) sum g_n g_n^T, the residual H - G, or K-FAC (Kronecker factors per Linear/Conv2d layer)."
)


def eigen_options(
    defaults: Any, *, top_k: str, which: str, ncv: str, maxiter: str, hvp: str, solver: bool = False
) -> Callable[[F], F]:
    """The eigen solver's options and its products', as ``landscape hessian`` and ``landscape spectrum`` share them.

    ``--top-k``, ``--which`` (``--solver`` too with ``solver``), ``--tol``, ``--ncv``, ``--maxiter``, ``--hvp``,
    ``--operator`` and ``--dtype``, their defaults from the command's options class.

    Args:
        defaults: the command's options class (:class:`~landscape.options.hessian.HessianOptions` or
            :class:`~landscape.options.hessian.SpectrumOptions`), whose defaults the options show.
        top_k: the help of ``--top-k``.
        which: the help of ``--which``.
        ncv: the help of ``--ncv``.
        maxiter: the help of ``--maxiter``.
        hvp: the help of ``--hvp``.
        solver: also declare ``--solver`` (one of :data:`~landscape.options.hessian.SOLVERS`).

    Returns:
        The decorator.
    """
    from landscape.options.common import DTYPES
    from landscape.options.hessian import HVP_MODES, OPERATORS, SOLVERS, WHICH

    D = defaults

    def wrap(func: F) -> F:
        return _apply(
            func,
            [
                click.option("--top-k", default=D.top_k, show_default=True, type=NATURAL, help=top_k),
                click.option("--which", default=D.which, show_default=True, type=click.Choice(WHICH), help=which),
                *(
                    [click.option("--solver", default=D.solver, show_default=True, type=click.Choice(SOLVERS))]
                    if solver
                    else []
                ),
                click.option(
                    "--tol",
                    default=D.tol,
                    show_default=True,
                    type=float,
                    help="A pair converges when its residual ||H y - lambda y|| <= TOL |lambda|.",
                ),
                click.option("--ncv", default=D.ncv, type=COUNT, help=ncv),
                click.option("--maxiter", default=D.maxiter, type=COUNT, help=maxiter),
                click.option("--hvp", default=D.hvp, show_default=True, type=click.Choice(HVP_MODES), help=hvp),
                click.option(
                    "--operator",
                    default=D.operator,
                    show_default=True,
                    type=click.Choice(OPERATORS),
                    help=OPERATOR_HELP,
                ),
                click.option("--dtype", default=D.dtype, type=click.Choice(DTYPES), help=DTYPE_HELP),
            ],
        )

    return wrap
