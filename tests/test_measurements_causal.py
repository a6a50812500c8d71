"""The causal measurements: state formulas against the tensors `step` carries, bits per byte by hand, recall per
query, and the tiny causal suite end to end."""

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from attnbench.decisions.outcomes import cell_outcomes
from attnbench.decoder import TransformerDecoder
from attnbench.decoder_training import TokenScores, score_tokens
from attnbench.errors import ConfigError
from attnbench.executor import RunOptions, run_suite
from attnbench.measurements.decode import DecodeOptions, decode_row
from attnbench.measurements.language_model import bits_per_bucket, block_outcomes, lm_metrics
from attnbench.measurements.recall import accuracy_per_query, row_outcomes
from attnbench.model import ModelConfig
from attnbench.predictions import decode_outcomes
from attnbench.recurrence import state_bytes, step_through
from attnbench.registry import build_attention
from attnbench.suite import load_suite
from attnbench.tasks.sequence import TokenSplit

H, D = 2, 8
STATE_CASES = [  # (name, options, bytes per sequence at context T, by hand)
    ("softmax", {}, lambda t: t * (2 * H * D * 4 + 1)),  # keys + values float32, one bool per position
    ("elu-linear", {}, lambda t: H * (D * D + D) * 4),  # M = D features: kv M x D + normaliser M
    ("performer", {"num_features": 16}, lambda t: H * (16 * D + 16 + 1) * 4),  # + favor's anchor
    ("rfa", {"num_features": 8}, lambda t: H * (16 * D + 16) * 4),  # sin and cos: 2 x 8 features
    ("random-features", {"feature_map": "softplus", "num_features": 12}, lambda t: H * (12 * D + 12) * 4),
    # short_conv 3 adds its window: the last 2 inputs of q, k and v, H x D each
    ("softmax", {"short_conv": 3}, lambda t: t * (2 * H * D * 4 + 1) + 3 * 2 * H * D * 4),
    ("elu-linear", {"short_conv": 3}, lambda t: H * (D * D + D) * 4 + 3 * 2 * H * D * 4),
]


@pytest.mark.parametrize(
    "name, options, by_hand", STATE_CASES, ids=[c[0] + ("-conv" if c[1].get("short_conv") else "") for c in STATE_CASES]
)
def test_state_formula_matches_the_tensors_step_carries(name, options, by_hand):
    attn = build_attention(name, head_dim=D, num_heads=H, causal=True, **options).eval()
    for t in (1, 7, 50):
        q, k, v = (torch.randn(1, H, t, D) for _ in range(3))
        with torch.no_grad():
            carried = state_bytes(step_through(attn, q, k, v)[1])
        assert carried == attn.state_size(t) == by_hand(t)


class FixedDistribution(nn.Module):
    """A tiny 'model' predicting the same distribution (1/2, 1/4, 1/8, 1/8) at every position."""

    def forward(self, ids, mask=None):
        p = torch.tensor([0.5, 0.25, 0.125, 0.125])
        return p.log().expand(*ids.shape, 4)


def test_bits_per_byte_equal_a_hand_computation():
    ids = torch.zeros(2, 4, dtype=torch.long)
    labels = torch.tensor([[0, 1, 2, 3], [0, 0, -100, 1]])
    split = TokenSplit(ids, torch.ones_like(ids, dtype=torch.bool), labels)
    metrics = lm_metrics(score_tokens(FixedDistribution(), split))
    bits = [1, 2, 3, 3, 1, 1, 2]  # -log2 p of each labelled byte
    assert metrics["bits_per_byte"] == pytest.approx(sum(bits) / 7)
    assert metrics["nll"] == pytest.approx(sum(bits) / 7 * math.log(2))
    assert metrics["perplexity"] == pytest.approx(2 ** (sum(bits) / 7))
    row_means = torch.tensor([9 / 4, 4 / 3], dtype=torch.float64)
    assert metrics["bits_per_byte_ci95"] == pytest.approx(1.96 * float(row_means.std()) / math.sqrt(2))
    assert metrics["accuracy"] == pytest.approx(3 / 7)  # arg-max is byte 0, the label 3 times of 7
    buckets = bits_per_bucket(score_tokens(FixedDistribution(), split).loss, 2)
    assert [b["bits_per_byte"] for b in buckets] == pytest.approx([(1 + 2 + 1 + 1) / 4, (3 + 3 + 2) / 3])


