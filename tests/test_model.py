"""The shared encoder classifier: same shared weights for every variant, Q = K tying, sentence pairs, padding."""

import dataclasses

import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.model import ModelConfig, TransformerClassifier, parameter_counts
from attnbench.registry import attention_names

CFG = dict(vocab_size=50, num_classes=3, max_length=32, d_model=16, num_layers=2, num_heads=2, ffn_dim=32, dropout=0.0)


def _shared_state(model):
    return {k: v for k, v in model.state_dict().items() if ".attn.attention." not in k}


def test_variants_differ_only_by_the_attentions_own_parameters():
    reference = TransformerClassifier(ModelConfig(**CFG), "softmax", seed=3)
    ref_counts, ref_state = parameter_counts(reference), _shared_state(reference)
    assert ref_counts["attention"] == 0 and ref_counts["total"] == ref_counts["shared"]
    for name in attention_names():
        model = TransformerClassifier(ModelConfig(**CFG), name, seed=3)
        counts = parameter_counts(model)
        own = sum(p.numel() for m in model.attention_modules() for p in m.parameters())
        assert counts["attention"] == own and counts["total"] == counts["shared"] + own, name
        assert counts["shared"] == ref_counts["shared"], name
        state = _shared_state(model)
        assert state.keys() == ref_state.keys(), name
        for key, value in ref_state.items():  # same seed: identical shared initialisation for every variant
            torch.testing.assert_close(state[key], value, rtol=0, atol=0, msg=f"{name}: {key}")


def test_known_attention_parameter_counts():
    def own(name, options=None):
        return parameter_counts(TransformerClassifier(ModelConfig(**CFG), name, options))["attention"]

    layers, heads = CFG["num_layers"], CFG["num_heads"]
    assert own("performer") == own("elu-linear") == own("random-features") == 0
    assert own("rfa") == layers * heads  # one sigma per head
    assert own("nystromformer") == layers * heads * 33  # depthwise conv, kernel 33
    assert own("nystromformer", {"conv_kernel": 0}) == 0
    assert own("linformer", {"projected_length": 8}) == layers * 2 * CFG["max_length"] * 8


def test_tie_qk_shares_one_projection():
    tied = TransformerClassifier(ModelConfig(**CFG, tie_qk=True), "softmax")
    untied = TransformerClassifier(ModelConfig(**CFG, tie_qk=False), "softmax")
    d = CFG["d_model"]
    assert parameter_counts(untied)["total"] - parameter_counts(tied)["total"] == CFG["num_layers"] * (d * d + d)
    seen = []
    for model in (tied, untied):
        model.backbone.layers[0].attn.attention.register_forward_hook(lambda module, args, out: seen.append(args))
    ids = torch.randint(1, 50, (2, 6))
    tied(ids)
    untied(ids)
    assert torch.equal(seen[0][0], seen[0][1])
    assert not torch.equal(seen[1][0], seen[1][1])


def test_qk_projection_none_feeds_the_attention_each_heads_slice_of_the_normed_hidden_state():
    model = TransformerClassifier(ModelConfig(**CFG, qk_projection="none"), "softmax", seed=1).eval()
    layer = model.backbone.layers[0]
    assert layer.attn.q_proj is None and layer.attn.k_proj is None
    seen = []
    layer.attn.attention.register_forward_hook(lambda module, args, out: seen.append((args, out)))
    ids = torch.randint(1, 50, (2, 6), generator=torch.Generator().manual_seed(0))
    model(ids)
    (q, k, _), _ = seen[0]
    b, n, h, d = 2, 6, CFG["num_heads"], CFG["d_model"] // CFG["num_heads"]
    hidden = layer.norm1(model.backbone.embed(ids))  # (B, N, d_model), by hand: no projection at all
    slices = torch.stack([hidden[..., i * d : (i + 1) * d] for i in range(h)], dim=1)  # (B, H, N, d)
    torch.testing.assert_close(q, slices, rtol=0, atol=0)
    assert k is q
    values = torch.stack([layer.attn.v_proj(hidden)[..., i * d : (i + 1) * d] for i in range(h)], dim=1)
    weights = torch.softmax(slices @ slices.transpose(-2, -1) / d**0.5, dim=-1)
    merged = (weights @ values).transpose(1, 2).reshape(b, n, h * d)
    torch.testing.assert_close(layer.attn(hidden, None), layer.attn.out_proj(merged), rtol=1e-5, atol=1e-6)


