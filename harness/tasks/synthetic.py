"""Shared machinery of the generated tasks: class-balanced, de-duplicated, disjoint splits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from attnbench.errors import UserError
from attnbench.options import option, require
from attnbench.tasks import TaskConfig, TestRows
from attnbench.tasks.base import SPLITS, Split

Example = tuple[tuple[int, ...], int]  # (token ids without padding, class)
Sampler = Callable[[np.random.Generator], "Example | None"]  # None = rejected draw


@dataclasses.dataclass
class SyntheticConfig(TaskConfig):
    """Split sizes and balancing shared by every generated task."""

    num_train: int = option(2000, "training examples", maximum=10_000_000)
    num_validation: int = option(500, "validation examples", maximum=10_000_000)
    num_test: int = option(500, "test examples", maximum=10_000_000)
    max_draws: int = option(2_000_000, "give up after this many draws (rejections included)")

    test_rows: ClassVar[TestRows] = "fresh"  # every seed draws its own rows

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("num_train", "num_validation", "num_test"):
            require(getattr(self, name) >= 1, f"{name}={getattr(self, name)} must be at least 1")

    def sizes(self) -> dict[str, int]:
        return {"train": self.num_train, "validation": self.num_validation, "test": self.num_test}


def class_quotas(size: int, num_classes: int) -> list[int]:
    """Per-class counts summing to `size`, as equal as possible (the first classes get the remainder)."""
    return [size // num_classes + (1 if c < size % num_classes else 0) for c in range(num_classes)]


def balanced_splits(
    sample: Sampler, num_classes: int, cfg: SyntheticConfig, width: int, task: str, balanced: bool = True
) -> dict[str, Split]:
    """Draw unique examples until every split holds its per-class quota (`balanced`), or its size with the classes
    as the sampler draws them (not balanced: the generator's own distribution); rows shuffled, seeded.

    A token sequence appears at most once over all splits, so train/validation/test are disjoint.
    """
    rng = np.random.default_rng(cfg.seed)
    buckets = num_classes if balanced else 1  # not balanced: one quota that any class fills
    need = {s: class_quotas(n, buckets) for s, n in cfg.sizes().items()}
    rows: dict[str, list[Example]] = {s: [] for s in SPLITS}
    remaining = sum(cfg.sizes().values())
    seen: set[tuple[int, ...]] = set()
    draws = 0
    while remaining:
        draws += 1
        if draws > cfg.max_draws:
            short = {s: [c for c in range(buckets) if need[s][c]] for s in SPLITS if any(need[s])}
            raise UserError(
                f"task {task!r}: after {cfg.max_draws} draws the classes {short} (by split) are "
                f"still short of examples; lower num_train/num_validation/num_test, widen the "
                f"length range, or raise max_draws"
            )
        example = sample(rng)
        if example is None or example[0] in seen:
            continue
        tokens, label = example
        bucket = label if balanced else 0
        split = next((s for s in SPLITS if need[s][bucket] > 0), None)
        if split is None:
            continue
        seen.add(tokens)
        need[split][bucket] -= 1
        rows[split].append(example)
        remaining -= 1
    out = {}
    for s in SPLITS:
        order = rng.permutation(len(rows[s]))
        chosen = [rows[s][i] for i in order]
        out[s] = Split.from_rows([t for t, _ in chosen], [y for _, y in chosen], width)
    return out


def split_info(splits: dict[str, Split]) -> dict:
    """Sizes and per-class counts of each split, for TaskData.info."""
    return {s: {"size": len(sp), "class_counts": np.bincount(sp.labels.numpy()).tolist()} for s, sp in splits.items()}
