"""What the causal tasks produce: token rows labelled per position, for the decoder (attnbench.decoder).

A `TokenSplit` is a `Split` whose labels are (N, L): the token each position should predict, or -100 where a
position carries no label (as torch's CrossEntropyLoss ignores it); an answer is a maximal run of consecutive
labelled positions in a row (what exact match scores). Rows may carry `tags`, one value per row under each name
(a needle's depth, a row's context length), which the measurements group their scores by. `SequenceTaskData`
holds such splits; its `num_classes` is the vocabulary the head predicts over.
"""

from __future__ import annotations

import dataclasses

import torch

from attnbench.options import require
from attnbench.tasks.base import Split, TaskData, eval_split_sizes

IGNORE = -100


@dataclasses.dataclass
class TokenSplit(Split):
    """input_ids, attention_mask, labels: (N, L); labels -100 where a position has none; tags: name -> (N,)."""

    tags: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.attention_mask.shape == self.input_ids.shape, "attention_mask must match input_ids"
        assert self.labels.shape == self.input_ids.shape, "labels must be (N, L), one per position"
        assert all(tag.shape == (len(self),) for tag in self.tags.values()), "each tag holds one value per row"

    def subset(self, index: torch.Tensor | slice) -> TokenSplit:
        tags = {name: tag[index] for name, tag in self.tags.items()}
        return TokenSplit(self.input_ids[index], self.attention_mask[index], self.labels[index], tags=tags)

    def batches(self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None):
        """Yield (input_ids, attention_mask, None, labels) batches of whole rows, cut to the batch's longest real
        row (right padding), labels (b, width)."""
        order = torch.randperm(len(self), generator=generator) if shuffle else torch.arange(len(self))
        for start in range(0, len(self), batch_size):
            idx = order[start : start + batch_size]
            mask = self.attention_mask[idx]
            width = max(int(mask.sum(dim=1).max()), 1)
            yield self.input_ids[idx, :width], mask[:, :width], None, self.labels[idx, :width]

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
            **eval_split_sizes(self.eval_splits),
        }


def no_label_noise(label_noise: float, task: str) -> None:
    """Causal tasks have no class labels to flip: refuse label_noise."""
    require(
        label_noise == 0.0,
        f"label_noise={label_noise}: task {task!r} labels positions, not rows, so it has no label noise; leave it at 0",
    )
