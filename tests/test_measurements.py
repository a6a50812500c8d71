"""Every measurement through run_cell on tiny settings: schema keys, determinism, skips, OOM rows, errors."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from cells import tiny_cell
from torch import nn

from attnbench.cell_spec import TaskSpec
from attnbench.measurements import SkipCell, measurement_names, run_cell
from attnbench.measurements.cost import forward_cost, point_cost
from attnbench.measurements.fidelity import exact_attention, uniform_attention
from attnbench.measurements.robustness import normalized_auc
from attnbench.registry import AttentionConfig, build_attention, register_attention

CLASSIFICATION_KEYS = {
    "accuracy",
    "macro_f1",
    "mcc",
    "balanced_accuracy",
    "roc_auc",
    "pr_auc",
    "nll",
    "brier",
    "ece",
    "ece_equal_mass",
}


@register_attention("test-no-padding", padding_mask=False)
class NoPaddingAttention(nn.Module):
    """Exact attention that declares it cannot take a padding mask."""

    def __init__(self, cfg: AttentionConfig):
        super().__init__()

    def forward(self, q, k, v, key_padding_mask=None):
        return exact_attention(q, k, v).to(q.dtype)


@register_attention("test-oom")
class OomAbove32(nn.Module):
    """Raises torch.OutOfMemoryError for sequences longer than 32, like a real allocation failure."""

    def __init__(self, cfg: AttentionConfig):
        super().__init__()

    def forward(self, q, k, v, key_padding_mask=None):
        if q.shape[2] > 32:
            raise torch.OutOfMemoryError("simulated: cannot allocate the score matrix")
        return v * 1.0


def test_registered_measurements():
    assert {"accuracy", "robustness", "efficiency", "fidelity", "kernel"} <= set(measurement_names())


@pytest.mark.parametrize("attention", ["softmax", "elu-linear"])
def test_accuracy_cell_schema(attention):
    result = run_cell(tiny_cell("accuracy", attention))
    metrics, details = result["metrics"], result["details"]
    assert CLASSIFICATION_KEYS | {"train_seconds", "params_total", "params_attention"} <= set(metrics)
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    assert 0.0 <= metrics["accuracy"] <= 1.0
    assert details["checkpoint"].startswith("best-validation (epoch ")
    assert len(details["history"]) == 2 and details["phase_a"] is None
    assert sum(b["count"] for b in details["reliability"]) == details["eval_rows"] == 48
    assert details["params"]["total"] == metrics["params_total"]
    if attention == "softmax":  # the SDPA backend that actually ran is recorded, one entry per layer
        assert len(details["attention_runtime"]) == 1
        assert details["attention_runtime"][0]["last_backend"] in {"math", "flash", "efficient", "cudnn"}
    else:  # the routes its calls took, training and evaluation (head width 8: the fused kernels take 16k)
        assert details["attention_runtime"][0]["kernel_routes"].keys() == {"pytorch-factored", "pytorch-chunked"}


def test_same_cell_twice_gives_identical_metrics():
    first, second = (run_cell(tiny_cell("accuracy", seed=3)) for _ in range(2))
    drop = {"train_seconds"}
    assert {k: v for k, v in first["metrics"].items() if k not in drop} == {
        k: v for k, v in second["metrics"].items() if k not in drop
    }
    assert first["details"]["reliability"] == second["details"]["reliability"]


def test_attention_without_padding_support_is_skipped_on_padded_task():
    with pytest.raises(SkipCell, match="padding"):
        run_cell(tiny_cell("accuracy", "test-no-padding"))


def test_normalized_auc_known_values():
    assert normalized_auc([0.0, 0.5, 1.0], [0.8, 0.8, 0.8], 0.8) == pytest.approx(1.0)
    assert normalized_auc([0.0, 1.0], [0.8, 0.0], 0.8) == pytest.approx(0.5)
    assert normalized_auc([0.5, 1.0], [0.4, 0.0], 0.8) == pytest.approx((0.5 * 1.2 / 2 + 0.5 * 0.4 / 2) / 0.8)
    assert normalized_auc([0.0], [0.8], 0.8) is None


def test_robustness_cell_rows_and_summary():
    options = {
        "corruptions": ["substitute", "delete"],
        "severities": [0.0, 0.2, 0.5],
        "label_noise": [0.0, 0.3],
        "feature_budgets": [4],
    }
    result = run_cell(tiny_cell("robustness", "performer", {"num_features": 8}, options))
    metrics, rows = result["metrics"], result["details"]["rows"]
    assert {
        "clean_accuracy",
        "clean_ece",
        "robustness_auc",
        "robustness_auc_substitute",
        "label_noise_accuracy@0.3",
        "feature_budget_accuracy@4",
    } <= set(metrics)
    corruption = [r for r in rows if r["kind"] == "corruption"]
    assert len(corruption) == 6
    assert all(r["accuracy"] == metrics["clean_accuracy"] for r in corruption if r["severity"] == 0.0)
    assert [r["severity"] for r in rows if r["kind"] == "label_noise"] == [0.0, 0.3]
    budget = [r for r in rows if r["kind"] == "feature_budget"]
    assert budget[0]["status"] == "ok" and budget[0]["num_features"] == 4


def test_robustness_feature_budget_skipped_without_the_option():
    options = {"corruptions": ["swap"], "severities": [0.0, 0.3], "feature_budgets": [16]}
    rows = run_cell(tiny_cell("robustness", "softmax", options=options))["details"]["rows"]
    budget = [r for r in rows if r["kind"] == "feature_budget"]
    assert budget[0]["status"] == "skipped" and "num_features" in budget[0]["reason"]


EFFICIENCY_FAST = {
    "seq_lens": [32, 64],
    "min_time_s": 0.01,
    "min_repeats": 2,
    "warmup": 1,
    "matmul_size": 256,
    "copy_mb": 8,
    "heads": [2],
    "head_dim": 16,
    "threads": 1,
}
ROW_KEYS = {
    "seq_len",
    "batch",
    "heads",
    "head_dim",
    "mode",
    "status",
    "reason",
    "median_ms",
    "q25_ms",
    "q75_ms",
    "repeats",
    "tokens_per_s",
    "peak_mem_bytes",
    "mem_method",
    "flops",
    "gflops_per_s",
    "roofline_ms",
    "roofline_fraction",
}


@pytest.fixture(autouse=True)
def _unchecked_starvation(monkeypatch):
    """Efficiency tests run on a shared machine: the starvation check reads no counters here (not checked), except
    where a test injects its own."""
    from attnbench import timing

    monkeypatch.setattr(timing, "sched_snapshot", lambda: None)


def test_efficiency_cell_rows_memory_and_roofline():
    cell = dataclasses.replace(
        tiny_cell("efficiency", "elu-linear", options=EFFICIENCY_FAST), task=TaskSpec("none", {})
    )
    result = run_cell(cell)
    rows, machine = result["details"]["rows"], result["details"]["machine"]
    assert {"matmul_gflops", "copy_gb_per_s", "threads", "device"} <= set(machine) and machine["threads"] == 1
    assert machine["allocator"]["policy"] == "retain"  # glibc here: freed memory kept for reuse
    assert len(rows) == 4 and all(ROW_KEYS <= set(r) for r in rows)
    assert all(sum(r["kernel_routes"].values()) >= r["repeats"] for r in rows)  # each timed call counted
    for r in rows:
        assert r["status"] == "ok", r
        assert r["median_ms"] > 0 and r["repeats"] >= 2 and r["peak_mem_bytes"] >= 0
        assert r["mem_method"] == "cpu-subprocess-vmhwm"
        assert r["roofline_fraction"] == pytest.approx(r["roofline_ms"] / r["median_ms"])
        rates = {"matmul_gflops": r["probe_matmul_gflops"], "copy_gb_per_s": r["probe_copy_gb_per_s"]}
        bound = max(r["flops"] / (rates["matmul_gflops"] * 1e9), r["bytes"] / (rates["copy_gb_per_s"] * 1e9))
        assert r["roofline_ms"] == pytest.approx(bound * 1e3)  # the point's own probe, not the run's
        assert r["gflops_per_s"] == pytest.approx(r["flops"] / r["median_ms"] / 1e6)
    assert {"forward_ms@32", "train_ms@64", "forward_roofline_fraction@64"} <= set(result["metrics"])
    above_one = [r for r in rows if r["roofline_fraction"] > 1]
    assert bool(above_one) == any("roofline fraction above 1" in note for note in result["details"]["notes"])
    assert all(isinstance(r["busy"], bool) and r["others_cores"] >= 0 for r in rows)


def test_efficiency_rounds_interleave_the_points_and_pool_their_calls(monkeypatch):
    """Three rounds: each pass visits every point in order, its calls pooled; the bound uses probes next to passes."""
    from attnbench.measurements import efficiency

    order, probes = [], iter(range(1, 100))
    real_time_repeated = efficiency.time_repeated

    def traced(fn, **kwargs):
        order.append(fn)
        return real_time_repeated(fn, **kwargs)

    monkeypatch.setattr(efficiency, "time_repeated", traced)
    monkeypatch.setattr(efficiency, "_probe", lambda *a: {"matmul_gflops": float(next(probes)), "copy_gb_per_s": 1.0})
    options = EFFICIENCY_FAST | {"memory": False, "modes": ["forward"], "rounds": 3, "min_repeats": 3}
    rows = run_cell(tiny_cell("efficiency", "elu-linear", options=options))["details"]["rows"]
    assert len(order) == 6 and order[:2] == order[2:4] == order[4:]  # 2 points x 3 rounds, interleaved
    assert all(r["rounds"] == 3 and r["repeats"] >= 3 and r["min_ms"] <= r["q25_ms"] <= r["median_ms"] for r in rows)
    # probe j precedes pass j and probe j + 1 follows it; point 0 has passes 1, 3, 5: better probes 2, 4, 6 -> 4
    assert [r["probe_matmul_gflops"] for r in rows] == [4.0, 5.0]


def test_efficiency_rows_record_the_machine_load_and_flag_a_busy_machine(monkeypatch):
    """Each point carries the load read around its timed passes; where other processes held the cores it is
    flagged busy (row and notes), where none did it is not."""
    from attnbench.measurements import efficiency

    options = {**EFFICIENCY_FAST, "seq_lens": [16], "modes": ["forward"], "clock": "wall"}  # a wall-clock point
    for others, busy in ((1.5, True), (0.0, False)):
        monkeypatch.setattr(efficiency, "others_cores", lambda *a, o=others: o)
        monkeypatch.setattr(efficiency, "machine_load", lambda s: {"load_1m": 3.0, "cpus": 2, "cpu_availability": 1.0})
        details = run_cell(tiny_cell("efficiency", "elu-linear", options=options))["details"]
        row = details["rows"][0]
        assert row["busy"] is busy and row["others_cores"] == others and row["load_1m"] == 3.0
        assert any("busy machine" in note for note in details["notes"]) is busy


def test_efficiency_paired_times_two_attentions_call_by_call(monkeypatch):
    """A paired attention is timed in alternation at every point; the same attention under another label gives a
    ratio near 1, and the row carries both medians and the ratio's quartiles."""
    from attnbench.measurements import efficiency

    alternated = []
    real = efficiency.time_alternating
    monkeypatch.setattr(efficiency, "time_alternating", lambda *a, **k: alternated.append(1) or real(*a, **k))
    options = EFFICIENCY_FAST | {
        "memory": False,
        "modes": ["forward"],
        "seq_lens": [64],
        "min_time_s": 0.05,
        "min_repeats": 20,
        "paired": {"elu-linear": {"name": "elu-linear", "label": "twin"}},
    }
    result = run_cell(tiny_cell("efficiency", "elu-linear", options=options))
    (row,) = result["details"]["rows"]
    assert alternated and row["paired_label"] == "twin" and row["paired_median_ms"] > 0
    assert row["paired_ratio_q25"] <= row["paired_ratio"] <= row["paired_ratio_q75"]
    assert 0.5 < row["paired_ratio"] < 2.0  # the same work on both sides
    assert result["metrics"]["forward_paired_ratio@64"] == row["paired_ratio"]


