"""The one training loop with the decoder's objective: per-epoch validation scores and the checkpoint rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnbench.decoder import TransformerDecoder
from attnbench.decoder_training import NEXT_TOKEN, score_tokens
from attnbench.model import ModelConfig
from attnbench.tasks import load_task
from attnbench.train import TrainConfig, train_model


@pytest.mark.parametrize("checkpoint", ["best-validation", "best-validation-nll", "last"])
def test_decoder_checkpoint_rule(checkpoint: str) -> None:
    task = load_task("mqar", num_kv_pairs=2, seq_len=16, vocab_size=32, num_train=64, num_validation=32, num_test=8)
    cfg = ModelConfig(
        vocab_size=task.vocab_size,
        num_classes=task.vocab_size,
        max_length=task.max_length,
        d_model=16,
        num_heads=2,
        num_layers=1,
        ffn_dim=32,
        kind="decoder",
        pad_id=task.pad_id,
    )
    model = TransformerDecoder(cfg, "softmax", seed=0)
    training = TrainConfig(epochs=4, batch_size=16, lr=1e-2, checkpoint=checkpoint)
    result = train_model(model, task, training, NEXT_TOKEN, seed=0)
    history = result.history
    assert [h["epoch"] for h in history] == [1, 2, 3, 4] and {"val_accuracy", "val_loss"} <= set(history[0])
    expected = {
        "best-validation": int(np.argmax([h["val_accuracy"] for h in history])) + 1,
        "best-validation-nll": int(np.argmin([h["val_loss"] for h in history])) + 1,
        "last": len(history),
    }[checkpoint]
    assert result.best_epoch == expected and result.checkpoint == f"{checkpoint} (epoch {expected})"
    with torch.no_grad():  # the model returned is that epoch's: its validation loss, recomputed, is the one recorded
        again = score_tokens(result.model, task["validation"], 64)
    assert again.mean_loss() == pytest.approx(history[expected - 1]["val_loss"], rel=1e-6)
