"""Hedgehog: its feature map and attention by hand, and its distillation phase through the registry."""

import dataclasses
import math

import torch
from test_learning_phase import LENGTH, VOCAB, toy_task

from attnbench.baselines.hedgehog import distillation
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.registry import attention_capabilities, build_attention
from attnbench.train import TrainConfig, learning_procedure, train_classifier


def test_feature_map_is_a_softmax_over_plus_and_minus_the_projection():
    attn = build_attention("hedgehog", head_dim=2).double()  # W = I at the start
    x = torch.tensor([0.5, -1.0], dtype=torch.float64)
    exps = [math.exp(t) for t in (0.5, -1.0, -0.5, 1.0)]
    expected = torch.tensor([e / sum(exps) for e in exps], dtype=torch.float64)
    torch.testing.assert_close(attn.feature_map(x.view(1, 1, 1, 2))[0, 0, 0], expected)


def test_two_tokens_by_hand():
    """out_2 = sum_j (phi(q_2) . phi(k_j)) v_j / sum_j phi(q_2) . phi(k_j), phi as above."""
    attn = build_attention("hedgehog", head_dim=2, causal=True).double()

    def phi(x):
        exps = [math.exp(t) for t in (x[0], x[1], -x[0], -x[1])]
        return [e / sum(exps) for e in exps]

    q, k, v = [[0.0, 1.0], [1.0, 2.0]], [[1.0, 0.0], [-1.0, 1.0]], [[2.0, 0.0], [0.0, 4.0]]
    weights = [sum(a * b for a, b in zip(phi(q[1]), phi(k[j]))) for j in range(2)]
    expected = [sum(w * v[j][c] for j, w in enumerate(weights)) / sum(weights) for c in range(2)]
    as_tensor = [torch.tensor(x, dtype=torch.float64).view(1, 1, 2, 2) for x in (q, k, v)]
    torch.testing.assert_close(attn(*as_tensor)[0, 0, 1], torch.tensor(expected, dtype=torch.float64))


def test_distillation_loss_is_the_cross_entropy_between_weight_rows():
    attn = build_attention("hedgehog", head_dim=3, causal=True).double()
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 1, 4, 3, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.tensor([[True, True, True, False]])
    with torch.no_grad():
        phi_q, phi_k = attn.feature_map(q)[0, 0], attn.feature_map(k)[0, 0]
    total = 0.0
    for i in range(3):
        scores = [float(q[0, 0, i] @ k[0, 0, j]) / math.sqrt(3) for j in range(i + 1)]
        teacher = [math.exp(s) / sum(math.exp(t) for t in scores) for s in scores]
        kernel = [float(phi_q[i] @ phi_k[j]) for j in range(i + 1)]
        total -= sum(t * math.log(w / sum(kernel)) for t, w in zip(teacher, kernel))
    torch.testing.assert_close(attn.distillation_loss(q, k, mask), torch.tensor(total / 3, dtype=torch.float64))


def hedgehog_model() -> TransformerClassifier:
    cfg = ModelConfig(
        vocab_size=VOCAB, num_classes=2, max_length=LENGTH, d_model=16, num_heads=2, num_layers=2, ffn_dim=32
    )
    return TransformerClassifier(cfg, "hedgehog", seed=0)


def test_distillation_is_the_declared_learning_phase_and_lowers_the_loss():
    model, task = hedgehog_model(), toy_task()
    assert (
        attention_capabilities("hedgehog").learning_phase
        == "attnbench.baselines.hedgehog.distillation:distill_hedgehog"
    )
    procedure = learning_procedure(model)
    assert procedure.factory is distillation.distill_hedgehog and procedure.config is distillation.DistillationConfig
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = distillation.distill_hedgehog(model, task["train"], {"max_steps": 30, "batch_size": 32, "step": 0.05})
    moved = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert moved and all(n.endswith("feature_map.weight") for n in moved)
    assert result["steps"] == 30 and all(p.requires_grad for p in model.parameters())
    assert all(after < first for first, after in zip(result["loss_first_batch"], result["loss_last_batch"]))


def test_phase_b_leaves_the_distilled_maps_alone(monkeypatch):
    model, seen = hedgehog_model(), {}

    def spy(model, train, options, **kwargs):
        result = distillation_procedure(model, train, options, **kwargs)
        seen["distilled"] = [m.feature_map.weight.detach().clone() for m in model.attention_modules()]
        return result

    distillation_procedure = distillation.distill_hedgehog
    spy.__attnbench_entry__ = dataclasses.replace(distillation_procedure.__attnbench_entry__, factory=spy)
    monkeypatch.setattr(distillation, "distill_hedgehog", spy)
    result = train_classifier(
        model, toy_task(), TrainConfig(epochs=1, batch_size=32, lr=1e-3, phase_a={"max_steps": 3, "batch_size": 32})
    )
    assert result.phase_a["steps"] == 3
    initial = torch.eye(8).repeat(2, 1, 1)
    for w, m in zip(seen["distilled"], result.model.attention_modules()):
        assert not torch.equal(w, initial) and torch.equal(w, m.feature_map.weight)