def test_efficiency_refuses_a_starved_point_and_leaves_it_out_of_the_metrics(monkeypatch):
    """Counters that show the timed threads waiting 60% of the time for a core: every try refused, the point
    recorded as not measured with the reason, no time and no metric; a quiet reading is accepted."""
    from attnbench import timing
    from attnbench.measurements import efficiency

    options = {**EFFICIENCY_FAST, "memory": False, "seq_lens": [16], "modes": ["forward"], "starved_tries": 2}
    options["clock"] = "wall"  # a one-thread point is otherwise timed on its CPU clock (next test)
    monkeypatch.setattr(
        efficiency, "time_unstarved", lambda measure, **k: timing.time_unstarved(measure, **k | {"pause_s": 0})
    )
    for share in (0.6, 0.0):
        clock = iter([timing.SchedSnapshot(0, 0), timing.SchedSnapshot(int(1e9 * (1 - share)), int(1e9 * share))] * 4)
        monkeypatch.setattr(timing, "sched_snapshot", lambda c=clock: next(c))
        result = run_cell(tiny_cell("efficiency", "elu-linear", options=options))
        (row,) = result["details"]["rows"]
        assert row["starvation_checked"] and row["starved_share"] == pytest.approx(share)
        if share:
            assert row["status"] == "not_measured" and row["median_ms"] is None and row["timing_tries"] == 2
            assert "waited for a core 60%, 60%" in row["reason"] and "forward_ms@16" not in result["metrics"]
            assert any("not measured" in note for note in result["details"]["notes"])
        else:
            assert row["status"] == "ok" and row["timing_tries"] == 1 and "forward_ms@16" in result["metrics"]


