"""A verdict for every claim of Paper A and Paper B, from a demo folder, with intervals over training seeds.

:func:`findings` reads the files ``landscape demo`` writes (checkpoints, ``*_spectrum.h5``, ``*_fourier.h5``, the
optional ``data_size/`` spectra, for every training seed: seed 0's in the folder, seed K's in ``seedK/``, see
:mod:`landscape.reproduce.inputs`; and ``paper_b.json``) and returns one :class:`Finding` per claim and model;
:func:`findings_markdown` turns them into a Markdown table (the "Findings" section of ``summary.md``).

**Statistic and interval.** Every claim is a sign (or threshold) claim about one number. The number is computed
on all the units of all the seeds' models; its 95% interval is over the seeds
(:func:`landscape.reproduce.statistics.seed_jackknife`): the same statistic recomputed without each seed in turn
gives the jackknife standard error, and the interval is the value -/+ the t quantile of ``S - 1`` degrees of
freedom times it (for a ratio, the same on the log scale). Training randomness enters once per seed, so ``S``
seeds are ``S`` independent observations whatever the units within each; the interval covers the randomness of
training as well as that of the units, and a claim is reproduced or contradicted only when it holds across
trainings; with a single seed there is no interval (inconclusive). Nothing is drawn at random. The units, each
seed's contribution to the statistic:

- Hessian spectra: mini-batches (rows of ``eigenvalues``, one per mini-batch of 16 images);
- adaptive sharpness: mini-batches ``S`` (rows of a sharpness file's ``values`` at its largest radius; the
  measures, invariant to rescaling a ReLU network's layers, judge "ViTs are flatter" beside the eigenvalues);
- accuracy: test images (per-image correctness recomputed from the checkpoints on the whole test split; the
  difference AlterNet - ResNet is paired: seed K's AlterNet with seed K's ResNet, image by image);
- Fourier statistics: batches of ``fourier_unit`` (16) images of the very samples of the Fourier file (its
  ``dataset``, ``split``, ``n_samples``, ``seed`` and ``first_samples`` attributes); the per-batch running sums
  of :func:`landscape.analyses.fourier.features.fourier_profile` are added over a seed's batches, so each seed's
  share of the statistic is that of its profile;
- Paper B: one test accuracy difference per seed (rows of ``paper_b.json``);
- the barrier against width (:mod:`landscape.reproduce.widths`): seed pairs (a pair leaves with either seed).

Two models' statistics (ViT against ResNet, a small data fraction against all the data) leave a seed out of both
sides at once (seed K's two models are independent trainings, so the pairs are independent).

**Verdict rule.** A claim says the number lies on one side of a threshold (zero unless stated):
``reproduced`` when the whole interval lies on the claimed side, ``contradicted`` when the whole interval lies
on the other side, ``inconclusive`` when the interval contains the threshold (or is undefined: one seed);
``not measured`` only when the inputs are absent, and then :attr:`Finding.where` names the command that makes them.

**Change across a block.** Paper A's "MSAs lower the high-frequency amplitude, Convs raise it" (and the same for
the variance) is measured block by block: for map ``i >= 1`` of a model (forward order, as in the Fourier file),
``change_i = value(map i) - value(map i-1)``, the block's output minus its input; the changes are averaged over
the blocks of one kind: MSA (``msa``) or Conv/MLP (``conv``, ``downsample`` and ``mlp``, as in the demo's
summary).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from landscape.errors import LandscapeError
from landscape.options.fourier import CONV_KINDS, MSA_KINDS
from landscape.reproduce.inputs import (
    BatchSums,
    Grouped,
    fourier_batch_sums,
    per_image_correct,
    read_paper_b,
    seed_folders,
    seed_sharpness,
    seed_spectra,
    seeds_text,
    stack_seeds,
    stack_sums,
)
from landscape.reproduce.negative import CLAIM, NEGATIVE_SHARE, STATISTIC, negative_curvature
from landscape.reproduce.statistics import seed_jackknife, seed_mean, seed_weights
from landscape.reproduce.table import (
    DemoFiles,
    Finding,
    compare,
    measured,
    not_measured,
    one_model,
)
from landscape.reproduce.widths import CONNECT_FILE as WIDTH_CONNECT_FILE
from landscape.reproduce.widths import WIDTH_DIR, WidthSweep, read_barriers, width_estimate, width_label
from landscape.store.read import read_result

#: "at least as accurate": the accuracy difference must lie above -EPSILON (0.5 percentage points)
ACCURACY_EPSILON = 0.005
#: the data fractions of Paper A's Fig 4 (besides 100%), trained by the FULL demo into ``data_size/``
DATA_SIZE_DIR = "data_size"
DEMO_COMMAND = "landscape demo --out DIR"
PAPER_B_COMMAND = "python benchmarks/cnn_init_vit.py --steps 1000 --seeds 0 1 2 --control"
#: the paper column of the width sweep's row: Ainsworth et al. 2023 ("Git Re-Basin"), not Paper A or B
REBASIN = "Re-Basin"
#: the demo's sharpness files, one per model and measure, in each seed's folder
SHARPNESS_FILE = "{model}_sharpness_{measure}.h5"


# ------------------------------------------------------------------------------------------ statistics
def change_across_blocks(values: np.ndarray, kinds: Sequence[str], group: Sequence[str]) -> np.ndarray:
    """The mean change of a per-map value across the blocks of ``group``: block output minus block input.

    Args:
        values: per-map values in forward order, shape ``(..., L)`` (e.g. one row per set of seeds).
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
        weights: ``(r, n_batches)``, the weight of each batch in each of ``r`` evaluations.

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


