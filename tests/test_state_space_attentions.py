"""The state-space attentions and the softmax ones with a recurrent cache (FoX, sliding window, kernelized RPE) against their own naive forms: values, steps, causality, padding, gradients."""

import pytest
from recurrent_forms import (
    check_causality,
    check_gradients_match_naive,
    check_naive_equals_parallel,
    check_padding_invariance,
    check_prefill_equals_stepping,
    check_step_equals_parallel,
)

CASES = [
    ("retention", {}),
    ("retention", {"short_conv": 4, "output_norm": False}),
    ("gla", {}),
    ("gla", {"short_conv": 3, "gate_rank": 4}),
    ("deltanet", {}),
    ("deltanet", {"short_conv": 4, "chunk_size": 8}),
    ("deltanet", {"short_conv": 3, "chunk_size": 8, "allow_neg_eigval": True}),
    ("gated-deltanet", {}),
    ("gated-deltanet", {"short_conv": 4, "chunk_size": 8}),
    ("gated-deltanet", {"short_conv": 3, "chunk_size": 8, "allow_neg_eigval": True}),
    ("mamba2", {}),
    ("mamba2", {"short_conv": 4, "chunk_size": 8, "output_norm": False}),
    ("rwkv7", {}),
    ("rwkv7", {"short_conv": 3, "chunk_size": 8, "low_rank": 3}),
    ("log-linear", {}),
    ("log-linear", {"short_conv": 3, "chunk_size": 4, "output_norm": False}),
    ("based", {"feature_dim": 4, "window": 5}),
    ("based", {"feature_dim": 3, "window": 64, "short_conv": 2}),
    ("hedgehog", {}),
    ("hedgehog", {"feature_dim": 5, "short_conv": 4}),
    ("fox", {}),
    ("fox", {"short_conv": 3}),
    ("sliding-window", {"window": 5}),
    ("sliding-window", {"window": 64, "short_conv": 2}),
    ("kernelized-rpe", {"max_distance": 6, "form": "fft"}),
    ("kernelized-rpe", {"max_distance": 64, "num_features": 16, "short_conv": 3, "form": "fft"}),
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in options.items()) or 'default'}" for name, options in CASES]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_parallel_form_equals_naive_form(name, options, causal):
    check_naive_equals_parallel(name, causal, **options)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_recurrent_step_equals_parallel_form(name, options):
    check_step_equals_parallel(name, **options)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_a_prompt_prefilled_at_once_leaves_the_state_stepping_leaves(name, options):
    check_prefill_equals_stepping(name, **options)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_no_output_depends_on_later_positions(name, options):
    check_causality(name, **options)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_padded_sequence_equals_itself_unpadded(name, options, causal):
    check_padding_invariance(name, causal, **options)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_gradients_equal_autograd_of_the_naive_form(name, options, causal):
    check_gradients_match_naive(name, causal, **options)
