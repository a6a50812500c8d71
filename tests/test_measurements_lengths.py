"""Scores per test length and exact match of answers: by hand, and a tiny state-tracking run end to end."""

from __future__ import annotations

import json

import pytest
import torch

from attnbench.decoder_training import TokenScores
from attnbench.executor import RunOptions, run_suite
from attnbench.measurements.lengths import length_metrics, model_length
from attnbench.measurements.recall import scores_by_tags
from attnbench.metrics import metric_direction
from attnbench.names import split_metric_name
from attnbench.suite import load_suite
from attnbench.tasks import load_task
from attnbench.tasks.sequence import TokenSplit


def test_exact_match_scores_each_run_of_labelled_positions_as_one_answer():
    labelled = torch.tensor([[False, True, True, False, True], [True, True, True, True, True]])
    correct = torch.tensor([[False, True, False, False, True], [True, True, True, True, True]])
    scores = TokenScores(torch.zeros(2, 5), correct, labelled)
    # answers: row 0 -> positions 1-2 (one wrong), position 4 (right); row 1 -> positions 0-4 (all right)
    assert scores.answers_right().tolist() == [False, True, True]
    assert scores.exact_match() == pytest.approx(2 / 3)
    assert scores.accuracy() == pytest.approx(7 / 8)


def test_scores_grouped_by_the_rows_tags():
    labelled = torch.ones(4, 2, dtype=torch.bool)
    correct = torch.tensor([[True, True], [True, False], [False, False], [True, True]])
    ids = torch.ones(4, 2, dtype=torch.long)
    tags = {"depth": torch.tensor([0.0, 0.0, 0.5, 0.5]), "context_length": torch.tensor([8, 8, 8, 16])}
    split = TokenSplit(ids, ids.bool(), ids, tags=tags)
    groups = scores_by_tags(TokenScores(torch.zeros(4, 2), correct, labelled), split)
    assert [(g["context_length"], g["depth"], g["rows"], g["accuracy"]) for g in groups] == [
        (8, 0, 2, 0.75),
        (8, 0.5, 1, 0.0),
        (16, 0.5, 1, 1.0),
    ]
    assert [g["exact_match"] for g in groups] == [0.5, 0.0, 1.0]


def test_metrics_named_by_length_are_declared_and_parsed():
    assert length_metrics({64: {"accuracy": 0.5}, 16: {"accuracy": 1.0, "nll": 0.1}}) == {
        "accuracy@16": 1.0,
        "nll@16": 0.1,
        "accuracy@64": 0.5,
    }
    assert metric_direction("accuracy@128") == "max" and metric_direction("nll@128") == "min"
    assert split_metric_name("exact_match@256") == ("exact_match", 256) and split_metric_name("accuracy") is None
    data = load_task("parity", train_lengths=[8], test_lengths=[8, 40], num_train=4, num_validation=2, num_test=2)
    assert model_length(data) == 40


def test_a_state_tracking_cell_reports_accuracy_per_test_length(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "name: lengths-tiny\ndescription: parity at two test lengths\nattentions: [elu-linear]\n"
        "tasks: [{name: parity, options: {train_lengths: [8], test_lengths: [8, 24], num_train: 32, "
        "num_validation: 8, num_test: 8}}]\nseeds: [0]\n"
        "model: {kind: decoder, d_model: 16, num_layers: 1, num_heads: 2, ffn_dim: 32, dropout: 0.0}\n"
        "training: {epochs: 1, batch_size: 16}\nmeasurements: [recall]\n"
    )
    summary = run_suite(load_suite(str(tmp_path / "s.yaml")), tmp_path / "run", RunOptions(show_progress=False))
    assert not summary.failures, summary
    (cell,) = [json.loads(p.read_text()) for p in (tmp_path / "run" / "cells").rglob("*.json")]
    metrics = cell["metrics"]
    assert cell["status"] == "ok" and {"accuracy@8", "accuracy@24", "exact_match@24", "nll@24"} <= set(metrics)
    assert [row["length"] for row in cell["details"]["per_length"]] == [8, 24]
    assert 0 <= metrics["exact_match@24"] <= metrics["accuracy@24"] <= 1
    assert "num_kv_pairs" not in metrics and "accuracy_per_query" not in cell["details"]