# ------------------------------------------------------------------------------------------ the claims
def _role(models: Sequence[str], prefix: str) -> str | None:
    return next((m for m in models if m.startswith(prefix)), None)


def _zoo_kinds(model: str) -> list[str]:
    """The kinds of blocks a zoo model of ``model``'s family has (for the rows of a model not measured)."""
    return {"vit": ["embed", "msa", "mlp"], "alternet": ["stem", "conv", "msa"]}.get(
        model.split("_")[0], ["stem", "conv"]
    )


def _seed_sums(folders: dict[int, Path], model: str, unit: int) -> tuple[dict[int, BatchSums], bool]:
    """Every seed's per-batch Fourier sums of ``model`` (seeds without both files left out); whether all match."""
    sums = {}
    for s, d in folders.items():
        path, ckpt = d / f"{model}_fourier.h5", d / f"{model}.pt"
        if path.is_file() and ckpt.is_file():
            sums[s] = fourier_batch_sums(path, ckpt, unit=unit)
    return sums, all(x.matches_file() for x in sums.values())


def _fourier_findings(src: DemoFiles) -> list[Finding]:
    """Claims (1) and (5): change of the high-frequency value and of the variance across MSA and Conv/MLP blocks."""
    folders, models, unit = src.folders, src.models, src.fourier_unit
    hf_rows: list[Finding] = []
    var_rows: list[Finding] = []
    for model in models:
        per_seed, match = _seed_sums(folders, model, unit)
        sums = stack_sums(list(per_seed.values())) if per_seed else None
        sizes = [len(x.count) for x in per_seed.values()]
        kinds = sums.kinds if sums is not None else _zoo_kinds(model)
        for label, group, side in [("MSA", MSA_KINDS, "less"), ("Conv/MLP", CONV_KINDS, "greater")]:
            present = sorted({k for k in kinds[1:] if k in group})
            if not present:
                continue
            name = "MLP" if present == ["mlp"] else label
            verb = "lower" if side == "less" else "raise"
            hf_claim = f"{name} blocks {verb} the high-frequency amplitude ({model})"
            var_claim = f"{name} blocks {verb} the feature-map variance ({model})"
            hf_stat = f"mean over {name} blocks of the change of high-freq Delta log amplitude (output - input)"
            var_stat = f"mean over {name} blocks of the change of feature-map variance (output - input)"
            if sums is None:
                where = f"{model}_fourier.h5 and {model}.pt are missing: `{DEMO_COMMAND}`"
                hf_rows.append(not_measured(hf_claim, "A", hf_stat, where))
                var_rows.append(not_measured(var_claim, "A", var_stat, where))
                continue
            where = f"{model}_fourier.h5 (samples, seed), {model}.pt of {seeds_text(list(per_seed))}"
            where += f"; batches of {unit} images"
            if not match:
                where += " (note: the recomputed profile differs from the file's)"
            units = (sum(sizes), len(sizes))
            for values, claim, stat, rows in [
                (sums.high_frequency, hf_claim, hf_stat, hf_rows),
                (sums.variance, var_claim, var_stat, var_rows),
            ]:
                est = seed_jackknife(
                    len(sizes),
                    lambda keep, f=values, k=kinds, g=group, n=sizes: change_across_blocks(
                        f(seed_weights(keep, n)), k, g
                    ),
                )
                rows.append(measured(claim, "A", stat, est, units, where, side=side))
    return hf_rows + var_rows


