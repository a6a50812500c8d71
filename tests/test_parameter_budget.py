"""LRA's parameter rule, and the parameter counts accuracy cells store for it, against a hand count."""

from __future__ import annotations

import torch

from attnbench.model import ModelConfig, TransformerClassifier, parameter_counts
from attnbench.parameter_budget import parameter_rule
from attnbench.tasks.base import Split, TaskData
from attnbench.two_tower import build_classifier

V, L, D, F, C, LAYERS = 20, 16, 8, 12, 3, 2


def _task(info: dict | None = None) -> TaskData:
    ids, mask = torch.ones(4, L, dtype=torch.long), torch.ones(4, L, dtype=torch.bool)
    split = Split(ids, mask, torch.zeros(4, dtype=torch.long))
    return TaskData(
        "t",
        {"train": split, "validation": split, "test": split},
        num_classes=C,
        vocab_size=V,
        max_length=L,
        info=info or {},
    )


def _config() -> ModelConfig:
    return ModelConfig(vocab_size=V, num_classes=C, max_length=L, d_model=D, num_layers=LAYERS, num_heads=2, ffn_dim=F)


def hand_count() -> int:
    """Embeddings, per layer two LayerNorms, Q(=K), V and output projections and the FFN, final norm, classifier."""
    layer = 2 * 2 * D + 3 * (D * D + D) + (D * F + F) + (F * D + D)
    return V * D + L * D + LAYERS * layer + 2 * D + (D * C + C)


def _softmax_count(task: TaskData) -> int:
    return parameter_counts(build_classifier(_config(), task, "softmax", {}, 0))["total"]


def test_softmax_count_matches_the_hand_count() -> None:
    assert _softmax_count(_task()) == hand_count()


def test_two_tower_reference_counts_one_encoder_and_the_matching_head() -> None:
    task = _task({"architecture": "two-tower", "document_length": L // 2})
    encoder = hand_count() - (L // 2) * D - (D * C + C)  # positions for one document, no classifier
    head = (4 * D * F + F) + (F * C + C)
    assert _softmax_count(task) == encoder + head


def test_linformer_breaks_the_rule_by_its_projections() -> None:
    model = TransformerClassifier(_config(), "linformer", {"projected_length": 8})
    own = sum(p.numel() for m in model.attention_modules() for p in m.parameters())
    total = parameter_counts(model)["total"]
    assert total == hand_count() + own
    rule = parameter_rule(total, hand_count(), 0.1)
    assert rule["ratio"] == total / hand_count()
    assert rule["within"] == (own <= 0.1 * hand_count())


def test_rule_boundary() -> None:
    assert parameter_rule(110, 100, 0.1)["within"] and parameter_rule(90, 100, 0.1)["within"]
    assert not parameter_rule(111, 100, 0.1)["within"] and not parameter_rule(89, 100, 0.1)["within"]


def test_a_suite_checking_the_rule_needs_its_reference_row(tmp_path) -> None:
    """The rule compares with a row of the suite: a suite without it is refused before anything runs."""
    import pytest

    from attnbench.errors import UserError
    from attnbench.suite import load_suite

    def suite(attentions: str, options: str) -> str:
        path = tmp_path / "s.yaml"
        path.write_text(
            f"name: s\ndescription: d\nattentions: {attentions}\ntasks: [listops]\nseeds: [0]\n"
            f"measurements: [{{name: accuracy, options: {options}}}]\n"
        )
        return str(path)

    with pytest.raises(UserError, match=r"measurements\[0\]\.options\.parameter_reference: 'softmax' is not a label"):
        load_suite(suite("[elu-linear, performer]", "{parameter_tolerance: 0.1}"))
    load_suite(suite("[elu-linear, performer]", "{parameter_tolerance: 0.1, parameter_reference: performer}"))
    load_suite(suite("[elu-linear]", "{}"))  # the rule off: no reference needed
