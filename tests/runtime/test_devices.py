"""Sizes that do not fit the machine are refused before anything of them is allocated (one line, what to lower)."""

import pytest
import torch
from helpers import one_line_error

from landscape.analyses.hessian.probes import probe_vectors
from landscape.data.images import resize
from landscape.runtime import devices


@pytest.fixture
def small_machine(monkeypatch):
    """A machine with 1 MB of memory."""
    monkeypatch.setattr(devices, "device_memory", lambda device: 1_000_000)


def test_require_memory_compares_the_bytes_of_the_vectors_with_the_device(small_machine):
    devices.require_memory(1000, 125, torch.float64, torch.device("cpu"), "x", "lower it")  # exactly 1 MB
    msg = one_line_error(devices.require_memory, 1001, 125, torch.float64, torch.device("cpu"), "x", "lower it")
    assert "needs 0.0 GB" in msg and "1001 vectors of 125 entries" in msg and msg.endswith("lower it")


def test_probe_vectors_too_many_to_hold_are_refused_before_they_are_drawn(small_machine):
    assert probe_vectors(100, 1000, seed=0).shape == (100, 1000)  # 0.8 MB
    msg = one_line_error(probe_vectors, 100, 10**12, seed=0)
    assert "1,000,000,000,000 probe vectors" in msg and "lower --probes" in msg


def test_images_resized_beyond_the_memory_are_refused_before_they_are_allocated(small_machine):
    images = torch.rand(2, 3, 4, 4)
    assert resize(images, (8, 8), None).shape == (2, 3, 8, 8)
    msg = one_line_error(resize, images, (100_000, 100_000), None)
    assert "2 images of 3 x 100000 x 100000" in msg and "lower --input-size" in msg


def test_a_density_grid_too_large_to_broaden_is_refused_before_it_is_allocated(small_machine):
    from landscape.analyses.hessian.density import broadened_density

    nodes, weights = torch.tensor([[0.0, 1.0]], dtype=torch.float64), torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    assert broadened_density(nodes, weights, 0.1, 100)[0].shape == (100,)
    msg = one_line_error(broadened_density, nodes, weights, 0.1, 10**12)
    assert "a density grid of 1,000,000,000,000 points over 2 nodes" in msg and "lower --grid-points" in msg


def test_augmented_copies_beyond_the_memory_are_refused_before_they_are_drawn(small_machine):
    from landscape.data.augment import augmented_batches
    from landscape.data.loading import load_dataset

    digits = load_dataset("digits", "train")  # 1 x 32 x 32 images: 4 kB each
    assert len(augmented_batches(digits, 10, 10, copies=2, num_classes=10)) == 2
    msg = one_line_error(augmented_batches, digits, 10, 10, copies=10**9, num_classes=10)
    assert "10,000,000,000 augmented images (1000000000 copies of 10) of 1 x 32 x 32" in msg
    assert "lower --augment-copies" in msg
