"""The controls of phase A (issue 34): the projected Vanilla twin, the force normalisations against a hand
computation, phase A after a phase-B warm-up, per-attention phase-A options, and the ce-kernel ceiling."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import attnbench.baselines.coulomb.phase_a as learning_phase
from attnbench.baselines.coulomb.phase_a import PhaseAConfig, run_learning_phase
from attnbench.baselines.coulomb.physics import DynamicsConfig, particle_step
from attnbench.errors import ConfigError
from attnbench.model import ModelConfig, TransformerClassifier
from attnbench.registry import build_attention
from attnbench.train import TrainConfig, learning_phase_options, train_classifier
from tests.test_learning_phase import LENGTH, VOCAB, particles, toy_task

PAPER_PHASE_A = {"radius": 1.5, "radius_units": "absolute", "max_steps": 1, "batch_size": 32}


def toy_model(attention: str, seed: int = 0, **options) -> TransformerClassifier:
    cfg = ModelConfig(
        vocab_size=VOCAB,
        num_classes=2,
        max_length=LENGTH,
        d_model=16,
        num_heads=2,
        num_layers=2,
        ffn_dim=32,
        qk_projection="none",
    )
    return TransformerClassifier(
        cfg, attention, {"num_features": 8, "feature_map": "softmaxfeat", **options}, seed=seed
    )


def omegas(model: TransformerClassifier) -> list[torch.Tensor]:
    return [m.feature_map.omega.detach().clone() for m in model.attention_modules()]


def test_projected_control_equals_phase_a_first_projection_without_force_or_noise():
    kernel = toy_model("coulomb")
    drawn = omegas(kernel)
    assert all(float((w.norm(dim=-1) > 1.5).double().mean()) > 0.9 for w in drawn)  # N(0, I), 8 dims: most beyond
    # zero noise (beta inf), a force too small to move a float32 particle (step 1e-30, force clipped at 10)
    run_learning_phase(
        kernel, toy_task()["train"], {**PAPER_PHASE_A, "beta": math.inf, "step": 1e-30, "repulsion": 0.0}
    )
    control = toy_model("random-features", projection_radius=1.5, projection_units="absolute")
    for after_phase_a, projected, w in zip(omegas(kernel), omegas(control), drawn):
        norms = w.norm(dim=-1, keepdim=True)
        by_hand = torch.where(norms > 1.5, w * (1.5 / norms), w)  # rows beyond 1.5 onto the sphere
        torch.testing.assert_close(projected, by_hand, rtol=1e-6, atol=0)
        assert torch.equal(projected, after_phase_a)
    assert "omegas projected to radius 1.5" in control.attention_modules()[0].feature_form


def test_projection_units_and_scale_of_the_initial_omegas():
    plain = build_attention("random-features", head_dim=16, num_features=8, seed=3).feature_map.omega
    scaled = build_attention("random-features", head_dim=16, num_features=8, seed=3, omega_scale=0.25)
    torch.testing.assert_close(scaled.feature_map.omega, plain * 0.25)
    capped = build_attention("random-features", head_dim=16, num_features=8, seed=3, projection_radius=0.5)
    norms = capped.feature_map.omega.norm(dim=-1)  # sqrt_dim units: radius 0.5 * 4 = 2
    assert float(norms.max()) == pytest.approx(2.0, rel=1e-6)
    kept = plain.norm(dim=-1) <= 2.0
    torch.testing.assert_close(capped.feature_map.omega[kept], plain[kept])
    with pytest.raises(ConfigError, match="projection_radius"):
        build_attention("random-features", head_dim=16, projection_radius=0.0)


def hand_forces(omega: torch.Tensor, x: torch.Tensor, y: torch.Tensor, repulsion: float, force: str) -> torch.Tensor:
    """Forces on N particles omega (N, d) of linear features phi_k(x) = omega_k . x, ustat alignment with T = +-1,
    log repulsion, written out by hand: dA/domega_k = 1/(n(n-1) N) sum_{i != j} T_ij (x_i u_jk + x_j u_ik),
    dW/domega_k = -1/(N(N-1)) sum_{l != k} (omega_k - omega_l) / |omega_k - omega_l|^2."""
    n, (m, _) = x.shape[0], omega.shape
    t = torch.where(y[:, None] == y[None, :], 1.0, -1.0).double()
    out = torch.zeros_like(omega)
    for k in range(m):
        d_align = sum(
            t[i, j] * (x[i] * (omega[k] @ x[j]) + x[j] * (omega[k] @ x[i]))
            for i in range(n)
            for j in range(n)
            if i != j
        ) / (n * (n - 1) * m)
        d_energy = -sum((omega[k] - omega[j]) / (omega[k] - omega[j]).square().sum() for j in range(m) if j != k) / (
            m * (m - 1)
        )
        if force == "mean":
            out[k] = m * (-d_align + repulsion * d_energy)
        else:
            out[k] = -n * (n - 1) * d_align + repulsion * m * (m - 1) * d_energy
    return out


@pytest.mark.parametrize("force", ["mean", "sum"])
def test_force_normalisation_against_a_hand_computation(force):
    g = torch.Generator().manual_seed(1)
    omega = torch.randn(1, 3, 2, generator=g, dtype=torch.float64)
    x = torch.randn(4, 2, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 0, 1])
    cfg = DynamicsConfig(
        step=1e-3, beta=math.inf, repulsion=0.5, grad_clip=1e9, radius=1e9, radius_units="absolute", force=force
    )
    new, _ = particle_step(omega, lambda w: torch.einsum("nd,smd->snm", x, w), y, cfg)
    torch.testing.assert_close(
        (omega - new)[0] / cfg.step, hand_forces(omega[0], x, y, 0.5, force), rtol=1e-6, atol=1e-9
    )


def test_sum_force_is_pairs_over_particles_times_the_mean_alignment_force():
    cfg_mean, cfg_sum = DynamicsConfig(repulsion=0.0), DynamicsConfig(repulsion=0.0, force="sum")
    align = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    (g_mean,) = torch.autograd.grad(cfg_mean.hamiltonian(align, torch.tensor(0.0), 64, 256), align)
    (g_sum,) = torch.autograd.grad(cfg_sum.hamiltonian(align, torch.tensor(0.0), 64, 256), align)
    ratio = g_sum * cfg_sum.force_factor(256) / (g_mean * cfg_mean.force_factor(256))
    assert float(ratio) == pytest.approx(64 * 63 / 256)


def test_phase_a_after_warm_up_epochs_runs_between_epochs_and_selects_a_later_checkpoint(monkeypatch):
    model, task = toy_model("coulomb"), toy_task()
    seen = {}

    def spy(model, train, options, **kwargs):
        seen["classifier"] = model.classifier.weight.detach().clone()
        seen["options"] = options
        result = run_learning_phase(model, train, options, **kwargs)
        seen["particles"] = particles(model)
        return result

    spy.__attnbench_entry__ = dataclasses.replace(run_learning_phase.__attnbench_entry__, factory=spy)
    monkeypatch.setattr(learning_phase, "run_learning_phase", spy)
    initial = model.classifier.weight.detach().clone()
    result = train_classifier(
        model,
        task,
        TrainConfig(epochs=3, batch_size=32, lr=1e-3, phase_a={"max_steps": 3, "batch_size": 32, "after_epochs": 2}),
    )
    assert not torch.equal(seen["classifier"], initial)  # two epochs of phase B ran before phase A
    assert seen["options"].after_epochs == 2 and result.phase_a["steps"] == 3
    assert result.best_epoch == 3  # only checkpoints after phase A are candidates
    for a, b in zip(seen["particles"], particles(result.model)):
        assert torch.equal(a, b)  # frozen after phase A


def test_after_epochs_must_leave_an_epoch_of_phase_b():
    with pytest.raises(ConfigError, match="after_epochs=2"):
        train_classifier(toy_model("coulomb"), toy_task(), TrainConfig(epochs=2, phase_a={"after_epochs": 2}))


def test_attention_phase_a_options_override_the_suites():
    model = toy_model("coulomb", phase_a={"beta": math.inf, "force": "sum"})
    merged = learning_phase_options(model, TrainConfig(phase_a={"beta": 50.0, "max_steps": 1}))
    assert merged == {"beta": math.inf, "max_steps": 1, "force": "sum"}
    with pytest.raises(ConfigError, match="did you mean 'beta'"):
        toy_model("coulomb", phase_a={"bta": 1.0})
    assert PhaseAConfig(**merged).force == "sum"


def test_ce_kernel_trains_the_same_particles_by_cross_entropy_without_phase_a():
    kernel, ceiling = toy_model("coulomb"), toy_model("ce-kernel")
    for a, b in zip(omegas(kernel), omegas(ceiling)):
        assert torch.equal(a, b)  # the same draw
    start = omegas(ceiling)
    result = train_classifier(ceiling, toy_task(), TrainConfig(epochs=1, batch_size=32, lr=1e-2))
    assert result.phase_a is None
    assert all(not torch.equal(a, b) for a, b in zip(start, omegas(result.model)))


def test_representation_probes_measure_the_pooled_attention_outputs_by_hand():
    model, task = toy_model("coulomb"), toy_task()
    result = run_learning_phase(
        model, task["train"], {"max_steps": 1, "batch_size": 32, "probe_examples": 32}, validation=task["validation"]
    )
    rep = result["representation"]
    assert set(rep) == {"probe_accuracy", "pooled_norm", "class_separation"}
    assert 0.0 <= rep["probe_accuracy"]["after"] <= 1.0
    outputs = []
    model.attention_modules()[0].register_forward_hook(
        lambda module, args, kwargs, out: outputs.append((out, kwargs["key_padding_mask"])), with_kwargs=True
    )
    split = task["validation"]  # 32 rows: all of them are the probe's
    ids, mask, labels = split.input_ids, split.attention_mask, split.labels
    model.eval()
    with torch.no_grad():
        model(ids, mask)
    out, seen_mask = outputs[0]
    rows = (out.transpose(1, 2).flatten(2) * seen_mask[..., None]).sum(1) / seen_mask.sum(1, keepdim=True)
    assert rep["pooled_norm"]["after_per_layer"][0] == pytest.approx(float(rows.norm(dim=1).mean()), rel=1e-5)
    means = [rows[labels == c].mean(0) for c in (0, 1)]
    assert rep["class_separation"]["after_per_layer"][0] == pytest.approx(float((means[0] - means[1]).norm()), rel=1e-5)
