"""MAD's tasks against MAD's definitions, each label found again by searching the row another way."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
import torch

from attnbench.decoder import TransformerDecoder
from attnbench.errors import ConfigError
from attnbench.executor import RunOptions, run_suite
from attnbench.model import ModelConfig
from attnbench.readout import LastPositionReadout, sinusoidal_positions
from attnbench.suite import load_suite
from attnbench.tasks import load_task

IGNORE = -100
SMALL = {"num_train": 60, "num_validation": 20, "num_test": 80}


@functools.lru_cache(maxsize=None)
def task(name: str, **options):
    return load_task(name, **SMALL, **options)


def unshifted(split) -> list[tuple[list[int], list[int]]]:
    """(the row before MAD's shift, labels of its positions 1..) for each row of a test-style split: the input row
    plus its last token, which only the labels hold."""
    out = []
    for ids, labels in zip(split.input_ids.tolist(), split.labels.tolist()):
        last = labels[-1]
        out.append((ids + [last], labels))
    return out


def test_noisy_recall_answers_every_repeated_key_with_its_first_value():
    data = task("noisy_recall", vocab_size=32, noise_vocab_size=16, seq_len=64, frac_noise=0.3)
    content = 32 - 16
    noise_pairs = pairs = 0
    for row, labels in unshifted(data["test"]):
        assert len(row) == 64  # multi-query: seq_len tokens before the shift, seq_len - 1 after
        values: dict[int, int] = {}
        for j in range(0, 64, 2):
            key, value = row[j], row[j + 1]
            label = labels[j]  # the label of position j (predicting row[j + 1])
            pairs += 1
            if key >= content:
                assert value >= content and label == IGNORE  # a noise pair: noise tokens, no answer
                noise_pairs += 1
                continue
            assert key < content // 2 <= value < content
            assert labels[j - 1] == IGNORE if j else True  # keys are never answers
            assert label == (values[key] if key in values else IGNORE)
            assert values.setdefault(key, value) == value  # a key keeps its value within the row
        assert labels[-1] != IGNORE  # the probe's value ends the row
    assert abs(noise_pairs / pairs - 0.3) < 0.03


def test_noisy_recall_trains_on_every_next_token():
    data = task("noisy_recall", vocab_size=32, noise_vocab_size=16, seq_len=64, frac_noise=0.3)
    train = data["train"]
    assert torch.equal(train.labels[:, :-1], train.input_ids[:, 1:]) and bool((train.labels != IGNORE).all())


def segments(row: list[int], half: int, pad: int) -> list[tuple[str, tuple[int, ...]]]:
    """The row cut into maximal runs of key tokens (below half) and value tokens, padding dropped."""
    runs: list[tuple[str, list[int]]] = []
    for t in row:
        if t == pad:
            continue
        kind = "k" if t < half else "v"
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(t)
        else:
            runs.append((kind, [t]))
    return [(kind, tuple(run)) for kind, run in runs]


def test_fuzzy_recall_answers_each_repeated_key_motif_with_its_value_motif():
    data = task("fuzzy_recall", vocab_size=16, seq_len=64, k_motif_size=2, v_motif_size=3)
    pad, half = 15, 7
    for row, labels in unshifted(data["test"]):
        runs = segments(row, half, pad)
        assert row[: len(row) - sum(len(r) for _, r in runs)] == [pad] * (len(row) - sum(len(r) for _, r in runs))
        kinds = [kind for kind, _ in runs]
        assert kinds == ["k", "v"] * (len(runs) // 2)  # key motif, value motif, ...
        pairs = [(runs[i][1], runs[i + 1][1]) for i in range(0, len(runs), 2)]
        assert all(len(k) == 2 and len(set(k)) == 2 and 1 <= len(v) <= 3 for k, v in pairs)  # test keys: full size
        answers = [tuple(labels[t - 1] for t in range(1, len(row)) if labels[t - 1] != IGNORE)]
        expected: list[int] = []
        table: dict[tuple[int, ...], tuple[int, ...]] = {}
        for k, v in pairs:
            if k in table:
                assert v == table[k]  # a key motif keeps its value motif
                expected += v
            table[k] = v
        assert answers == [tuple(expected)]
        assert pairs[-1] in list(table.items()) and pairs.count(pairs[-1]) >= 2  # the probe was planted before


def test_selective_copy_labels_are_the_non_blank_tokens_in_order():
    data = task("selective_copy", vocab_size=16, seq_len=64, num_tokens_to_copy=8)
    blank, copy = 14, 15
    before = []
    for split in data.splits.values():
        for row, labels in zip(split.input_ids.tolist(), split.labels.tolist()):
            at = row.index(copy)
            tokens = [t for t in row[:at] if t != blank]
            assert len(tokens) == 8 and at == 64 - 8 - 1 and row[at + 1 :] == [blank] * 8
            assert labels[: at + 1] == [IGNORE] * (at + 1) and labels[at + 1 :] == tokens
            assert row[at - 1] != blank  # MAD inserts blanks before tokens, never after the last
            before.append(row.index(tokens[0]) if tokens[0] != blank else 0)
    assert abs(np.mean(before) - (64 - 17) / 8) < 1.0  # blanks before the first token: their share, 1/8


def test_memorization_labels_follow_one_fixed_map_per_seed():
    data = task("memorization", vocab_size=64, seq_len=16)
    content = 63
    table: dict[int, int] = {}
    for split in data.splits.values():
        for row, labels in zip(split.input_ids.tolist(), split.labels.tolist()):
            assert row[1::2] == [63] * 8 and labels[0::2] == [IGNORE] * 8
            for key, value in zip(row[0::2], labels[1::2]):
                assert key < content // 2 <= value < content
                assert table.setdefault(key, value) == value
    assert len(set(table.values())) == len(table)  # one value per key, never shared
    other = load_task("memorization", seed=1, vocab_size=64, seq_len=16, **SMALL)
    moved = sum(
        table.get(k) != v
        for row, labels in zip(other["test"].input_ids.tolist(), other["test"].labels.tolist())
        for k, v in zip(row[0::2], labels[1::2])
    )
    assert moved > 0  # another seed, another map


def test_compression_targets_the_row_read_out_from_the_last_position():
    data = task("compression", vocab_size=16, seq_len=12)
    test = data["test"]
    assert torch.equal(test.labels, test.input_ids) and bool((test.input_ids[:, -1] == 15).all())
    assert int(test.input_ids[:, :-1].max()) < 15 and data.info["readout"] == "last"
    cfg = ModelConfig(vocab_size=16, num_classes=16, max_length=12, d_model=16, num_layers=1, num_heads=2,
                      ffn_dim=32, dropout=0.0, kind="decoder")  # fmt: skip
    decoder = TransformerDecoder(cfg, "softmax", {}, seed=0).eval()
    readout = LastPositionReadout(decoder).eval()
    ids = test.input_ids[:2]
    changed = ids.clone()
    changed[:, -2] = (changed[:, -2] + 1) % 15  # only a late token
    with torch.no_grad():
        assert torch.equal(decoder(ids)[:, 0], decoder(changed)[:, 0])  # a causal head: position 0 cannot see it
        assert not torch.allclose(readout(ids)[:, 0], readout(changed)[:, 0])  # the readout's position 0 does
    code = sinusoidal_positions(3, 4)
    assert torch.allclose(code[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    assert torch.allclose(code[2], torch.tensor([math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]))


def test_compression_trains_through_the_readout_in_the_recall_measurement(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "name: compression-tiny\ndescription: compression through the readout\nattentions: [softmax]\n"
        "tasks: [{name: compression, options: {seq_len: 12, num_train: 64, num_validation: 16, num_test: 16}}]\n"
        "seeds: [0]\nmodel: {kind: decoder, d_model: 16, num_layers: 1, num_heads: 2, ffn_dim: 32, dropout: 0.0}\n"
        "training: {epochs: 1, batch_size: 16}\nmeasurements: [recall]\n"
    )
    summary = run_suite(load_suite(str(tmp_path / "s.yaml")), tmp_path / "run", RunOptions(show_progress=False))
    assert not summary.failures, summary
    (cell,) = [json.loads(p.read_text()) for p in (tmp_path / "run" / "cells").rglob("*.json")]
    assert cell["status"] == "ok" and cell["details"]["labelled"] == 16 * 12
    assert 0 <= cell["metrics"]["exact_match"] <= cell["metrics"]["accuracy"] <= 1


@pytest.mark.parametrize(
    "name,options,match",
    [
        ("noisy_recall", {"seq_len": 63}, "even"),
        ("noisy_recall", {"frac_noise": 0.2, "noise_vocab_size": 0}, "noise_vocab_size"),
        ("selective_copy", {"seq_len": 32, "num_tokens_to_copy": 16}, "num_tokens_to_copy"),
        ("fuzzy_recall", {"vocab_size": 8, "k_motif_size": 4}, "vocab_size"),
    ],
)
def test_impossible_options_are_refused(name, options, match):
    with pytest.raises(ConfigError, match=match):
        load_task(name, **options)
