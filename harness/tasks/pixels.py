"""Image classification from grey-level pixel tokens (LRA's "Image": CIFAR-10 in grey, 1,024 tokens).

Sources: `cifar10` from the hub (needs the network; grey = 0.2989 R + 0.5870 G + 0.1140 B, as
tf.image.rgb_to_grayscale which LRA used; 45k/5k train/validation from the hub's train split, seeded,
and its 10k test), or `digits`, scikit-learn's bundled 8x8 handwritten digits (1,797 images, 16 grey
levels scaled to 0-255), offline, optionally enlarged `upscale` times per side (nearest neighbour) for
longer sequences. Tokens are the grey levels 0-255 row by row; id 256 is padding (never needed).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
from pathlib import Path
from typing import Literal

import numpy as np

from attnbench.errors import UserError
from attnbench.options import option, require
from attnbench.tasks import TaskConfig, register_task
from attnbench.tasks.base import SPLITS, Split, TaskData
from attnbench.tasks.pathfinder import PAD_ID, PIXEL_LEVELS
from attnbench.tasks.sentence import quiet_datasets

GREY_WEIGHTS = np.array([0.2989, 0.5870, 0.1140])


@dataclasses.dataclass
class PixelsConfig(TaskConfig):
    """Which images, how large, and how they are split."""

    source: Literal["digits", "cifar10"] = option(
        "digits",
        "digits: scikit-learn's bundled 8x8 digits (offline); cifar10: the hub's CIFAR-10 in grey (LRA's Image)",
    )
    upscale: int = option(1, "enlarge each side this many times (nearest neighbour): digits at 4 -> 1,024 tokens")
    validation_fraction: float = option(0.1, "share of the training images held out for validation")
    test_fraction: float = option(0.2, "share of the images held out for test where the source has no test split")
    max_train_examples: int | None = option(None, "keep this many training images (seeded; None = all)")
    split_seed: int = option(0, "seed of the split (fixed across training seeds)", minimum=0, maximum=2**32 - 1)

    def inputs(self) -> dict[str, Path | str]:
        """digits: the two files scikit-learn bundles and `load_digits` reads (images, description); cifar10 is
        read from the hub by its name."""
        if self.source != "digits":
            return {}
        sklearn_data = importlib.resources.files("sklearn.datasets")
        return {
            "digits": Path(str(sklearn_data / "data" / "digits.csv.gz")),
            "digits.description": Path(str(sklearn_data / "descr" / "digits.rst")),
        }

    def __post_init__(self) -> None:
        super().__post_init__()
        require(1 <= self.upscale <= 8, f"upscale={self.upscale} must lie in [1, 8]")
        for name in ("validation_fraction", "test_fraction"):
            require(0.0 < getattr(self, name) < 0.5, f"{name}={getattr(self, name)} must lie in (0, 0.5)")


def grey_levels(images: np.ndarray) -> np.ndarray:
    """(N, H, W, 3) RGB uint8 -> (N, H, W) uint8 grey levels (ITU-R 601 luma, rounded)."""
    return np.clip(np.rint(images.astype(np.float64) @ GREY_WEIGHTS), 0, 255).astype(np.uint8)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return np.rint(bunch.images * (255 / 16)).astype(np.uint8), bunch.target.astype(np.int64)


def _cifar10() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    try:
        with quiet_datasets() as datasets:
            loaded = datasets.load_dataset("uoft-cs/cifar10")
    except Exception as err:  # offline or the hub unreachable
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(
            f"task 'pixels': loading cifar10 from the hub failed ({reason}); use source: digits offline"
        ) from None
    return {
        s: (
            grey_levels(np.stack([np.asarray(im.convert("RGB")) for im in loaded[s]["img"]])),
            np.asarray(loaded[s]["label"], dtype=np.int64),
        )
        for s in ("train", "test")
    }


def _carve(images: np.ndarray, labels: np.ndarray, fraction: float, rng: np.random.Generator):
    order = rng.permutation(len(labels))
    count = max(1, round(fraction * len(labels)))
    held, kept = order[:count], np.sort(order[count:])
    return (images[kept], labels[kept]), (images[held], labels[held])


@register_task("pixels", config=PixelsConfig)
def pixels(cfg: PixelsConfig) -> TaskData:
    """Images as sequences of grey-level pixel tokens: the hub's CIFAR-10 (grey) or scikit-learn's digits."""
    rng = np.random.default_rng(cfg.split_seed)
    if cfg.source == "cifar10":
        loaded = _cifar10()
        train, test = loaded["train"], loaded["test"]
    else:
        train, test = _carve(*_digits(), cfg.test_fraction, rng)
    train, validation = _carve(*train, cfg.validation_fraction, rng)
    if cfg.max_train_examples is not None and cfg.max_train_examples < len(train[1]):
        keep = np.sort(rng.permutation(len(train[1]))[: cfg.max_train_examples])
        train = (train[0][keep], train[1][keep])
    parts = {"train": train, "validation": validation, "test": test}
    side = parts["train"][0].shape[1] * cfg.upscale
    splits = {}
    for s in SPLITS:
        images, labels = parts[s]
        images = images.repeat(cfg.upscale, axis=1).repeat(cfg.upscale, axis=2)
        splits[s] = Split.from_rows(images.reshape(len(images), -1).tolist(), labels.tolist(), side * side, PAD_ID)
    return TaskData(
        "pixels",
        splits,
        num_classes=10,
        vocab_size=PIXEL_LEVELS + 1,
        max_length=side * side,
        pad_id=PAD_ID,
        info={
            "source": "hub uoft-cs/cifar10 (grey)" if cfg.source == "cifar10" else "scikit-learn load_digits (bundled)",
            "image_side": side,
            "tokens": "grey levels 0-255 row by row; id 256 = padding",
            "splits": {s: {"size": len(sp)} for s, sp in splits.items()},
        },
        special_ids=(PAD_ID,),
    )
