"""Byte-level document matching (LRA's "Retrieval", AAN citation links): do two documents belong together?

Each row holds both documents: [CLS] a-bytes with segment id 0, then [CLS] b-bytes with segment id 1,
each cut to `max_length` ids (LRA: 4,000 each under `preset: lra`), then right-padded. The model is
`attnbench.two_tower` (the task says so in info["architecture"]): it splits a row back into its two
documents and encodes each alone, so neither document attends to the other.

Sources (`layout`):
- `pairs`: files (or a hub data set) with two text columns and a binary label, e.g. LRA's AAN pairs
  exported to TSV (columns named by `text_columns` and `label_column`).
- `corpus`: any labelled single-text corpus (e.g. the shared Rotten Tomatoes files) made into pairs by
  `pairs_from_corpus`: every document of a split is paired with a partner from the same split, of its
  own class (label 1) or another class (label 0), each with probability 1/2, seeded by split_seed.
"""
from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from attnbench.errors import UserError
from attnbench.options import option, require
from attnbench.tasks import register_task
from attnbench.tasks.base import SPLITS, Split, TaskData
from attnbench.tasks.byte_text import BYTE_VOCAB, CLS_ID, PAD_ID, ByteTextConfig, encode_bytes, labelled_splits
from attnbench.tasks.sentence import TextRows

TWO_TOWER = "two-tower"  # the model attnbench.two_tower builds


@dataclasses.dataclass
class ByteRetrievalConfig(ByteTextConfig):
    """Options of byte-level matching: the byte options, per document, plus where the pairs come from."""

    layout: Literal["pairs", "corpus"] = option(
        "pairs", "pairs: two text columns and a 0/1 label per row; corpus: one text column and a class per row, "
                 "paired by pairs_from_corpus (label 1 = same class)")

    def __post_init__(self) -> None:
        super().__post_init__()
        wanted = 2 if self.layout == "pairs" else 1
        require(len(self.text_columns) == wanted, f"text_columns={self.text_columns} must name {wanted} column(s) "
                                                  f"for layout: {self.layout}")


def pairs_from_corpus(texts: list[str], labels: list[int], seed: int) -> tuple[list[str], list[str], list[int]]:
    """Pair each document with a random partner: of its own class (label 1) or another (label 0), p = 1/2 each.

    Deterministic per seed; a document never pairs with itself. Returns (first texts, second texts, labels)."""
    rng = np.random.default_rng(seed)
    classes = np.asarray(labels)
    by_class = {c: np.flatnonzero(classes == c) for c in np.unique(classes)}
    if len(by_class) < 2:
        raise UserError(f"pairs_from_corpus: the corpus holds one class only ({list(by_class)}); pairs need two")
    firsts, seconds, matched = [], [], []
    for i, c in enumerate(classes):
        same = int(rng.integers(2)) == 1 and len(by_class[c]) > 1
        pool = by_class[c] if same else np.flatnonzero(classes != c)
        j = i
        while j == i:
            j = int(pool[rng.integers(len(pool))])
        firsts.append(texts[i])
        seconds.append(texts[j])
        matched.append(int(same))
    return firsts, seconds, matched


def pair_row(a: str, b: str, length: int) -> tuple[list[int], list[int]]:
    """Token ids and segment ids of one pair: [CLS] a (segment 0) then [CLS] b (segment 1), each at most `length`."""
    first, second = encode_bytes(a, length), encode_bytes(b, length)
    return first + second, [0] * len(first) + [1] * len(second)


@register_task("byte_retrieval", config=ByteRetrievalConfig)
def byte_retrieval(cfg: ByteRetrievalConfig) -> TaskData:
    """Byte-level two-tower document matching (LRA Retrieval); pair files, or pairs built from a corpus."""
    rows, labels, info = labelled_splits(cfg, "byte_retrieval")
    if cfg.layout == "corpus":
        built = {s: pairs_from_corpus(rows[s].texts, labels[s], cfg.split_seed + k) for k, s in enumerate(SPLITS)}
        rows = {s: TextRows(a, b, y) for s, (a, b, y) in built.items()}
        labels = {s: list(rows[s].labels) for s in SPLITS}
        info = {**info, "corpus_label_names": info["label_names"], "label_names": ["different", "same"],
                "pairs": "built by pairs_from_corpus: label 1 when both documents share the corpus class"}
    elif sorted(set(labels["train"])) != [0, 1]:
        raise UserError(f"byte_retrieval: the pair labels are {info['label_names']}; matching needs two classes")
    splits = {}
    for s in SPLITS:
        encoded = [pair_row(a, b, cfg.length) for a, b in zip(rows[s].texts, rows[s].pairs)]
        splits[s] = Split.from_rows([ids for ids, _ in encoded], labels[s], 2 * cfg.length, PAD_ID,
                                    segments=[seg for _, seg in encoded])
    return TaskData("byte_retrieval", splits, num_classes=2, vocab_size=BYTE_VOCAB, max_length=2 * cfg.length,
                    pad_id=PAD_ID,
                    info={**info, "preset": cfg.preset, "architecture": TWO_TOWER, "document_length": cfg.length,
                          "tokenizer": "bytes (0 [PAD], 1 [CLS], 2 + byte) per document"},
                    special_ids=(PAD_ID, CLS_ID),
                    texts={s: [f"{a}\n{b}" for a, b in zip(rows[s].texts, rows[s].pairs)] for s in SPLITS})