def test_a_one_thread_point_on_a_busy_machine_is_timed_on_its_cpu_clock(monkeypatch):
    """Counters that show the timed thread waiting 60% of its runnable time (two 2-thread jobs beside it): the
    wall clock refuses the point, its thread's CPU clock times it."""
    import time

    from attnbench import timing

    options = {**EFFICIENCY_FAST, "memory": False, "seq_lens": [16], "modes": ["forward"], "starved_tries": 2}
    waiting = lambda: timing.SchedSnapshot(time.thread_time_ns(), int(1.5 * time.thread_time_ns()))  # noqa: E731
    monkeypatch.setattr(timing, "sched_snapshot", waiting)
    (row,) = run_cell(tiny_cell("efficiency", "elu-linear", options=options))["details"]["rows"]
    assert row["threads"] == 1 and row["clock"] == "thread-cpu" and row["status"] == "ok" and row["median_ms"] > 0
    assert row["starved_share"] == pytest.approx(0.6, abs=0.05)
    (wall,) = run_cell(tiny_cell("efficiency", "elu-linear", options=options | {"clock": "wall"}))["details"]["rows"]
    assert wall["status"] == "not_measured" and wall["clock"] == "wall"


def test_efficiency_small_calls_run_on_one_thread(monkeypatch):
    """A call below single_thread_flops is warmed up and timed with one torch thread, a larger one with the option's."""
    from attnbench.measurements import efficiency

    seen = []
    real = efficiency.time_repeated
    monkeypatch.setattr(
        efficiency, "time_repeated", lambda fn, **k: seen.append(torch.get_num_threads()) or real(fn, **k)
    )
    flops = [
        point_cost(
            build_attention("softmax", head_dim=16, num_heads=2, max_length=n),
            "softmax",
            1,
            2,
            n,
            16,
            "forward",
            torch.float32,
        )["flops"]
        for n in (16, 256)
    ]
    options = {
        **EFFICIENCY_FAST,
        "memory": False,
        "modes": ["forward"],
        "threads": 2,
        "seq_lens": [16, 256],
        "single_thread_flops": (flops[0] * flops[1]) ** 0.5,
    }
    rows = run_cell(tiny_cell("efficiency", "softmax", options=options))["details"]["rows"]
    assert [r["flops"] for r in rows] == flops
    assert [r["threads"] for r in rows] == seen == [1, 2]


