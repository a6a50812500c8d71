"""Pathfinder: the label agrees with an independent flood fill of the generated contour masks; the original
generator's geometry (nearby starts, start-to-end markers, disks); the marker distance alone at chance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import ndimage
from sklearn.linear_model import LogisticRegression

from attnbench.tasks import load_task
from attnbench.tasks.pathfinder import (
    BACKGROUND,
    MARKER,
    PAD_ID,
    PathfinderConfig,
    PathfinderSampler,
    generate_pathfinder,
    marker_distance,
)

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
        lit = (drawn.image != BACKGROUND) & (drawn.image != MARKER)
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
        traced = drawn.masks.any(axis=0)
        assert np.array_equal((drawn.image != BACKGROUND) & traced, traced)  # every traced pixel lit


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


def test_targets_start_a_seed_distance_apart_and_markers_sit_on_start_and_far_end():
    cfg = PathfinderConfig(resolution=32, contour_length=9)
    assert (cfg.seed_distance, cfg.thickness, cfg.marker_radius, cfg.num_distractors) == (7.0, 2, 1.0, 5)
    rng = np.random.default_rng(2)
    for i in range(20):
        drawn = generate_pathfinder(rng, i % 2, cfg)
        components, _ = ndimage.label(drawn.masks.any(axis=0), structure=EIGHT_NEIGHBOURS)
        a, b = drawn.endpoints
        targets = {int(components[p]) for p in (a, b)}
        assert len(targets) == 2 - drawn.label
        assert drawn.image[a] == MARKER and drawn.image[b] == MARKER
        assert (drawn.image == MARKER).sum() > 2  # disks, not single pixels
        starts = [np.argwhere(drawn.masks[k]) for k in (0, 1)]
        gap = min(float(np.hypot(*(p - q))) for p in starts[0] for q in starts[1])
        assert gap <= 7.0 + 1  # the targets come within the seed distance of each other (their starts)


def marker_distance_accuracy(images) -> float:
    """Held-out accuracy of a logistic regression that predicts the label from the marker distance alone."""
    x = np.array([[marker_distance(d)] for d in images])
    y = np.array([d.label for d in images])
    half = len(images) // 2
    return LogisticRegression().fit(x[:half], y[:half]).score(x[half:], y[half:])


def test_marker_distance_alone_stays_at_chance():
    cfg = PathfinderConfig(resolution=32, contour_length=9)
    rng = np.random.default_rng(0)
    plain = [generate_pathfinder(rng, i % 2, cfg) for i in range(1000)]
    sampler = PathfinderSampler(cfg)
    matched = [sampler.draw(rng, i % 2) for i in range(1000)]
    assert marker_distance_accuracy(plain) > 0.57  # nearby starts alone leave a cue (so the test can fail)
    assert abs(marker_distance_accuracy(matched) - 0.5) < 0.05  # 500 held out: chance within ~2.2 s.e.
