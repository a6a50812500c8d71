"""The causal decoder (attnbench.decoder): causality, stepping against the parallel forward, tying, refusal."""

import dataclasses

import pytest
import torch
from cells import tiny_cell

from attnbench.decoder import TransformerDecoder, token_loss
from attnbench.errors import ConfigError
from attnbench.model import ModelConfig

CFG = ModelConfig(
    vocab_size=23,
    num_classes=23,
    max_length=64,
    d_model=16,
    num_layers=2,
    num_heads=2,
    ffn_dim=32,
    dropout=0.0,
    kind="decoder",
    tie_qk=False,
)
ATTENTIONS = [
    ("softmax", {}),
    ("elu-linear", {}),
    ("performer", {"num_features": 16}),
    ("random-features", {"feature_map": "favor", "num_features": 16}),
    ("mamba2", {"short_conv": 3}),  # a gated recurrence: prefilled by its chunked pass
    ("rwkv7", {}),  # and token shift, which carries the prompt's last token
]


def _ids(batch=2, n=40, seed=0):
    return torch.randint(0, CFG.vocab_size, (batch, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name, options", ATTENTIONS, ids=[a for a, _ in ATTENTIONS])
def test_output_at_t_is_unchanged_by_anything_after_t(name, options):
    model = TransformerDecoder(CFG, name, options).eval()
    ids = _ids()
    changed = ids.clone()
    changed[:, 25:] = (changed[:, 25:] + 1 + torch.arange(15)) % CFG.vocab_size
    with torch.no_grad():
        before, after = model(ids), model(changed)
    torch.testing.assert_close(after[:, :25], before[:, :25], rtol=0, atol=1e-6)
    assert (after[:, 25:] - before[:, 25:]).abs().max() > 1e-3


@pytest.mark.parametrize("name, options", ATTENTIONS, ids=[a for a, _ in ATTENTIONS])
def test_stepping_and_prefill_equal_the_parallel_forward(name, options):
    model = TransformerDecoder(CFG, name, options).eval()
    ids = _ids()
    with torch.no_grad():
        parallel = model(ids)
        state = model.init_state(2)
        stepped = []
        for t in range(ids.shape[1]):
            logits, state = model.step(ids[:, t], state)
            stepped.append(logits)
        torch.testing.assert_close(torch.stack(stepped, 1), parallel, rtol=1e-4, atol=1e-4)
        prompt_logits, prefilled = model.prefill(ids[:, :30])
        torch.testing.assert_close(prompt_logits, parallel[:, :30], rtol=1e-5, atol=1e-5)
        for t in range(30, 40):
            logits, prefilled = model.step(ids[:, t], prefilled)
            torch.testing.assert_close(logits, parallel[:, t], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("qk_projection", ["none", "shared", "separate"])
def test_every_qk_projection_steps_and_generates_like_the_parallel_forward(qk_projection):
    """The step projects queries and keys by the same rule as the parallel forward (none: the input itself)."""
    cfg = dataclasses.replace(CFG, qk_projection=qk_projection, tie_qk=None)
    model = TransformerDecoder(cfg, "elu-linear").eval()
    ids = _ids(n=12)
    with torch.no_grad():
        parallel = model(ids)
        state, stepped = model.init_state(2), []
        for t in range(ids.shape[1]):
            logits, state = model.step(ids[:, t], state)
            stepped.append(logits)
        torch.testing.assert_close(torch.stack(stepped, 1), parallel, rtol=1e-4, atol=1e-4)
        out = model.generate(ids[:, :5], 3)
        expected = ids[:, :5]
        for _ in range(3):
            expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, expected)


def test_padded_batches_give_each_row_its_unpadded_logits():
    model = TransformerDecoder(CFG, "elu-linear").eval()
    ids = _ids()
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 30:] = False
    with torch.no_grad():
        padded = model(ids, mask)
        alone = model(ids[1:, :30])
    torch.testing.assert_close(padded[1, :30], alone[0], rtol=1e-5, atol=1e-5)


def test_generate_continues_greedily_like_repeated_forward_passes():
    model = TransformerDecoder(CFG, "softmax").eval()
    prompt = _ids(n=5)
    out = model.generate(prompt, 6)
    expected = prompt
    with torch.no_grad():
        for _ in range(6):
            expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, expected)


