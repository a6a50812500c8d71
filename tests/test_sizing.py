"""Fair sizing (`model: {match: ...}`): the sized models counted again by hand, the search against brute force, a
target out of reach skipped, bad settings refused when the suite loads, and the choice recorded per cell."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from attnbench.decoder import TransformerDecoder
from attnbench.errors import ConfigError, UserError
from attnbench.executor import RunOptions, run_suite
from attnbench.measurements import SkipCell
from attnbench.model import ModelConfig
from attnbench.sizing import closest_value, size_to_match
from attnbench.suite import load_suite

V, N, LAYERS, HEADS = 64, 32, 2, 2


def decoder_config(match: dict | None, kind: str = "decoder") -> ModelConfig:
    return ModelConfig(
        vocab_size=V, num_classes=V, max_length=N, d_model=32, num_heads=HEADS, ffn_dim=64,
        num_layers=LAYERS, kind=kind, tie_qk=False, match=match,
    )  # fmt: skip


def softmax_decoder_parameters(d: int, ffn: int) -> int:
    """A softmax decoder's parameters by hand: tied token embedding and head, positions, per block two norms,
    q k v out projections with biases and the feed-forward pair, a final norm."""
    block = 2 * 2 * d + 4 * (d * d + d) + (d * ffn + ffn) + (ffn * d + d)
    return V * d + N * d + LAYERS * block + 2 * d


def size(config: ModelConfig, name: str, options: dict | None = None):
    return size_to_match(
        config, name, options or {}, length=N, build=lambda cfg, opts: TransformerDecoder(cfg, name, opts, seed=0)
    )


@pytest.mark.parametrize("target", [20_000, 150_000, 1_000_000])
def test_a_parameter_target_is_met_by_width_as_an_independent_count_says(target):
    sized = size(decoder_config({"parameters": target, "tolerance": 0.03}), "softmax")
    d, ffn = sized.config.d_model, sized.config.ffn_dim
    assert d % HEADS == 0 and ffn == 2 * d  # the width moves in steps of the head count, ffn_dim at its ratio
    count = softmax_decoder_parameters(d, ffn)
    assert sized.record["achieved"] == count and abs(count / target - 1) <= 0.03
    for other in (d - HEADS, d + HEADS):  # no neighbouring width comes closer
        assert abs(softmax_decoder_parameters(other, 2 * other) / target - 1) >= abs(count / target - 1)


def test_a_state_target_is_met_by_feature_count_as_performers_state_formula_says():
    sized = size(decoder_config({"state_bytes": 20_000, "by": "num_features"}), "performer", {"num_features": 16})
    m, head_dim = sized.options["num_features"], 32 // HEADS
    by_hand = HEADS * (m * head_dim + m + 1) * 4  # kv state M x D, normaliser M, favor's anchor, float32
    assert sized.record["achieved"] == by_hand and abs(by_hand / 20_000 - 1) <= 0.05
    assert abs(HEADS * ((m + 1) * head_dim + m + 2) * 4 / 20_000 - 1) >= abs(by_hand / 20_000 - 1)
    assert sized.config.d_model == 32  # only the knob moved


def test_the_search_finds_what_brute_force_finds():
    values = list(range(1, 5000))
    quantity = lambda v: 3 * v * v + 7 * v  # noqa: E731 - grows with v, as width grows parameters
    for target, start in ((10, 4000), (123_456, 1), (50_000_000, 2500), (74_999_000, 10)):
        best = min(values, key=lambda v: abs(quantity(v) / target - 1))
        assert closest_value(values, quantity, target, start) == best


def test_a_target_out_of_reach_is_skipped_naming_the_closest():
    with pytest.raises(SkipCell, match=r"match parameters=100 by d_model: the closest, d_model=2, gives \d+"):
        size(decoder_config({"parameters": 100}), "softmax")


def test_no_match_leaves_the_model_as_configured():
    sized = size(decoder_config(None), "softmax")
    assert sized.record is None and sized.config.d_model == 32


def suite_file(tmp_path: Path, model: dict, attentions: list | None = None) -> str:
    path = tmp_path / "sized.yaml"
    suite = {
        "name": "sized",
        "description": "sized to a budget",
        "attentions": attentions or ["softmax", {"name": "elu-linear", "options": {}}],
        "tasks": [{"name": "mqar", "options": {"num_kv_pairs": 2, "seq_len": 16, "vocab_size": 32,
                                               "num_train": 64, "num_validation": 16, "num_test": 16}}],
        "seeds": [0],
        "model": {"kind": "decoder", "d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32, **model},
        "training": {"epochs": 1, "batch_size": 16},
        "measurements": ["recall"],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(suite))
    return str(path)


@pytest.mark.parametrize(
    "match, attentions, expected",
    [
        ({"parameters": 1000, "state_bytes": 10}, None, "model.match: match takes one target"),
        (
            {"parameters": 1000, "by": "num_features"},
            ["softmax"],
            "attentions[0].model.match: match by='num_features' is neither d_model nor num_heads nor an integer option of attention 'softmax' (its integer options: short_conv)",
        ),
        ({"parameters": 0}, None, "model.match: option 'parameters' of model setting 'match' is 0, outside"),
        ({"params": 1000}, None, "unknown option 'params'"),
    ],
)
def test_bad_match_settings_are_refused_when_the_suite_loads(tmp_path, match, attentions, expected):
    with pytest.raises(UserError, match=re.escape(expected)):
        load_suite(suite_file(tmp_path, {"match": match}, attentions))


def test_state_bytes_needs_a_causal_attention():
    with pytest.raises(ConfigError, match="no causal form"):
        size(decoder_config({"state_bytes": 1000}, kind="encoder"), "linformer")


def test_each_cell_records_what_the_sizing_chose(tmp_path):
    suite = load_suite(suite_file(tmp_path, {"match": {"parameters": 12_000, "tolerance": 0.05}}))
    summary = run_suite(suite, tmp_path / "run", RunOptions(show_progress=False, workers=1))
    assert summary.counts == {"ok": 2}, summary
    for path in (tmp_path / "run" / "cells").rglob("*.json"):
        cell = json.loads(path.read_text())
        sizing = cell["details"]["sizing"]
        assert sizing["within"] and sizing["achieved"] == cell["metrics"]["params_total"]
        assert cell["provenance"]["config"]["model"]["d_model"] == sizing["value"]
