"""Piecewise-linear operations found in one forward pass: modules and functional calls on the parameters only."""

import torch
import torch.nn.functional as F
from torch import nn

from landscape.models.kinks import is_kinked, kinked_operations


class Functional(nn.Module):
    """F.relu and max pooling written in forward; a clamp of integer indices that is no kink of the loss."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x):
        index = torch.arange(4).clamp(0, 2)  # index arithmetic, not a function of the parameters
        return F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1)[:, index]


def test_functional_relu_and_max_pooling_are_found_and_index_arithmetic_is_not():
    model = Functional()
    x = torch.randn(2, 1, 4, 4)
    assert kinked_operations(lambda: model(x)) == ["max_pool2d", "relu"]


def test_smooth_networks_have_no_kinks_and_module_activations_are_found():
    x = torch.randn(2, 3)
    smooth = nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2), nn.Tanh())
    assert kinked_operations(lambda: smooth(x)) == []
    kinked = nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(), nn.Linear(4, 2), nn.Hardtanh())
    assert kinked_operations(lambda: kinked(x)) == ["hardtanh", "leaky_relu"]
    assert kinked[0].weight.grad is None  # no gradient was taken


def test_which_names_are_kinks():
    assert all(is_kinked(n) for n in ("relu", "relu6", "_max_pool2d", "adaptive_max_pool1d", "clamp", "abs"))
    assert not any(is_kinked(n) for n in ("gelu", "softmax", "tanh", "linear", "conv2d", "avg_pool2d"))
