"""The causal tasks: MQAR against an independent check of every answer, byte_lm's blocks and provenance."""

import hashlib

import pytest
import torch

from attnbench.errors import UserError
from attnbench.tasks import load_task
from attnbench.tasks.byte_lm import byte_blocks, default_corpus
from attnbench.tasks.mqar import multiquery_ar


def test_every_mqar_answer_is_the_value_paired_with_that_key_earlier():
    inputs, labels = multiquery_ar(200, seq_len=64, vocab_size=128, num_kv_pairs=8, power_a=0.01, seed=3)
    assert inputs.shape == labels.shape == (200, 64)
    for row, lab in zip(inputs.tolist(), labels.tolist()):
        pairs = {row[i]: row[i + 1] for i in range(0, 16, 2)}  # the context: k1 v1 ... k8 v8
        assert len(pairs) == 8 and all(1 <= k < 64 <= v < 128 for k, v in pairs.items())
        answered = [(t, label) for t, label in enumerate(lab) if label != -100]
        assert len(answered) == 8  # each key asked once
        assert sorted(row[t] for t, _ in answered) == sorted(pairs)
        for t, label in answered:
            assert t >= 16 and (t - 16) % 2 == 0
            assert label == pairs[row[t]]


def test_mqar_gaps_follow_the_power_law_small_gaps_likelier():
    _, labels = multiquery_ar(2000, seq_len=128, vocab_size=256, num_kv_pairs=4, power_a=0.01, seed=0)
    gaps = ((labels != -100).nonzero()[:, 1] - 8) // 2
    counts = torch.bincount(gaps, minlength=60).float()
    p = torch.arange(1, 61, dtype=torch.float64) ** (0.01 - 1)
    assert counts[:5].sum() > counts[-30:].sum()  # p(g) ~ g^-0.99: the first five gaps outweigh the last thirty
    assert float(p[:5].sum() / p.sum()) > 0.4


def test_mqar_task_splits_differ_and_refuse_impossible_options():
    data = load_task("mqar", num_kv_pairs=4, seq_len=32, vocab_size=64, num_train=20, num_validation=5, num_test=5)
    assert not torch.equal(data["train"].input_ids[:5], data["test"].input_ids)
    assert data.summary()["splits"]["test"] == {"size": 5, "length": 32, "labelled": 20}
    with pytest.raises(UserError, match="seq_len >= 64"):
        load_task("mqar", num_kv_pairs=16, seq_len=32, vocab_size=64)


def test_byte_blocks_score_each_byte_once_in_non_overlapping_blocks():
    split = byte_blocks(b"abcdefghij", 3)
    assert split.input_ids.tolist() == [list(b"abc"), list(b"def"), list(b"ghi")]
    assert split.labels.tolist() == [list(b"bcd"), list(b"efg"), list(b"hij")]


def test_byte_lm_default_corpus_is_pythons_doc_topics_with_its_hash():
    data = load_task("byte_lm", block_size=64)
    corpus = default_corpus()
    info = data.info
    assert info["corpus_sha256"] == hashlib.sha256(corpus).hexdigest() and info["corpus_bytes"] == len(corpus)
    assert "pydoc_data" in info["source"] and len(corpus) > 100_000
    assert sum(info["split_bytes"].values()) == len(corpus)
    assert data.raw["train"] + data.raw["validation"] + data.raw["test"] == corpus
    assert data["test"].input_ids.shape[1] == 64 and data.vocab_size == 256


def test_byte_lm_reads_a_local_file(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"hello world, " * 100)
    data = load_task("byte_lm", path=str(tmp_path), block_size=16)
    assert data.info["corpus_bytes"] == 1300 and "1 file" in data.info["source"]


def test_mqar_power_a_whose_gap_weights_overflow_is_refused_in_one_line():
    """power_a 1000 failed inside numpy ('probabilities contain NaN'); it is refused where the options are read."""
    with pytest.raises(
        UserError, match=r"power_a=1000(.0)?: the query gaps' weights g\^\(power_a - 1\) over gaps 1..24"
    ):
        load_task("mqar", num_kv_pairs=8, seq_len=64, power_a=1000)
    data = load_task(
        "mqar", num_kv_pairs=4, seq_len=32, vocab_size=64, num_train=5, num_validation=5, num_test=5, power_a=10
    )
    assert len(data["test"]) == 5
