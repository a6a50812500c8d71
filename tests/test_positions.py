"""Where position enters the model (`model: {positions: learned | rope | none}`): rope's rotation inside the
blocks against the formula, relative-position invariance of rope'd softmax, models with rope or none run at 4x
the length they were built for (the parallel form equal to stepping), and learned positions unchanged."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.decoder import TransformerDecoder
from attnbench.errors import ConfigError
from attnbench.model import ModelConfig, TransformerClassifier

L = 16  # the length the models are built (and would be trained) for


def config(positions: str, kind: str = "decoder", **changes) -> ModelConfig:
    settings = dict(vocab_size=32, num_classes=32, max_length=L, d_model=16, num_heads=2, ffn_dim=32,
                    num_layers=2, kind=kind, tie_qk=False, dropout=0.0, positions=positions)  # fmt: skip
    return ModelConfig(**{**settings, **changes})


def test_rope_rotates_each_blocks_queries_and_keys_by_the_formula():
    model = TransformerDecoder(config("rope"), "softmax", {}, seed=0).eval()
    seen = []
    attention = model.attention_modules()[0]
    attention.register_forward_hook(lambda module, args, kwargs, out: seen.append(args), with_kwargs=True)
    ids = torch.randint(0, 32, (1, 6))
    with torch.no_grad():
        model(ids)
        block = model.backbone.layers[0]
        h = block.norm1(model.backbone.token_embedding(ids))  # no position table: the tokens alone enter
        q = block.attn.q_proj(h)[0].view(6, 2, 8)  # (N, heads, head_dim)
    rotated_q = seen[0][0][0]  # (heads, N, head_dim) as the attention received it
    for head in range(2):
        for p in range(6):
            for j in range(4):  # plane j pairs features j and j + 4 and turns by p * 10000^(-2j/8)
                a = p * 10000.0 ** (-2 * j / 8)
                x, y = float(q[p, head, j]), float(q[p, head, j + 4])
                assert float(rotated_q[head, p, j]) == pytest.approx(x * math.cos(a) - y * math.sin(a), abs=1e-5)
                assert float(rotated_q[head, p, j + 4]) == pytest.approx(x * math.sin(a) + y * math.cos(a), abs=1e-5)


def test_rope_softmax_sees_relative_positions_only():
    attn = TransformerDecoder(config("rope"), "softmax", {}, seed=0).backbone.layers[0].attn
    q, k, v = (torch.randn(1, 2, 10, 8) for _ in range(3))
    outputs = []
    for start in (0, 7, 500):  # the same row placed at other absolute positions
        rq, rk = attn.positioned(q, k, torch.arange(start, start + 10))
        outputs.append(attn.attention(rq, rk, v, key_padding_mask=None))
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5) and torch.allclose(outputs[0], outputs[2], atol=1e-4)


@pytest.mark.parametrize("positions", ["rope", "none"])
@pytest.mark.parametrize("attention", ["softmax", "elu-linear", "gla"])
def test_a_decoder_without_a_table_runs_at_4x_its_length_parallel_equal_to_stepping(positions, attention):
    model = TransformerDecoder(config(positions), attention, {}, seed=0).eval()
    ids = torch.randint(0, 32, (3, 4 * L))
    with torch.no_grad():
        parallel = model(ids)
        state, stepped = model.init_state(3), []
        for t in range(4 * L):
            logits, state = model.step(ids[:, t], state)
            stepped.append(logits)
    assert parallel.shape == (3, 4 * L, 32) and torch.isfinite(parallel).all()
    assert torch.allclose(parallel, torch.stack(stepped, dim=1), atol=1e-5)


@pytest.mark.parametrize("positions", ["rope", "none"])
def test_a_classifier_without_a_table_runs_at_4x_its_length_padding_included(positions):
    model = TransformerClassifier(config(positions, kind="encoder", num_classes=3), "softmax", {}, seed=0).eval()
    ids = torch.randint(1, 32, (2, 4 * L))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 3 * L :] = False
    with torch.no_grad():
        both = model(ids, mask)
        alone = model(ids[1:, : 3 * L])  # the padded row alone, unpadded: the same logits
    assert both.shape == (2, 3) and torch.allclose(both[1], alone[0], atol=1e-5)


def test_learned_positions_keep_their_table_and_refuse_past_it():
    model = TransformerDecoder(config("learned"), "softmax", {}, seed=0)
    assert model.backbone.position_embedding.weight.shape == (L, 16)
    with pytest.raises(ValueError, match="exceeds the model's max_length=16 .learned positions.; .* rope or none"):
        model(torch.zeros(1, L + 1, dtype=torch.long))
    for positions in ("rope", "none"):
        assert TransformerDecoder(config(positions), "softmax", {}, seed=0).backbone.position_embedding is None


def test_rope_needs_an_even_head_dim():
    with pytest.raises(ConfigError, match="head_dim=3 .* is odd"):
        config("rope", d_model=6, num_heads=2)
