"""The two-tower matcher never lets one document see the other."""
from __future__ import annotations

import torch

from attnbench.model import ModelConfig
from attnbench.tasks.base import Split
from attnbench.tasks.byte_retrieval import pair_row
from attnbench.two_tower import TwoTowerClassifier, split_documents


def _batch(pairs: list[tuple[str, str]], length: int = 24):
    rows = [pair_row(a, b, length) for a, b in pairs]
    split = Split.from_rows([r for r, _ in rows], [0] * len(rows), 2 * length, segments=[s for _, s in rows])
    return split.input_ids, split.attention_mask, split.segment_ids


def test_split_documents_restores_each_document() -> None:
    ids, mask, seg = _batch([("ab", "xyz"), ("hello", "q")])
    (a, ma), (b, mb) = split_documents(ids, mask, seg, pad_id=0)
    assert a[ma].tolist() == ids[0, :3].tolist() + ids[1, :6].tolist()
    assert ma.sum(dim=1).tolist() == [3, 6] and mb.sum(dim=1).tolist() == [4, 2]
    assert b[1, :2].tolist() == ids[1, 6:8].tolist()


def test_changing_document_b_leaves_the_encoding_of_a_bitwise_unchanged() -> None:
    cfg = ModelConfig(vocab_size=258, num_classes=2, max_length=48, d_model=32, num_heads=2, ffn_dim=64)
    model = TwoTowerClassifier(cfg, document_length=24, attention="softmax", seed=0).eval()
    seen = []
    model.encode = lambda ids, m: seen.append(model.encoder(ids, m)) or seen[-1]  # record each tower's output
    with torch.no_grad():
        first = model(*_batch([("same first document", "short"), ("another a", "b")]))
        second = model(*_batch([("same first document", "a much longer other one"), ("another a", "zz")]))
    assert torch.equal(seen[0], seen[2])  # tower A: bitwise equal
    assert not torch.equal(seen[1], seen[3]) and not torch.equal(first, second)


def test_counts_one_encoder_for_both_towers() -> None:
    cfg = ModelConfig(vocab_size=258, num_classes=2, max_length=48, d_model=32, num_heads=2, ffn_dim=64)
    model = TwoTowerClassifier(cfg, document_length=24, attention="softmax", seed=0)
    d, f = 32, 64
    head = (4 * d * f + f) + (f * 2 + 2)
    assert model.encoder.position_embedding.num_embeddings == 24
    assert sum(p.numel() for p in model.head.parameters()) == head
