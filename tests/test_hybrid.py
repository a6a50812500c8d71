"""Hybrid models: the pattern over the layers, its options and errors, its capabilities, and the model built from it
(each layer its own attention, the recurrent step through every layer, the state per layer and in total)."""

import pytest
import torch

from attnbench.attention_properties import pattern_attentions
from attnbench.decoder import TransformerDecoder
from attnbench.errors import ConfigError
from attnbench.measurements.recall import layer_ratio
from attnbench.measurements.state import layer_states
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.recurrence import state_bytes
from attnbench.registry import attention_capabilities, build_attention, layer_attentions
from attnbench.suite import load_suite

GDN_SWA = {"layers": ["gated-deltanet", "sliding-window"], "window": 8, "short_conv": 3}
DECODER = dict(vocab_size=40, max_length=48, d_model=16, num_heads=2, ffn_dim=32, dropout=0.0, kind="decoder")


def names(layers):
    return [name for name, _ in layers]


def test_the_pattern_repeats_over_the_layers_and_ratio_writes_it():
    three_to_one = {"layers": ["gated-deltanet", "gated-deltanet", "gated-deltanet", "sliding-window"], "window": 64}
    layers = layer_attentions("hybrid", three_to_one, 8)
    assert names(layers) == ["gated-deltanet"] * 3 + ["sliding-window"] + ["gated-deltanet"] * 3 + ["sliding-window"]
    by_ratio = layer_attentions("hybrid", {"layers": ["gated-deltanet", "sliding-window"], "ratio": 3, "window": 64}, 8)
    assert by_ratio == layers
    assert names(layer_attentions("hybrid", {**GDN_SWA, "ratio": 7}, 8)) == ["gated-deltanet"] * 7 + ["sliding-window"]
    assert layer_attentions("softmax", {"short_conv": 3}, 2) == [("softmax", {"short_conv": 3})] * 2


def test_shared_options_go_to_the_layers_that_take_them_and_own_options_win():
    layers = layer_attentions(
        "hybrid",
        {"layers": ["deltanet", {"name": "sliding-window", "options": {"window": 4}}], "window": 16, "short_conv": 2},
        2,
    )
    assert layers == [
        ("deltanet", {"short_conv": 2, "causal": False}),
        ("sliding-window", {"window": 4, "short_conv": 2, "causal": False}),
    ]
    assert layer_attentions("hybrid", {**GDN_SWA, "causal": True}, 2)[1][1]["causal"] is True


@pytest.mark.parametrize(
    ("options", "num_layers", "message"),
    [
        ({"layers": ["deltanet", "sliding-window"], "windw": 8}, 2, "taken by none of the hybrid's layers.*'window'"),
        ({"layers": ["deltanet", "sliding-window", "softmax"]}, 4, "multiple of 3"),
        ({"layers": ["deltanet", "hybrid"]}, 2, "itself a pattern of layers"),
        ({"layers": ["deltanet", "hedgehog"]}, 2, "learning phase"),
        ({"layers": ["deltanet", "softmax", "gla"], "ratio": 3}, 4, "ratio=3 repeats the first of two"),
        ({"layers": ["deltanet", {"name": "softmax", "opts": {}}]}, 2, "give an attention's name or"),
        ({"layers": ["deltanet", "no-such-attention"]}, 2, "no-such-attention"),
        ({"layers": []}, 2, "empty"),
        ({"layers": ["deltanet", "skyformer"], "causal": True}, 2, "skyformer.*no causal form"),
    ],
)
def test_a_bad_pattern_is_a_clear_error(options, num_layers, message):
    with pytest.raises(Exception, match=message) as raised:
        layer_attentions("hybrid", options, num_layers)
    assert isinstance(raised.value, ConfigError) or "Unknown" in type(raised.value).__name__


def test_capabilities_are_the_layers_and_the_name_alone_builds_nothing():
    assert attention_capabilities("hybrid", **GDN_SWA).causal
    assert attention_capabilities("hybrid", **GDN_SWA).recurrent_state
    assert not attention_capabilities("hybrid", layers=["deltanet", "skyformer"]).causal
    assert attention_capabilities("hybrid", layers=["deltanet", "skyformer"]).layer_pattern
    with pytest.raises(ConfigError, match="layer by layer"):
        build_attention("hybrid", **GDN_SWA)


