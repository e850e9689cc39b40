"""The shared front half of every analysis: model source -> model, dataset -> fixed batches, provenance.

``ModelSource -> create_model + weights -> Objective(...) -> analysis -> store -> plot``.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from landscape.core.centre import (
    CentreCheck,
    announcement,
    centre_attrs,
    check_centre,
    preprocess_sources,
    preprocess_values,
)
from landscape.core.criteria import select_logits
from landscape.core.objective import Objective
from landscape.core.source import AnalysisInputs, ModelSource, resolve_preprocess
from landscape.data.augment import augmented_batches
from landscape.data.batches import stream_batches
from landscape.data.given import ACCEPTED, GivenData, batches_sha256, describe, given_batches, is_data
from landscape.data.labels import LABEL_RANGE_REMEDY, check_label_range, label_range
from landscape.data.loading import load_dataset
from landscape.data.stream import BatchSource, HeldBatches, as_source
from landscape.errors import LandscapeError
from landscape.models.checkpoint import floating_dtype, require_finite_weights
from landscape.models.external import calling_forward
from landscape.options import checks
from landscape.options.common import AUGMENTED_CRITERION
from landscape.runtime import clock, distributed
from landscape.runtime import progress as progress_display
from landscape.runtime.distributed import resolve_device


def load_inputs(
    checkpoint: ModelSource | str | Path | nn.Module,
    *,
    model_name: str | None = None,
    data: str | None = None,
    split: str = "train",
    device: str | torch.device = "auto",
) -> AnalysisInputs:
    """Build the model of ``checkpoint`` (a path, a :class:`ModelSource` or a module; eval mode, on the device).

    The dataset defaults to the one recorded in the checkpoint, else ``digits``; its preprocessing follows
    :func:`resolve_preprocess`. Every parameter and buffer must be finite, for every analysis.

    Args:
        checkpoint: a :class:`ModelSource`, the path of a checkpoint file, or an ``nn.Module`` (copied).
        model_name: model name for a checkpoint path (see :class:`ModelSource`).
        data: dataset spec; None takes the checkpoint's, else ``digits``.
        split: dataset split to analyse (``train`` or ``test``).
        device: ``"auto"``, a device string or a ``torch.device`` (see `landscape.runtime.distributed.resolve_device`).

    Returns:
        The model (eval mode, on the device) with its name, options, checkpoint identity, dataset, split, device,
        source and preprocessing.

    Raises:
        LandscapeError: an unknown device, the model cannot be built (see :meth:`ModelSource.build`), or a
            parameter or buffer is not finite.
    """
    source = ModelSource.of(checkpoint, model_name)
    dev = resolve_device(device)
    model, meta = source.build(data or "digits")
    require_finite_weights(
        model, source.describe()
    )  # one rule for every analysis (and convert, --init, training): finite weights
    model = model.to(dev).eval()
    spec = data or meta.get("dataset") or "digits"
    return AnalysisInputs(
        model=model,
        model_name=getattr(model, "model_name", None) or meta.get("model_name") or str(source.model),
        model_kwargs=dict(getattr(model, "model_kwargs", meta.get("model_kwargs", {}))),
        checkpoint=source.describe(),
        checkpoint_sha256=meta.get("sha256", ""),
        dataset_spec=spec,
        split=split,
        device=dev,
        source=source,
        preprocess=resolve_preprocess(model, spec, pretrained=source.pretrained, overrides=source.preprocess),
    )


def batches_for(
    inputs: AnalysisInputs, *, batch_size: int, n_samples: int | None, seed: int = 0, first_samples: bool = False
) -> BatchSource:
    """Fixed batches (no augmentation, fixed seeded order) of the inputs' dataset, read onto its device one by one.

    Args:
        inputs: the analysis inputs (dataset spec, split, preprocessing and device).
        batch_size: samples per batch (positive).
        n_samples: number of samples to take (positive); None takes the whole split.
        seed: seeds the order of the samples.
        first_samples: take the first ``n_samples`` of the split in file order, unshuffled (``seed`` unused).

    Returns:
        The :class:`~landscape.data.stream.BatchSource` of ``(x, y)`` batches (float32 ``(b, C, H, W)`` images,
        int64 ``(b,)`` labels) placed on ``inputs.device`` as each is read (`landscape.data.batches.stream_batches`).

    Raises:
        LandscapeError: a non-positive ``batch_size`` or ``n_samples``, more samples than the split holds, or a
            dataset that cannot be loaded (`landscape.data.load_dataset`, `landscape.data.batches.stream_batches`).
    """
    _check_sizes(batch_size, n_samples)
    dataset = load_dataset(inputs.dataset_spec, inputs.split, preprocess=inputs.preprocess)
    return stream_batches(dataset, batch_size, n_samples, seed=seed, device=inputs.device, first_samples=first_samples)


def _check_sizes(batch_size: int, n_samples: int | None) -> None:
    """An error unless ``batch_size`` and ``n_samples`` (when given) are positive."""
    if batch_size <= 0:
        raise LandscapeError(f"--batch-size must be positive, got {batch_size}")
    if n_samples is not None and n_samples <= 0:
        raise LandscapeError(f"--samples must be positive, got {n_samples}")


def augmented_batches_for(
    inputs: AnalysisInputs,
    *,
    batch_size: int,
    n_samples: int | None,
    seed: int = 0,
    copies: int = 1,
    first_samples: bool = False,
) -> BatchSource:
    """Paper A's augmented batches (``--augment paper-a``) of the inputs' dataset, drawn once, held on the host.

    The samples are those :func:`batches_for` takes; each is augmented ``copies`` times and every batch mixed
    within itself, with targets over the model's outputs (see :mod:`landscape.data.augment`). The caller's random
    state is untouched.

    Args:
        inputs: the analysis inputs (model, dataset spec, split, preprocessing, device, logits selector).
        batch_size: images per batch (positive).
        n_samples: number of distinct samples (positive); None takes the whole split.
        seed: seeds the samples and the augmentation.
        copies: augmented copies of each sample (positive).
        first_samples: the first ``n_samples`` of the split in file order, as in :func:`batches_for`.

    Returns:
        The ``(x, t)`` batches (float32 ``(b, C, H, W)`` images, float32 ``(b, n_outputs)`` label
        distributions), held on the host and placed on ``inputs.device`` as each is read.

    Raises:
        LandscapeError: a non-positive ``batch_size``, ``n_samples`` or ``copies``, more samples than the split
            holds, a model with fewer outputs than the data's classes, or a dataset that cannot be loaded.
    """
    _check_sizes(batch_size, n_samples)
    dataset = load_dataset(inputs.dataset_spec, inputs.split, preprocess=inputs.preprocess)
    one = dataset.images(torch.arange(1)).to(inputs.device)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # the targets' width is the model's: one image through it
        with calling_forward(inputs.model, one):
            output = inputs.model(one)
        outputs = int(select_logits(output, inputs.source.output).shape[-1])
    held = augmented_batches(
        dataset, batch_size, n_samples, seed=seed, copies=copies, num_classes=outputs, first_samples=first_samples
    )
    return HeldBatches(held).placed(inputs.device)


def parse_patterns(patterns: Sequence[str] | str | None) -> list[str]:
    """Split comma-separated name patterns into a list (empty for None).

    Args:
        patterns: one comma-separated string, a sequence of them, or None.

    Returns:
        The stripped, non-empty patterns in order.
    """
    if patterns is None:
        return []
    if isinstance(patterns, str):
        patterns = [patterns]
    return [p.strip() for item in patterns for p in item.split(",") if p.strip()]


def build_objective(
    inputs: AnalysisInputs, batches: Sequence[tuple[torch.Tensor, torch.Tensor]] | BatchSource, **options: Any
) -> Objective:
    """The :class:`~landscape.core.objective.Objective` of ``inputs.model`` over ``batches`` on ``inputs.device``.

    ``options`` are passed to the Objective (criterion, regularizer, dtype, allow_stochastic, ...); the
    logits selector is the source's ``--model-output``.

    Args:
        inputs: the analysis inputs (model, device, dataset spec and logits selector).
        batches: the fixed ``(x, y)`` batches the objective averages over.
        **options: keyword options of the Objective.

    Returns:
        The objective.

    Raises:
        LandscapeError: the device ran out of memory (with the batch size to lower), or the Objective's checks.
        ForeignError: the model's forward raised on the data (its type and message quoted).
    """
    try:
        return Objective(inputs.model, batches, device=inputs.device, output=inputs.source.output, **options)
    except torch.OutOfMemoryError as exc:
        size = as_source(batches).sizes[0] if batches else 0
        raise LandscapeError(
            f"out of memory on {inputs.device} with batches of {size} samples; lower --batch-size (or --samples)"
        ) from exc


def check_labels(
    model: nn.Module,
    batches: Sequence[tuple[Tensor, Tensor]] | BatchSource,
    output: str | int | None = None,
    remedy: str = LABEL_RANGE_REMEDY,
) -> None:
    """Refuse labels the model cannot predict: every integer target must lie in ``0..n_outputs-1``.

    The number of outputs is read from one forward pass of the first image (no batches: nothing to check).

    Args:
        model: the classifier (eval mode).
        batches: ``(x, y)`` batches of images and labels.
        output: where the logits are in the model's output (``--model-output``).
        remedy: what to do about labels it cannot output, in the caller's words.

    Raises:
        LandscapeError: naming the label range and the model's number of outputs (also: no logits in the
            model's output).
    """
    source = as_source(batches)
    labels = [source.labels(i) for i in range(len(source))]  # the targets alone: no image is read
    if not labels or label_range(labels) is None:
        return
    one = source[0][0][:1]
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        with calling_forward(model, one):
            logits = model(one)
        n_out = int(select_logits(logits, output).shape[-1])
    check_label_range(labels, n_out, remedy)


@dataclass
class Prepared:
    """What every analysis starts from: the model on its device, its fixed batches, the loss, the provenance.

    Attributes:
        inputs: the model rebuilt from its source, with its dataset, device and preprocessing.
        batches: the fixed ``(x, y)`` batches, each read onto the device when indexed or iterated (targets are
            label distributions when augmented).
        criterion: ``"cross_entropy"``, or ``"soft_cross_entropy"`` for Paper A's augmented batches.
        attrs: the result file's root attributes: the provenance, the options' ``attrs()`` and the centre's
            check (:func:`landscape.core.centre.centre_attrs`).
        centre: the model's own weights measured once on the batches (loss, accuracy, time of the pass).
        preprocess: where the preprocessing came from and its values (:mod:`landscape.core.centre`).
        started: when the run began (:func:`landscape.runtime.clock.take`); the time to the work is its set-up.
    """

    inputs: AnalysisInputs
    batches: BatchSource
    criterion: str
    attrs: dict[str, Any]
    centre: CentreCheck
    preprocess: tuple[dict[str, str], dict[str, Any]]
    started: float = field(default_factory=time.perf_counter)

    @property
    def n_samples(self) -> int:
        """The number of samples over all batches."""
        return sum(self.batches.sizes)

    @property
    def seconds_per_pass(self) -> float:
        """The measured time of one forward pass over every batch at the centre (a unit to estimate with)."""
        return self.centre.seconds

    def announce(
        self,
        plan: str,
        units: float,
        unit: str,
        seconds_per_unit: float | None,
        progress: bool | None,
        *,
        at_least: bool = False,
    ) -> None:
        """Print, before the work, what will run, the preprocessing and the centre (rank 0; not with ``False``).

        The time is estimated as ``units * seconds_per_unit`` from one measured unit.

        Args:
            plan: what will run, e.g. ``surface: 21 x 21 grid over [-1, 1] x [-1, 1] (441 points)``.
            units: how many units the work makes.
            unit: the unit's name (``point``, ``product``, ``batch``, ...).
            seconds_per_unit: the measured seconds of one (None: no estimate).
            progress: the run's tri-state (``False``: ``--quiet``).
            at_least: ``units`` is the fewest the work makes (a Lanczos solve restarts as it needs).
        """
        setup = time.perf_counter() - self.started  # the run's time before its work: counted, and said
        estimate = progress_display.estimate(units, seconds_per_unit, unit, at_least=at_least, setup=setup)
        sources, values = self.preprocess
        data = (
            "the given batches"
            if self.inputs.dataset_spec == GIVEN
            else f"{self.inputs.dataset_spec} ({self.inputs.split})"
        )
        lines = announcement(plan, data, self.n_samples, self.centre, sources, values, estimate, setup)
        progress_display.announce(lines, progress)


def prepare(
    source: ModelSource | str | Path | nn.Module,
    options: Any,
    *,
    model_name: str | None = None,
    device: str | torch.device = "auto",
    command: str = "",
    fraction: float | None = None,
    first_samples: bool = False,
    labels: bool = False,
    batches: Iterable[Any] | None = None,
) -> Prepared:
    """The one front half: start (torchrun), the model from its source, the fixed batches, the provenance.

    ``options`` is an analysis's options object (:mod:`landscape.options`): its ``data``, ``split``,
    ``samples``, ``batch_size``, ``seed`` and, where it has them, ``augment`` and ``augment_copies`` choose
    the batches (:func:`batches_for`, or :func:`augmented_batches_for` with ``augment="paper-a"``), and its
    ``attrs()`` join the provenance.

    Args:
        source: the model: a :class:`ModelSource`, a checkpoint path, or an ``nn.Module``.
        options: the analysis's options (validated when they were built).
        model_name: the model of a checkpoint that does not name it.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or a ``torch.device``.
        command: how the run was asked for (the command line, or the Python call), recorded as ``command``.
        fraction: take this share of the split (``max(1, round(fraction * N))`` samples) when
            ``options.samples`` is None.
        first_samples: take the split's first samples in file order instead of a seeded permutation.
        labels: check that the model can output every label (:func:`check_labels`).
        batches: the data as the caller holds it (a ``Dataset``, a ``DataLoader``, a list of ``(x, y)`` batches
            or a :class:`~landscape.data.given.GivenData`): its first ``options.samples`` images in order, instead
            of ``options.data`` (:func:`~landscape.data.given.given_batches`); the file records ``dataset:
            batches`` and the data's SHA-256 (``data_sha256``), which a resumed run must match.

    Returns:
        The :class:`Prepared` inputs.

    Raises:
        LandscapeError: the model or data cannot be loaded, a weight is not finite, the sizes are out of range,
            or (with ``labels``) a label the model cannot output.
    """
    started = clock.take()  # the command's start, or the Python call's
    dev = distributed.start(device)
    inputs = load_inputs(source, model_name=model_name, data=options.data, split=options.split, device=dev)
    dtype = floating_dtype(inputs.model)  # the model's own: its inputs are cast to it
    if batches is not None:
        if getattr(options, "augment", "none") != "none":
            raise LandscapeError("--augment paper-a draws from a dataset: give a dataset spec (data=...), not batches")
        given = given_batches(
            batches, inputs.device, samples=getattr(options, "samples", None), batch_size=options.batch_size
        )
        held = as_source(given).placed(inputs.device, dtype)
        inputs.dataset_spec, inputs.split, inputs.preprocess = GIVEN, GIVEN, None
        check_labels(inputs.model, held, inputs.source.output)  # the caller's labels: checked for every analysis
        n_given = sum(held.sizes)
        recorded = _recorded(options, dtype)
        if "batch_size" in recorded:  # what was computed: the data's own batches (a loader's come as they are)
            recorded["batch_size"] = max(held.sizes)
        attrs = inputs.provenance(n_given, options.seed, command=command, **recorded)
        attrs["data_sha256"] = batches_sha256(given)  # the data as given
        criterion = AUGMENTED_CRITERION if held.labels(0).is_floating_point() else "cross_entropy"
        return _checked(inputs, held, criterion, attrs, given=True, started=started)
    n = options.samples
    if n is None and fraction is not None:
        n = max(1, round(fraction * len(load_dataset(inputs.dataset_spec, inputs.split, preprocess=inputs.preprocess))))
    augment = getattr(options, "augment", "none")
    if augment == "none":
        batches = batches_for(
            inputs, batch_size=options.batch_size, n_samples=n, seed=options.seed, first_samples=first_samples
        )
        criterion = "cross_entropy"
    else:  # Paper A's augmented training data, drawn once from the seed and held fixed for every evaluation
        batches = augmented_batches_for(
            inputs, batch_size=options.batch_size, n_samples=n, seed=options.seed, copies=options.augment_copies
        )
        criterion = "soft_cross_entropy"
    batches = batches.placed(inputs.device, dtype)
    if labels:
        check_labels(inputs.model, batches, inputs.source.output)
    n_samples = sum(batches.sizes)
    attrs = inputs.provenance(n_samples, options.seed, command=command, **_recorded(options, dtype))
    return _checked(inputs, batches, criterion, attrs, given=False, started=started)


def _recorded(options: Any, dtype: torch.dtype | None) -> dict[str, Any]:
    """The options' attributes as a file records them: the seed left out (the provenance's own), the type used.

    An option ``dtype`` left to the model (None) is recorded as the model's own type, ``dtype``: a file records what
    was computed, never a default.
    """
    recorded = {k: v for k, v in options.attrs().items() if k != "seed"}
    if "dtype" in recorded and recorded["dtype"] is None and dtype is not None:
        recorded["dtype"] = str(dtype).removeprefix("torch.")
    return recorded


def _checked(
    inputs: AnalysisInputs, batches: BatchSource, criterion: str, attrs: dict[str, Any], given: bool, started: float
) -> Prepared:
    """The :class:`Prepared` inputs with the centre measured and the preprocessing traced, both recorded."""
    centre = check_centre(inputs, batches, criterion)
    sources, values = preprocess_sources(inputs, given), preprocess_values(inputs, batches, given)
    attrs.update(centre_attrs(centre, sources, values))
    return Prepared(inputs, batches, criterion, attrs, centre, (sources, values), started)


#: what the file records as the dataset and split of data given as batches
GIVEN = "batches"


def python_call(function: str, *args: Any, **kwargs: Any) -> str:
    """How a Python call is recorded as a result file's ``command``: ``function(arg, ..., key=value, ...)``.

    No memory address is recorded: a module is written as its class name, data as its type and size
    (:func:`~landscape.data.given.describe`), a function by its name, any other object without a readable
    ``repr`` by its type.

    Args:
        function: the function's dotted name.
        *args: its positional arguments (a path is written as text).
        **kwargs: its keyword arguments (None values left out).

    Returns:
        The call as text.
    """

    def text(value: Any) -> str:
        if isinstance(value, nn.Module):
            return f"<{type(value).__name__}>"
        if isinstance(value, ModelSource):
            return f"<ModelSource {value.describe()}>"
        if isinstance(value, Tensor):
            return f"<Tensor {tuple(value.shape)}>"
        if is_data(value) and not (isinstance(value, (list, tuple)) and not _holds_batches(value)):
            return describe(value)
        if callable(value):
            return f"<function {getattr(value, '__qualname__', type(value).__name__)}>"
        shown = repr(str(value)) if isinstance(value, Path) else repr(value)
        return f"<{type(value).__name__}>" if " at 0x" in shown else shown

    parts = [text(a) for a in args] + [f"{k}={text(v)}" for k, v in kwargs.items() if v is not None]
    return f"{function}({', '.join(parts)})"


def _holds_batches(value: Sequence[Any]) -> bool:
    """Whether a list or tuple holds batches (sequences or dicts of tensors), not plain values."""
    return bool(value) and isinstance(value[0], (list, tuple, dict))


def eval_model(model: nn.Module) -> nn.Module:
    """Return the model itself if it is already in eval mode everywhere, else an eval-mode deep copy.

    Args:
        model: the model (never changed).

    Returns:
        ``model``, or a deep copy of it in eval mode when any submodule is in training mode.
    """
    if any(m.training for m in model.modules()):
        return copy.deepcopy(model).eval()
    return model


def batch_images(batch: Tensor | Sequence[Tensor]) -> Tensor:
    """The images of a batch given as a tensor or as ``(x, y)``.

    Args:
        batch: ``x``, or a sequence whose first item is ``x``.

    Returns:
        ``x``.
    """
    return batch if isinstance(batch, Tensor) else batch[0]


def run_from_python(
    run: Any,
    name: str,
    options_class: type,
    model: Any,
    data: Any,
    *,
    others: Sequence[Any] = (),
    options: Any = None,
    fields: Mapping[str, Any] | None = None,
    batch: Callable[[Any], Sequence[Tensor]] | None = None,
    **run_kwargs: Any,
) -> Any:
    """What every ``landscape.<analysis>(model, data, ...)`` function does: options, data, the call's record.

    The runner is called as ``run(model, *others, options, command=..., batches=..., **run_kwargs)``.

    Args:
        run: the analysis's runner (``run_surface``, ...).
        name: the public function's name, e.g. ``"landscape.surface"`` (recorded as the file's ``command``).
        options_class: the analysis's options class.
        model: an ``nn.Module``, a checkpoint path or a :class:`~landscape.core.source.ModelSource`.
        data: a dataset spec (``"digits"``, ``"cifar10:PATH"``, ...); a ``Dataset``, a ``DataLoader`` or a list of
            batches, of which the first ``samples`` images are used (:func:`~landscape.data.given.given_batches`);
            or None for the checkpoint's dataset (else digits).
        others: more models the runner takes after ``model`` (e.g. the second end of a path), recorded too.
        options: an options object, instead of ``fields``.
        fields: the options as keywords (the options class's fields, the CLI's option names with ``_``).
        batch: a function from one batch of the data to ``(inputs, labels)`` (dict batches, longer tuples).
        **run_kwargs: the runner's own keywords (``out``, ``device``, ``force``, ``progress``, ...).

    Returns:
        The runner's result.

    Raises:
        LandscapeError: both ``options`` and keywords, options of another analysis, a model or data of a type
            that is neither, the caller's own module without data (it has no dataset of its own), ``batch=``
            without held data, or the runner's errors.
    """
    clock.start()  # the call's set-up counts in its time and its estimate
    fields = dict(fields or {})
    if run_kwargs.get("out") is not None:
        checks.output_file(run_kwargs["out"], "--out", f"{name.rpartition('.')[2]}.h5")
    if options is not None and fields:
        raise LandscapeError(f"{name}: give the options as options=... or as keywords, not both")
    for position, value in enumerate((model, *others)):
        _check_model(name, value, position, len(others) + 1)
    own = next((m for m in map(_own_module, (model, *others)) if m is not None), None)
    if data is None and own is not None and fields.get("data") is None and getattr(options, "data", None) is None:
        raise LandscapeError(
            f"give data=: your model ({type(own).__name__}) brings no dataset of its own, and without data= it "
            "would be analysed on the bundled digits; pass your DataLoader, Dataset or list of (x, y) batches, or a "
            "dataset spec such as data='digits'"
        )
    if data is not None and not isinstance(data, (str, Path)) and not is_data(data):
        raise LandscapeError(f"data= takes {ACCEPTED}; got {describe_value(data)}")
    spec = data if isinstance(data, (str, Path)) else None
    if options is None:
        options = options_class(**({"data": str(spec)} if spec is not None else {}), **fields)
    elif not isinstance(options, options_class):
        raise LandscapeError(f"{name} takes a {options_class.__name__}, got {type(options).__name__}")
    if batch is not None and (data is None or spec is not None):
        raise LandscapeError("batch= reads the batches of data you hold: give a Dataset or DataLoader as data=")
    given = None
    if data is not None and spec is None:
        asked = options.batch_size if "batch_size" in fields or _set(options, "batch_size") else None
        exact = "samples" in fields or _set(options, "samples")
        given = GivenData(data, batch=batch, exact=exact, batch_size=asked)
    record = python_call(name, model, *others, data=spec or given, batch=batch, out=run_kwargs.get("out"), **fields)
    return run(model, *others, options, command=record, batches=given, **run_kwargs)


def _set(options: Any, field: str) -> bool:
    """Whether an options object has ``field`` away from its class's default."""
    defaults = {f.name: f.default for f in dataclasses.fields(options)}
    return field in defaults and getattr(options, field) != defaults[field]


