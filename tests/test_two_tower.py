"""The two-tower matcher never lets one document see the other."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnbench.model import ModelConfig
from attnbench.tasks.base import Split
from attnbench.tasks.byte_retrieval import pair_row
from attnbench.two_tower import TwoTowerClassifier, split_documents

D, F, DOC = 32, 64, 24


def _batch(pairs: list[tuple[str, str]], length: int = DOC):
    rows = [pair_row(a, b, length) for a, b in pairs]
    split = Split.from_rows([r for r, _ in rows], [0] * len(rows), 2 * length, segments=[s for _, s in rows])
    return split.input_ids, split.attention_mask, split.segment_ids


def _model(attention: str = "softmax", options: dict | None = None) -> TwoTowerClassifier:
    cfg = ModelConfig(vocab_size=258, num_classes=2, max_length=2 * DOC, d_model=D, num_heads=2, ffn_dim=F)
    return TwoTowerClassifier(cfg, document_length=DOC, attention=attention, attention_options=options, seed=0)


def test_split_documents_restores_each_document() -> None:
    ids, mask, seg = _batch([("ab", "xyz"), ("hello", "q")])
    (a, ma), (b, mb) = split_documents(ids, mask, seg, pad_id=0, width=DOC)
    assert a.shape == b.shape == (2, DOC)
    assert a[ma].tolist() == ids[0, :3].tolist() + ids[1, :6].tolist()
    assert ma.sum(dim=1).tolist() == [3, 6] and mb.sum(dim=1).tolist() == [4, 2]
    assert b[1, :2].tolist() == ids[1, 6:8].tolist()


@pytest.mark.parametrize(
    "attention,options", [("softmax", {}), ("performer", {"num_features": 16}), ("linformer", {"projected_length": 8})]
)
def test_changing_document_b_leaves_the_encoding_of_a_bitwise_unchanged(attention: str, options: dict) -> None:
    model = _model(attention, options).eval()
    with torch.no_grad():
        u1, v1 = model.towers(*_batch([("same first document", "short"), ("another a", "b")]))
        u2, v2 = model.towers(*_batch([("same first document", "a much longer other one"), ("another a", "zz")]))
    assert torch.equal(u1, u2)
    assert not torch.equal(v1, v2)


def test_a_training_step_with_features_redrawn_per_call() -> None:
    model = _model("rfa", {"num_features": 16}).train()
    ids, mask, seg = _batch([("first doc", "second doc"), ("x", "y")])
    loss = nn.functional.cross_entropy(model(ids, mask, seg), torch.tensor([0, 1]))
    loss.backward()
    assert all(p.grad is not None for p in model.head.parameters())


def test_counts_one_encoder_for_both_towers() -> None:
    model = _model()
    assert model.encoder.backbone.position_embedding.num_embeddings == DOC
    assert sum(p.numel() for p in model.head.parameters()) == (4 * D * F + F) + (F * 2 + 2)


def test_phase_a_runs_on_both_towers_with_the_row_label() -> None:
    from attnbench.baselines.coulomb.phase_a import run_learning_phase

    pairs = [(f"document {i}", f"other {i % 3}") for i in range(8)]
    ids, mask, seg = _batch(pairs)
    split = Split(ids, mask, torch.tensor([i % 2 for i in range(8)]), seg)
    model = _model("coulomb", {"feature_map": "favor", "num_features": 8})
    before = [p.detach().clone() for m in model.attention_modules() for p in m.learning_phase_parameters()]
    record = run_learning_phase(model, split, {"max_steps": 2, "batch_size": 4}, validation=split)
    after = [p.detach() for m in model.attention_modules() for p in m.learning_phase_parameters()]
    assert record["seconds"] >= 0 and any(not torch.equal(a, b) for a, b in zip(before, after))
