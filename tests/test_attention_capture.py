"""AttentionCapture: the inputs and outputs each attention module sees, in a pass cut short after the last one."""

from __future__ import annotations

import pytest
import torch

from attnbench.attention_capture import AttentionCapture
from attnbench.model import ModelConfig, TransformerClassifier

VOCAB, LENGTH = 20, 12


def model_and_batch() -> tuple[TransformerClassifier, tuple]:
    cfg = ModelConfig(vocab_size=VOCAB, num_classes=2, max_length=LENGTH, d_model=16, num_heads=2, num_layers=2)
    model = TransformerClassifier(cfg, "softmax", seed=0).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, VOCAB, (4, LENGTH), generator=g)
    mask = torch.arange(LENGTH)[None] < torch.tensor([12, 9, 5, 7])[:, None]
    return model, (ids.masked_fill(~mask, 0), mask, None, torch.tensor([0, 1, 1, 0]))


def seen_in_a_full_pass(model: TransformerClassifier, batch: tuple) -> list[tuple]:
    """(q, k, mask, output) of each attention module, by hooks of this test's own over a whole forward."""
    seen = []

    def keep(module, args, kwargs, output):
        seen.append((args[0], args[1], kwargs.get("key_padding_mask", args[3] if len(args) > 3 else None), output))

    handles = [m.register_forward_hook(keep, with_kwargs=True) for m in model.attention_modules()]
    with torch.no_grad():
        model(batch[0], batch[1], batch[2])
    for handle in handles:
        handle.remove()
    return seen


def test_captures_each_attention_modules_inputs_and_output():
    model, batch = model_and_batch()
    expected = seen_in_a_full_pass(model, batch)
    capture = AttentionCapture(model.attention_modules())
    with torch.no_grad():
        labels = capture.run(model, batch, torch.device("cpu"))
    capture.remove()
    assert torch.equal(labels, batch[3])
    assert len(capture.inputs) == len(expected) == 2
    for (q, k, mask), output, (q0, k0, mask0, output0) in zip(capture.inputs, capture.outputs, expected):
        assert q.shape == (4, 2, LENGTH, 8) and torch.equal(q, q0) and torch.equal(k, k0)
        assert torch.equal(mask, mask0) and torch.equal(output, output0)


def test_the_pass_stops_after_the_last_attention_module():
    model, batch = model_and_batch()
    reached = []
    model.classifier.register_forward_hook(lambda *args: reached.append("classifier"))
    capture = AttentionCapture(model.attention_modules())
    with torch.no_grad():
        capture.run(model, batch, torch.device("cpu"))
    assert reached == []
    capture.remove()
    with torch.no_grad():
        model(batch[0], batch[1], batch[2])  # the hooks are gone: a whole pass again
    assert reached == ["classifier"]


def test_a_module_the_model_does_not_call_is_named():
    model, batch = model_and_batch()
    stray = TransformerClassifier(model.cfg, "softmax", seed=1).attention_modules()[0]
    capture = AttentionCapture([*model.attention_modules(), stray])
    with pytest.raises(RuntimeError, match=r"attention modules \[2\] were not called"):
        capture.run(model, batch, torch.device("cpu"))
