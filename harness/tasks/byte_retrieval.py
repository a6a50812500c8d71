"""Byte-level document matching (LRA's "Retrieval", AAN citation links): do two documents belong together?

Each row holds both documents: [CLS] a-bytes with segment id 0, then [CLS] b-bytes with segment id 1,
each cut to `max_length` ids (LRA: 4,000 each under `preset: lra`), then right-padded. The model is
`attnbench.two_tower` (the task says so in info["architecture"]): it splits a row back into its two
documents and encodes each alone, so neither document attends to the other.

Sources (`layout`):
- `pairs`: files (or a hub data set) with two text columns and a binary label, e.g. LRA's AAN pairs
  exported to TSV (columns named by `text_columns` and `label_column`).
- `corpus`: any single-text corpus (e.g. the shared Rotten Tomatoes files) made into pairs by
  `pairs_from_corpus`, seeded by split_seed, every document of a split paired once within its split, label 1
  with probability 1/2. `pairing: class`: the partner is of the document's own class (1) or another class (0),
  so a pair matches when both documents are about the same thing (the class is the topic). `pairing:
  near-duplicate`: the partner is an edited copy (bytes deleted, swapped or replaced at `edit_rate`) of the
  document itself (1) or of another document (0), the model must tell a copy from a stranger: document
  matching by content, the easier task on a small corpus (the CPU suite's choice).
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
        "pairs",
        "pairs: two text columns and a 0/1 label per row; corpus: one text column (and a class) per row, "
        "paired by pairs_from_corpus",
    )
    pairing: Literal["class", "near-duplicate"] = option(
        "class",
        "layout corpus: label 1 = same class (class), or = an edited copy of the same document (near-duplicate)",
    )
    edit_rate: float = option(0.1, "near-duplicate: share of the partner's bytes deleted, swapped or replaced")

    def __post_init__(self) -> None:
        super().__post_init__()
        wanted = 2 if self.layout == "pairs" else 1
        require(
            len(self.text_columns) == wanted,
            f"text_columns={self.text_columns} must name {wanted} column(s) for layout: {self.layout}",
        )
        require(0.0 <= self.edit_rate < 0.5, f"edit_rate={self.edit_rate} must lie in [0, 0.5)")


def edited_copy(text: str, rate: float, rng: np.random.Generator) -> str:
    """`text` with about `rate` of its characters deleted, swapped with the next one, or replaced by a random letter."""
    chars = list(text)
    out: list[str] = []
    i = 0
    while i < len(chars):
        if rng.random() >= rate:
            out.append(chars[i])
        else:
            kind = int(rng.integers(3))
            if kind == 1 and i + 1 < len(chars):
                out += [chars[i + 1], chars[i]]
                i += 1
            elif kind == 2:
                out.append(chr(ord("a") + int(rng.integers(26))))
        i += 1
    return "".join(out) or text


def pairs_from_corpus(
    texts: list[str], labels: list[int], seed: int, pairing: str = "class", edit_rate: float = 0.1
) -> tuple[list[str], list[str], list[int]]:
    """Pair each document with a partner, label 1 with probability 1/2: class pairing, a partner of its own class
    (1) or another (0); near-duplicate pairing, an edited copy of itself (1) or of another document (0).

    Deterministic per seed; a class partner is never the document itself. Returns (firsts, seconds, labels)."""
    rng = np.random.default_rng(seed)
    if pairing == "near-duplicate":
        if len(texts) < 2:
            raise UserError("pairs_from_corpus: near-duplicate pairs need at least two documents")
        firsts, seconds, matched = [], [], []
        for i, text in enumerate(texts):
            same = int(rng.integers(2))
            j = i if same else (i + 1 + int(rng.integers(len(texts) - 1))) % len(texts)
            firsts.append(text)
            seconds.append(edited_copy(texts[j], edit_rate, rng))
            matched.append(same)
        return firsts, seconds, matched
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
        built = {
            s: pairs_from_corpus(rows[s].texts, labels[s], cfg.split_seed + k, cfg.pairing, cfg.edit_rate)
            for k, s in enumerate(SPLITS)
        }
        rows = {s: TextRows(a, b, y) for s, (a, b, y) in built.items()}
        labels = {s: list(rows[s].labels) for s in SPLITS}
        meaning = (
            "both documents share the corpus class"
            if cfg.pairing == "class"
            else f"the second is an edited copy (edit_rate {cfg.edit_rate}) of the first"
        )
        info = {
            **info,
            "corpus_label_names": info["label_names"],
            "label_names": ["different", "same"],
            "pairs": f"built by pairs_from_corpus ({cfg.pairing}): label 1 when {meaning}",
        }
    elif sorted(set(labels["train"])) != [0, 1]:
        raise UserError(f"byte_retrieval: the pair labels are {info['label_names']}; matching needs two classes")
    splits = {}
    for s in SPLITS:
        encoded = [pair_row(a, b, cfg.length) for a, b in zip(rows[s].texts, rows[s].pairs)]
        splits[s] = Split.from_rows(
            [ids for ids, _ in encoded], labels[s], 2 * cfg.length, PAD_ID, segments=[seg for _, seg in encoded]
        )
    return TaskData(
        "byte_retrieval",
        splits,
        num_classes=2,
        vocab_size=BYTE_VOCAB,
        max_length=2 * cfg.length,
        pad_id=PAD_ID,
        info={
            **info,
            "preset": cfg.preset,
            "architecture": TWO_TOWER,
            "document_length": cfg.length,
            "tokenizer": "bytes (0 [PAD], 1 [CLS], 2 + byte) per document",
        },
        special_ids=(PAD_ID, CLS_ID),
        texts={s: [f"{a}\n{b}" for a, b in zip(rows[s].texts, rows[s].pairs)] for s in SPLITS},
    )
