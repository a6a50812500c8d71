"""Associative recall: key-value pairs, then a query key; the class is the value stored under it.

Two row layouts (option `layout`):
- "joined": one token per pair, (k1:v1) (k2:v2) ... (kP:vP) [QUERY] q. Retrieval is one attention
  step (the query key matches the key part of one pair token), learnt within a few epochs.
- "separate": k1 v1 k2 v2 ... kP vP [QUERY] q (the usual MQAR form). Retrieval needs two steps
  (copy each key into its value, then match), which small models learn only after thousands of
  optimiser steps.
Keys in a row are distinct and q is one of them. The values of a row are spread evenly over the
classes (distinct when num_classes >= num_pairs), so counting values gives no shortcut. Retrieving
one value among many is a known weak spot of linear attention, so variants separate here.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from attnbench.options import option, require
from attnbench.tasks import register_task
from attnbench.tasks.base import TaskData
from attnbench.tasks.synthetic import Example, SyntheticConfig, balanced_splits, split_info

PAD_ID, QUERY_ID = 0, 1


@dataclasses.dataclass
class RecallConfig(SyntheticConfig):
    """Options of the associative-recall generator."""

    num_train: int = option(
        20000,
        "training examples (defaults: with 5 epochs of a 2-layer d_model=64 encoder, "
        "softmax reaches ~0.8 test accuracy, ELU linear attention stays near chance)",
    )
    num_pairs: int = option(8, "key-value pairs per row")
    num_keys: int = option(8, "size of the key vocabulary")
    num_classes: int = option(4, "number of distinct values (= number of classes)")
    layout: Literal["joined", "separate"] = option("joined", "one token per pair, or a key token then a value token")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.num_pairs >= 1, f"num_pairs={self.num_pairs} must be at least 1")
        require(
            self.num_keys >= self.num_pairs,
            f"num_keys={self.num_keys} is below num_pairs={self.num_pairs}; keys in a row are distinct",
        )
        require(self.num_classes >= 2, f"num_classes={self.num_classes} must be at least 2")

    @property
    def length(self) -> int:
        return (1 if self.layout == "joined" else 2) * self.num_pairs + 2


def key_id(key: int) -> int:
    """Token id of key number `key` (0-based); query keys use the same ids."""
    return 2 + key


def value_id(value: int, num_keys: int) -> int:
    """Token id of value (class) number `value` (0-based), layout "separate"."""
    return 2 + num_keys + value


def pair_id(key: int, value: int, num_keys: int, num_classes: int) -> int:
    """Token id of the pair (key, value), layout "joined"."""
    return 2 + num_keys + key * num_classes + value


def vocab_size(cfg: RecallConfig) -> int:
    return 2 + cfg.num_keys + (cfg.num_keys * cfg.num_classes if cfg.layout == "joined" else cfg.num_classes)


def row_values(num_pairs: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Values of one row: each class at most once more often than any other, in random order."""
    classes = rng.permutation(num_classes)
    return rng.permutation(np.resize(classes, num_pairs))


class RecallSampler:
    """Draws (tokens, value of the queried key) examples."""

    def __init__(self, cfg: RecallConfig):
        self.cfg = cfg

    def __call__(self, rng: np.random.Generator) -> Example:
        cfg = self.cfg
        keys = rng.choice(cfg.num_keys, size=cfg.num_pairs, replace=False).tolist()
        values = row_values(cfg.num_pairs, cfg.num_classes, rng).tolist()
        asked = int(rng.integers(cfg.num_pairs))
        tokens = []
        for k, v in zip(keys, values):
            if cfg.layout == "joined":
                tokens.append(pair_id(k, v, cfg.num_keys, cfg.num_classes))
            else:
                tokens += [key_id(k), value_id(v, cfg.num_keys)]
        tokens += [QUERY_ID, key_id(keys[asked])]
        return tuple(tokens), values[asked]


@register_task("associative_recall", config=RecallConfig)
def associative_recall(cfg: RecallConfig) -> TaskData:
    """Associative recall: read key-value pairs, answer the value of the queried key."""
    splits = balanced_splits(RecallSampler(cfg), cfg.num_classes, cfg, cfg.length, "associative_recall")
    return TaskData(
        "associative_recall",
        splits,
        num_classes=cfg.num_classes,
        vocab_size=vocab_size(cfg),
        max_length=cfg.length,
        pad_id=PAD_ID,
        info={
            "source": f"generated (associative recall, {cfg.layout} layout)",
            "query_id": QUERY_ID,
            "key_ids": [key_id(0), key_id(cfg.num_keys - 1)],
            "splits": split_info(splits),
        },
        special_ids=(PAD_ID, QUERY_ID),
    )
