"""The model zoo: a registry of named constructors over a few parametric model classes.

Importing this package registers every model: ``create_model("resnet18", num_classes=10, in_chans=1)``.
"""

from landscape.models.alternet import AlterNet
from landscape.models.layers import FEATURE_KINDS, Feature
from landscape.models.registry import (
    count_parameters,
    create_model,
    list_aliases,
    list_models,
    register_model,
    resolve_model_name,
)
from landscape.models.resnet import ResNet
from landscape.models.vit import ViT
from landscape.models.vit_rpe import ConvViT, RingViT

__all__ = [
    "FEATURE_KINDS",
    "AlterNet",
    "ConvViT",
    "Feature",
    "ResNet",
    "RingViT",
    "ViT",
    "count_parameters",
    "create_model",
    "list_aliases",
    "list_models",
    "register_model",
    "resolve_model_name",
]