def test_efficiency_paired_option_rejects_bad_entries():
    from attnbench.errors import UserError
    from attnbench.measurements.efficiency import EfficiencyOptions

    with pytest.raises(UserError, match="must be an attention name"):
        EfficiencyOptions(paired={"performer": 42})
    with pytest.raises(UserError, match=r"paired\[.performer.\]: unknown attention .no-such-attention"):
        EfficiencyOptions(paired={"performer": "no-such-attention"})
    with pytest.raises(UserError, match="num_feature"):
        EfficiencyOptions(paired={"performer": {"name": "performer", "options": {"num_feature": 4}}})


def test_efficiency_records_oom_and_length_cap_rows_in_process():
    options = EFFICIENCY_FAST | {
        "memory": False,
        "modes": ["forward"],
        "seq_lens": [16, 32, 64],
        "length_caps": {"test-oom": 32},
    }
    cap = run_cell(tiny_cell("efficiency", "test-oom", options=options))["details"]["rows"]
    assert [r["status"] for r in cap] == ["ok", "ok", "skipped"] and "length cap 32" in cap[2]["reason"]
    options["length_caps"] = {}
    rows = run_cell(tiny_cell("efficiency", "test-oom", options=options))["details"]["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok", "oom"]
    assert "simulated" in rows[2]["reason"] and rows[2]["median_ms"] is None


