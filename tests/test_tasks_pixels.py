"""pixels: scikit-learn's digits as grey-level tokens, and the RGB-to-grey rule LRA used."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits

from attnbench.tasks import load_task
from attnbench.tasks.pixels import grey_levels


def test_grey_levels_follow_itu_601_luma() -> None:
    rgb = np.array([[[[255, 0, 0], [0, 255, 0], [0, 0, 255], [10, 20, 30]]]], dtype=np.uint8)
    expected = [
        round(0.2989 * 255),
        round(0.5870 * 255),
        round(0.1140 * 255),
        round(0.2989 * 10 + 0.5870 * 20 + 0.1140 * 30),
    ]
    assert grey_levels(rgb)[0, 0].tolist() == expected


def test_digits_rows_are_the_bundled_images_enlarged() -> None:
    data = load_task("pixels", upscale=2)
    sizes = {s: len(data[s]) for s in ("train", "validation", "test")}
    assert sum(sizes.values()) == 1797 and data.max_length == 256 and data.vocab_size == 257
    digits = load_digits()
    images = np.rint(digits.images * (255 / 16)).astype(np.int64)
    row = data["test"].input_ids[0].view(16, 16)
    assert torch.equal(row[::2, ::2], row[1::2, 1::2])  # each pixel repeated 2 x 2
    small = row[::2, ::2].numpy()
    matches = [i for i in range(len(images)) if np.array_equal(images[i], small)]
    assert matches and int(digits.target[matches[0]]) == int(data["test"].labels[0])
    again = load_task("pixels", upscale=2, seed=5)  # the split depends on split_seed only, not the cell seed
    assert torch.equal(again["train"].input_ids, data["train"].input_ids)
