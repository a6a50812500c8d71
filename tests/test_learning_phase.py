"""Phase A moves the particles and nothing else; phase B moves everything else and never the particles."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

import attnbench.baselines.coulomb.phase_a as learning_phase
from attnbench.baselines.coulomb.phase_a import representations, run_learning_phase
from attnbench.errors import ConfigError
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.tasks.base import Split, TaskData
from attnbench.train import TrainConfig, train_classifier

VOCAB, LENGTH = 20, 12


def toy_split(n: int, generator: torch.Generator) -> Split:
    """Label = which of two marker tokens opens the sequence; right-padded rows of varying length."""
    ids = torch.randint(3, VOCAB, (n, LENGTH), generator=generator)
    labels = torch.randint(0, 2, (n,), generator=generator)
    ids[:, 0] = 1 + labels
    mask = torch.arange(LENGTH)[None] < torch.randint(4, LENGTH + 1, (n,), generator=generator)[:, None]
    ids[~mask] = 0
    return Split(ids, mask, labels)


def toy_task() -> TaskData:
    g = torch.Generator().manual_seed(0)
    splits = {"train": toy_split(96, g), "validation": toy_split(32, g), "test": toy_split(32, g)}
    return TaskData("toy", splits, num_classes=2, vocab_size=VOCAB, max_length=LENGTH)


def toy_model(seed: int = 0, tie_qk: bool = True, **attention_options) -> TransformerClassifier:
    cfg = ModelConfig(
        vocab_size=VOCAB,
        num_classes=2,
        max_length=LENGTH,
        d_model=16,
        num_heads=2,
        num_layers=2,
        ffn_dim=32,
        tie_qk=tie_qk,
    )
    return TransformerClassifier(cfg, "coulomb", {"num_features": 8, **attention_options}, seed=seed)


def particles(model: TransformerClassifier) -> list[torch.Tensor]:
    return [m.learning_phase_parameters()[0].detach().clone() for m in model.attention_modules()]


def others(model: TransformerClassifier) -> dict[str, torch.Tensor]:
    """Every parameter and buffer except the particles."""
    ids = {id(p) for m in model.attention_modules() for p in m.learning_phase_parameters()}
    state = {n: p.detach().clone() for n, p in model.named_parameters() if id(p) not in ids}
    state.update({n: b.clone() for n, b in model.named_buffers()})
    return state


def test_phase_a_moves_only_particles_and_phase_b_never_moves_them(monkeypatch):
    model, task = toy_model(), toy_task()
    seen = {}

    def spy(model, train, options, **kwargs):
        seen["particles_before"], seen["others_before"] = particles(model), others(model)
        result = run_learning_phase(model, train, options, **kwargs)
        seen["particles_after"], seen["others_after"] = particles(model), others(model)
        return result

    spy.__attnbench_entry__ = dataclasses.replace(run_learning_phase.__attnbench_entry__, factory=spy)
    monkeypatch.setattr(learning_phase, "run_learning_phase", spy)
    trained_before = others(model)
    result = train_classifier(
        model, task, TrainConfig(epochs=2, batch_size=32, lr=1e-3, phase_a={"max_steps": 5, "batch_size": 32})
    )
    for name, value in seen["others_before"].items():
        assert torch.equal(value, seen["others_after"][name]), name  # phase A: bit-identical
    assert all(not torch.equal(a, b) for a, b in zip(seen["particles_before"], seen["particles_after"]))
    for a, b in zip(seen["particles_after"], particles(result.model)):
        assert torch.equal(a, b)  # phase B (and the checkpoint reload): bit-identical particles
    changed = [n for n, v in others(result.model).items() if not torch.equal(v, trained_before[n])]
    assert any("q_proj" in n for n in changed) and any("classifier" in n for n in changed)
    assert result.phase_a["steps"] == 5


def test_kernel_model_equals_its_vanilla_twin_before_phase_a():
    cfg = toy_model().cfg
    kernel = toy_model(feature_map="favor")
    vanilla = TransformerClassifier(cfg, "random-features", {"num_features": 8, "feature_map": "favor"}, seed=0)
    assert {n: p for n, p in kernel.state_dict().items()}.keys() == vanilla.state_dict().keys()
    assert all(torch.equal(p, vanilla.state_dict()[n]) for n, p in kernel.state_dict().items())
    batch = next(toy_task()["test"].batches(8))
    kernel.eval(), vanilla.eval()
    assert torch.equal(kernel(batch[0], batch[1]), vanilla(batch[0], batch[1]))


def test_same_seed_same_particles_and_json_result():
    task = toy_task()
    runs = []
    for seed in (3, 3, 4):
        model = toy_model()
        result = run_learning_phase(model, task["train"], {"max_steps": 4, "batch_size": 16}, seed=seed)
        runs.append((particles(model), result))
    assert all(torch.equal(a, b) for a, b in zip(runs[0][0], runs[1][0]))
    assert not all(torch.equal(a, b) for a, b in zip(runs[0][0], runs[2][0]))
    result = runs[0][1]
    json.dumps(result, allow_nan=False)
    assert result["steps"] == result["budget_steps"] == 4
    assert len(result["diagnostics"]) == 2 and all(len(layer) == 2 for layer in result["diagnostics"])
    step = result["diagnostics"][1][0][-1]
    assert set(step) == {
        "H",
        "alignment",
        "energy",
        "max_move",
        "drift",
        "noise",
        "norm_before_projection",
        "norm_after_projection",
        "projected_fraction",
    }
    assert step["H"] == pytest.approx(-step["alignment"] + 1e-3 * step["energy"])
    assert result["objective"] == "within-class" and result["probe_split"] == "train"
    measured = result["validation_alignment"]
    assert set(measured) == {"within-class", "centered-kta", "input-kernel"}
    assert result["alignment_after"] == pytest.approx(sum(measured["within-class"]["after_per_layer"]) / 2)
    walk = result["walk"]
    assert walk["drift_noise_ratio"] == pytest.approx(walk["drift"] / walk["noise"])
    assert walk["noise"] == pytest.approx(math.sqrt(2 * 2e-3 / 50) * math.sqrt(8), rel=0.5)  # |xi| ~ sqrt(d), d = 8
    assert 0 < result["relative_move"] < 1
    assert len(result["distances_before"]) == len(result["distances_after"]) == 2 * 2 * 8 * 7 // 2


def test_default_budget_is_ten_epochs_fraction_by_option_and_model_is_restored():
    model, task = toy_model(), toy_task()
    model.train()
    result = run_learning_phase(model, task["train"], {"batch_size": 32}, seed=0, validation=task["validation"])
    assert result["steps"] == 10 * math.ceil(96 / 32) and result["probe_split"] == "validation"
    assert result["probe_rows"] == 32
    assert model.training
    assert all(not m._forward_hooks for m in model.attention_modules())
    assert all(p.requires_grad for p in model.parameters())
    result = run_learning_phase(model, task["train"], {"batch_size": 32, "steps_fraction": 0.2}, phase_b_steps=20)
    assert result["budget_steps"] == 5  # A = 20% of A + B
    with pytest.raises(ConfigError, match="steps_fraction"):
        run_learning_phase(model, task["train"], {"steps_fraction": 0.2})


def test_phase_a_is_the_procedure_the_registry_names_and_train_does_not_import_it():
    from attnbench.registry import attention_entry
    from attnbench.train import learning_procedure

    assert (
        attention_entry("coulomb").capabilities.learning_phase
        == "attnbench.baselines.coulomb.phase_a:run_learning_phase"
    )
    procedure = learning_procedure(toy_model())
    assert procedure.factory is run_learning_phase and procedure.config is learning_phase.PhaseAConfig
    source = open(train_classifier.__code__.co_filename).read()
    assert "learning_phase import" not in source and "import attnbench.baselines.coulomb.phase_a" not in source


def test_within_class_alignment_of_outputs_matches_the_pooled_attention_outputs():
    model, task = toy_model(feature_map="softplus"), toy_task()
    result = run_learning_phase(
        model, task["train"], {"max_steps": 1, "batch_size": 16}, seed=0, validation=task["validation"]
    )
    before = result["validation_alignment"]["within-class"]["before_per_layer"]
    fresh = toy_model(feature_map="softplus").eval()
    outputs = []
    handle = fresh.attention_modules()[0].register_forward_hook(lambda m, a, out: outputs.append(out))
    split = task["validation"]
    with torch.no_grad():
        fresh(split.input_ids, split.attention_mask)
    handle.remove()
    out, mask = outputs[0], split.attention_mask  # (B, H, N, D)
    rows = (out.transpose(1, 2).flatten(2) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    from attnbench.baselines.coulomb.physics import within_class_alignment

    assert before[0] == pytest.approx(float(within_class_alignment(rows.double(), split.labels)), rel=1e-5)


def test_norm_value_option_moves_layer_norms_and_value_projections_only():
    model, task = toy_model(), toy_task()
    state = others(model)
    run_learning_phase(model, task["train"], {"max_steps": 3, "batch_size": 32, "train_norm_value": True}, seed=0)
    changed = {n for n, v in others(model).items() if not torch.equal(v, state[n])}
    assert any("v_proj" in n for n in changed) and any("norm1" in n for n in changed)
    assert all("v_proj" in n or "norm" in n for n in changed), changed


def test_mean_pooling_over_real_tokens_and_untied_keys():
    q = torch.randn(2, 3, 4, 5)
    k = torch.randn(2, 3, 4, 5)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    labels = torch.tensor([0, 1])
    x, y = representations(q, q, mask, labels, "mean")
    assert x.shape == (1, 3, 2, 5) and torch.equal(y, labels)
    assert torch.allclose(x[0, :, 0], q[0, :, :2].mean(dim=1)) and torch.allclose(x[0, :, 1], q[1].mean(dim=1))
    x, y = representations(q, k, mask, labels, "mean")
    assert x.shape == (1, 3, 4, 5) and torch.equal(y, torch.tensor([0, 1, 0, 1]))
    assert torch.allclose(x[0, :, 2], k[0, :, :2].mean(dim=1))
    x, y = representations(q, q, mask, labels, "token")
    assert x.shape == (1, 3, 6, 5) and torch.equal(y, torch.tensor([0, 0, 1, 1, 1, 1]))
    assert torch.equal(x[0, :, 1], q[0, :, 1])


def test_token_pooling_untied_model_and_resampling():
    model, task = toy_model(tie_qk=False, feature_map="trig"), toy_task()
    result = run_learning_phase(
        model,
        task["train"],
        {"max_steps": 3, "batch_size": 16, "pooling": "token", "resample": 5, "beta": "inf"},
        seed=0,
    )
    assert result["num_particles"] == [5, 5]
    assert all(p.shape == (2, 5, 8) for p in particles(model))
    assert all(m.feature_map.num_features == 10 for m in model.attention_modules())
    batch = next(task["test"].batches(8))
    assert model(batch[0], batch[1]).shape == (8, 2)


def test_input_kernel_alignment_rises_on_a_task_with_signal():
    model, task = toy_model(feature_map="trig", num_features=16), toy_task()
    result = run_learning_phase(
        model,
        task["train"],
        {
            "max_steps": 30,
            "batch_size": 96,
            "step": 0.05,
            "beta": "inf",
            "alignment": "centered",
            "objective": "input-kernel",
        },
        seed=0,
    )
    assert result["alignment_after"] > result["alignment_before"] + 0.01


def test_within_class_alignment_of_outputs_rises_without_noise():
    model, task = toy_model(feature_map="softplus", num_features=16), toy_task()
    result = run_learning_phase(
        model,
        task["train"],
        {"max_steps": 30, "batch_size": 96, "step": 0.5, "beta": "inf", "repulsion": 0.0},
        seed=0,
        validation=task["validation"],
    )
    assert result["alignment_after"] > 1.05 * result["alignment_before"]
    assert result["walk"]["noise"] == 0 and result["walk"]["drift"] > 0


def test_phase_a_options_are_validated():
    model, task = toy_model(), toy_task()
    with pytest.raises(ConfigError, match="did you mean 'step'"):
        run_learning_phase(model, task["train"], {"stepp": 0.1})
    with pytest.raises(ConfigError, match="resample"):
        run_learning_phase(model, task["train"], {"max_steps": 1, "resample": 99})
    with pytest.raises(ConfigError, match="train_norm_value"):
        run_learning_phase(model, task["train"], {"objective": "input-kernel", "train_norm_value": True})