def test_efficiency_fixes_and_then_restores_the_thread_count():
    seen = []
    options = EFFICIENCY_FAST | {"memory": False, "seq_lens": [16], "threads": 2}
    run_cell(
        tiny_cell("efficiency", "softmax", options=options), progress=lambda *a: seen.append(torch.get_num_threads())
    )
    assert seen and set(seen) == {2}
    assert torch.get_num_threads() == 1


def test_cost_formulas_for_softmax_and_feature_maps():
    softmax = build_attention("softmax", head_dim=16)
    assert forward_cost(softmax, "softmax", 2, 3, 100, 16)["flops"] == 4 * 2 * 3 * 100 * 100 * 16
    elu = build_attention("elu-linear", head_dim=16)
    n, d = 100, 16  # elu-linear: M = d features; phi_k^T v and phi_q S (2 n M d each), key sum and
    # normaliser dot (3 n M), the division (n d), elu + 1 on queries and keys (4 flops per entry each)
    expected = 2 * (2 * n * d * d) + 3 * n * d + n * d + 2 * 4 * n * d
    assert forward_cost(elu, "elu-linear", 1, 1, n, d)["flops"] == expected
    assert forward_cost(OomAbove32(AttentionConfig()), "test-oom", 1, 1, 8, 8) is None


def test_an_attention_cost_method_overrides_the_family_formula():
    class Costed(OomAbove32):
        def cost(self, batch, heads, n, d):
            return {"flops": 7 * batch * heads * n * d, "bytes": 11}

    assert forward_cost(Costed(AttentionConfig()), "softmax", 2, 3, 5, 4) == {"flops": 7 * 2 * 3 * 5 * 4, "bytes": 11.0}
    train = point_cost(Costed(AttentionConfig()), "softmax", 1, 1, 1, 1, "train", torch.float16)
    assert train == {"flops": 21.0, "bytes": 11.0}  # 3x flops; 2x bytes at half the element size


