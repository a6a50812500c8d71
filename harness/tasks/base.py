"""What every task produces: tokenised, padded splits the shared classifier consumes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass
class Split:
    """One split. input_ids (N, L) long, padded with the task's pad_id; attention_mask (N, L) bool,
    True = real token; labels (N,) long in [0, num_classes); segment_ids (N, L) long 0/1 for pairs."""

    input_ids: Tensor
    attention_mask: Tensor
    labels: Tensor
    segment_ids: Tensor | None = None

    def __post_init__(self) -> None:
        n = self.input_ids.shape[0]
        assert self.attention_mask.shape == self.input_ids.shape, "attention_mask must match input_ids"
        assert self.labels.shape == (n,), "labels must be (N,)"
        assert self.segment_ids is None or self.segment_ids.shape == self.input_ids.shape

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Sequence[int]],
        labels: Sequence[int],
        width: int,
        pad_id: int = 0,
        segments: Sequence[Sequence[int]] | None = None,
    ) -> "Split":
        """Right-pad token rows (each at most `width` long) into a Split of shape (N, width)."""
        lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
        if len(rows) and int(lengths.max()) > width:
            i = int(lengths.argmax())
            raise ValueError(f"row {i} has {int(lengths[i])} tokens, more than the width {width}")
        mask = torch.arange(width) < lengths[:, None]  # right padding: real tokens first
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        ids[mask] = torch.tensor([t for row in rows for t in row], dtype=torch.long)
        seg = None
        if segments is not None:
            seg = torch.zeros((len(rows), width), dtype=torch.long)
            seg[mask] = torch.tensor([s for row in segments for s in row], dtype=torch.long)
        return cls(ids, mask, torch.as_tensor(list(labels), dtype=torch.long), seg)

    def subset(self, index: Tensor) -> "Split":
        """Rows `index` (a long tensor or a slice) of this split."""
        seg = None if self.segment_ids is None else self.segment_ids[index]
        return Split(self.input_ids[index], self.attention_mask[index], self.labels[index], seg)

    def batches(self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None):
        """Yield (input_ids, attention_mask, segment_ids, labels) batches, trimmed to the longest real row."""
        order = torch.randperm(len(self), generator=generator) if shuffle else torch.arange(len(self))
        for start in range(0, len(self), batch_size):
            idx = order[start : start + batch_size]
            mask = self.attention_mask[idx]
            width = max(int(mask.sum(dim=1).max()), 1)
            seg = None if self.segment_ids is None else self.segment_ids[idx, :width]
            yield self.input_ids[idx, :width], mask[:, :width], seg, self.labels[idx]


@dataclasses.dataclass
class TaskData:
    """A loaded task: its three disjoint splits and what the model needs to know about them."""

    name: str
    splits: dict[str, Split]
    num_classes: int
    vocab_size: int
    max_length: int
    pad_id: int = 0
    pair: bool = False
    info: dict = dataclasses.field(default_factory=dict)  # provenance: source, sizes, tokenizer, options
    special_ids: tuple[int, ...] = (0,)  # ids corruption never touches (pad, [CLS], [SEP], ...)
    texts: dict[str, list[str]] | None = None  # raw texts per split (pairs joined by a newline), text tasks only
    # test rows at other lengths, keyed by row length in tokens, drawn as the test split's; the measurements score
    # each apart and report `<metric>@<length>` (attnbench.measurements.lengths); the `test` split stays the headline
    eval_splits: dict[int, Split] = dataclasses.field(default_factory=dict)

    def __getitem__(self, split: str) -> Split:
        return self.splits[split]

    def summary(self) -> dict:
        """What a cell ran on (JSON-able, for its provenance): sizes, class names, class counts and split
        sizes, plus the task's own info (source, files, tokenizer, rows dropped for bad data)."""
        names = self.info.get("label_names", list(range(self.num_classes)))
        splits = {
            name: {
                "size": len(split),
                "class_counts": torch.bincount(split.labels, minlength=self.num_classes).tolist(),
            }
            for name, split in self.splits.items()
        }
        return {
            **self.info,
            "task": self.name,
            "num_classes": self.num_classes,
            "vocab_size": self.vocab_size,
            "max_length": self.max_length,
            "pair": self.pair,
            "label_names": names,
            "splits": splits,
            **eval_split_sizes(self.eval_splits),
        }


def eval_split_sizes(eval_splits: dict[int, Split]) -> dict:
    """{"eval_splits": {length: rows}} for a task's summary, or nothing where it has none."""
    return {"eval_splits": {str(n): len(split) for n, split in sorted(eval_splits.items())}} if eval_splits else {}
