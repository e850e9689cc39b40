"""Paper B's low-data experiment: does a CNN-initialised ViT beat a randomly initialised one on little data?

For each training fraction (stratified subsets of the training split) and seed, with the same optimiser
settings and the same number of optimiser steps for every model:

1. ``convvit_mini`` (the CNN counterpart; ``--size ti`` for the CIFAR-size models) is trained from scratch;
2. ``vit_rpe_mini`` is trained from a random initialisation (and, with ``--control``, for twice the steps);
3. the trained ``convvit_mini`` is converted (``landscape.models.convert``) into a ``vit_rpe_mini`` (its test accuracy
   right after conversion is reported too) and fine-tuned.

The CNN-initialised ViT therefore sees twice the steps in total (CNN stage + ViT stage), as in Paper B's
two-stage pipeline. Prints a markdown table of test accuracies, the seeds and the command.

    python benchmarks/cnn_init_vit.py --fractions 0.1 0.25 1.0 --steps 100 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from landscape.data.loading import load_dataset
from landscape.models.checkpoint import load_model
from landscape.models.convert import DEFAULT_SHARPNESS, convert_checkpoint
from landscape.train import TrainConfig, evaluate_model, train_model


def _epochs_for(n_train: int, steps: int, batch_size: int) -> int:
    """Epochs that give about ``steps`` optimiser steps on ``n_train`` samples (at least one epoch)."""
    return max(1, round(steps / math.ceil(n_train / batch_size)))


def run_cell(args: argparse.Namespace, fraction: float, seed: int, workdir: Path) -> dict:
    """Train the three models on one fraction with one seed; return their test accuracies and details."""
    subset = None if fraction >= 1.0 else fraction
    n_train = len(load_dataset(args.data, "train", subset=subset, seed=seed))
    epochs = _epochs_for(n_train, args.steps, args.batch_size)
    steps = epochs * math.ceil(n_train / args.batch_size)
    common = dict(
        data=args.data,
        epochs=epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=seed,
        subset=subset,
        warmup_epochs=0.1 * epochs,
        device="cpu",
        model_kwargs=dict(args.model_kw),
    )
    tag = f"f{fraction:g}_s{seed}"
    CNN, VIT = f"convvit_{args.size}", f"vit_rpe_{args.size}"
    row = {"fraction": fraction, "seed": seed, "n_train": n_train, "epochs": epochs, "steps": steps}
    if args.control or args.control_only:  # compute control: the random ViT gets the two stages' total steps
        twice = {**common, "epochs": 2 * epochs, "warmup_epochs": 0.2 * epochs}
        row["vit_random_2x"] = train_model(
            TrainConfig(model=VIT, **twice), workdir / f"vit2x_{tag}.pt", force=True, quiet=True
        ).metrics["test_accuracy"]
    if args.control_only:
        return row
    cnn = train_model(TrainConfig(model=CNN, **common), workdir / f"cnn_{tag}.pt", force=True, quiet=True)
    vit = train_model(TrainConfig(model=VIT, **common), workdir / f"vit_{tag}.pt", force=True, quiet=True)
    conv = convert_checkpoint(
        cnn.checkpoint,
        workdir / f"init_{tag}.pt",
        sharpness=args.sharpness,
        data=args.data,
        samples=256,
        seed=seed,
        force=True,
    )
    converted, _ = load_model(conv.out)
    before = evaluate_model(converted, load_dataset(args.data, "test"), torch.device("cpu"))["accuracy"]
    finetune = {**common, "lr": args.finetune_lr or args.lr}
    tuned = train_model(
        TrainConfig(model=VIT, init=str(conv.out), **finetune), workdir / f"ft_{tag}.pt", force=True, quiet=True
    )
    row.update(
        cnn=cnn.metrics["test_accuracy"],
        vit_random=vit.metrics["test_accuracy"],
        converted=before,
        vit_cnn_init=tuned.metrics["test_accuracy"],
        logit_diff=conv.max_logit_difference,
    )
    return row


COLUMNS = [
    ("cnn", "convvit (CNN)"),
    ("vit_random", "vit_rpe, random init"),
    ("vit_random_2x", "vit_rpe, random init, 2x steps"),
    ("converted", "converted, before fine-tuning"),
    ("vit_cnn_init", "vit_rpe, CNN init (CNN steps + ViT steps)"),
]


def _mean(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows]
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def markdown_table(rows: list[dict], args: argparse.Namespace, command: str, seconds: float) -> str:
    """The results as a markdown table (mean ± std over seeds, test accuracy in %), with seeds and command."""
    lines = [
        f"Test accuracy (%) of convvit_{args.size} / vit_rpe_{args.size} on {args.data} (test split), "
        f"mean ± std over seeds {args.seeds}; every model trained "
        f"for the same number of AdamW steps (batch {args.batch_size}, lr {args.lr:g}, cosine schedule; "
        f"fine-tuning lr {args.finetune_lr or args.lr:g}); "
        f"conversion sharpness c = {args.sharpness:g}.",
        "",
        "| train fraction | train images | steps | "
        + " | ".join(h for k, h in COLUMNS if k in rows[0])
        + (" | max logit diff after conversion |" if "logit_diff" in rows[0] else " |"),
        "|---|---|---|" + "---|" * (sum(k in rows[0] for k, _ in COLUMNS) + ("logit_diff" in rows[0])),
    ]
    for fraction in args.fractions:
        cell = [r for r in rows if r["fraction"] == fraction]
        values = [_mean(cell, k) for k, _ in COLUMNS if k in rows[0]]
        if "logit_diff" in rows[0]:
            values.append(f"{max(r['logit_diff'] for r in cell):.2e}")
        lines.append(f"| {fraction:g} | {cell[0]['n_train']} | {cell[0]['steps']} | " + " | ".join(values) + " |")
    lines += ["", f"Command: `{command}` ({seconds / 60:.1f} min, {torch.get_num_threads()} threads)."]
    return "\n".join(lines)


def _model_kw(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    try:
        return key, int(value)
    except ValueError:
        return key, float(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of the experiment."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="digits", help="dataset spec, e.g. digits or cifar100:PATH")
    p.add_argument("--size", default="mini", choices=["mini", "ti"], help="convvit_/vit_rpe_ SIZE models")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.25, 1.0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--steps", type=int, default=100, help="optimiser steps per training run (rounded to epochs)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--finetune-lr", type=float, default=None, help="lr of the CNN-initialised ViT [default: --lr]")
    p.add_argument("--sharpness", type=float, default=DEFAULT_SHARPNESS)
    p.add_argument(
        "--model-kw",
        type=_model_kw,
        action="append",
        default=[],
        help="model option key=value for all three models, e.g. depth=2 (repeatable)",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="also train the random-init ViT for twice the steps (the two-stage pipeline's total)",
    )
    p.add_argument("--control-only", action="store_true", help="train only that control")
    p.add_argument("--workdir", type=Path, default=None, help="keep the checkpoints here (default: a temp dir)")
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the per-run rows here, e.g. demo/paper_b.json (read by the demo's findings table)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> tuple[str, list[dict]]:
    """Run the experiment and print (and return) the markdown table and the per-run rows."""
    args = parse_args(argv)
    command = "python benchmarks/cnn_init_vit.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for fraction in args.fractions:
            for seed in args.seeds:
                rows.append(run_cell(args, fraction, seed, workdir))
                r = rows[-1]
                done = ", ".join(f"{k} {r[k]:.3f}" for k, _ in COLUMNS if k in r)
                print(
                    f"fraction {fraction:g} seed {seed}: {done} ({time.perf_counter() - start:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    seconds = time.perf_counter() - start
    table = markdown_table(rows, args, command, seconds)
    print(table)
    if args.json is not None:
        from landscape.store.files import WRITTEN_BY, write_text

        payload = {"command": command, "seconds": seconds, "rows": rows, "written_by": WRITTEN_BY}
        write_text(args.json, json.dumps(payload, indent=1))
    return table, rows


if __name__ == "__main__":
    main()
