"""`eval_lengths` for any task with a row length: the test rows at each length checked by an independent solver,
refused where a task has none, scored per length by every training measurement (the recurrent step equal to the
parallel form), and a model without a position table trained at L and scored at 4L end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from attnbench.decoder import TransformerDecoder
from attnbench.decoder_training import cheaper_form, score_tokens
from attnbench.errors import ConfigError, UserError
from attnbench.executor import RunOptions, run_suite
from attnbench.model import ModelConfig
from attnbench.suite import load_suite
from attnbench.tasks import load_task
from attnbench.tasks.byte_lm import byte_blocks
from attnbench.tasks.listops import evaluate


def test_mqar_rows_at_each_length_answer_every_key_with_its_value():
    data = load_task("mqar", num_kv_pairs=4, seq_len=32, vocab_size=256, num_test=20, eval_lengths=[64, 128])
    assert sorted(data.eval_splits) == [64, 128] and data.summary()["eval_splits"] == {"64": 20, "128": 20}
    for length, split in data.eval_splits.items():
        assert split.input_ids.shape == (20, length)
        for row, labels in zip(split.input_ids.tolist(), split.labels.tolist()):
            pairs = {row[i]: row[i + 1] for i in range(0, 8, 2)}  # by search: each answer's key and its value
            answered = [(t, y) for t, y in enumerate(labels) if y != -100]
            assert len(answered) == 4 and all(y == pairs[row[t]] for t, y in answered)


def test_byte_lm_at_a_length_is_the_same_test_text_cut_longer():
    data = load_task("byte_lm", block_size=64, eval_lengths=[256])
    expected = byte_blocks(data.raw["test"], 256)
    assert torch.equal(data.eval_splits[256].input_ids, expected.input_ids)
    assert torch.equal(data.eval_splits[256].labels, expected.labels)


def test_listops_rows_at_a_length_fit_it_and_keep_their_values():
    data = load_task("listops", num_train=40, num_validation=10, num_test=30, max_length=64, eval_lengths=[256])
    split = data.eval_splits[256]
    lengths = split.attention_mask.sum(dim=1)
    assert split.input_ids.shape == (30, 256) and int(lengths.max()) <= 256 and int(lengths.min()) >= 128
    for ids, n, label in zip(split.input_ids.tolist(), lengths.tolist(), split.labels.tolist()):
        assert evaluate(ids[:n], 10) == label  # the stack machine's value of the expression


def suite_file(tmp_path: Path, tasks: list, model: dict, measurements: list) -> str:
    path = tmp_path / "lengths.yaml"
    suite = {
        "name": "lengths",
        "description": "scored beyond the training length",
        "attentions": ["softmax"],
        "tasks": tasks,
        "seeds": [0],
        "model": {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32, "dropout": 0.0, **model},
        "training": {"epochs": 1, "batch_size": 16},
        "measurements": measurements,
    }
    path.write_text(yaml.safe_dump(suite))
    return str(path)


def test_a_task_without_a_row_length_or_a_length_its_options_refuse_fails_when_the_suite_loads(tmp_path):
    with pytest.raises(UserError, match=r"tasks\[0\].options: eval_lengths=\[100\]: NonlinearConfig has no row"):
        load_suite(
            suite_file(tmp_path, [{"name": "nonlinear_tokens", "options": {"eval_lengths": [100]}}], {}, ["accuracy"])
        )
    with pytest.raises(UserError, match="eval_lengths: at length 128: vocab_size=128 must exceed seq_len=128"):
        mqar = {"name": "mqar", "options": {"vocab_size": 128, "eval_lengths": [128]}}
        load_suite(suite_file(tmp_path, [mqar], {"kind": "decoder"}, ["recall"]))
    with pytest.raises(ConfigError, match="has no row length"):
        load_task("parity", eval_lengths=[64])  # state tracking keeps its own test_lengths


@pytest.mark.parametrize("attention", ["elu-linear", "softmax"])
def test_the_step_form_scores_as_the_parallel_form_and_auto_says_which_it_took(attention):
    cfg = ModelConfig(vocab_size=64, num_classes=64, max_length=16, d_model=16, num_heads=2, ffn_dim=32,
                      num_layers=1, kind="decoder", dropout=0.0, positions="rope")  # fmt: skip
    model = TransformerDecoder(cfg, attention, {}, seed=0).eval()
    split = load_task("mqar", num_kv_pairs=2, seq_len=16, vocab_size=64, num_test=6, eval_lengths=[48]).eval_splits[48]
    parallel, step = (score_tokens(model, split, 4, form=form) for form in ("parallel", "step"))
    assert torch.allclose(parallel.loss.nan_to_num(), step.loss.nan_to_num(), atol=1e-5)
    assert torch.equal(parallel.correct, step.correct) and step.form == {"form": "step"}
    chosen = cheaper_form(model, split.input_ids[:4], split.attention_mask[:4])
    if attention == "softmax":  # its KV cache grows, so each step costs more than the last: never stepped
        assert chosen == {"form": "parallel", "reason": "a layer's state grows with the context"}
    else:
        assert chosen["form"] in ("parallel", "step") and chosen["parallel_s"] > 0 and chosen["step_s_estimate"] > 0


def cells_of(tmp_path: Path, suite: str) -> list[dict]:
    summary = run_suite(load_suite(suite), tmp_path / "run", RunOptions(show_progress=False, workers=1))
    assert not summary.failures, summary
    return [json.loads(p.read_text()) for p in (tmp_path / "run" / "cells").rglob("*.json")]


@pytest.mark.parametrize("positions", ["rope", "none"])
def test_a_decoder_trained_at_16_is_scored_at_64_by_recall(tmp_path, positions):
    mqar = {"name": "mqar", "options": {"num_kv_pairs": 2, "seq_len": 16, "vocab_size": 96, "num_train": 64,
                                        "num_validation": 16, "num_test": 16, "eval_lengths": [64]}}  # fmt: skip
    model = {"kind": "decoder", "positions": positions}
    measurement = {"name": "recall", "options": {"eval_form": "step"}}
    (cell,) = cells_of(tmp_path, suite_file(tmp_path, [mqar], model, [measurement]))
    assert cell["status"] == "ok" and cell["provenance"]["config"]["model"]["positions"] == positions
    assert 0 <= cell["metrics"]["accuracy@64"] <= 1 and cell["metrics"]["nll@64"] > 0
    assert cell["details"]["per_length"][0]["form"] == {"form": "step"}


def test_lm_and_accuracy_report_their_metrics_per_length(tmp_path):
    text = tmp_path / "text.txt"
    text.write_bytes(b"the quick brown fox jumps over the lazy dog. " * 300)
    tasks = [{"name": "byte_lm", "options": {"path": str(text), "block_size": 16, "eval_lengths": [64]}}]
    measurement = {"name": "lm", "options": {"twice_length": False, "position_buckets": 4}}
    (cell,) = cells_of(tmp_path, suite_file(tmp_path, tasks, {"kind": "decoder", "positions": "rope"}, [measurement]))
    (row,) = cell["details"]["per_length"]
    assert row["length"] == 64 and row["bits_per_byte"] == cell["metrics"]["bits_per_byte@64"] > 0
    assert [(b["start"], b["stop"]) for b in row["position_buckets"]] == [(0, 16), (16, 32), (32, 48), (48, 64)]
    listops = [{"name": "listops", "options": {"num_train": 40, "num_validation": 10, "num_test": 10, "max_length": 32,
                                               "min_length": 8, "eval_lengths": [128]}}]  # fmt: skip
    other = tmp_path / "encoder"
    other.mkdir()
    (cell,) = cells_of(other, suite_file(other, listops, {"positions": "none"}, ["accuracy"]))
    assert 0 <= cell["metrics"]["accuracy@128"] <= 1 and cell["details"]["per_length"][0]["length"] == 128


def test_a_split_too_short_for_the_rows_scored_is_refused_when_the_suite_loads(tmp_path):
    """byte_lm whose test split holds a block of 64 bytes but not of 128: the model trained, then the cell failed on
    lm's twice-length rows naming block_size=128, a value the user never set. Now the suite is refused, naming the
    option that asks for the rows; the task's own block_size and eval_lengths are checked on every split."""
    text = tmp_path / "text.txt"
    text.write_bytes(bytes(range(32, 127)) * 21)  # 1,995 bytes: 99 each for validation and test
    task = {"name": "byte_lm", "options": {"path": str(text), "block_size": 64}}
    once = [{"name": "lm", "options": {"twice_length": False}}]
    with pytest.raises(
        UserError,
        match=r"tasks\[0\].options: byte_lm's test split holds 99 bytes \(test_fraction of the corpus's 1,995\), too "
        r"few for one block of 128 bytes .* for lm's twice_length \(2 x block_size=64\);.*\(measurements\[0\]: lm\)",
    ):
        load_suite(suite_file(tmp_path, [task], {"kind": "decoder"}, ["lm"]))
    assert len(load_suite(suite_file(tmp_path, [task], {"kind": "decoder"}, once)).cells()) == 1
    longer = {**task, "options": {**task["options"], "eval_lengths": [128]}}
    with pytest.raises(UserError, match=r"validation split holds 99 bytes .* for eval_lengths \[128\] \(128\)"):
        load_suite(suite_file(tmp_path, [longer], {"kind": "decoder"}, once))
