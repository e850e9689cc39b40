"""``landscape convert``: turn a trained ``convvit_*`` checkpoint into a ``vit_rpe_*`` checkpoint (Paper B)."""

from __future__ import annotations

import click

from landscape.cli.options import COUNT, OUTPUT, SEED


@click.command("convert")
@click.option("--ckpt", required=True, type=click.Path(dir_okay=False), help="A trained convvit_* checkpoint.")
@click.option("--out", required=True, type=OUTPUT, help="Where to write the vit_rpe_* checkpoint.")
@click.option(
    "--sharpness",
    default=None,
    type=float,
    help="Position-bias margin c: each query leaks about n*exp(-c) of its attention [default: 10].",
)
@click.option("--k-std", default=None, type=float, help="Std of the random W_K [default: 0.02].")
@click.option(
    "--q-std",
    default=0.0,
    show_default=True,
    type=float,
    help="Std of the random W_Q (0 keeps the content term exactly zero).",
)
@click.option("--data", default=None, help="Dataset spec to compare logits on [default: the checkpoint's].")
@click.option(
    "--samples",
    default=512,
    show_default=True,
    type=COUNT,
    help="Training images to compare logits on.",
)
@click.option("--seed", default=0, show_default=True, type=SEED, help="Seed of W_K/W_Q and of the compared samples.")
@click.option("--force", is_flag=True, help="Overwrite an existing --out.")
def command(
    ckpt: str,
    out: str,
    sharpness: float | None,
    k_std: float | None,
    q_std: float,
    data: str | None,
    samples: int,
    seed: int,
    force: bool,
) -> None:
    """Initialise a ViT from a CNN counterpart and print the max logit difference between the two."""
    from landscape.models.convert import DEFAULT_K_STD, DEFAULT_SHARPNESS, convert_checkpoint

    r = convert_checkpoint(
        ckpt,
        out,
        sharpness=DEFAULT_SHARPNESS if sharpness is None else sharpness,
        k_std=DEFAULT_K_STD if k_std is None else k_std,
        q_std=q_std,
        data=data,
        samples=samples,
        seed=seed,
        force=force,
    )
    click.echo(
        f"saved {r.out} ({r.model} from {r.source_model}, sharpness {r.sharpness:g}): "
        f"max |logit difference| {r.max_logit_difference:.3e} on {r.n_samples} samples of {r.dataset}"
    )
