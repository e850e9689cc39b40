"""``landscape models``: list the model zoo with parameter counts."""

from __future__ import annotations

import click


@click.command("models")
@click.option("--pattern", default=None, help="Only names matching this glob, e.g. 'vit*'.")
@click.option("--num-classes", default=10, show_default=True, help="Classes of the head used for the counts.")
@click.option("--in-chans", default=3, show_default=True, help="Input channels used for the counts.")
def command(pattern: str | None, num_classes: int, in_chans: int) -> None:
    """List every registered model with its parameter count."""
    from landscape.models import count_parameters, create_model, list_models

    names = list_models(pattern)
    width = max((len(n) for n in names), default=4)
    click.echo(f"{'model':<{width}}  parameters")
    for name in names:
        model = create_model(name, num_classes=num_classes, in_chans=in_chans)
        click.echo(f"{name:<{width}}  {count_parameters(model):>12,}")