def test_qk_projection_none_with_padding_reads_the_real_tokens_slices():
    model = TransformerClassifier(ModelConfig(**CFG, qk_projection="none"), "softmax", seed=1).eval()
    seen = []
    model.backbone.layers[0].attn.attention.register_forward_hook(lambda module, args, out: seen.append(args))
    ids = torch.randint(1, 50, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    model(ids, mask)
    q = seen[0][0]
    hidden = model.backbone.layers[0].norm1(model.backbone.embed(ids))
    expected = hidden.view(2, 6, CFG["num_heads"], -1).transpose(1, 2)
    torch.testing.assert_close(q[0], expected[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(q[1, :, :3], expected[1, :, :3], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "given, resolved",
    [
        ({}, ("shared", True)),
        ({"tie_qk": True}, ("shared", True)),
        ({"tie_qk": False}, ("separate", False)),
        ({"qk_projection": "none"}, ("none", True)),
        ({"qk_projection": "separate"}, ("separate", False)),
        ({"qk_projection": "shared", "tie_qk": True}, ("shared", True)),
    ],
)
def test_qk_projection_resolves_tie_qk(given, resolved):
    cfg = ModelConfig(**CFG, **given)
    assert (cfg.qk_projection, cfg.tie_qk) == resolved
    again = ModelConfig(**dataclasses.asdict(cfg))  # the resolved config (provenance) rebuilds the same model
    assert (again.qk_projection, again.tie_qk) == resolved


@pytest.mark.parametrize(
    "given", [{"qk_projection": "none", "tie_qk": False}, {"qk_projection": "separate", "tie_qk": True}]
)
def test_qk_projection_contradicting_tie_qk_is_refused(given):
    with pytest.raises(ConfigError, match="contradicts qk_projection"):
        ModelConfig(**CFG, **given)


def test_qk_projection_parameter_counts():
    d, layers = CFG["d_model"], CFG["num_layers"]
    total = {
        p: parameter_counts(TransformerClassifier(ModelConfig(**CFG, qk_projection=p), "softmax"))["total"]
        for p in ("none", "shared", "separate")
    }
    assert total["shared"] - total["none"] == total["separate"] - total["shared"] == layers * (d * d + d)


def test_sentence_pairs_use_segment_embeddings():
    model = TransformerClassifier(ModelConfig(**CFG, num_segments=2), "softmax").eval()
    ids = torch.randint(1, 50, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.bool)
    first = torch.zeros(2, 8, dtype=torch.long)
    pair = first.clone()
    pair[:, 4:] = 1
    assert model(ids, mask, pair).shape == (2, 3)
    assert not torch.allclose(model(ids, mask, first), model(ids, mask, pair))
    assert TransformerClassifier(ModelConfig(**CFG), "softmax").backbone.segment_embedding is None


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_padding_does_not_change_logits(pooling):
    model = TransformerClassifier(ModelConfig(**CFG, pooling=pooling), "softmax").eval()
    ids = torch.randint(1, 50, (1, 5))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[True] * 5 + [False] * 3])
    torch.testing.assert_close(model(padded, mask), model(ids, torch.ones(1, 5, dtype=torch.bool)))


def test_too_long_input_and_bad_config_fail_clearly():
    model = TransformerClassifier(ModelConfig(**CFG), "softmax")
    with pytest.raises(ValueError, match="exceeds the model's max_length=32"):
        model(torch.ones(1, 33, dtype=torch.long))
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        ModelConfig(d_model=10, num_heads=3)


@pytest.mark.parametrize("name", ["softmax", "performer", "nystromformer", "linformer", "elu-linear"])
def test_a_padded_batch_gives_each_rows_logits_and_zeros_at_padded_positions(name):
    """The per-token layers run on the real tokens only (Tokens): a batch of rows of different lengths gives each
    row's logits alone, and the attention sees zeros at padded positions."""
    options = {"nystromformer": {"num_landmarks": 4}, "linformer": {"projected_length": 8}}.get(name, {})
    model = TransformerClassifier(ModelConfig(**CFG), name, options).eval()
    lengths = [7, 3, 5]
    ids = torch.zeros(3, 7, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1, 50, (n,), generator=torch.Generator().manual_seed(row))
    mask = torch.arange(7) < torch.tensor(lengths)[:, None]
    seen = []
    model.backbone.layers[0].attn.attention.register_forward_hook(lambda module, args, out: seen.append(args[2]))
    batch = model(ids, mask)
    assert torch.all(seen[0].transpose(1, 2)[~mask] == 0)
    for row, n in enumerate(lengths):
        alone = model(ids[row : row + 1, :n], torch.ones(1, n, dtype=torch.bool))
        torch.testing.assert_close(batch[row : row + 1], alone, rtol=1e-4, atol=1e-5)