def test_per_row_outcomes_average_to_the_position_averaged_metrics():
    ids = torch.zeros(2, 4, dtype=torch.long)
    labels = torch.tensor([[0, 1, 2, 3], [0, 0, -100, 1]])  # 4 and 3 labelled bytes
    scores = score_tokens(FixedDistribution(), TokenSplit(ids, torch.ones_like(ids, dtype=torch.bool), labels))
    blocks = decode_outcomes(block_outcomes(scores)["bits_per_byte"])
    assert blocks.tolist() == pytest.approx([(1 + 2 + 3 + 3) / 3.5, (1 + 1 + 2) / 3.5])  # each block's bits / 3.5
    assert blocks.mean() == pytest.approx(lm_metrics(scores)["bits_per_byte"])
    rows = decode_outcomes(row_outcomes(scores)["accuracy"])
    assert rows.tolist() == pytest.approx([1 / 3.5, 2 / 3.5]) and rows.mean() == pytest.approx(scores.accuracy())
    even = TokenScores(torch.zeros(2, 2), torch.tensor([[True, False], [True, True]]), torch.ones(2, 2, dtype=bool))
    assert decode_outcomes(row_outcomes(even)["accuracy"]).tolist() == [0.5, 1.0]  # equal rows: each row's accuracy


def test_accuracy_per_query_keeps_row_order():
    labelled = torch.tensor([[False, True, False, True], [True, False, True, False]])
    correct = torch.tensor([[False, True, False, False], [True, False, True, False]])
    scores = TokenScores(torch.zeros(2, 4), correct, labelled)
    assert accuracy_per_query(scores) == [1.0, 0.5]


def test_decode_times_each_step_in_alternation_with_the_paired_one():
    cfg = ModelConfig(vocab_size=32, num_classes=32, max_length=64, d_model=16, num_layers=1, num_heads=2,
                      ffn_dim=32, dropout=0.0, kind="decoder", tie_qk=False)  # fmt: skip
    model, twin = (TransformerDecoder(cfg, name, {}, seed=0).eval() for name in ("elu-linear", "softmax"))
    row = decode_row(model, 40, DecodeOptions(context_lengths=[40], steps=6, warmup=1), "cpu", twin)
    assert row["pairs"] == 6 and 0 <= row["pairs_faster"] + row["pairs_slower"] <= 6 and row["paired_ratio"] > 0
    assert len(row["pair_ratios"]) == 6 and "verdict" not in row  # the report decides, over its whole table
    assert row["state_bytes"] == H * (D * D + D) * 4  # the first layer's state: heads x (D x D + D) float32
    alone = decode_row(model, 40, DecodeOptions(context_lengths=[40], steps=3, warmup=0, paired=None), "cpu")
    assert "pairs" not in alone and alone["decode_ms_per_token"] > 0


def test_decode_refuses_an_unknown_paired_attention_when_the_suite_loads():
    with pytest.raises(ConfigError, match="paired"):
        DecodeOptions(paired="no-such-attention")
    with pytest.raises(ConfigError, match="paired"):
        DecodeOptions(paired={"name": "softmax", "options": {"no_such_option": 1}})


def test_the_tiny_causal_suite_runs_end_to_end(tmp_path):
    suite = load_suite(str(Path(__file__).parent / "suites" / "causal-tiny.yaml"))
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False, workers=1))
    assert not summary.failures and summary.counts.get("ok", 0) >= 20, summary
    cells = [json.loads(p.read_text()) for p in (tmp_path / "run" / "cells").rglob("*.json")]
    decode = [c for c in cells if c["status"] == "ok" and "decode_ms_per_token@8" in c["metrics"]]
    performer = [c for c in decode if "performer" in c["label"]]
    softmax = [c for c in decode if c["label"] == "softmax"]
    assert performer and softmax
    for cell in performer:  # paired with softmax by default: the timing check ran at every context
        assert cell["details"]["paired"] == {"name": "softmax", "options": {}}
        assert all(len(row["pair_ratios"]) == row["pairs"] for row in cell["details"]["rows"])
    assert all(c["details"]["paired"] is None for c in softmax)  # the reference is not paired with itself
    scored = [
        c for c in cells if c["status"] == "ok" and ("num_kv_pairs" in c["metrics"] or "bits_per_byte" in c["metrics"])
    ]
    assert scored
    for cell in scored:  # the engine reads each row's (block's) outcomes, and they average to the stored metric
        metric = "bits_per_byte" if "bits_per_byte" in cell["metrics"] else "accuracy"
        assert cell_outcomes(cell["details"], metric, cell["metrics"][metric]) is not None
    hedgehog = [c for c in cells if c["label"] == "hedgehog" and "num_kv_pairs" in c["metrics"]]
    assert hedgehog and all(c["status"] == "ok" for c in hedgehog)  # its distillation runs in the decoder too
    for cell in hedgehog:
        phase = cell["details"]["phase_a"]
        assert phase["procedure"] == "hedgehog attention distillation" and phase["steps"] >= 1