def test_each_layer_is_the_attention_a_uniform_model_would_build_there():
    cfg = ModelConfig(**DECODER, num_layers=4)
    hybrid = TransformerDecoder(cfg, "hybrid", {**GDN_SWA, "ratio": 3}, seed=2)
    uniform = TransformerDecoder(cfg, "gated-deltanet", {"short_conv": 3}, seed=2)
    kinds = [type(a).__name__ for a in hybrid.attention_modules()]
    assert kinds == ["GatedDeltaNetAttention"] * 3 + ["SlidingWindowAttention"]
    for mine, theirs in zip(hybrid.attention_modules()[:3], uniform.attention_modules()[:3]):
        for (name, p), (_, q) in zip(mine.named_parameters(), theirs.named_parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)  # same layer seed, same weights
    shared = {k: v for k, v in hybrid.state_dict().items() if ".attn.attention." not in k}
    for key, value in shared.items():  # the weights around the attentions are every variant's
        torch.testing.assert_close(value, uniform.state_dict()[key], rtol=0, atol=0, msg=key)


def test_decoding_steps_through_every_layer_and_the_state_is_per_layer():
    cfg = ModelConfig(**DECODER, num_layers=4)
    model = TransformerDecoder(cfg, "hybrid", {"layers": ["deltanet", "fox", "sliding-window", "softmax"]}, seed=1)
    model = model.double().eval()
    ids = torch.randint(40, (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        parallel = model(ids)
        state, stepped = model.init_state(2), []
        for t in range(30):
            logits, state = model.step(ids[:, t], state)
            stepped.append(logits)
        torch.testing.assert_close(torch.stack(stepped, dim=1), parallel, rtol=1e-10, atol=1e-10)
        _, prefilled = model.prefill(ids[:, :20])
        torch.testing.assert_close(model.step(ids[:, 20], prefilled)[0], parallel[:, 20], rtol=1e-10, atol=1e-10)
    model = model.float()
    with torch.no_grad():
        per_layer = [state_bytes(layer) for layer in model.prefill(ids[:1, :20])[1]["layers"]]  # one sequence
    assert per_layer[0] < per_layer[1]  # DeltaNet's D x D per head against FoX's cache of 20 tokens
    states = layer_states(model.attention_modules(), 20, cfg.head_dim, cfg.num_heads)
    assert [row["bytes"] for row in states["layers"]] == per_layer
    assert states["total"] == sum(per_layer) and states["mean"] == states["total"] / 4


def test_an_encoder_hybrid_trains_on_padded_rows():
    cfg = ModelConfig(vocab_size=40, num_classes=3, max_length=24, d_model=16, num_heads=2, num_layers=2, dropout=0.0)
    model = TransformerClassifier(
        cfg, "hybrid", {"layers": ["skyformer", "kernelized-rpe"], "num_landmarks": 8}, seed=0
    )
    ids = torch.randint(1, 40, (3, 24), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 24, dtype=torch.bool)
    mask[1, 15:] = False
    logits = model(ids, mask)
    logits.sum().backward()
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_layer_ratio_reads_two_kinds_of_layer():
    assert layer_ratio(["gated-deltanet"] * 3 + ["sliding-window"]) == 3.0
    assert layer_ratio(["a", "b", "a", "b"]) == 1.0
    assert layer_ratio(["a", "a"]) is None and layer_ratio(["a", "b", "c"]) is None


def test_check_covers_each_distinct_layer_attention():
    assert pattern_attentions("hybrid", {**GDN_SWA, "ratio": 3}) == [
        ("gated-deltanet", {"short_conv": 3}),
        ("sliding-window", {"window": 8, "short_conv": 3}),
    ]


def test_a_suite_checks_the_pattern_against_the_model(tmp_path):
    body = """
name: hybrids
description: a hybrid against its model
attentions:
  - {name: hybrid, label: gdn-swa-3to1, options: {layers: [gated-deltanet, gated-deltanet, gated-deltanet, sliding-window], window: 64}}
tasks: [{name: mqar, options: {num_kv_pairs: 4, seq_len: 64, vocab_size: 256}}]
seeds: [0]
model: {kind: decoder, num_layers: NUM_LAYERS}
measurements: [recall]
"""
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(body.replace("NUM_LAYERS", "8"))
    bad.write_text(body.replace("NUM_LAYERS", "2"))
    assert load_suite(str(good)).attentions[0]["options"]["window"] == 64
    with pytest.raises(Exception, match="multiple of 4"):
        load_suite(str(bad))
