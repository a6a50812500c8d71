"""What the causal tasks produce: token rows labelled per position, for the decoder (attnbench.decoder).

A `TokenSplit` is a `Split` whose labels are (N, L): the token each position should predict, or -100 where a
position carries no label (as torch's CrossEntropyLoss ignores it). `SequenceTaskData` holds such splits;
its `num_classes` is the vocabulary the head predicts over.
"""

from __future__ import annotations

import dataclasses

import torch

from attnbench.options import require
from attnbench.tasks.base import Split, TaskData

IGNORE = -100


@dataclasses.dataclass
class TokenSplit(Split):
    """input_ids, attention_mask, labels: (N, L); labels -100 where a position has none."""

    def __post_init__(self) -> None:
        assert self.attention_mask.shape == self.input_ids.shape, "attention_mask must match input_ids"
        assert self.labels.shape == self.input_ids.shape, "labels must be (N, L), one per position"

    def subset(self, index: torch.Tensor | slice) -> TokenSplit:
        return TokenSplit(self.input_ids[index], self.attention_mask[index], self.labels[index])

    def batches(self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None):
        """Yield (input_ids, attention_mask, None, labels) batches of whole rows, labels (b, L)."""
        order = torch.randperm(len(self), generator=generator) if shuffle else torch.arange(len(self))
        for start in range(0, len(self), batch_size):
            idx = order[start : start + batch_size]
            yield self.input_ids[idx], self.attention_mask[idx], None, self.labels[idx]

    def labelled(self) -> int:
        """How many positions carry a label."""
        return int((self.labels != IGNORE).sum())


@dataclasses.dataclass
class SequenceTaskData(TaskData):
    """A causal task: TokenSplits; `raw` keeps each split's bytes for tasks that re-block them (byte_lm)."""

    raw: dict[str, bytes] | None = None

    def summary(self) -> dict:
        """Sizes per split (rows, row length, labelled positions) and the task's own info (source, hashes)."""
        splits = {
            name: {"size": len(split), "length": int(split.input_ids.shape[1]), "labelled": split.labelled()}
            for name, split in self.splits.items()
        }
        return {
            **self.info,
            "task": self.name,
            "vocab_size": self.vocab_size,
            "max_length": self.max_length,
            "splits": splits,
        }


def no_label_noise(label_noise: float, task: str) -> None:
    """Causal tasks have no class labels to flip: refuse label_noise."""
    require(
        label_noise == 0.0,
        f"label_noise={label_noise}: task {task!r} labels positions, not rows, so it has no label noise; leave it at 0",
    )