def _data_fractions(folders: dict[int, Path], vit: str) -> dict[float, str]:
    """The data fractions of ``vit``'s ``data_size/`` spectra in any seed folder: ``{fraction: file name}``."""
    out = {}
    for d in folders.values():
        for path in (d / DATA_SIZE_DIR).glob(f"{vit}_data*_spectrum.h5"):
            try:
                out[float(path.name.split("_data", 1)[1].split("_spectrum", 1)[0])] = path.name
            except ValueError:
                continue
    return out


def _units(*sides: Grouped) -> tuple[int, int]:
    """``(n, seeds)`` of a statistic over ``sides``: the fewest units and the fewest seeds of any side."""
    return min(sum(x.sizes) for x in sides), min(len(x.sizes) for x in sides)


def _spectrum_findings(src: DemoFiles) -> list[Finding]:
    """Claims (2) and (3): negative eigenvalues of ViT vs ResNet, and their magnitudes."""
    folders, models = src.folders, src.models
    vit, resnet = _role(models, "vit"), _role(models, "resnet")
    ev = seed_spectra(folders, f"{vit}_spectrum.h5") if vit else None
    er = seed_spectra(folders, f"{resnet}_spectrum.h5") if resnet else None
    out: list[Finding] = []
    missing = f"`{DEMO_COMMAND}` (per-mini-batch spectra)"

    claim = f"ViT has negative Hessian eigenvalues ({vit})"
    stat = "share of negative eigenvalues among the top-5 (largest magnitude) of each mini-batch"
    if ev is None:
        out.append(not_measured(claim, "A", stat, missing))
    else:
        est = one_model(ev, negative_share)
        where = f"{vit}_spectrum.h5 of {seeds_text(ev.seeds)}, mini-batches"
        out.append(measured(claim, "A", stat, est, _units(ev), where, side="greater"))

    both = ev is not None and er is not None
    where = f"{vit}_spectrum.h5, {resnet}_spectrum.h5" + (
        f" of {seeds_text(sorted(set(ev.seeds) | set(er.seeds)))}; mini-batches of each" if both else ""
    )
    claim = f"ResNet has hardly any negative eigenvalues: fewer than ViT ({vit} - {resnet})"
    stat = "difference of the shares of negative eigenvalues, ViT - ResNet"
    if not both:
        out.append(not_measured(claim, "A", stat, missing))
    else:
        est = compare(ev, er, negative_share, np.subtract)
        out.append(measured(claim, "A", stat, est, _units(ev, er), where, side="greater"))

    claim = f"ViT's Hessian eigenvalues are smaller in magnitude than ResNet's: flatter ({vit} / {resnet})"
    stat = "ratio of the mean top eigenvalue magnitude per mini-batch, ViT / ResNet (threshold 1)"
    if not both:
        out.append(not_measured(claim, "A", stat, missing))
    else:
        est = compare(ev, er, top_magnitude, np.divide, log=True)
        out.append(measured(claim, "A", stat, est, _units(ev, er), where, side="less", threshold=1.0))

    return out