def test_exact_attention_matches_sdpa_with_padding():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 10, 8, generator=g) for _ in range(3))
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 6:] = False
    expected = nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask[:, None, None, :]
    )
    assert torch.allclose(exact_attention(q, k, v, mask), expected, atol=1e-12)


def test_fidelity_softmax_is_exact_and_more_features_help():
    options = {"inputs": ["random"], "seq_lens": [64], "heads": 2, "head_dim": 16, "random_std": 0.5}
    exact = run_cell(tiny_cell("fidelity", "softmax", options=options))
    assert exact["details"]["rows"][0]["rel_error"] < 1e-5
    performer = run_cell(tiny_cell("fidelity", "performer", options=options | {"num_features": [4, 256]}))
    few, many = performer["details"]["rows"]
    assert (few["num_features"], many["num_features"]) == (4, 256)
    assert many["rel_error"] < few["rel_error"]
    assert set(performer["metrics"]) == {"rel_error_random@64/m4", "rel_error_random@64/m256"}


def test_uniform_attention_is_softmax_with_zero_logits_over_real_keys():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(2, 3, 10, 4, generator=g)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 7:] = False
    zeros = torch.zeros(2, 3, 10, 4)  # q = 0: every logit 0, softmax uniform over the real keys
    torch.testing.assert_close(uniform_attention(v, mask), exact_attention(zeros, zeros, v, mask))


def test_fidelity_places_each_estimate_between_uniform_and_exact():
    options = {"inputs": ["random"], "seq_lens": [64], "heads": 2, "head_dim": 16, "random_std": 0.5}
    exact = run_cell(tiny_cell("fidelity", "softmax", options=options))["details"]["rows"][0]
    assert exact["from_uniform"] == pytest.approx(1.0, abs=1e-5)  # exact is exactly as far from U as E is
    assert 0 < exact["uniform_rel_error"] < 1
    elu = run_cell(tiny_cell("fidelity", "elu-linear", options=options))["details"]["rows"][0]
    assert elu["uniform_rel_error"] == pytest.approx(exact["uniform_rel_error"])  # same inputs, same U
    assert elu["from_uniform"] > 0.05  # elu + 1 features depend on q and k: not collapsed


def test_fidelity_on_trained_inputs_is_deterministic():
    options = {"inputs": ["trained"], "train_examples": 64, "capture_rows": 8}
    first = run_cell(tiny_cell("fidelity", "elu-linear", options=options))
    row = first["details"]["rows"][0]
    assert row["inputs"] == "trained" and row["layers"] == 1 and 0 < row["rel_error"] < 10
    assert run_cell(tiny_cell("fidelity", "elu-linear", options=options))["metrics"] == first["metrics"]


def test_unknown_measurement_option_says_what_is_valid():
    with pytest.raises(Exception, match="valid options"):
        run_cell(tiny_cell("robustness", options={"severity": [0.1]}))


def test_a_training_step_keeps_a_learned_kernel_frozen_as_phase_b_does():
    """The efficiency measurement's training step of the Coulomb attention is a phase-B step: its particles, moved
    only by phase A, take no gradient (and so the attention may run its fused training path)."""
    import inspect

    from attnbench.measurements.efficiency import attention_call

    step = attention_call(
        "coulomb", {"feature_map": "favor", "num_features": 16}, 1, 2, 64, 16, "train", "float32", "cpu", 0
    )
    step()
    module = inspect.getclosurevars(step).nonlocals["module"]
    assert not module.feature_map.omega.requires_grad and module.feature_map.omega.grad is None
    inputs = inspect.getclosurevars(step).nonlocals["q"]
    assert inputs.grad is not None and torch.isfinite(inputs.grad).all()
