"""``landscape models``: list the model zoo with parameter counts, for the data the models would be trained on."""

from __future__ import annotations

import click

from landscape.cli.options import COUNT


@click.command("models")
@click.option("--pattern", default=None, help="Only names matching this glob, e.g. 'vit*'.")
@click.option(
    "--data",
    default="digits",
    show_default=True,
    help="The dataset whose channels and classes the counts are for (as `landscape train --data`).",
)
@click.option("--num-classes", default=None, type=COUNT, help="Classes of the head [default: the data's].")
@click.option("--in-chans", default=None, type=COUNT, help="Input channels [default: the data's].")
def command(pattern: str | None, data: str, num_classes: int | None, in_chans: int | None) -> None:
    """List every registered model with its parameter count (for the default data: 1 channel, 10 classes)."""
    from landscape.data import dataset_info
    from landscape.models import count_parameters, create_model, list_models

    info = dataset_info(data)
    chans = info.in_chans if in_chans is None else in_chans
    classes = info.num_classes if num_classes is None else num_classes
    names = list_models(pattern)
    width = max((len(n) for n in names), default=4)
    plural = "s" if chans != 1 else ""
    click.echo(f"{'model':<{width}}  parameters ({chans} input channel{plural}, {classes} classes)")
    for name in names:
        model = create_model(name, num_classes=classes, in_chans=chans)
        click.echo(f"{name:<{width}}  {count_parameters(model):>12,}")
