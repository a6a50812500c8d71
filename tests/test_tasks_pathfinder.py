"""Pathfinder: the label agrees with an independent flood fill of the generated contour masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import ndimage

from attnbench.tasks import load_task
from attnbench.tasks.pathfinder import BACKGROUND, MARKER, PAD_ID, PathfinderConfig, generate_pathfinder

EIGHT_NEIGHBOURS = np.ones((3, 3), dtype=int)


@pytest.mark.parametrize("resolution,contour_length", [(16, 6), (32, 9), (64, 14)])
def test_label_matches_flood_fill_of_the_masks(resolution: int, contour_length: int) -> None:
    cfg = PathfinderConfig(resolution=resolution, contour_length=contour_length, num_distractors=3)
    rng = np.random.default_rng(resolution)
    for i in range(30):
        drawn = generate_pathfinder(rng, i % 2, cfg)
        components, count = ndimage.label(drawn.masks.any(axis=0), structure=EIGHT_NEIGHBOURS)
        assert count == len(drawn.masks)  # contours never touch: one component per contour
        a, b = drawn.endpoints
        assert int(components[a] == components[b]) == drawn.label
        assert drawn.image[a] == MARKER and drawn.image[b] == MARKER
        lit = drawn.image != BACKGROUND
        assert not (lit & ~drawn.masks.any(axis=0)).any()  # every lit pixel lies on a contour
        assert lit.sum() < drawn.masks.sum()  # dashed: some of every trace is dark


def test_solid_contours_light_their_whole_trace() -> None:
    cfg = PathfinderConfig(resolution=16, contour_length=6, num_distractors=1, dashed=False)
    rng = np.random.default_rng(5)
    for i in range(20):
        drawn = generate_pathfinder(rng, i % 2, cfg)
        components, _ = ndimage.label(drawn.masks.any(axis=0), structure=EIGHT_NEIGHBOURS)
        a, b = drawn.endpoints
        assert int(components[a] == components[b]) == drawn.label
        assert np.array_equal(drawn.image != BACKGROUND, drawn.masks.any(axis=0))  # every traced pixel lit


def test_generation_is_deterministic_per_seed() -> None:
    cfg = PathfinderConfig(resolution=16)
    first = generate_pathfinder(np.random.default_rng(7), 1, cfg)
    again = generate_pathfinder(np.random.default_rng(7), 1, cfg)
    assert np.array_equal(first.image, again.image) and np.array_equal(first.masks, again.masks)


def test_task_feeds_pixels_as_tokens() -> None:
    data = load_task("pathfinder", seed=3, num_train=40, num_validation=10, num_test=10)
    again = load_task("pathfinder", seed=3, num_train=40, num_validation=10, num_test=10)
    train = data["train"]
    assert train.input_ids.shape == (40, 256) and bool(train.attention_mask.all())
    assert int(train.input_ids.max()) <= 255 and data.vocab_size == 257 and data.pad_id == PAD_ID
    assert torch.bincount(train.labels).tolist() == [20, 20]
    assert torch.equal(train.input_ids, again["train"].input_ids)
