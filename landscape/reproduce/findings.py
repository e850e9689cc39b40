"""A verdict for every claim of Paper A and Paper B, from a demo folder, with bootstrap intervals.

:func:`findings` reads the files ``landscape demo`` writes (checkpoints, ``*_spectrum.h5``, ``*_fourier.h5``, the
optional ``data_size/`` spectra and an optional ``paper_b.json``) and returns one :class:`Finding` per claim and
model; :func:`findings_markdown` turns them into a Markdown table (the "Findings" section of ``summary.md``).

**Statistic and interval.** Every claim is a sign (or threshold) claim about one number. The number is computed
on all the units the demo used; its 95% interval is the percentile interval of the same statistic recomputed on
``resamples`` (default 1000) bootstrap resamples of the natural unit, drawn with ``numpy.random.default_rng(seed)``
(the global numpy and torch random states are never used nor changed):

- Hessian spectra: mini-batches (rows of ``eigenvalues``, one per mini-batch of 16 images);
- accuracy: test images (per-image correctness recomputed from the checkpoints on the whole test split, the
  same resample of images for both models: a paired bootstrap);
- Fourier statistics: batches of ``fourier_unit`` (16) images of the very samples of the Fourier file (its
  ``dataset``, ``split``, ``n_samples``, ``seed`` and ``first_samples`` attributes); the per-batch running sums
  of :func:`landscape.analyses.fourier.features.fourier_profile` are added over the batches of a resample, so each
  resample's statistic is that of one pooled profile, as in the file;
- Paper B: seeds (rows of ``paper_b.json``).

Two models' statistics (a difference or a ratio) resample each model's units independently (paired where the
units are the same images).

**Verdict rule.** A claim says the number lies on one side of a threshold (zero unless stated):
``reproduced`` when the whole interval lies on the claimed side, ``contradicted`` when the whole interval lies
on the other side, ``inconclusive`` when the interval contains the threshold (or is undefined, e.g. one unit);
``not measured`` only when the inputs are absent, and then :attr:`Finding.where` names the command that makes
them.

**Change across a block.** Paper A's "MSAs lower the high-frequency amplitude, Convs raise it" (and the same for
the variance) is measured block by block: for map ``i >= 1`` of a model (forward order, as in the Fourier file),
``change_i = value(map i) - value(map i-1)``, the block's output minus its input; the changes are averaged over
the blocks of one kind: MSA (``msa``) or Conv/MLP (``conv``, ``downsample`` and ``mlp``, as in the demo's
summary).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from landscape.analyses.fourier.features import fourier_profile
from landscape.core.front import batches_for, load_inputs
from landscape.data.loading import load_dataset
from landscape.errors import LandscapeError
from landscape.options.fourier import CONV_KINDS, MSA_KINDS
from landscape.reproduce.statistics import bootstrap, two_sample
from landscape.store.read import read_result

VERDICTS = ("reproduced", "contradicted", "inconclusive", "not measured")
#: "at least as accurate": the accuracy difference must lie above -EPSILON (0.5 percentage points)
ACCURACY_EPSILON = 0.005
#: the data fractions of Paper A's Fig 4 (besides 100%), trained by the FULL demo into ``data_size/``
DATA_SIZE_DIR = "data_size"
DEMO_COMMAND = "landscape demo --out DIR"
PAPER_B_COMMAND = "python benchmarks/cnn_init_vit.py --steps 1000 --seeds 0 1 2 --control"


@dataclass(frozen=True)
class Finding:
    """The verdict on one claim.

    Attributes:
        claim: the claim, one line, the paper's words in ours.
        paper: ``"A"`` or ``"B"``.
        statistic: what was measured, one line.
        value: the statistic on all the units.
        low: the lower end of its 95% bootstrap interval.
        high: the upper end of its 95% bootstrap interval.
        n: the number of resampled units (mini-batches, images, batches of images or seeds; 0 when not measured).
        verdict: one of :data:`VERDICTS`.
        where: the files the number comes from, or the command that measures it.
    """

    claim: str
    paper: str
    statistic: str
    value: float
    low: float
    high: float
    n: int
    verdict: str
    where: str


# ------------------------------------------------------------------------------------------ verdict and bootstrap
def verdict(low: float, high: float, *, side: str, threshold: float = 0.0) -> str:
    """The verdict of a claim that a number lies on ``side`` of ``threshold``, from its interval.

    Args:
        low: the interval's lower end.
        high: the interval's upper end.
        side: ``"greater"`` (the claim: number > threshold) or ``"less"`` (number < threshold).
        threshold: the claimed threshold.

    Returns:
        ``reproduced`` when the whole interval lies on the claimed side, ``contradicted`` when it lies wholly on
        the other side, ``inconclusive`` when it contains the threshold or is not finite.

    Raises:
        LandscapeError: an unknown ``side``.
    """
    if side not in ("greater", "less"):
        raise LandscapeError(f"side must be 'greater' or 'less', got {side!r}")
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    above, below = low > threshold, high < threshold
    if side == "greater":
        return "reproduced" if above else "contradicted" if below else "inconclusive"
    return "reproduced" if below else "contradicted" if above else "inconclusive"


# ------------------------------------------------------------------------------------------ statistics
def change_across_blocks(values: np.ndarray, kinds: Sequence[str], group: Sequence[str]) -> np.ndarray:
    """The mean change of a per-map value across the blocks of ``group``: block output minus block input.

    Args:
        values: per-map values in forward order, shape ``(..., L)`` (e.g. one row per bootstrap resample).
        kinds: the kind of each of the ``L`` maps.
        group: the kinds of the blocks to average over (the kind of the block's output map).

    Returns:
        ``mean over i >= 1 with kinds[i] in group of values[..., i] - values[..., i - 1]`` (NaN changes left
        out), shape ``values.shape[:-1]``; NaN when no block is of the group.
    """
    v = np.asarray(values, dtype=float)
    blocks = [i for i in range(1, len(kinds)) if kinds[i] in group]
    if not blocks:
        return np.full(v.shape[:-1], np.nan)
    changes = v[..., blocks] - v[..., [i - 1 for i in blocks]]
    finite = np.isfinite(changes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(finite, changes, 0).sum(-1) / finite.sum(-1)


def negative_share(eigenvalues: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The share of negative eigenvalues among the finite ones of the weighted mini-batches.

    Args:
        eigenvalues: ``(n_batches, k)``, one row per mini-batch (NaN: not computed).
        weights: ``(r, n_batches)`` how often each batch is drawn.

    Returns:
        ``r`` shares.
    """
    e = np.asarray(eigenvalues, dtype=float)
    finite = np.isfinite(e)
    negative = (np.where(finite, e, 0) < 0).sum(1)
    return (weights @ negative) / (weights @ finite.sum(1))


def top_magnitude(eigenvalues: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The mean over the weighted mini-batches of each batch's largest eigenvalue magnitude.

    Args:
        eigenvalues: ``(n_batches, k)``.
        weights: ``(r, n_batches)``.

    Returns:
        ``r`` means.
    """
    top = np.nanmax(np.abs(np.asarray(eigenvalues, dtype=float)), axis=1)
    return (weights @ top) / weights.sum(1)


# ------------------------------------------------------------------------------------------ reading the inputs
def read_spectrum(path: Path) -> np.ndarray | None:
    """The rows of a spectrum file's ``eigenvalues`` that are done and finite, or None when there is no file."""
    if not path.is_file():
        return None
    res = read_result(path)
    eig = np.asarray(res["eigenvalues"], dtype=float)
    done = np.asarray(res["done"], bool) if "done" in res.arrays else np.ones(len(eig), bool)
    keep = done & np.isfinite(eig).any(1)
    return eig[keep]


@dataclass
class BatchSums:
    """Per-batch running sums of a Fourier profile: one row per batch of images, one column per map.

    Attributes:
        kinds: the kind of every map.
        delta_sum: the sum over (sample, channel) of the Delta log amplitude at the highest frequency.
        variance_sum: the sum over (sample, channel) of the spatial variance.
        count: the (sample, channel) pairs of each batch and map.
        file_high_frequency: the file's ``high_frequency`` (to check the recomputation), or None.
    """

    kinds: list[str]
    delta_sum: np.ndarray
    variance_sum: np.ndarray
    count: np.ndarray
    file_high_frequency: np.ndarray | None = None

    def high_frequency(self, weights: np.ndarray) -> np.ndarray:
        """Per map, the pooled high-frequency value of each weighted resample, ``(r, L)``."""
        return (weights @ self.delta_sum) / (weights @ self.count)

    def variance(self, weights: np.ndarray) -> np.ndarray:
        """Per map, the pooled feature-map variance of each weighted resample, ``(r, L)``."""
        return (weights @ self.variance_sum) / (weights @ self.count)


def fourier_batch_sums(fourier_file: Path, checkpoint: Path, *, unit: int = 16) -> BatchSums:
    """Recompute the Fourier file's profile batch by batch, on the file's own samples, from the checkpoint.

    Args:
        fourier_file: a ``fourier`` result file (its ``dataset``, ``split``, ``n_samples``, ``seed``,
            ``first_samples``, ``profile`` and ``taps`` attributes are used).
        checkpoint: the checkpoint the file was computed from.
        unit: images per batch (the bootstrap's unit).

    Returns:
        The per-batch sums (on the CPU; the torch random state is restored afterwards).
    """
    import torch

    res = read_result(fourier_file)
    attrs = res.attrs
    taps = attrs.get("taps") or None
    if isinstance(taps, str):
        taps = json.loads(taps) or None
    with torch.random.fork_rng(devices=[]):
        inputs = load_inputs(checkpoint, data=attrs.get("dataset"), split=attrs.get("split", "test"), device="cpu")
        batches = batches_for(
            inputs,
            batch_size=unit,
            n_samples=int(attrs["n_samples"]),
            seed=int(attrs.get("seed", 0)),
            first_samples=bool(attrs.get("first_samples", False)),
        )
        kinds: list[str] = []
        delta, var, count = [], [], []
        for batch in batches:
            p = fourier_profile(inputs.model, [batch], profile=str(attrs.get("profile", "diagonal")), taps=taps)
            kinds = p.kinds
            counts = np.array([layer.count for layer in p.layers], dtype=float)
            delta.append(p.high_frequency * counts)
            var.append(np.array([float(layer.variance_sum) for layer in p.layers]))
            count.append(counts)
    return BatchSums(
        kinds,
        np.array(delta),
        np.array(var),
        np.array(count),
        np.asarray(res["high_frequency"], dtype=float) if "high_frequency" in res.arrays else None,
    )


def per_image_correct(checkpoint: Path, *, split: str = "test", batch_size: int = 256) -> np.ndarray:
    """Whether the checkpoint's model classifies each image of ``split`` of its dataset correctly (eval mode, CPU).

    Args:
        checkpoint: a landscape checkpoint.
        split: the split.
        batch_size: images per forward pass.

    Returns:
        A bool array, one entry per image in the split's order (the torch random state is restored afterwards).
    """
    import torch

    with torch.random.fork_rng(devices=[]):
        inputs = load_inputs(checkpoint, split=split, device="cpu")

        x_all, y_all = load_dataset(inputs.dataset_spec, split, preprocess=inputs.preprocess).tensors()
        out = []
        with torch.no_grad():
            for i in range(0, len(y_all), batch_size):
                logits = inputs.model(x_all[i : i + batch_size])
                out.append((logits.argmax(-1) == y_all[i : i + batch_size]).numpy())
    return np.concatenate(out)


def read_paper_b(path: Path) -> list[dict]:
    """The rows of ``paper_b.json``, the per-run rows that :func:`benchmarks.cnn_init_vit.main` returns.

    The file holds a list of dicts (or ``{"rows": [...]}``) with ``fraction``, ``seed``, ``vit_random_2x`` and
    ``vit_cnn_init`` (test accuracies; ``vit_random`` is used when there is no ``vit_random_2x``).

    Args:
        path: the JSON file.

    Returns:
        The rows.

    Raises:
        LandscapeError: the file is not such a list.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data.get("rows") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise LandscapeError(f"{path} should hold a list of result rows (dicts)")
    return rows


# ------------------------------------------------------------------------------------------ the claims
def _not_measured(claim: str, paper: str, statistic: str, where: str) -> Finding:
    return Finding(claim, paper, statistic, math.nan, math.nan, math.nan, 0, "not measured", where)


def _finding(
    claim: str,
    paper: str,
    statistic: str,
    estimate: tuple[float, float, float],
    n: int,
    where: str,
    *,
    side: str,
    threshold: float = 0.0,
) -> Finding:
    value, low, high = estimate
    return Finding(
        claim, paper, statistic, value, low, high, n, verdict(low, high, side=side, threshold=threshold), where
    )


def _role(models: Sequence[str], prefix: str) -> str | None:
    return next((m for m in models if m.startswith(prefix)), None)


def _fourier_findings(
    folder: Path, models: Sequence[str], rng: np.random.Generator, resamples: int, unit: int
) -> list[Finding]:
    """Claims (1) and (5): change of the high-frequency value and of the variance across MSA and Conv/MLP blocks."""
    hf_rows: list[Finding] = []
    var_rows: list[Finding] = []
    for model in models:
        path, ckpt = folder / f"{model}_fourier.h5", folder / f"{model}.pt"
        sums = fourier_batch_sums(path, ckpt, unit=unit) if path.is_file() and ckpt.is_file() else None
        groups = [("MSA", MSA_KINDS, "less"), ("Conv/MLP", CONV_KINDS, "greater")]
        if sums is None:
            kinds = {"vit": ["embed", "msa", "mlp"], "alternet": ["stem", "conv", "msa"]}.get(
                model.split("_")[0], ["stem", "conv"]
            )  # the blocks a zoo model of that family has
        else:
            kinds = sums.kinds
        for label, group, side in groups:
            if not any(k in group for k in kinds[1:]):
                continue
            present = sorted({k for k in kinds[1:] if k in group})
            name = "MLP" if present == ["mlp"] else label
            lower = side == "less"
            hf_claim = f"{name} blocks {'lower' if lower else 'raise'} the high-frequency amplitude ({model})"
            var_claim = f"{name} blocks {'lower' if lower else 'raise'} the feature-map variance ({model})"
            hf_stat = f"mean over {name} blocks of the change of high-freq Delta log amplitude (output - input)"
            var_stat = f"mean over {name} blocks of the change of feature-map variance (output - input)"
            if sums is None:
                where = f"{path.name} and {ckpt.name} are missing: `{DEMO_COMMAND}`"
                hf_rows.append(_not_measured(hf_claim, "A", hf_stat, where))
                var_rows.append(_not_measured(var_claim, "A", var_stat, where))
                continue
            where = f"{path.name} (samples, seed), {ckpt.name}; batches of {unit} images"
            if sums.file_high_frequency is not None and not np.allclose(
                sums.high_frequency(np.ones((1, len(sums.count))))[0], sums.file_high_frequency, atol=1e-3
            ):
                where += " (note: the recomputed profile differs from the file's)"
            n = len(sums.count)
            hf = bootstrap(
                n,
                lambda w, s=sums, k=kinds, g=group: change_across_blocks(s.high_frequency(w), k, g),
                resamples=resamples,
                rng=rng,
            )
            var = bootstrap(
                n,
                lambda w, s=sums, k=kinds, g=group: change_across_blocks(s.variance(w), k, g),
                resamples=resamples,
                rng=rng,
            )
            hf_rows.append(_finding(hf_claim, "A", hf_stat, hf, n, where, side=side))
            var_rows.append(_finding(var_claim, "A", var_stat, var, n, where, side=side))
    return hf_rows + var_rows


def _spectrum_findings(folder: Path, models: Sequence[str], rng: np.random.Generator, resamples: int) -> list[Finding]:
    """Claims (2), (3) and (4): negative eigenvalues of ViT vs ResNet, magnitudes, and the data size."""
    vit, resnet = _role(models, "vit"), _role(models, "resnet")
    vit_path = folder / f"{vit}_spectrum.h5" if vit else None
    res_path = folder / f"{resnet}_spectrum.h5" if resnet else None
    ev = read_spectrum(vit_path) if vit_path else None
    er = read_spectrum(res_path) if res_path else None
    out: list[Finding] = []
    missing = f"`{DEMO_COMMAND}` (per-mini-batch spectra)"

    claim = f"ViT has negative Hessian eigenvalues ({vit})"
    stat = "share of negative eigenvalues among the top-5 (largest magnitude) of each mini-batch"
    if ev is None or not len(ev):
        out.append(_not_measured(claim, "A", stat, missing))
    else:
        est = bootstrap(len(ev), lambda w: negative_share(ev, w), resamples=resamples, rng=rng)
        out.append(_finding(claim, "A", stat, est, len(ev), f"{vit_path.name}, mini-batches", side="greater"))

    both = ev is not None and er is not None and len(ev) and len(er)
    where = f"{vit_path.name if vit_path else '-'}, {res_path.name if res_path else '-'}; mini-batches of each"
    claim = f"ResNet has hardly any negative eigenvalues: fewer than ViT ({vit} - {resnet})"
    stat = "difference of the shares of negative eigenvalues, ViT - ResNet"
    if not both:
        out.append(_not_measured(claim, "A", stat, missing))
    else:
        est = two_sample(ev, er, negative_share, np.subtract, resamples=resamples, rng=rng)
        out.append(_finding(claim, "A", stat, est, min(len(ev), len(er)), where, side="greater"))

    claim = f"ViT's Hessian eigenvalues are smaller in magnitude than ResNet's: flatter ({vit} / {resnet})"
    stat = "ratio of the mean top eigenvalue magnitude per mini-batch, ViT / ResNet (threshold 1)"
    if not both:
        out.append(_not_measured(claim, "A", stat, missing))
    else:
        est = two_sample(ev, er, top_magnitude, np.divide, resamples=resamples, rng=rng)
        out.append(_finding(claim, "A", stat, est, min(len(ev), len(er)), where, side="less", threshold=1.0))

    claim = "More data suppresses ViT's negative eigenvalues (vit_mini on 6% vs 100% of the data)"
    stat = "share of negative eigenvalues, smallest data fraction - all the data"
    subsets = sorted((folder / DATA_SIZE_DIR).glob(f"{vit or 'vit_mini'}_data*_spectrum.h5"))
    fractions = {}
    for path in subsets:
        try:
            fractions[float(path.name.split("_data", 1)[1].split("_spectrum", 1)[0])] = path
        except ValueError:
            continue
    if ev is None or not len(ev) or not fractions:
        where = (
            f"{DATA_SIZE_DIR}/ spectra missing: the FULL demo `{DEMO_COMMAND}` trains them "
            "(DemoSettings.data_fractions), or notebook 02's data-size section"
        )
        out.append(_not_measured(claim, "A", stat, where))
    else:
        small = min(fractions)
        es = read_spectrum(fractions[small])
        claim = f"More data suppresses ViT's negative eigenvalues ({vit} on {small:.0%} vs 100% of the data)"
        est = two_sample(es, ev, negative_share, np.subtract, resamples=resamples, rng=rng)
        where = f"{DATA_SIZE_DIR}/{fractions[small].name}, {vit_path.name}; mini-batches of each"
        out.append(_finding(claim, "A", stat, est, min(len(es), len(ev)), where, side="greater"))
    return out


def _accuracy_finding(folder: Path, models: Sequence[str], rng: np.random.Generator, resamples: int) -> Finding:
    """Claim (6): AlterNet is at least as accurate as ResNet."""
    alt, resnet = _role(models, "alternet"), _role(models, "resnet")
    claim = f"AlterNet is at least as accurate as ResNet ({alt} - {resnet})"
    stat = f"test accuracy difference, AlterNet - ResNet (threshold -{ACCURACY_EPSILON:g}: 0.5 points)"
    a_ckpt = folder / f"{alt}.pt" if alt else None
    r_ckpt = folder / f"{resnet}.pt" if resnet else None
    if not (a_ckpt and r_ckpt and a_ckpt.is_file() and r_ckpt.is_file()):
        return _not_measured(claim, "A", stat, f"checkpoints missing: `{DEMO_COMMAND}`")
    a = per_image_correct(a_ckpt).astype(float)
    r = per_image_correct(r_ckpt).astype(float)
    if len(a) != len(r):
        raise LandscapeError(f"{a_ckpt.name} and {r_ckpt.name} were tested on different data")
    d = a - r
    est = bootstrap(len(d), lambda w: (w @ d) / w.sum(1), resamples=resamples, rng=rng)
    where = f"{a_ckpt.name}, {r_ckpt.name}: per-image correctness on the test split (paired)"
    return _finding(claim, "A", stat, est, len(d), where, side="greater", threshold=-ACCURACY_EPSILON)


def _paper_b_finding(folder: Path, rng: np.random.Generator, resamples: int) -> Finding:
    """Claim (7): the CNN-initialised ViT beats a random-init ViT (given the same total steps) at low data."""
    path = folder / "paper_b.json"
    claim = "A CNN-initialised ViT beats a randomly initialised ViT at low data"
    stat = "test accuracy, CNN-init ViT - random-init ViT (2x steps), at the smallest data fraction"
    if not path.is_file():
        return _not_measured(claim, "B", stat, f"no paper_b.json: `{PAPER_B_COMMAND}`, rows saved as paper_b.json")
    rows = read_paper_b(path)
    base = "vit_random_2x" if any("vit_random_2x" in r for r in rows) else "vit_random"
    rows = [r for r in rows if base in r and "vit_cnn_init" in r and "fraction" in r]
    if not rows:
        return _not_measured(claim, "B", stat, f"{path.name} holds no rows with vit_cnn_init and {base}")
    small = min(float(r["fraction"]) for r in rows)
    d = np.array([float(r["vit_cnn_init"]) - float(r[base]) for r in rows if float(r["fraction"]) == small])
    if base != "vit_random_2x":
        stat = stat.replace("(2x steps)", "(same steps per stage; no 2x control in the file)")
    est = bootstrap(len(d), lambda w: (w @ d) / w.sum(1), resamples=resamples, rng=rng)
    where = f"{path.name}: fraction {small:g}, over {len(d)} seed(s)"
    return _finding(claim + f" (fraction {small:g})", "B", stat, est, len(d), where, side="greater")


def findings(
    folder: str | Path,
    models: Sequence[str] = ("resnet_mini", "vit_mini", "alternet_mini"),
    *,
    seed: int = 0,
    resamples: int = 1000,
    fourier_unit: int = 16,
) -> list[Finding]:
    """A verdict for every claim of Paper A and Paper B from the files of a demo folder (see the module doc).

    Args:
        folder: the demo folder (``MODEL.pt``, ``MODEL_spectrum.h5``, ``MODEL_fourier.h5``, optionally
            ``data_size/vit_mini_dataF_spectrum.h5`` and ``paper_b.json``).
        models: the models; the roles ResNet, ViT and AlterNet go to the first name starting with ``resnet``,
            ``vit`` and ``alternet``.
        seed: seeds the bootstrap's ``numpy.random.default_rng`` (the global random states are untouched).
        resamples: bootstrap resamples per interval.
        fourier_unit: images per batch, the bootstrap's unit for Fourier statistics.

    Returns:
        The findings, in the order: high-frequency change per model and block kind, variance change, negative
        share of ViT, ViT - ResNet negative share, ViT / ResNet magnitude, data size, accuracy, Paper B.
    """
    root = Path(folder)
    rng = np.random.default_rng(seed)
    out = _fourier_findings(root, models, rng, resamples, fourier_unit)
    out += _spectrum_findings(root, models, rng, resamples)
    out.append(_accuracy_finding(root, models, rng, resamples))
    out.append(_paper_b_finding(root, rng, resamples))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _number(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.4g}"


def findings_markdown(items: Sequence[Finding]) -> str:
    """The findings as a Markdown table: claim | paper | statistic | value [95% interval] | verdict.

    The statistic cell ends with the number of resampled units; a "not measured" verdict names what measures it.

    Args:
        items: the findings.

    Returns:
        The table (header, separator, one row per finding), without a trailing newline.
    """
    lines = [
        "| claim | paper | statistic | value [95% interval] | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in items:
        if f.verdict == "not measured":
            value, word = "–", f"not measured: {f.where}"
        else:
            value, word = f"{_number(f.value)} [{_number(f.low)}, {_number(f.high)}]", f.verdict
        stat = f"{f.statistic} (n = {f.n})" if f.n else f.statistic
        lines.append(f"| {_cell(f.claim)} | {f.paper} | {_cell(stat)} | {value} | {_cell(word)} |")
    return "\n".join(lines)