def describe_value(value: Any) -> str:
    """A value's type, and its size for data, without its memory address (for messages)."""
    if is_data(value):
        return describe(value)
    kind = type(value).__name__
    article = "an" if kind[0].lower() in "aeiou" else "a"
    return f"{article} {kind}" + (f" ({value!r})" if isinstance(value, (int, float, bool)) else "")


def _own_module(value: Any) -> nn.Module | None:
    """The caller's own module (not one :func:`~landscape.models.create_model` built), given or in a ModelSource."""
    module = value.module if isinstance(value, ModelSource) else value
    if isinstance(module, nn.Module) and not isinstance(getattr(module, "model_name", None), str):
        return module
    return None


def _check_model(name: str, value: Any, position: int, count: int) -> None:
    """An error unless ``value`` (the ``position``-th of ``count`` models) is a model, a path or a source."""
    if isinstance(value, (nn.Module, ModelSource, str, Path)):
        return
    which = "the model" if count == 1 else ("the first model", "the second model", "a model")[min(position, 2)]
    missing = f"; {name} takes {count} models, then the data: is one missing?" if is_data(value) and count > 1 else ""
    raise LandscapeError(
        f"{which} is {describe_value(value)}, not a model: give an nn.Module, a checkpoint path or a ModelSource"
        + missing
    )
