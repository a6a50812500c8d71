"""Byte-level tasks: tokenisation round-trips, loaders on the shared local files, pairs from a corpus."""

from __future__ import annotations

import os

import pytest
import torch

from attnbench.errors import UserError
from attnbench.tasks import load_task
from attnbench.tasks.byte_retrieval import pair_row, pairs_from_corpus
from attnbench.tasks.byte_text import BYTE_VOCAB, CLS_ID, PAD_ID, decode_bytes, encode_bytes

RT = {s: f"rotten_tomatoes/{s}.jsonl" for s in ("train", "validation", "test")}
needs_data = pytest.mark.skipif(not os.environ.get("ATTNBENCH_DATA_DIR"), reason="needs $ATTNBENCH_DATA_DIR")


@pytest.mark.parametrize("text", ["plain ascii", "café – naïve 日本語 🎬", "", "tab\there\nnewline"])
def test_bytes_round_trip(text: str) -> None:
    ids = encode_bytes(text, 1000)
    assert ids[0] == CLS_ID and len(ids) == 1 + len(text.encode("utf-8"))
    assert all(2 <= i < BYTE_VOCAB for i in ids[1:])
    assert decode_bytes(ids) == text
    assert decode_bytes(ids + [PAD_ID] * 5) == text


def test_bytes_truncate_to_the_width() -> None:
    ids = encode_bytes("abcdefgh", 4)
    assert ids == [CLS_ID] + [2 + b for b in b"abc"]


def test_pairs_from_corpus_label_says_same_class() -> None:
    texts = [f"doc{i}" for i in range(40)]
    classes = [i % 3 for i in range(40)]
    a, b, same = pairs_from_corpus(texts, classes, seed=4)
    cls = {t: c for t, c in zip(texts, classes)}
    assert [int(cls[x] == cls[y]) for x, y in zip(a, b)] == same
    assert all(x != y for x, y in zip(a, b)) and 0 < sum(same) < len(same)
    assert (a, b, same) == pairs_from_corpus(texts, classes, seed=4)


def test_pair_row_segments() -> None:
    ids, seg = pair_row("ab", "xyz", 10)
    assert ids == [CLS_ID, 2 + 97, 2 + 98, CLS_ID, 2 + 120, 2 + 121, 2 + 122] and seg == [0, 0, 0, 1, 1, 1, 1]


@needs_data
def test_byte_text_loads_local_files() -> None:
    data = load_task("byte_text", files=RT, max_length=64, max_train_examples=100, max_eval_examples=20)
    train = data["train"]
    assert train.input_ids.shape == (100, 64) and data.vocab_size == BYTE_VOCAB and data.num_classes == 2
    row = train.input_ids[0][train.attention_mask[0]].tolist()
    assert decode_bytes(row) == data.texts["train"][0].encode("utf-8")[:63].decode("utf-8", errors="replace")
    assert data.info["source"] == "local files" and data.info["preset"] == "cpu"


@needs_data
def test_byte_retrieval_builds_pairs_from_a_corpus() -> None:
    data = load_task(
        "byte_retrieval", files=RT, layout="corpus", max_length=32, max_train_examples=50, max_eval_examples=10
    )
    train = data["train"]
    assert train.input_ids.shape == (50, 64) and data.info["architecture"] == "two-tower"
    assert bool(((train.segment_ids == 1) & ~train.attention_mask).sum() == 0)
    assert torch.equal((train.input_ids == CLS_ID).sum(dim=1), torch.full((50,), 2))


def test_byte_text_without_files_offline_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from attnbench.tasks import TASKS

    cfg = TASKS.make_config("byte_text", seed=0)
    with pytest.raises(UserError, match="give files"):
        cfg.check_inputs()


def test_listops_lra_preset_sets_lra_sizes_and_refuses_overrides() -> None:
    from attnbench.errors import ConfigError
    from attnbench.tasks import TASKS

    cfg = TASKS.make_config("listops", seed=0, preset="lra")
    assert (cfg.min_length, cfg.max_length, cfg.max_args, cfg.num_train, cfg.num_test) == (500, 2000, 10, 96000, 2000)
    with pytest.raises(ConfigError, match="max_length"):
        TASKS.make_config("listops", seed=0, preset="lra", max_length=300)


def test_near_duplicate_pairs_copy_the_same_document_when_labelled_1() -> None:
    texts = [f"review number {i} says something different" for i in range(30)]
    a, b, same = pairs_from_corpus(texts, [0] * 30, seed=1, pairing="near-duplicate", edit_rate=0.0)
    assert a == texts and [int(x == y) for x, y in zip(a, b)] == same and 0 < sum(same) < 30
    _, edited, _ = pairs_from_corpus(texts, [0] * 30, seed=1, pairing="near-duplicate", edit_rate=0.2)
    assert sum(x != y for x, y in zip(b, edited)) > 20