def test_head_is_tied_to_the_embedding_unless_asked_otherwise():
    tied = TransformerDecoder(CFG, "softmax")
    assert tied.head.weight is tied.backbone.token_embedding.weight
    untied = TransformerDecoder(ModelConfig(**{**CFG.__dict__, "tie_embeddings": False}), "softmax")
    assert untied.head.weight is not untied.backbone.token_embedding.weight


def test_loss_counts_only_labelled_positions():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([[1, -100, 4], [-100, -100, 0]])
    log_p = torch.log_softmax(logits, -1)
    expected = -(log_p[0, 0, 1] + log_p[0, 2, 4] + log_p[1, 2, 0]) / 3
    torch.testing.assert_close(token_loss(logits, labels), expected)


@pytest.mark.parametrize("name", ["linformer", "nystromformer"])
def test_attentions_without_a_causal_form_are_refused_with_the_reason(name):
    with pytest.raises(ConfigError, match="no causal form"):
        TransformerDecoder(CFG, name, {})


def test_a_decoder_suite_naming_a_non_causal_attention_is_refused_on_loading(tmp_path):
    from attnbench.errors import UserError
    from attnbench.suite import load_suite

    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\ndescription: a decoder with linformer\nattentions: [softmax, {name: linformer, options: {projected_length: 8}}]\n"
        "tasks: [{name: mqar, options: {num_kv_pairs: 2, seq_len: 16, vocab_size: 32}}]\nseeds: [0]\n"
        "model: {kind: decoder, d_model: 16, num_heads: 2}\nmeasurements: [recall]\n"
    )
    with pytest.raises(UserError, match=r"attentions\[1\].name: attention 'linformer' has no causal form"):
        load_suite(path)


def test_token_and_position_embeddings_start_at_one_scale():
    """GPT-2's init: positions no louder than tokens, else the residual stream hides which token is where."""
    model = TransformerDecoder(ModelConfig(**{**CFG.__dict__, "d_model": 64}), "softmax")
    token_std = float(model.backbone.token_embedding.weight.detach().std())
    position_std = float(model.backbone.position_embedding.weight.detach().std())
    assert 0.5 < position_std / token_std < 2.0


def test_a_tied_decoder_learns_a_next_token_map_in_a_few_steps():
    """next = (3 x + 7) mod V is one embedding-to-head map: a working decoder learns it in 150 small steps
    (with positions drowning tokens, the loss stayed near ln V)."""
    torch.manual_seed(0)
    cfg = ModelConfig(**{**CFG.__dict__, "vocab_size": 64, "num_classes": 64, "d_model": 32, "ffn_dim": 64})
    model = TransformerDecoder(cfg, "softmax")
    rows = [torch.randint(0, 64, (256, 1))]
    for _ in range(16):
        rows.append((3 * rows[-1] + 7) % 64)
    seq = torch.cat(rows, dim=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    for _ in range(150):
        batch = seq[torch.randint(0, 256, (16,))]
        loss = token_loss(model(batch[:, :-1]), batch[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < torch.log(torch.tensor(64.0)).item() / 3


def test_a_learning_phase_that_reads_class_labels_is_skipped_in_a_decoder_with_the_reason():
    """Coulomb's phase A aligns its kernel with sequence class labels, which a decoder has not: its decoder cells are
    skipped (a decoder without phase A would be its Vanilla twin); Hedgehog's distillation reads no label and runs."""
    from attnbench.decoder_training import train_cell_decoder
    from attnbench.measurements import SkipCell
    from attnbench.registry import learning_phase_entry

    assert learning_phase_entry("hedgehog").capabilities.causal
    assert not learning_phase_entry("coulomb").capabilities.causal
    cell = tiny_cell(
        "recall",
        "coulomb",
        {"num_features": 8},
        task={"name": "mqar", "label": "kv2", "options": {}},
        model={"kind": "decoder", "d_model": 16, "num_heads": 2},
        training={"epochs": 1},
    )
    with pytest.raises(SkipCell, match="reads each sequence's class label"):
        train_cell_decoder(cell, None, device="cpu")  # refused before the task is read