def _negative_curvature_findings(src: DemoFiles) -> list[Finding]:
    """Where ViT's and ResNet's negative curvature comes from (:mod:`landscape.reproduce.negative`)."""
    out = []
    for model in [m for m in (_role(src.models, "vit"), _role(src.models, "resnet")) if m]:
        row = negative_curvature(src.folders, model)
        claim = CLAIM.format(model=model)
        if row.estimate is None:
            out.append(not_measured(claim, "A", STATISTIC, f"`{DEMO_COMMAND}` (the negative-curvature stage)"))
        else:
            kw = {"side": "greater", "threshold": NEGATIVE_SHARE}
            out.append(measured(claim, "A", STATISTIC, row.estimate, row.units, row.where, **kw))
    return out


def _data_size_finding(src: DemoFiles) -> Finding:
    """Claim (4): more data suppresses ViT's negative eigenvalues (a small data fraction against all the data)."""
    folders, models = src.folders, src.models
    vit = _role(models, "vit")
    ev = seed_spectra(folders, f"{vit}_spectrum.h5") if vit else None
    claim = "More data suppresses ViT's negative eigenvalues (vit_mini on 6% vs 100% of the data)"
    stat = "share of negative eigenvalues, smallest data fraction - all the data"
    fractions = _data_fractions(folders, vit or "vit_mini")
    es = seed_spectra(folders, f"{DATA_SIZE_DIR}/{fractions[min(fractions)]}") if fractions else None
    if ev is None or es is None:
        where = (
            f"{DATA_SIZE_DIR}/ spectra missing: the FULL demo `{DEMO_COMMAND}` trains them "
            "(DemoSettings.data_fractions), or notebook 02's data-size section"
        )
        return not_measured(claim, "A", stat, where)
    small = min(fractions)
    claim = f"More data suppresses ViT's negative eigenvalues ({vit} on {small:.0%} vs 100% of the data)"
    est = compare(es, ev, negative_share, np.subtract)
    where = f"{DATA_SIZE_DIR}/{fractions[small]}, {vit}_spectrum.h5 of {seeds_text(es.seeds)}; mini-batches"
    return measured(claim, "A", stat, est, _units(es, ev), where, side="greater")


def batch_mean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The mean of per-batch values over the weighted mini-batches: ``(weights @ values) / weights.sum(1)``.

    Args:
        values: ``(n_batches,)``, one value per mini-batch.
        weights: ``(r, n_batches)``.

    Returns:
        ``r`` means.
    """
    return (weights @ np.asarray(values, dtype=float)) / weights.sum(1)


def _sharpness_attrs(folders: dict[int, Path], name: str) -> dict:
    """The first seed's sharpness file ``name``'s attributes, with ``largest_rho``, its largest radius."""
    for d in folders.values():
        if (d / name).is_file():
            res = read_result(d / name)
            return {**res.attrs, "largest_rho": float(np.max(np.asarray(res["rho"], dtype=float)))}
    return {}


def _sharpness_findings(src: DemoFiles) -> list[Finding]:
    """Claim (3) again with measures invariant to rescaling: adaptive average- and worst-case m-sharpness."""
    folders, models = src.folders, src.models
    vit, resnet = _role(models, "vit"), _role(models, "resnet")
    out = []
    for measure in ("average", "worst"):
        claim = f"ViT is flatter than ResNet by adaptive {measure}-case sharpness ({vit} / {resnet})"
        names = [SHARPNESS_FILE.format(model=m, measure=measure) for m in (vit, resnet)]
        attrs = _sharpness_attrs(folders, names[0])
        norm = "inf" if str(attrs.get("p", "2")) == "inf" else "2"
        what = "average-case (Gaussian noise)" if measure == "average" else f"worst-case (l{norm} ball)"
        stat = f"ratio of the mean adaptive {what} m-sharpness per mini-batch, ViT / ResNet (threshold 1)"
        sv, sr = (seed_sharpness(folders, n) if vit and resnet else None for n in names)
        if sv is None or sr is None:
            out.append(not_measured(claim, "A", stat, f"`{DEMO_COMMAND}` (DemoSettings.sharpness)"))
            continue
        est = compare(sv, sr, batch_mean, np.divide, log=True)
        seeds = seeds_text(sorted(set(sv.seeds) | set(sr.seeds)))
        size = f"rho = {attrs['largest_rho']:g} relative to |w|, m = {attrs.get('batch_size')}"
        where = f"{names[0]}, {names[1]} of {seeds} ({size}); mini-batches"
        out.append(measured(claim, "A", stat, est, _units(sv, sr), where, side="less", threshold=1.0))
    return out


def _accuracy_finding(src: DemoFiles) -> Finding:
    """Claim (6): AlterNet is at least as accurate as ResNet (paired: seed by seed, image by image)."""
    folders, models = src.folders, src.models
    alt, resnet = _role(models, "alternet"), _role(models, "resnet")
    claim = f"AlterNet is at least as accurate as ResNet ({alt} - {resnet})"
    stat = f"test accuracy difference, AlterNet - ResNet (threshold -{ACCURACY_EPSILON:g}: 0.5 points)"
    differences = {}
    for s, d in folders.items():
        a_ckpt, r_ckpt = d / f"{alt}.pt", d / f"{resnet}.pt"
        if not (alt and resnet and a_ckpt.is_file() and r_ckpt.is_file()):
            continue
        a = per_image_correct(a_ckpt).astype(float)
        r = per_image_correct(r_ckpt).astype(float)
        if len(a) != len(r):
            raise LandscapeError(f"{a_ckpt.name} and {r_ckpt.name} of seed {s} were tested on different data")
        differences[s] = a - r
    d = stack_seeds(differences)
    if d is None:
        return not_measured(claim, "A", stat, f"checkpoints missing: `{DEMO_COMMAND}`")
    est = one_model(d, batch_mean)
    where = f"{alt}.pt, {resnet}.pt of {seeds_text(d.seeds)}: per-image correctness on the test split (paired)"
    return measured(
        claim, "A", stat, est, (len(d.units), len(d.sizes)), where, side="greater", threshold=-ACCURACY_EPSILON
    )


def _paper_b_finding(src: DemoFiles) -> Finding:
    """Claim (7): the CNN-initialised ViT beats a random-init ViT (given the same total steps) at low data."""
    path = src.root / "paper_b.json"
    claim = "A CNN-initialised ViT beats a randomly initialised ViT at low data"
    stat = "test accuracy, CNN-init ViT - random-init ViT (2x steps), at the smallest data fraction"
    if not path.is_file():
        where = (
            f"no paper_b.json: the full demo `{DEMO_COMMAND}` measures it (not the quick demo), "
            f"or `{PAPER_B_COMMAND} --json DIR/paper_b.json`"
        )
        return not_measured(claim, "B", stat, where)
    rows = read_paper_b(path)
    base = "vit_random_2x" if any("vit_random_2x" in r for r in rows) else "vit_random"
    rows = [r for r in rows if base in r and "vit_cnn_init" in r and "fraction" in r]
    if not rows:
        return not_measured(claim, "B", stat, f"{path.name} holds no rows with vit_cnn_init and {base}")
    small = min(float(r["fraction"]) for r in rows)
    rows = [r for r in rows if float(r["fraction"]) == small]
    d = np.array([float(r["vit_cnn_init"]) - float(r[base]) for r in rows])
    if base != "vit_random_2x":
        stat = stat.replace("(2x steps)", "(same steps per stage; no 2x control in the file)")
    est = seed_mean(d)
    steps = sorted({int(r["steps"]) for r in rows if "steps" in r})
    size = f", {'/'.join(map(str, steps))} steps per stage" if steps else ""
    where = f"{path.name}: fraction {small:g}{size}, over {len(d)} seed(s)"
    return measured(claim + f" (fraction {small:g})", "B", stat, est, (len(d), len(d)), where, side="greater")


def _width_finding(src: DemoFiles) -> Finding:
    """After weight matching the barrier between two trainings falls as the network widens (Ainsworth et al. 2023).

    The statistic is the aligned line's test loss barrier at the widest multiplier minus at the narrowest,
    averaged over the seed pairs measured at both (:mod:`landscape.reproduce.widths`); its interval is over the
    seeds (:func:`landscape.reproduce.widths.width_estimate`).
    """
    sweep, seeds = src.widths, list(src.folders)
    claim = f"After alignment the barrier falls with width ({sweep.model})"
    stat = "test loss barrier of the weight-matched line, widest - narrowest, mean over seed pairs"
    estimate = width_estimate(read_barriers(src.root, sweep, seeds))
    if not estimate:
        return not_measured(claim, REBASIN, stat, f"`{DEMO_COMMAND}` (the full demo's width sweep)")
    narrow, wide, n, n_seeds, value = estimate
    stat = stat.replace("widest - narrowest", f"{width_label(wide)}x - {width_label(narrow)}x {sweep.model}'s channels")
    where = f"{WIDTH_DIR}/{WIDTH_CONNECT_FILE.format(model=sweep.model, k='K', a='A', b='B')} of {n} seed pairs"
    return measured(claim, REBASIN, stat, value, (n, n_seeds), where, side="less")


def _listed(row: Callable[[DemoFiles], Finding]) -> Callable[[DemoFiles], list[Finding]]:
    return lambda src: [row(src)]


#: the rows of the table in order, each a function of the demo's files returning its findings; a new claim is one
#: function added here (its interval by :func:`one_model` or :func:`compare`, its row by :func:`measured`)
ROWS: tuple[Callable[[DemoFiles], list[Finding]], ...] = (
    _fourier_findings,
    _spectrum_findings,
    _negative_curvature_findings,
    _sharpness_findings,
    _listed(_data_size_finding),
    _listed(_accuracy_finding),
    _listed(_width_finding),
    _listed(_paper_b_finding),
)


def findings(
    folder: str | Path,
    models: Sequence[str] = ("resnet_mini", "vit_mini", "alternet_mini"),
    *,
    training_seeds: Sequence[int] | None = None,
    fourier_unit: int = 16,
    widths: WidthSweep | None = None,
) -> list[Finding]:
    """A verdict for every claim of Paper A and Paper B from the files of a demo folder (see the module doc).

    Deterministic: the intervals are over the seeds (delete-one-seed jackknife), nothing is drawn at random.

    Args:
        folder: the demo folder (``MODEL.pt``, ``MODEL_spectrum.h5``, ``MODEL_fourier.h5``, optionally
            ``data_size/vit_mini_dataF_spectrum.h5``, the same in ``seedK/`` for the models trained with seed K,
            and ``paper_b.json``).
        models: the models; the roles ResNet, ViT and AlterNet go to the first name starting with ``resnet``,
            ``vit`` and ``alternet``.
        training_seeds: the training seeds whose models are read; None: seed 0 and every ``seedK/`` there is.
        fourier_unit: images per batch of the recomputed Fourier profiles (their sums are pooled per seed).
        widths: the width sweep whose ``widths/`` files give the width row (None: the default
            :class:`~landscape.reproduce.widths.WidthSweep`).

    Returns:
        The findings, in the order of :data:`ROWS`: high-frequency change per model and block kind, variance
        change, negative share of ViT, ViT - ResNet negative share, ViT / ResNet magnitude, the residual's share of
        ViT's and ResNet's negative curvature, ViT / ResNet adaptive average- and worst-case sharpness, data size,
        accuracy, the barrier against width, Paper B.
    """
    root = Path(folder)
    src = DemoFiles(root, seed_folders(root, training_seeds), tuple(models), fourier_unit, widths or WidthSweep())
    return [finding for row in ROWS for finding in row(src)]
